package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferry-replicator/ferry/pkg/batch"
	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/kafkaclient"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/services/writer/internal/checkpoint"
	"github.com/ferry-replicator/ferry/services/writer/internal/offsetindex"
)

// span is a source partition's offsets, [start, end): those of the source
// partition, or, for start > 0, what is left of it.
type span struct {
	partition  int32
	start, end int64
}

// checkIndex checks the writer's offset index of each span's partition
// (the index topic and what the partition's checkpoint carries, as
// operators' translations read it) against the target itself, at every
// offset: Translate(s) for every source offset s is the target offset of
// the first copied record at or after s (past the last: the end, saying
// so), TranslateBack(t) for every target offset the source offset of the
// first copied record at or after t, and an offset before the index's
// start is ErrBeforeIndex naming it.
func checkIndex(ctx context.Context, t *testing.T, w *testWriter, spans ...span) {
	t.Helper()
	checkIndexOf(ctx, t, w, w.store, spans...)
}

// checkIndexTopic checks as checkIndex does what the index topic alone
// holds: every entry flushed.
func checkIndexTopic(ctx context.Context, t *testing.T, w *testWriter, spans ...span) {
	t.Helper()
	checkIndexOf(ctx, t, w, nil, spans...)
}

func checkIndexOf(ctx context.Context, t *testing.T, w *testWriter, store *checkpoint.Store, spans ...span) {
	t.Helper()
	r, err := offsetindex.NewReader([]kgo.Opt{kgo.SeedBrokers(w.cluster.ListenAddrs()...)}, indexTopic)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, sp := range spans {
		copied := copiedRecords(ctx, t, w, sp.partition)
		if len(copied) == 0 {
			t.Fatalf("orders/%d: nothing copied", sp.partition)
		}
		for i := 1; i < len(copied); i++ {
			if copied[i].source <= copied[i-1].source {
				t.Fatalf("orders/%d: target holds source %d after %d", sp.partition, copied[i].source, copied[i-1].source)
			}
		}
		last := copied[len(copied)-1]
		key := offsetindex.Key{Link: "east", Topic: "orders", Partition: sp.partition}
		var x *offsetindex.Index
		if store != nil {
			// The store's view tails the checkpoint topic: read what the
			// last acknowledged round wrote before taking what its
			// checkpoint carries (under load the view was a round behind,
			// and the offsets that round copied answered as not copied).
			if err := store.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			x, err = loadIndex(ctx, r, store, key)
		} else {
			x, err = r.Load(ctx, key)
		}
		if err != nil {
			t.Fatal(err)
		}
		for s := sp.start; s < sp.end; s++ {
			want := offsetindex.Position{Offset: last.target + 1, End: true}
			for _, c := range copied {
				if c.source >= s {
					want = offsetindex.Position{Offset: c.target}
					break
				}
			}
			if got, err := x.Translate(s); err != nil || got != want {
				t.Errorf("orders/%d: Translate(%d) = %+v, %v; want %+v (target: %v)", sp.partition, s, got, err, want, copied)
			}
		}
		hw := w.cluster.PartitionInfo("orders", sp.partition).HighWatermark
		for tgt := int64(0); tgt <= hw; tgt++ {
			want := offsetindex.Position{Offset: last.source + 1, End: true}
			for _, c := range copied {
				if c.target >= tgt {
					want = offsetindex.Position{Offset: c.source}
					break
				}
			}
			if got, err := x.TranslateBack(tgt); err != nil || got != want {
				t.Errorf("orders/%d: TranslateBack(%d) = %+v, %v; want %+v (target: %v)", sp.partition, tgt, got, err, want, copied)
			}
		}
		if sp.start > 0 {
			var before *offsetindex.BeforeIndexError
			if _, err := x.Translate(sp.start - 1); !errors.As(err, &before) || before.Start != sp.start {
				t.Errorf("orders/%d: Translate(%d) before the index: %v, want ErrBeforeIndex starting at %d", sp.partition, sp.start-1, err, sp.start)
			}
		}
	}
}

