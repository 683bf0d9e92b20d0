package rawfetch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/ferry-replicator/ferry/pkg/recordbatch"
)

func newCluster(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(3)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// fetchVersions records the Fetch versions a cluster is asked with.
type fetchVersions struct {
	mu   sync.Mutex
	seen map[int16]bool
}

func watchFetchVersions(c *kfake.Cluster) *fetchVersions {
	v := &fetchVersions{seen: make(map[int16]bool)}
	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		v.mu.Lock()
		v.seen[req.GetVersion()] = true
		v.mu.Unlock()
		return nil, nil, false // observe only
	})
	return v
}

func (v *fetchVersions) only(t *testing.T, want int16) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.seen) != 1 || !v.seen[want] {
		t.Fatalf("fetched with versions %v, want only v%d", v.seen, want)
	}
}

// TestRecords produces with kgo, one codec per partition, and reads the
// partitions back raw over several rounds: the batches hold what was
// produced, in order, compressed as produced. It runs with topics by id
// (Fetch v18, what kgo picks against kfake) and by name (Fetch capped at
// v12), and with limits that take one batch a round or many.
func TestRecords(t *testing.T) {
	codecs := []struct {
		name string
		kgo  kgo.CompressionCodec
		want recordbatch.Compression
	}{
		{"none", kgo.NoCompression(), recordbatch.None},
		{"gzip", kgo.GzipCompression(), recordbatch.Gzip},
		{"snappy", kgo.SnappyCompression(), recordbatch.Snappy},
		{"lz4", kgo.Lz4Compression(), recordbatch.LZ4},
		{"zstd", kgo.ZstdCompression(), recordbatch.Zstd},
	}
	const topic = "records"
	c := newCluster(t, kfake.SeedTopics(int32(len(codecs)), topic))
	ctx := timeout(t, 2*time.Minute)
	addrs := c.ListenAddrs()

	leaders := make(map[int32]bool)
	want := make(map[Partition][]*kgo.Record)
	for i, codec := range codecs {
		p := Partition{topic, int32(i)}
		leaders[c.LeaderFor(topic, p.Partition)] = true
		cl := newClient(t, addrs, kgo.ProducerBatchCompression(codec.kgo), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		recs := mixedRecords(topic, p.Partition, 400)
		for j := 0; j < len(recs); j += 40 { // ten batches at least
			produce(t, ctx, cl, recs[j:j+40]...)
		}
		want[p] = recs
	}
	if len(leaders) < 2 {
		t.Fatalf("partitions on leaders %v: the test wants several", leaders)
	}

	for _, v := range []struct {
		name    string
		max     *kversion.Versions
		version int16
	}{
		{"by topic id", nil, 18},
		{"by name", func() *kversion.Versions { v := kversion.Stable(); v.SetMaxKeyVersion(int16(kmsg.Fetch), 12); return v }(), 12},
	} {
		for _, limits := range []Options{
			{MaxWait: 50 * time.Millisecond, PartitionMaxBytes: 1}, // one batch a partition a round
			{MaxWait: 50 * time.Millisecond, PartitionMaxBytes: 8 << 10},
			{}, // defaults: all at once
		} {
			t.Run(fmt.Sprintf("%s/partition max %d", v.name, limits.PartitionMaxBytes), func(t *testing.T) {
				versions := watchFetchVersions(c)
				var opts []kgo.Opt
				if v.max != nil {
					opts = append(opts, kgo.MaxVersions(v.max))
				}
				f := New(newClient(t, addrs, opts...), limits).Reader()
				from := make(map[Partition]int64)
				for p := range want {
					from[p] = 0
				}
				got, st := readAll(t, ctx, f, from, nil)
				for i, codec := range codecs {
					p := Partition{topic, int32(i)}
					sameRecords(t, p.String(), decode(t, got[p]), want[p])
					compressed := 0
					for _, b := range got[p] {
						if info, _ := recordbatch.Parse(b); info.Compression() == codec.want {
							compressed++
						}
					}
					if compressed != len(got[p]) {
						t.Fatalf("%s: %d of %d batches %s", p, compressed, len(got[p]), codec.name)
					}
					if limits.PartitionMaxBytes == 1 && st.data[p] != len(got[p]) {
						t.Fatalf("%s: %d batches in %d rounds with data, want one a round", p, len(got[p]), st.data[p])
					}
				}
				t.Logf("%d rounds, %d retries, rounds with data %v", st.rounds, st.retries, st.data)
				versions.only(t, v.version)
			})
		}
	}
}

// TestTransactions reads a partition holding committed and aborted
// transactions of two producers, interleaved with each other and with
// plain records: exactly the committed and plain records arrive, in
// order, with no control batch, whether the aborted list comes in one
// response or a piece each round.
func TestTransactions(t *testing.T) {
	const topic = "txn"
	c := newCluster(t, kfake.SeedTopics(1, topic))
	ctx := timeout(t, 2*time.Minute)
	want := txnScenario(t, ctx, c.ListenAddrs(), topic)
	cl := newClient(t, c.ListenAddrs())
	// Not MaxBytes: kfake, cutting a response at MaxBytes, leaves out the
	// cut partition's aborted list (and the partitions after it), which
	// Apache Kafka does not.
	for _, limits := range []Options{{}, {PartitionMaxBytes: 1}} {
		t.Run(fmt.Sprintf("partition max %d", limits.PartitionMaxBytes), func(t *testing.T) {
			f := New(cl, limits).Reader()
			p := Partition{topic, 0}
			var last Result
			got, st := readAll(t, ctx, f, map[Partition]int64{p: 0}, func(_ Partition, r Result) bool {
				last = r
				return r.Next >= r.HighWatermark
			})
			sameValues(t, "committed", values(decode(t, got[p])), want)
			if last.Next != last.HighWatermark || last.LastStableOffset != last.HighWatermark {
				t.Fatalf("ended at %d; high watermark %d, last stable %d", last.Next, last.HighWatermark, last.LastStableOffset)
			}
			t.Logf("%d rounds, %d batches", st.rounds, len(got[p]))
		})
	}
}

// TestOpenTransaction: an open transaction holds the read at the last
// stable offset, and what follows its end arrives.
func TestOpenTransaction(t *testing.T) {
	const topic = "open"
	c := newCluster(t, kfake.SeedTopics(1, topic))
	ctx := timeout(t, time.Minute)
	openTransactionScenario(t, ctx, c.ListenAddrs(), topic)
}

// openTransactionScenario is TestOpenTransaction on any cluster.
func openTransactionScenario(t *testing.T, ctx context.Context, addrs []string, topic string) {
	p := Partition{topic, 0}
	plain := newClient(t, addrs, kgo.DefaultProduceTopic(topic))
	txn := newClient(t, addrs, kgo.DefaultProduceTopic(topic), kgo.TransactionalID("rawfetch-open"))
	f := New(newClient(t, addrs), Options{MaxWait: 20 * time.Millisecond}).Reader()

	produce(t, ctx, plain, valueRecords(topic, 0, "before")...)
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce(t, ctx, txn, valueRecords(topic, 0, "open-1", "open-2")...)
	produce(t, ctx, plain, valueRecords(topic, 0, "during")...)

	var last Result
	got, _ := readAll(t, ctx, f, map[Partition]int64{p: 0}, func(_ Partition, r Result) bool {
		last = r
		return r.LastStableOffset >= 0 && r.Next >= r.LastStableOffset
	})
	sameValues(t, "while open", values(decode(t, got[p])), []string{"before"})
	if last.Next != 1 || last.LastStableOffset != 1 || last.HighWatermark != 4 {
		t.Fatalf("while open: Next %d, last stable %d, high watermark %d; want 1, 1, 4", last.Next, last.LastStableOffset, last.HighWatermark)
	}
	// Asked again, the partition gives nothing more until the end.
	res, err := f.Fetch(ctx, map[Partition]int64{p: last.Next})
	if err != nil || res[p].Err != nil || len(res[p].Batches) != 0 || res[p].Next != last.Next {
		t.Fatalf("while open, again: %v %+v", err, res[p])
	}

	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	got, _ = readAll(t, ctx, f, map[Partition]int64{p: last.Next}, nil)
	sameValues(t, "after the commit", values(decode(t, got[p])), []string{"open-1", "open-2", "during"})
}

// TestMidBatch: asking an offset inside a batch returns that batch whole,
// starting before the offset asked; the caller skips the records before.
func TestMidBatch(t *testing.T) {
	const topic = "mid"
	c := newCluster(t, kfake.SeedTopics(1, topic))
	ctx := timeout(t, time.Minute)
	cl := newClient(t, c.ListenAddrs(), kgo.ProducerLinger(time.Second))
	produce(t, ctx, cl, valueRecords(topic, 0, numbered("one-batch", 10)...)...)
	produce(t, ctx, cl, valueRecords(topic, 0, numbered("next-batch", 5)...)...)

	p := Partition{topic, 0}
	f := New(cl, Options{}).Reader()
	res := roundWithoutRetry(t, ctx, f, map[Partition]int64{p: 4})[p]
	if res.Err != nil || len(res.Batches) != 2 || res.Next != 15 {
		t.Fatalf("Err %v, %d batches, Next %d; want 2 batches, Next 15", res.Err, len(res.Batches), res.Next)
	}
	info, err := recordbatch.Parse(res.Batches[0])
	if err != nil {
		t.Fatal(err)
	}
	if info.BaseOffset != 0 || info.NumRecords != 10 {
		t.Fatalf("first batch at %d with %d records, want the whole batch at 0 holding offset 4", info.BaseOffset, info.NumRecords)
	}
	sameValues(t, "first batch", values(decode(t, res.Batches[:1])), numbered("one-batch", 10))
}

// roundWithoutRetry runs rounds until no partition has Retry set.
func roundWithoutRetry(t *testing.T, ctx context.Context, f *Reader, pos map[Partition]int64) map[Partition]Result {
	t.Helper()
	for {
		res, err := f.Fetch(ctx, pos)
		if err != nil {
			t.Fatal(err)
		}
		retry := false
		for p, r := range res {
			if r.Retry != nil {
				t.Logf("%s: retry: %v", p, r.Retry)
				retry = true
			}
		}
		if !retry {
			return res
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLeaderMove moves a partition's leader twice while it is being read,
// one batch a round: the rounds after a move read from the new leader,
// without Err, and the batches neither repeat nor skip. The other
// partition, which stays, reads on.
func TestLeaderMove(t *testing.T) {
	const topic = "moving"
	c := newCluster(t, kfake.SeedTopics(2, topic))
	ctx := timeout(t, time.Minute)
	cl := newClient(t, c.ListenAddrs(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	f := New(cl, Options{MaxWait: 20 * time.Millisecond, PartitionMaxBytes: 1}).Reader()
	moving, still := Partition{topic, 0}, Partition{topic, 1}
	var want []string
	got := make(map[Partition][][]byte)
	pos := map[Partition]int64{moving: 0, still: 0}
	retries := 0
	for phase := range 3 {
		vs := numbered(fmt.Sprint("phase-", phase), 6)
		for i := 0; i < len(vs); i += 2 { // three batches a partition
			produce(t, ctx, cl, valueRecords(topic, 0, vs[i:i+2]...)...)
			produce(t, ctx, cl, valueRecords(topic, 1, vs[i:i+2]...)...)
		}
		want = append(want, vs...)
		// One batch of each partition, then the move: the rest of
		// the phase's batches are read from the new leader.
		res := roundWithoutRetry(t, ctx, f, pos)
		for p, r := range res {
			got[p] = append(got[p], r.Batches...)
			pos[p] = r.Next
		}
		to := c.LeaderFor(topic, 0)
		if phase > 0 {
			old := to
			to = (old + 1) % 3
			if err := c.MoveTopicPartition(topic, 0, to); err != nil {
				t.Fatal(err)
			}
			t.Logf("moved %s from broker %d to %d at offset %d", moving, old, to, pos[moving])
		}
		more, st := readAll(t, ctx, f, pos, nil)
		retries += st.retries
		for p, bs := range more {
			got[p] = append(got[p], bs...)
		}
		f.f.mu.Lock()
		leader := f.f.topics[topic].leaders[0]
		f.f.mu.Unlock()
		if leader.id != to {
			t.Fatalf("phase %d: read with cached leader %d, the leader is %d", phase, leader.id, to)
		}
		pos = map[Partition]int64{moving: int64(len(want)), still: int64(len(want))}
	}
	if retries < 2 {
		t.Fatalf("%d retries over two moves: the moves were not seen", retries)
	}
	sameValues(t, moving.String(), values(decode(t, got[moving])), want)
	sameValues(t, still.String(), values(decode(t, got[still])), want)
}

// TestOffsetOutOfRange: asking past the end, or below the log start after
// DeleteRecords, gives ErrOffsetOutOfRange with the log's bounds; asking
// the end itself is no error.
func TestOffsetOutOfRange(t *testing.T) {
	const topic = "range"
	c := newCluster(t, kfake.SeedTopics(1, topic))
	ctx := timeout(t, time.Minute)
	cl := newClient(t, c.ListenAddrs())
	for i := range 10 {
		produce(t, ctx, cl, valueRecords(topic, 0, numbered(fmt.Sprint("batch-", i), 3)...)...)
	}
	deleteRecords(t, ctx, cl, topic, 0, 12)
	outOfRangeCases(t, ctx, New(cl, Options{MaxWait: 20 * time.Millisecond}).Reader(), Partition{topic, 0}, 12, 30)
}

func deleteRecords(t *testing.T, ctx context.Context, cl *kgo.Client, topic string, partition int32, before int64) {
	t.Helper()
	req := kmsg.NewPtrDeleteRecordsRequest()
	req.TimeoutMillis = 10_000
	rt := kmsg.NewDeleteRecordsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewDeleteRecordsRequestTopicPartition()
	rp.Partition, rp.Offset = partition, before
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Topics[0].Partitions[0]; got.ErrorCode != 0 || got.LowWatermark != before {
		t.Fatalf("delete records: %v, low watermark %d", kerr.ErrorForCode(got.ErrorCode), got.LowWatermark)
	}
}

// outOfRangeCases checks p, whose log runs from start to end.
func outOfRangeCases(t *testing.T, ctx context.Context, f *Reader, p Partition, start, end int64) {
	for _, c := range []struct {
		name   string
		offset int64
		out    bool
	}{
		{"below the log start", start - 5, true},
		{"at offset 0, deleted", 0, true},
		{"past the end", end + 5, true},
		{"at the log start", start, false},
		{"at the end", end, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := roundWithoutRetry(t, ctx, f, map[Partition]int64{p: c.offset})[p]
			if !c.out {
				if r.Err != nil || r.Next < c.offset {
					t.Fatalf("Err %v, Next %d", r.Err, r.Next)
				}
				return
			}
			if !errors.Is(r.Err, ErrOffsetOutOfRange) {
				t.Fatalf("Err %v, want ErrOffsetOutOfRange", r.Err)
			}
			if r.LogStartOffset != start || r.HighWatermark != end || r.Next != c.offset || len(r.Batches) != 0 {
				t.Fatalf("log start %d, high watermark %d, Next %d, %d batches; want %d, %d, %d, none",
					r.LogStartOffset, r.HighWatermark, r.Next, len(r.Batches), start, end, c.offset)
			}
			for _, s := range []string{p.String(), fmt.Sprintf("offset %d,", c.offset), fmt.Sprintf("log start %d", start)} {
				if !strings.Contains(r.Err.Error(), s) {
					t.Fatalf("Err %q does not say %q", r.Err, s)
				}
			}
			t.Log(r.Err)
		})
	}
}

// TestCancel: ending ctx ends a round held by an idle partition at once,
// and the Fetcher works after it.
func TestCancel(t *testing.T) {
	const topic = "idle"
	c := newCluster(t, kfake.SeedTopics(3, topic))
	cl := newClient(t, c.ListenAddrs(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	f := New(cl, Options{MaxWait: time.Minute}).Reader()
	pos := map[Partition]int64{{topic, 0}: 0, {topic, 1}: 0, {topic, 2}: 0}
	// A first round looks the leaders up, so the canceled one is held by
	// the brokers, not by metadata.
	warm, cancelWarm := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancelWarm()
	if _, err := f.Fetch(warm, pos); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("idle round with a deadline: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	start := time.Now()
	time.AfterFunc(300*time.Millisecond, cancel)
	res, err := f.Fetch(ctx, pos)
	if !errors.Is(err, context.Canceled) || res != nil {
		t.Fatalf("canceled round: %v, %v", res, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("canceled round took %v", took)
	}

	produce(t, timeout(t, time.Minute), cl, valueRecords(topic, 1, "after")...)
	f2 := New(cl, Options{MaxWait: 20 * time.Millisecond}).Reader()
	got, _ := readAll(t, timeout(t, time.Minute), f2, map[Partition]int64{{topic, 1}: 0}, nil)
	sameValues(t, "after", values(decode(t, got[Partition{topic, 1}])), []string{"after"})
	// The first Fetcher too.
	pos = map[Partition]int64{{topic, 1}: 0}
	f.f.opts.MaxWait = 20 * time.Millisecond
	got, _ = readAll(t, timeout(t, time.Minute), f, pos, nil)
	sameValues(t, "after, first fetcher", values(decode(t, got[Partition{topic, 1}])), []string{"after"})
}

// TestRotation: a response cut at MaxBytes serves the partitions in
// request order, so a Reader rotates the order each round and every
// partition gets its turn at the front, rather than the first partition
// being drained before the others get anything.
func TestRotation(t *testing.T) {
	const topic = "rotate"
	c := newCluster(t, kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	ctx := timeout(t, time.Minute)
	cl := newClient(t, c.ListenAddrs(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	pos := make(map[Partition]int64)
	for p := range int32(3) {
		for b := range 3 {
			produce(t, ctx, cl, valueRecords(topic, p, fmt.Sprintf("p%d-b%d", p, b))...)
		}
		pos[Partition{topic, p}] = 0
	}
	f := New(cl, Options{MaxWait: 20 * time.Millisecond, MaxBytes: 1}).Reader() // one batch a round
	served := make(map[Partition]int)
	for round := range 3 {
		res, err := f.Fetch(ctx, pos)
		if err != nil {
			t.Fatal(err)
		}
		for p, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			if len(r.Batches) > 0 {
				served[p]++
				t.Logf("round %d: %s", round, p)
			}
			pos[p] = r.Next
		}
	}
	for p := range pos {
		if served[p] != 1 {
			t.Fatalf("three rounds served %v, want each partition once", served)
		}
	}
}

// TestRotationIsTheCallers: two shards fetch through one Fetcher, their
// rounds interleaved. A batch larger than PartitionMaxBytes comes back
// only when its partition is the first in the response to have data
// (KIP-74; kfake: the first batch of the response), so each caller's
// partitions must take turns at the front of its requests on its own
// count: with one count for the whole Fetcher, shard A's rounds all fell
// on odd counts, a/1 was always first, and a/0, whose next batch is above
// the limit, never moved.
func TestRotationIsTheCallers(t *testing.T) {
	c := newCluster(t, kfake.NumBrokers(1), kfake.SeedTopics(2, "a"), kfake.SeedTopics(1, "b"))
	ctx := timeout(t, time.Minute)
	cl := newClient(t, c.ListenAddrs(), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	const limit = 1 << 10
	big, a1, b0 := Partition{"a", 0}, Partition{"a", 1}, Partition{"b", 0}
	produce(t, ctx, cl, &kgo.Record{Topic: "a", Partition: 0, Value: make([]byte, 4*limit)})
	for i := range 100 { // small batches: a/1 has data in every round of the test
		produce(t, ctx, cl, valueRecords("a", 1, fmt.Sprintf("a1-%03d-%s", i, strings.Repeat("x", 100)))...)
	}
	for i := range 20 {
		produce(t, ctx, cl, valueRecords("b", 0, fmt.Sprintf("b0-%d", i))...)
	}

	f := New(cl, Options{MaxWait: 20 * time.Millisecond, PartitionMaxBytes: limit})
	shardA, shardB := f.Reader(), f.Reader()
	posA := map[Partition]int64{big: 0, a1: 0}
	posB := map[Partition]int64{b0: 0}
	round := func(r *Reader, pos map[Partition]int64) {
		t.Helper()
		res, err := r.Fetch(ctx, pos)
		if err != nil {
			t.Fatal(err)
		}
		for p, r := range res {
			if r.Err != nil || r.Retry != nil {
				t.Fatalf("%s: Err %v, Retry %v", p, r.Err, r.Retry)
			}
			pos[p] = r.Next
		}
	}
	// Two partitions on one leader: each must be first within two of its
	// shard's rounds, whatever the other shard does.
	for i := range 4 {
		round(shardA, posA)
		round(shardB, posB)
		t.Logf("shard A's round %d: a/0 at %d, a/1 at %d", i+1, posA[big], posA[a1])
	}
	if posA[big] != 1 {
		t.Fatalf("a/0 at %d after 4 rounds of its shard, interleaved with another's: its batch above the partition limit never came (a/1 at %d)", posA[big], posA[a1])
	}
	if posA[a1] == 0 || posB[b0] == 0 {
		t.Fatalf("a/1 at %d, b/0 at %d: every partition reads", posA[a1], posB[b0])
	}
}

// TestRecreatedTopicShowsItsNewID: a topic deleted and created again
// under its name while a Reader reads it, the new topic already past the
// position. By id (v13+) the old id is refused and the topic looked up
// again; by name (up to v12) the broker serves the new topic at once. Either
// way, the first Result holding anything of the new topic says the new id,
// and every Result before it the old one.
func TestRecreatedTopicShowsItsNewID(t *testing.T) {
	byName := kversion.Stable()
	byName.SetMaxKeyVersion(int16(kmsg.Fetch), 12)
	for _, v := range []struct {
		name    string
		opts    []kgo.Opt
		version int16
	}{{"by topic id", nil, 18}, {"by name", []kgo.Opt{kgo.MaxVersions(byName)}, 12}} {
		t.Run(v.name, func(t *testing.T) {
			const topic = "recreated"
			c := newCluster(t, kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
			ctx := timeout(t, time.Minute)
			cl := newClient(t, c.ListenAddrs())
			adm := kadm.NewClient(cl)
			topicID := func() [16]byte {
				t.Helper()
				// A client of its own each time: kgo answers a metadata
				// request from what it learned shortly before.
				details, err := kadm.NewClient(newClient(t, c.ListenAddrs())).ListTopics(ctx, topic)
				if err != nil || details[topic].Err != nil {
					t.Fatalf("list %s: %v %v", topic, err, details[topic].Err)
				}
				return details[topic].ID
			}
			p := Partition{topic, 0}
			produce(t, ctx, cl, valueRecords(topic, 0, numbered("old", 5)...)...)
			oldID := topicID()
			versions := watchFetchVersions(c)
			f := New(newClient(t, c.ListenAddrs(), v.opts...), Options{MaxWait: 20 * time.Millisecond}).Reader()
			r := roundWithoutRetry(t, ctx, f, map[Partition]int64{p: 0})[p]
			if r.Next != 5 || r.TopicID != oldID {
				t.Fatalf("first round: Next %d, topic id %x; want 5, %x", r.Next, r.TopicID, oldID)
			}

			if _, err := adm.DeleteTopic(ctx, topic); err != nil {
				t.Fatal(err)
			}
			if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
				t.Fatal(err)
			}
			// A new producer: cl's has the old id cached.
			produce(t, ctx, newClient(t, c.ListenAddrs()), valueRecords(topic, 0, numbered("new", 10)...)...)
			newID := topicID()
			if newID == oldID {
				t.Fatal("the recreated topic kept its id")
			}
			for round := 0; ; round++ {
				if round == 50 {
					t.Fatal("nothing of the new topic after 50 rounds")
				}
				res, err := f.Fetch(ctx, map[Partition]int64{p: 5})
				if err != nil {
					t.Fatal(err)
				}
				r := res[p]
				if r.Retry != nil {
					if r.TopicID != ([16]byte{}) {
						t.Fatalf("a Retry (%v) with topic id %x", r.Retry, r.TopicID)
					}
					t.Logf("round %d: retry: %v", round, r.Retry)
					continue
				}
				if r.Err != nil {
					t.Fatalf("round %d: %v", round, r.Err)
				}
				if r.TopicID != newID {
					t.Fatalf("round %d: %d batches, Next %d from topic id %x; want the new topic's id %x (old %x)", round, len(r.Batches), r.Next, r.TopicID, newID, oldID)
				}
				sameValues(t, "new topic", values(decode(t, r.Batches)), numbered("new", 10))
				break
			}
			versions.only(t, v.version)
		})
	}
}

// TestBrokerErrors answers one round with a broker error and checks what
// the partition's Result says and whether the leader is looked up again;
// the round after reads normally.
func TestBrokerErrors(t *testing.T) {
	const topic = "errors"
	c := newCluster(t, kfake.SeedTopics(1, topic))
	ctx := timeout(t, time.Minute)
	cl := newClient(t, c.ListenAddrs())
	produce(t, ctx, cl, valueRecords(topic, 0, "v")...)
	p := Partition{topic, 0}

	for _, tc := range []struct {
		name     string
		code     int16 // partition error code
		top      int16 // top-level error code
		drop     bool  // close the connection instead of answering
		err      error // Err's errors.Is target; nil: Retry instead
		errText  string
		relooked bool // the cached leader was forgotten
	}{
		{name: "not leader", code: kerr.NotLeaderForPartition.Code, relooked: true},
		{name: "fenced leader epoch", code: kerr.FencedLeaderEpoch.Code, relooked: true},
		{name: "unknown topic or partition", code: kerr.UnknownTopicOrPartition.Code, relooked: true},
		{name: "leader not available", code: kerr.LeaderNotAvailable.Code, relooked: true},
		{name: "unknown topic id", code: kerr.UnknownTopicID.Code, relooked: true},
		{name: "inconsistent topic id", code: kerr.InconsistentTopicID.Code, relooked: true},
		{name: "offset not available (retriable, same leader)", code: kerr.OffsetNotAvailable.Code},
		{name: "connection closed", drop: true, relooked: true},
		{name: "top-level retriable", top: kerr.FetchSessionIDNotFound.Code},
		{name: "topic authorization failed", code: kerr.TopicAuthorizationFailed.Code, err: kerr.TopicAuthorizationFailed},
		{name: "unsupported compression", code: kerr.UnsupportedCompressionType.Code, err: kerr.UnsupportedCompressionType},
		{name: "unknown code", code: 32000, err: kerr.UnknownServerError, errText: "error code 32000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := New(cl, Options{MaxWait: 20 * time.Millisecond}).Reader()
			roundWithoutRetry(t, ctx, f, map[Partition]int64{p: 0}) // leaders cached
			c.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
				if tc.drop {
					return nil, errors.New("dropped by the test"), true
				}
				req := kreq.(*kmsg.FetchRequest)
				resp := req.ResponseKind().(*kmsg.FetchResponse)
				resp.ErrorCode = tc.top
				for _, rt := range req.Topics {
					st := kmsg.NewFetchResponseTopic()
					st.Topic, st.TopicID = rt.Topic, rt.TopicID
					for _, rp := range rt.Partitions {
						sp := kmsg.NewFetchResponseTopicPartition()
						sp.Partition, sp.ErrorCode, sp.HighWatermark = rp.Partition, tc.code, -1
						st.Partitions = append(st.Partitions, sp)
					}
					resp.Topics = append(resp.Topics, st)
				}
				return resp, nil, true
			})
			res, err := f.Fetch(ctx, map[Partition]int64{p: 0})
			if err != nil {
				t.Fatal(err)
			}
			r := res[p]
			if len(r.Batches) != 0 || r.Next != 0 {
				t.Fatalf("%d batches, Next %d after an error", len(r.Batches), r.Next)
			}
			if tc.err != nil {
				if !errors.Is(r.Err, tc.err) || r.Retry != nil || !strings.Contains(r.Err.Error(), tc.errText) {
					t.Fatalf("Err %v, Retry %v; want Err %v", r.Err, r.Retry, tc.err)
				}
			} else if r.Err != nil || r.Retry == nil {
				t.Fatalf("Err %v, Retry %v; want a Retry only", r.Err, r.Retry)
			}
			t.Logf("Err %v, Retry %v", r.Err, r.Retry)
			f.f.mu.Lock()
			_, cached := f.f.topics[topic].leaders[0]
			f.f.mu.Unlock()
			if cached == tc.relooked {
				t.Fatalf("leader still cached: %v, want %v", cached, !tc.relooked)
			}
			got := roundWithoutRetry(t, ctx, f, map[Partition]int64{p: 0})[p]
			if got.Err != nil || len(got.Batches) != 1 {
				t.Fatalf("round after: Err %v, %d batches", got.Err, len(got.Batches))
			}
		})
	}
}

// TestUnknownTopic: a topic the cluster does not have is a Retry (it may
// be being created), found once it exists; a negative offset is an Err. A
// round limited in bytes whose partitions all lack a leader (as while the
// source is down) has no leader to share the limit among, and is the same
// Retry.
func TestUnknownTopic(t *testing.T) {
	c := newCluster(t)
	ctx := timeout(t, time.Minute)
	cl := newClient(t, c.ListenAddrs())
	f := New(cl, Options{MaxWait: 20 * time.Millisecond}).Reader()
	p := Partition{"later", 0}
	for _, maxBytes := range []int64{0, 1 << 20} {
		res, err := f.FetchUpTo(ctx, map[Partition]int64{p: 0, {"x", 0}: -2}, maxBytes)
		if err != nil {
			t.Fatalf("max bytes %d: %v", maxBytes, err)
		}
		if r := res[p]; r.Err != nil || !errors.Is(r.Retry, kerr.UnknownTopicOrPartition) {
			t.Fatalf("max bytes %d: unknown topic: Err %v, Retry %v", maxBytes, r.Err, r.Retry)
		}
		if r := res[Partition{"x", 0}]; r.Err == nil || r.Next != -2 {
			t.Fatalf("max bytes %d: negative offset: Err %v, Next %d", maxBytes, r.Err, r.Next)
		}
	}
	if err := c.CreateTopic("later", 1, nil); err != nil {
		t.Fatal(err)
	}
	produce(t, ctx, cl, valueRecords("later", 0, "here")...)
	got, _ := readAll(t, ctx, f, map[Partition]int64{p: 0}, nil)
	sameValues(t, "later", values(decode(t, got[p])), []string{"here"})
}

// TestNoTopicID: a topic cached without an id cannot be fetched by id
// (v13+): its partition gets an Err saying to cap Fetch at v12, and a
// client capped so reads it by name.
func TestNoTopicID(t *testing.T) {
	const topic = "noid"
	c := newCluster(t, kfake.SeedTopics(1, topic))
	ctx := timeout(t, time.Minute)
	cl := newClient(t, c.ListenAddrs())
	produce(t, ctx, cl, valueRecords(topic, 0, "v")...)
	p := Partition{topic, 0}
	byName := kversion.Stable()
	byName.SetMaxKeyVersion(int16(kmsg.Fetch), 12)
	for _, v := range []struct {
		name string
		opts []kgo.Opt
		err  bool
	}{{"by id", nil, true}, {"by name", []kgo.Opt{kgo.MaxVersions(byName)}, false}} {
		t.Run(v.name, func(t *testing.T) {
			f := New(newClient(t, c.ListenAddrs(), v.opts...), Options{MaxWait: 20 * time.Millisecond}).Reader()
			roundWithoutRetry(t, ctx, f, map[Partition]int64{p: 0})
			f.f.mu.Lock()
			f.f.topics[topic].id = [16]byte{} // as metadata without ids gives it
			f.f.mu.Unlock()
			r := roundWithoutRetry(t, ctx, f, map[Partition]int64{p: 0})[p]
			if v.err {
				if r.Err == nil || !strings.Contains(r.Err.Error(), "cap Fetch at v12") {
					t.Fatalf("Err %v, want one saying to cap Fetch at v12", r.Err)
				}
				return
			}
			if r.Err != nil || len(r.Batches) != 1 {
				t.Fatalf("Err %v, %d batches", r.Err, len(r.Batches))
			}
		})
	}
}

// The head (ListOffsets -3) is read after the high watermark, and a head
// at or past the high watermark (the leader answers -3 from its whole log,
// records not yet replicated included) is left unknown: a writer refuses
// a heartbeat whose head is not below its high watermark, ending the
// stream (an e2e run saw "head_offset 1243 is at or above high_watermark
// 1208").
func TestOffsetsHeadBelowHighWatermark(t *testing.T) {
	const topic = "head"
	c := newCluster(t, kfake.SeedTopics(1, topic))
	ctx := timeout(t, time.Minute)
	cl := newClient(t, c.ListenAddrs())
	produce(t, ctx, cl, valueRecords(topic, 0, numbered("r", 5)...)...)
	var mu sync.Mutex
	var order []int64
	c.ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.ListOffsetsRequest)
		ts := r.Topics[0].Partitions[0].Timestamp
		mu.Lock()
		order = append(order, ts)
		mu.Unlock()
		if ts != maxTimestamp {
			return nil, nil, false
		}
		// A leader that appended records past the high watermark.
		resp := r.ResponseKind().(*kmsg.ListOffsetsResponse)
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = topic
		rp := kmsg.NewListOffsetsResponseTopicPartition()
		rp.Offset, rp.Timestamp, rp.LeaderEpoch = 9, time.Now().UnixMilli(), 0
		rt.Partitions = append(rt.Partitions, rp)
		resp.Topics = append(resp.Topics, rt)
		return resp, nil, true
	})
	p := Partition{topic, 0}
	got, err := New(cl, Options{}).Offsets(ctx, []Partition{p})
	if err != nil {
		t.Fatal(err)
	}
	if o := got[p]; o.HighWatermark != 5 || o.HeadOffset != -1 || o.HeadTimestamp != -1 {
		t.Fatalf("offsets %+v; want high watermark 5 and the head past it left unknown", o)
	}
	mu.Lock()
	defer mu.Unlock()
	if i3, i1 := slices.Index(order, maxTimestamp), slices.Index(order, -1); i3 < 0 || i1 < 0 || i3 < i1 {
		t.Fatalf("ListOffsets asked %v: want the head (-3) read after the high watermark (-1)", order)
	}
}

// Records appended between the two reads do not leave a head older than
// the high watermark read with it: the head read after the bounds covers
// every record below them, or lies past them and is left unknown (the
// bounds will have moved by the next read, which asks it again). Read the
// other way round, the head said offset 4 of a partition whose high
// watermark said 7, and an idle partition kept that stale head (its lag in
// seconds reading low) until its next record: a heartbeat test failed on
// it under load.
func TestOffsetsHeadNotOlderThanHighWatermark(t *testing.T) {
	const topic = "head"
	c := newCluster(t, kfake.SeedTopics(1, topic))
	ctx := timeout(t, time.Minute)
	cl := newClient(t, c.ListenAddrs())
	base := time.Now()
	at := func(i int) *kgo.Record {
		return &kgo.Record{Topic: topic, Value: []byte(strconv.Itoa(i)), Timestamp: base.Add(time.Duration(i) * time.Millisecond)}
	}
	for i := range 5 {
		produce(t, ctx, cl, at(i))
	}
	// Between the first and the second of the two reads, two records are
	// appended (the control yields to the produce while it sleeps).
	var asked atomic.Int32
	c.ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		ts := req.(*kmsg.ListOffsetsRequest).Topics[0].Partitions[0].Timestamp
		if ts != -1 && ts != maxTimestamp {
			return nil, nil, false
		}
		if asked.Add(1) == 2 {
			done := make(chan struct{})
			go func() { defer close(done); produce(t, ctx, cl, at(5), at(6)) }()
			c.SleepControl(func() { <-done })
		}
		return nil, nil, false
	})
	p := Partition{topic, 0}
	got, err := New(cl, Options{}).Offsets(ctx, []Partition{p})
	if err != nil {
		t.Fatal(err)
	}
	o := got[p]
	if o.HeadOffset >= 0 && o.HeadOffset != o.HighWatermark-1 {
		t.Fatalf("offsets %+v: a head older than the high watermark read with it (want the last record's, or unknown)", o)
	}
}