// mustSendWire sends b (a Skip) as batch seq of orders/0 and waits for its
// acknowledgement.
func mustSendWire(t *testing.T, stream ferryv1.ReplicationService_ReplicateClient, seq uint64, b *ferryv1.Batch) {
	t.Helper()
	if _, err := sendWire(t, stream, seq, b); err != nil {
		t.Fatalf("batch %d: stream ended: %v", seq, err)
	}
}

// indexCases copy a source partition the ways the index must describe
// exactly; each returns the source spans to check.
var indexCases = []struct {
	name string
	edit func(*ProducerSettings)
	run  func(ctx context.Context, t *testing.T, w *testWriter) []span
}{
	{"plain", func(p *ProducerSettings) { p.MergeBelow = 0 }, func(ctx context.Context, t *testing.T, w *testWriter) []span {
		stream := w.openOrders(ctx, t, "east")
		mustSend(t, stream, 1, 0, 0, sourceBatch(t, 0, 10, nil, recordbatch.LZ4, 0), sourceBatch(t, 10, 5, nil, recordbatch.None, 0))
		mustSend(t, stream, 2, 0, 15, sourceBatch(t, 15, 20, nil, recordbatch.LZ4, 0))
		mustSend(t, stream, 3, 0, 35, sourceBatch(t, 35, 3, nil, recordbatch.None, 0))
		return []span{{0, 0, 38}}
	}},
	{"compacted source, rebuilt batches", nil, func(ctx context.Context, t *testing.T, w *testWriter) []span {
		stream := w.openOrders(ctx, t, "east")
		// The source's log starts at 100; compaction left gaps.
		mustSend(t, stream, 1, 0, 100, sourceBatch(t, 100, 0, []int32{0, 2, 3, 7}, recordbatch.None, 0), sourceBatch(t, 108, 0, []int32{0, 1, 5}, recordbatch.None, 0))
		mustSend(t, stream, 2, 0, 114, sourceBatch(t, 114, 5, nil, recordbatch.LZ4, 0), sourceBatch(t, 119, 0, []int32{0, 4}, recordbatch.None, 0))
		// A batch straddling where the copy goes on: 124 is not copied.
		mustSend(t, stream, 3, 0, 125, sourceBatch(t, 124, 0, []int32{0, 2, 4, 6}, recordbatch.None, 0))
		return []span{{0, 100, 131}}
	}},
	{"small batches merged", nil, func(ctx context.Context, t *testing.T, w *testWriter) []span {
		stream := w.openOrders(ctx, t, "east")
		// Source offsets 2, 5 and 8 hold nothing copied (markers): the
		// merged target batch is contiguous, the source is not.
		mustSend(t, stream, 1, 0, 0, sourceBatch(t, 0, 2, nil, recordbatch.LZ4, 0), sourceBatch(t, 3, 2, nil, recordbatch.LZ4, 0),
			sourceBatch(t, 6, 2, nil, recordbatch.None, 0), sourceBatch(t, 9, 3, nil, recordbatch.LZ4, 0))
		if n := len(targetBatches(t, w)); n != 1 {
			t.Fatalf("4 small source batches became %d target batches, want 1 (merged)", n)
		}
		mustSend(t, stream, 2, 0, 14, sourceBatch(t, 14, 2, nil, recordbatch.LZ4, 0))
		return []span{{0, 0, 16}}
	}},
	{"aborted transactions and markers in the source", nil, func(ctx context.Context, t *testing.T, w *testWriter) []span {
		stream := w.openOrders(ctx, t, "east")
		// 0..4 a committed transaction, 5 its marker, 6..9 aborted, 10
		// the abort marker, 11..15 plain, 16 a marker, 17..19 committed,
		// 20 its marker, 21 aborted, 22 its marker, 23..24 plain, 25..26
		// aborted and 27 their marker at the end.
		mustSend(t, stream, 1, 0, 0, sourceBatch(t, 0, 5, nil, recordbatch.None, transactional), sourceBatch(t, 11, 5, nil, recordbatch.LZ4, 0))
		mustSend(t, stream, 2, 0, 17, sourceBatch(t, 17, 3, nil, recordbatch.None, transactional))
		mustSend(t, stream, 3, 0, 23, sourceBatch(t, 23, 2, nil, recordbatch.None, 0))
		return []span{{0, 0, 28}}
	}},
	{"skips", nil, func(ctx context.Context, t *testing.T, w *testWriter) []span {
		stream := w.openOrders(ctx, t, "east")
		mustSendWire(t, stream, 1, batch.Skip(0, 4, 30))
		mustSendWire(t, stream, 2, wireKafka(t, 5, sourceBatch(t, 5, 10, nil, recordbatch.LZ4, 0)))
		mustSendWire(t, stream, 3, batch.Skip(15, 19, 30))
		mustSendWire(t, stream, 4, wireKafka(t, 20, sourceBatch(t, 20, 5, nil, recordbatch.None, 0)))
		mustSendWire(t, stream, 5, batch.Skip(25, 29, 30))
		return []span{{0, 0, 30}}
	}},
	{"partition added while running", nil, func(ctx context.Context, t *testing.T, w *testWriter) []span {
		stream := w.openOrders(ctx, t, "east")
		mustSend(t, stream, 1, 0, 0, sourceBatch(t, 0, 10, nil, recordbatch.LZ4, 0))
		closeStream(t, stream)
		stream = w.openTwo(ctx, t) // the source topic grew to two partitions
		mustSend(t, stream, 1, 0, 10, sourceBatch(t, 10, 5, nil, recordbatch.LZ4, 0))
		mustSend(t, stream, 2, 1, 0, sourceBatch(t, 0, 7, nil, recordbatch.LZ4, 0))
		mustSend(t, stream, 3, 0, 15, sourceBatch(t, 15, 5, nil, recordbatch.None, 0))
		mustSend(t, stream, 4, 1, 7, sourceBatch(t, 7, 3, nil, recordbatch.None, 0))
		return []span{{0, 0, 20}, {1, 0, 10}}
	}},
}

// TestOffsetIndexIsExact: for each way of copying, in both delivery modes
// (exactly-once: the transactions' markers take target offsets between
// rounds), the offset index translates every source offset and every
// target offset exactly, as the target itself shows.
//
// With every round flushing, the index topic alone holds it all; with
// flushes an hour apart, only the first round's entries are in the topic
// and the checkpoints carry the rest, across a stream opened again too.
func TestOffsetIndexIsExact(t *testing.T) {
	for _, tc := range indexCases {
		for _, exactlyOnce := range []bool{false, true} {
			for _, flush := range []time.Duration{0, time.Hour} {
				t.Run(fmt.Sprintf("%s exactly-once %v flush %v", tc.name, exactlyOnce, flush), func(t *testing.T) {
					w := startWriterOptions(t, passthroughLinks(t, exactlyOnce), func(o *Options) {
						if tc.edit != nil {
							tc.edit(&o.Producer)
						}
						o.Index.FlushInterval = flush
					})
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					defer cancel()
					spans := tc.run(ctx, t, w)
					checkIndex(ctx, t, w, spans...)
					if flush == 0 {
						checkIndexTopic(ctx, t, w, spans...)
					}
				})
			}
		}
	}
}

// A round writes the index topic only when it flushes. With flushes an
// hour apart, the rounds after the first flush add nothing to the index
// partition, not even a transaction marker (exactly-once: it joined none
// of their transactions), and the partition's checkpoint carries their
// entries, which translate exactly. A stream opened again flushes what the
// checkpoint carried with its first round's own: the index topic alone
// then translates every offset.
func TestIndexFlushesOnceAnInterval(t *testing.T) {
	bothModes(t, func(t *testing.T, exactlyOnce bool) {
		w := startWriterOptions(t, passthroughLinks(t, exactlyOnce), func(o *Options) { o.Index.FlushInterval = time.Hour })
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		key := offsetindex.Key{Link: "east", Topic: "orders", Partition: 0}
		stream := w.openOrders(ctx, t, "east")
		mustSend(t, stream, 1, 0, 0, sourceBatch(t, 0, 10, nil, recordbatch.LZ4, 0))
		mustSend(t, stream, 2, 0, 10, sourceBatch(t, 10, 5, nil, recordbatch.None, 0))
		flushed := w.cluster.PartitionInfo(indexTopic, 0).HighWatermark
		if flushed == 0 {
			t.Fatal("the first round's index was not written: no flush")
		}
		for seq, first := uint64(3), int64(15); seq <= 6; seq, first = seq+1, first+4 {
			mustSend(t, stream, seq, 0, first, sourceBatch(t, first, 4, nil, recordbatch.LZ4, 0))
		}
		if hw := w.cluster.PartitionInfo(indexTopic, 0).HighWatermark; hw != flushed {
			t.Fatalf("index partition went from %d to %d with flushes an hour apart", flushed, hw)
		}
		// The store's view follows the checkpoint topic: Sync waits until
		// it holds what the acknowledged rounds committed.
		if err := w.store.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		cp, ok, err := w.store.Get(key)
		if err != nil || !ok {
			t.Fatalf("checkpoint: %v, %v", ok, err)
		}
		carried, err := decodeUnindexed(cp.Unindexed)
		if err != nil || len(carried) != 1 || carried[0].Next != 31 {
			t.Fatalf("checkpoint carries %+v (%v), want one entry ending at 31, the rounds since the flush merged", carried, err)
		}
		checkIndex(ctx, t, w, span{0, 0, 31})

		closeStream(t, stream)
		stream = w.openOrders(ctx, t, "east")
		mustSend(t, stream, 1, 0, 31, sourceBatch(t, 31, 3, nil, recordbatch.None, 0))
		checkIndexTopic(ctx, t, w, span{0, 0, 34})
		if exactlyOnce {
			// The flush committed with the checkpoint, which carries none.
			if err := w.store.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if cp, _, err := w.store.Get(key); err != nil || len(cp.Unindexed) != 0 {
				t.Fatalf("checkpoint after the flush carries %d entries (%v), want none", len(cp.Unindexed), err)
			}
		}
	})
}

// Exactly-once, a round due to flush joins its index partition to its
// transaction with its data and checkpoint partitions, in the one
// AddPartitionsToTxn request every round makes: a flush costs the
// transaction coordinator no request (and state write) of its own.
func TestFlushingRoundAddsItsPartitionsOnce(t *testing.T) {
	w := startWriterOptions(t, passthroughLinks(t, true), func(o *Options) { o.Index.FlushInterval = 0 }) // every round flushes
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	var adds []map[string]bool // the topics of each request
	commits := 0
	w.cluster.ControlKey(kmsg.AddPartitionsToTxn.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		w.cluster.KeepControl()
		topics := map[string]bool{}
		for _, rt := range req.(*kmsg.AddPartitionsToTxnRequest).Topics {
			topics[rt.Topic] = true
		}
		mu.Lock()
		adds = append(adds, topics)
		mu.Unlock()
		return nil, nil, false
	})
	w.cluster.ControlKey(kmsg.EndTxn.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		w.cluster.KeepControl()
		if req.(*kmsg.EndTxnRequest).Commit {
			mu.Lock()
			commits++
			mu.Unlock()
		}
		return nil, nil, false
	})

	stream := w.openOrders(ctx, t, "east")
	for seq, first := uint64(1), int64(0); seq <= 3; seq, first = seq+1, first+5 {
		mustSend(t, stream, seq, 0, first, sourceBatch(t, first, 5, nil, recordbatch.LZ4, 0))
	}
	checkIndexTopic(ctx, t, w, span{0, 0, 15})
	mu.Lock()
	defer mu.Unlock()
	// A request may be sent again while the coordinator completes the
	// last transaction (CONCURRENT_TRANSACTIONS): every request names all
	// three topics, none the index partition alone.
	if commits != 3 || len(adds) < commits {
		t.Fatalf("%d AddPartitionsToTxn requests for %d committed rounds, want 3 rounds, one request each at least", len(adds), commits)
	}
	for i, topics := range adds {
		if !topics["orders"] || !topics[w.store.Topic()] || !topics[indexTopic] || len(topics) != 3 {
			t.Errorf("request %d added the partitions of %v, want those of orders, %s and %s", i+1, topics, w.store.Topic(), indexTopic)
		}
	}
}

// Exactly-once: a round whose transaction does not commit leaves no index
// record a read_committed reader sees, and the copy sent again after it is
// indexed exactly (the aborted round's records keep their target offsets).
func TestAbortedRoundLeavesNoIndexRecord(t *testing.T) {
	w := startWriter(t, passthroughLinks(t, true))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream := w.openOrders(ctx, t, "east")
	w.failNextCommit(kerr.ProducerFenced)
	if err := sendKafka(t, stream, 1, 0, sourceBatch(t, 0, 5, nil, recordbatch.None, 0)); err == nil {
		t.Fatal("a round whose commit failed was acknowledged")
	}
	if hw := w.cluster.PartitionInfo(indexTopic, 0).HighWatermark; hw == 0 {
		t.Fatal("the failed round wrote no index record at all: nothing shows it is left out")
	}
	r, err := offsetindex.NewReader([]kgo.Opt{kgo.SeedBrokers(w.cluster.ListenAddrs()...)}, indexTopic)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if x, err := r.Load(ctx, offsetindex.Key{Link: "east", Topic: "orders", Partition: 0}); err != nil || x.Runs() != 0 {
		t.Fatalf("read_committed index after the failed round: %d runs, %v; want none", x.Runs(), err)
	}
	if _, err := r.Translate(ctx, offsetindex.Key{Link: "east", Topic: "orders", Partition: 0}, 0); !errors.Is(err, offsetindex.ErrNotIndexed) {
		t.Fatalf("Translate after the failed round: %v, want ErrNotIndexed", err)
	}

	stream = w.openOrders(ctx, t, "east") // fences, and aborts what the failed round left open
	mustSend(t, stream, 1, 0, 0, sourceBatch(t, 0, 5, nil, recordbatch.None, 0))
	mustSend(t, stream, 2, 0, 5, sourceBatch(t, 5, 5, nil, recordbatch.LZ4, 0))
	checkIndex(ctx, t, w, span{0, 0, 10})
}

// The index record of a source partition is keyed and partitioned as its
// checkpoint is: with as many index partitions as checkpoint partitions,
// a round adds at most one index partition per checkpoint partition.
func TestIndexKeysAreCheckpointKeys(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	base, err := kafkaclient.Defaults("ferry-test").Sarama()
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.Open(cluster.ListenAddrs(), base, checkpoint.Options{Topic: cpTopic, Partitions: 7, ReplicationFactor: -1, Writer: "w1"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for p := range int32(50) {
		k := offsetindex.Key{Link: "east", Topic: "orders." + strconv.Itoa(int(p)), Partition: p * 977}
		ck := checkpoint.Key{Link: k.Link, Topic: k.Topic, Partition: k.Partition}
		if k.String() != ck.String() || offsetindex.PartitionOf(k, 7) != store.PartitionOf(ck) {
			t.Errorf("index key %q in partition %d, checkpoint key %q in %d", k, offsetindex.PartitionOf(k, 7), ck, store.PartitionOf(ck))
		}
	}
}

// Each flush leaves a landmark in the partition's checkpoint: the
// index-topic offset of the partition's first record it wrote, and that
// record's first source offset. A checkpoint carries them (at most
// offsetindex.MaxLandmarks) ascending, each naming a committed index
// record of the partition that starts where the landmark says, and a
// translation of an old offset reads the index from the one below it.
func TestFlushesLeaveLandmarksInTheCheckpoint(t *testing.T) {
	bothModes(t, func(t *testing.T, exactlyOnce bool) {
		w := startWriterOptions(t, passthroughLinks(t, exactlyOnce), func(o *Options) { o.Index.FlushInterval = 0 }) // every round flushes
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		stream := w.openOrders(ctx, t, "east")
		const rounds = 12
		for seq, first := uint64(1), int64(0); seq <= rounds; seq, first = seq+1, first+5 {
			mustSend(t, stream, seq, 0, first, sourceBatch(t, first, 5, nil, recordbatch.None, 0))
		}
		closeStream(t, stream)
		if err := w.store.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		key := offsetindex.Key{Link: "east", Topic: "orders", Partition: 0}
		cp, ok, err := w.store.Get(key)
		if !ok || err != nil {
			t.Fatalf("checkpoint: %v %v", ok, err)
		}
		// The last round's landmark rides with the checkpoint after it
		// (exactly-once: its offset is known once the round is written).
		if len(cp.Landmarks) < rounds-2 || !offsetindex.CheckLandmarks(cp.Landmarks) {
			t.Fatalf("checkpoint after %d flushing rounds carries landmarks %v, want at least %d, ascending", rounds, cp.Landmarks, rounds-2)
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(w.cluster.ListenAddrs()...), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{indexTopic: {0: kgo.NewOffset().AtStart()}}))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		at := map[int64]*kgo.Record{}
		hw := w.cluster.PartitionInfo(indexTopic, 0).HighWatermark
		for last := int64(-1); last < hw-1; {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("index topic read to %d of %d", last, hw)
			}
			fs.EachRecord(func(r *kgo.Record) {
				if last = max(last, r.Offset); !r.Attrs.IsControl() {
					at[r.Offset] = r
				}
			})
		}
		for _, l := range cp.Landmarks {
			rec, ok := at[l.Offset]
			if !ok {
				t.Fatalf("landmark %+v names no committed record of the index topic", l)
			}
			e, err := offsetindex.Decode(rec.Value)
			if string(rec.Key) != key.String() || err != nil || e.From != l.Source {
				t.Fatalf("landmark %+v names %s's record from %d (%v), want %s's from %d", l, rec.Key, e.From, err, key, l.Source)
			}
		}
		// An offset of the last rounds translates reading a few records.
		r, err := offsetindex.NewReader([]kgo.Opt{kgo.SeedBrokers(w.cluster.ListenAddrs()...)}, indexTopic)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		s := int64(5 * (rounds - 3))
		answers, err := r.TranslateAll(ctx, map[offsetindex.Key][]int64{key: {s}}, map[offsetindex.Key][]offsetindex.Landmark{key: cp.Landmarks})
		if err != nil || answers[key][s].Err != nil {
			t.Fatalf("translate %d: %v %+v", s, err, answers[key][s])
		}
		if n := r.RecordsRead(); n > 4 {
			t.Errorf("translating %d read %d index records, want the few from its landmark on", s, n)
		}
		// So does an operator's translation (ferryctl offsets translate),
		// answering every offset as the whole index does; an offset
		// before the first landmark reads from the log start.
		whole, err := w.srv.LoadIndex(ctx, r, key)
		if err != nil {
			t.Fatal(err)
		}
		for off := int64(0); off <= 5*rounds+1; off++ {
			before := r.RecordsRead()
			x, err := w.srv.LoadIndexFor(ctx, r, key, off)
			if err != nil {
				t.Fatal(err)
			}
			read := r.RecordsRead() - before
			got, gerr := x.Translate(off)
			want, werr := whole.Translate(off)
			if got != want || fmt.Sprint(gerr) != fmt.Sprint(werr) {
				t.Fatalf("LoadIndexFor(%d) translates to %+v, %v; the whole index: %+v, %v", off, got, gerr, want, werr)
			}
			if off >= s && read > 4 {
				t.Errorf("LoadIndexFor(%d) read %d index records, want the few from its landmark on", off, read)
			}
		}
	})
}
