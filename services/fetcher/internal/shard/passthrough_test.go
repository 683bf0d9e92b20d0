package shard

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-replicator/ferry/pkg/batch"
	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/provenance"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/pkg/tracing"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/metrics"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/writertest"
)

// defaults leaves the harness's settings as they are.
func defaults(*Settings) {}

// batchProducer is a producer of the source whose batches are cut only by
// Flush: produceBatch makes exactly one source batch.
func (s *source) batchProducer(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(s.addrs...), kgo.ManualFlushing()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produceBatch produces recs as one batch; kgo sets their offsets.
func produceBatch(t *testing.T, cl *kgo.Client, recs []*kgo.Record) {
	t.Helper()
	var (
		mu    sync.Mutex
		first error
	)
	for _, r := range recs {
		cl.Produce(context.Background(), r, func(_ *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if first == nil {
				first = err
			}
		})
	}
	if err := cl.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if first != nil {
		t.Fatalf("produce: %v", first)
	}
}

// numbered are n records for partition 0 of topic, numbered from i, with
// a key, a compressible value and a header.
func numbered(topic string, i, n int) []*kgo.Record {
	var recs []*kgo.Record
	for ; n > 0; i, n = i+1, n-1 {
		recs = append(recs, &kgo.Record{
			Topic: topic, Key: []byte("k" + strconv.Itoa(i)),
			Value:   []byte(strings.Repeat(fmt.Sprintf("value %d ", i), 10)),
			Headers: []kgo.RecordHeader{{Key: "n", Value: []byte(strconv.Itoa(i))}},
		})
	}
	return recs
}

// copied is a record a wire batch copies.
type copied struct {
	offset int64
	rec    recordbatch.Record
}

// openKafka opens a wire batch as the writer does (batch.OpenKafka splits
// the payload with recordbatch.Split and holds it to the proto's rules:
// checksums, each Kafka batch's CRC, no control batch, the first and last
// offsets and the record count).
func openKafka(t *testing.T, b *ferryv1.Batch) []batch.KafkaBatch {
	t.Helper()
	codecs, err := batch.NewCodecs(16 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer codecs.Close()
	if b.GetFormat() != ferryv1.PayloadFormat_PAYLOAD_FORMAT_KAFKA_RECORD_BATCH_V2 {
		t.Fatalf("batch %d..%d has format %v, want Kafka record batches", b.GetFirstOffset(), b.GetLastOffset(), b.GetFormat())
	}
	ks, err := codecs.OpenKafka(b, 16<<20)
	if err != nil {
		t.Fatalf("the writer would refuse batch %d..%d: %v", b.GetFirstOffset(), b.GetLastOffset(), err)
	}
	return ks
}

// copiedRecords decodes what the wire batches copy: each one's records
// from its first offset on.
func copiedRecords(t *testing.T, bs []*ferryv1.Batch) []copied {
	t.Helper()
	var out []copied
	for _, b := range bs {
		for _, k := range openKafka(t, b) {
			recs, err := recordbatch.Records(k.Raw, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, rec := range recs {
				if off := k.Info.BaseOffset + int64(rec.OffsetDelta); off >= b.GetFirstOffset() {
					out = append(out, copied{off, rec})
				}
			}
		}
	}
	return out
}

// sameRecords fails unless got are want, in order: offsets, keys, values,
// headers and timestamps.
func sameRecords(t *testing.T, got []copied, want []*kgo.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d records copied, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		same := g.offset == w.Offset && bytes.Equal(g.rec.Key, w.Key) && bytes.Equal(g.rec.Value, w.Value) &&
			g.rec.Timestamp == w.Timestamp.UnixMilli() && len(g.rec.Headers) == len(w.Headers)
		for j := 0; same && j < len(w.Headers); j++ {
			same = g.rec.Headers[j].Key == w.Headers[j].Key && bytes.Equal(g.rec.Headers[j].Value, w.Headers[j].Value)
		}
		if !same {
			t.Fatalf("record %d: copied offset %d key %q headers %v, want offset %d key %q headers %v (or values or timestamps differ)",
				i, g.offset, g.rec.Key, g.rec.Headers, w.Offset, w.Key, w.Headers)
		}
	}
}

func committedOf(m *metrics.Metrics, topic string) func() float64 {
	return func() float64 { return testutil.ToFloat64(m.Committed.WithLabelValues(testLink, topic, "0")) }
}

func stops(m *metrics.Metrics, topic, reason string) func() float64 {
	return func() float64 {
		return testutil.ToFloat64(m.PartitionStops.WithLabelValues(testLink, topic, "0", reason))
	}
}

func deleteRecords(t *testing.T, src *source, topic string, below int64) {
	t.Helper()
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: topic, Partition: 0, At: below})
	resp, err := kadm.NewClient(src.producer).DeleteRecords(context.Background(), offs)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("delete records below %d: %v", below, err)
	}
}

// The writer gets the source's own Kafka batches, holding exactly the
// records produced, in order. Batches compressed at the source travel as
// they are, with no link compression on top; an uncompressed source is
// compressed by the link codec. A round's batches are grouped up to
// link.batch.max_bytes, and a larger one travels alone.
func TestPassThroughSendsTheSourceBatches(t *testing.T) {
	const topic, maxBytes = "t", 4096
	tests := []struct {
		name   string
		source kgo.CompressionCodec
		want   recordbatch.Compression
		wire   ferryv1.Codec
	}{
		{"lz4 at the source", kgo.Lz4Compression(), recordbatch.LZ4, ferryv1.Codec_CODEC_NONE},
		{"zstd at the source", kgo.ZstdCompression(), recordbatch.Zstd, ferryv1.Codec_CODEC_NONE},
		{"uncompressed at the source", kgo.NoCompression(), recordbatch.None, ferryv1.Codec_CODEC_LZ4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := newSource(t, topic)
			prod := src.batchProducer(t, kgo.ProducerBatchCompression(tt.source))
			var want []*kgo.Record
			for _, n := range []int{1, 1, 1, 60, 1, 1, 20} { // 60 records: above maxBytes uncompressed
				recs := numbered(topic, len(want), n)
				produceBatch(t, prod, recs)
				want = append(want, recs...)
			}
			// All produced before the runner starts, so that its first
			// round reads them together and groups them.
			m := metrics.New(prometheus.NewRegistry())
			writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
			startRunnerOn(t, src, newWriters(t, writer.Addr()), m, func(s *Settings) {
				s.Codec, s.BatchMaxBytes = ferryv1.Codec_CODEC_LZ4, maxBytes
			}, topic)
			writertest.WaitFor(t, 10*time.Second, "every record committed", func() bool { return committedOf(m, topic)() == float64(len(want)) })

			got := writer.Received()
			sameRecords(t, copiedRecords(t, got), want)
			var grouped, alone bool
			var raw, wire int
			for _, b := range got {
				ks := openKafka(t, b)
				if b.GetCodec() != tt.wire {
					t.Errorf("batch %d..%d travels with codec %v, want %v", b.GetFirstOffset(), b.GetLastOffset(), b.GetCodec(), tt.wire)
				}
				for _, k := range ks {
					if c := k.Info.Compression(); c != tt.want {
						t.Errorf("Kafka batch at %d is %v, want %v as produced", k.Info.BaseOffset, c, tt.want)
					}
				}
				if len(ks) > 1 && b.GetUncompressedSize() > maxBytes {
					t.Errorf("batch %d..%d holds %d Kafka batches in %d bytes, above max_bytes %d", b.GetFirstOffset(), b.GetLastOffset(), len(ks), b.GetUncompressedSize(), maxBytes)
				}
				grouped = grouped || len(ks) > 1
				alone = alone || b.GetUncompressedSize() > maxBytes
				raw += int(b.GetUncompressedSize())
				wire += len(b.GetPayload())
			}
			if !grouped {
				t.Error("no wire batch grouped several Kafka batches")
			}
			if tt.want == recordbatch.None && !alone {
				t.Error("the Kafka batch above max_bytes did not travel (alone)")
			}
			for name, c := range map[string]struct {
				got  *prometheus.CounterVec
				want int
			}{"records": {m.Records, len(want)}, "bytes": {m.Bytes, raw}, "wire bytes": {m.WireBytes, wire}} {
				if v := testutil.ToFloat64(c.got.WithLabelValues(testLink, topic, "0")); v != float64(c.want) {
					t.Errorf("%s metric %v, want %d", name, v, c.want)
				}
			}
		})
	}
}

// A checkpoint in the middle of a source batch: the first wire batch starts
// at the checkpoint and carries the whole Kafka batch, which starts before
// it; what it copies is exactly the records from the checkpoint on.
func TestPassThroughResumesInsideASourceBatch(t *testing.T) {
	const topic = "t"
	src := newSource(t, topic)
	prod := src.batchProducer(t, kgo.ProducerBatchCompression(kgo.Lz4Compression()))
	first, second := numbered(topic, 0, 10), numbered(topic, 10, 5)
	produceBatch(t, prod, first)
	produceBatch(t, prod, second)
	cps := writertest.NewCheckpoints()
	cps.Set(topic, 0, 4)
	m := metrics.New(prometheus.NewRegistry())
	writer := writertest.Start(t, "127.0.0.1:0", cps)
	startRunnerOn(t, src, newWriters(t, writer.Addr()), m, defaults, topic)
	writertest.WaitFor(t, 10*time.Second, "15 records committed", func() bool { return committedOf(m, topic)() == 15 })

	got := writer.Received()
	if b := got[0]; b.GetFirstOffset() != 4 {
		t.Fatalf("first batch starts at %d, want the checkpoint 4", b.GetFirstOffset())
	}
	// The source batch holding the checkpoint, 0..9; under load kgo may
	// have sent the first record alone (its topic's metadata arriving
	// while it flushed), making it 1..9: it still starts before 4.
	if k := openKafka(t, got[0])[0]; k.Info.BaseOffset >= 4 || k.LastOffset() < 4 {
		t.Fatalf("its first Kafka batch holds %d..%d, want the source batch holding the checkpoint 4 from before it", k.Info.BaseOffset, k.LastOffset())
	}
	sameRecords(t, copiedRecords(t, got), append(first[4:], second...))
}

// Aborted source transactions and transaction markers do not travel; a
// start in the gap they leave is covered by a Skip from the start to the
// next batch (so the writer's offset index starts where the copy started:
// a consumer group positioned in the gap translates), and a marker at the
// end is covered by a Skip, so the checkpoint reaches the end.
func TestPassThroughLeavesOutAbortedTransactions(t *testing.T) {
	const topic = "t"
	ctx := context.Background()
	src := newSource(t, topic)
	txn, err := kgo.NewClient(kgo.SeedBrokers(src.addrs...), kgo.TransactionalID("passthrough"))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	transaction := func(recs []*kgo.Record, commit kgo.TransactionEndTry) {
		t.Helper()
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := txn.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := txn.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	var want []*kgo.Record
	transaction(numbered(topic, 100, 5), kgo.TryAbort) // offsets 0..4, marker 5
	committed := numbered(topic, 0, 5)
	transaction(committed, kgo.TryCommit)
	want = append(want, committed...)
	transaction(numbered(topic, 200, 5), kgo.TryAbort)
	plain := numbered(topic, 5, 3)
	if err := src.producer.ProduceSync(ctx, plain...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	want = append(want, plain...)
	committed = numbered(topic, 8, 5)
	transaction(committed, kgo.TryCommit)
	want = append(want, committed...)

	m := metrics.New(prometheus.NewRegistry())
	writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
	writer.TakeHeartbeats()
	startRunnerOn(t, src, newWriters(t, writer.Addr()), m, defaults, topic)
	// The checkpoint reaches the partition's end, past the last commit
	// marker, which a Skip covers: the lag is 0, not the marker's 1.
	end := src.cluster.PartitionInfo(topic, 0).HighWatermark
	if last := want[len(want)-1].Offset; end != last+2 {
		t.Fatalf("the source ends at %d, want the last record's %d and its marker", end, last)
	}
	writertest.WaitFor(t, 10*time.Second, "the checkpoint at the end, past the last marker", func() bool { return committedOf(m, topic)() == float64(end) })
	got := writer.Received()
	sameRecords(t, copiedRecords(t, got), want) // openKafka refuses control batches
	if len(got) < 2 || got[0].GetRecordCount() != 0 || got[0].GetFirstOffset() != 0 || got[0].GetLastOffset() != want[0].Offset-1 {
		t.Fatalf("first wire batch %d..%d with %d records, want a Skip over 0..%d: the aborted records and their marker before the first committed record",
			got[0].GetFirstOffset(), got[0].GetLastOffset(), got[0].GetRecordCount(), want[0].Offset-1)
	}
	if f := got[1].GetFirstOffset(); f != want[0].Offset {
		t.Errorf("first record batch starts at %d, want %d: the first committed record, after the aborted ones", f, want[0].Offset)
	}
	skipsCarryHighWatermark(t, got, end)
	// The heartbeats count what was read in records: the 13 committed,
	// not the 21 offsets (the aborted records and the markers).
	writertest.WaitFor(t, 10*time.Second, "a heartbeat counting the reads to the end", func() bool {
		hb := lastHeartbeat(writer, topic)
		return hb.GetReadsCounted() && hb.GetReadNext() == end
	})
	if hb := lastHeartbeat(writer, topic); hb.GetRecordsRead() != int64(len(want)) {
		t.Errorf("heartbeat counts %d records read to %d, want %d (of %d offsets)", hb.GetRecordsRead(), end, len(want), end)
	}
}

// skipsCarryHighWatermark checks that each Skip among bs carries the
// source high watermark its range was read under (after its last offset,
// at most end), which writers require of a Skip.
func skipsCarryHighWatermark(t *testing.T, bs []*ferryv1.Batch, end int64) {
	t.Helper()
	skips := 0
	for _, b := range bs {
		if b.GetRecordCount() != 0 {
			continue
		}
		skips++
		if hw := b.GetSourceHighWatermark(); hw <= b.GetLastOffset() || hw > end {
			t.Errorf("Skip %d..%d carries source high watermark %d, want one in %d..%d", b.GetFirstOffset(), b.GetLastOffset(), hw, b.GetLastOffset()+1, end)
		}
	}
	if skips == 0 {
		t.Error("no Skip sent")
	}
}

// A checkpoint below the source log start stops the partition before
// anything is read.
func TestCheckpointBelowLogStartStopsThePartition(t *testing.T) {
	const topic = "t"
	src := newSource(t, topic)
	src.produce(t, topic, 10)
	deleteRecords(t, src, topic, 6)
	cps := writertest.NewCheckpoints()
	cps.Set(topic, 0, 2)
	m := metrics.New(prometheus.NewRegistry())
	writer := writertest.Start(t, "127.0.0.1:0", cps)
	r, _ := startRunnerOn(t, src, newWriters(t, writer.Addr()), m, defaults, topic)
	writertest.WaitFor(t, 10*time.Second, "t/0 stopped", func() bool { return stops(m, topic, ReasonOutOfRange)() == 1 })
	if s := r.Status().Partitions["t/0"].Stopped; !strings.Contains(s, "checkpoint 2 is below the source log start 6") {
		t.Errorf("/status says %q", s)
	}
	if n := writer.Batches(); n != 0 {
		t.Errorf("%d batches sent from a stopped partition", n)
	}
}

// Records deleted below the position while the partition is being read
// (retention passing a lagging fetcher) stop it, offset_out_of_range:
// nothing past the gap is copied.
func TestPassThroughRecordsDeletedWhileReadingStopThePartition(t *testing.T) {
	const topic = "t"
	src := newSource(t, topic)
	m := metrics.New(prometheus.NewRegistry())
	writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
	writer.HoldAcks()
	// Each source batch a wire batch of its own and one batch in flight:
	// with acks held, one is sent, one waits for credit, the queue holds
	// outSlots and the loop blocks sealing the next, inside the round that
	// read it.
	r, _ := startRunnerOn(t, src, newWriters(t, writer.Addr()), m, func(s *Settings) {
		s.BatchMaxBytes, s.MaxInflightBytes = 1, 1
	}, topic)
	src.produce(t, topic, 30) // 30 batches
	records := func() float64 { return testutil.ToFloat64(m.Records.WithLabelValues(testLink, topic, "0")) }
	writertest.WaitFor(t, 10*time.Second, "the loop blocked", func() bool { return records() == outSlots+3 })
	src.produce(t, topic, 20)
	deleteRecords(t, src, topic, 50) // the blocked round ends at 30 at most
	writer.ReleaseAcks()

	writertest.WaitFor(t, 10*time.Second, "t/0 stopped", func() bool { return stops(m, topic, ReasonOutOfRange)() == 1 })
	stopped := r.Status().Partitions["t/0"].Stopped
	match := regexp.MustCompile(`while reading: .*offset out of range: offset (\d+), log start 50`).FindStringSubmatch(stopped)
	if match == nil {
		t.Fatalf("/status says %q", stopped)
	}
	at, _ := strconv.Atoi(match[1])
	if at > 30 {
		t.Fatalf("stopped at %d: the blocked round read up to 30 at most", at)
	}
	// What was read before the gap is sent and committed; nothing after.
	writertest.WaitFor(t, 10*time.Second, "the records before the gap committed", func() bool { return committedOf(m, topic)() == float64(at) })
	if n := writer.Batches(); n != at { // one record per batch from 0
		t.Fatalf("%d batches sent, want %d", n, at)
	}
}

// The lag follows the source high watermark the fetch rounds report, with
// nothing acknowledged and the runner's own watcher idle.
func TestPassThroughLagFollowsTheHighWatermark(t *testing.T) {
	const topic = "t"
	src := newSource(t, topic)
	m := metrics.New(prometheus.NewRegistry())
	lag := func() float64 { return testutil.ToFloat64(m.LagRecords.WithLabelValues(testLink, topic, "0")) }
	writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
	r, _ := startRunnerOn(t, src, newWriters(t, writer.Addr()), m, func(s *Settings) {
		s.HeartbeatInterval = time.Hour // the watcher reads once, at the start
	}, topic)
	src.produce(t, topic, 10)
	writertest.WaitFor(t, 10*time.Second, "10 records committed, no lag", func() bool { return committedOf(m, topic)() == 10 && lag() == 0 })

	writer.HoldAcks()
	defer writer.ReleaseAcks() // lets the drain at the end finish
	src.produce(t, topic, 25)
	writertest.WaitFor(t, 10*time.Second, "high watermark 35, lag 25", func() bool {
		return r.Status().Partitions["t/0"].HighWater == 35 && lag() == 25
	})
}

// A batch the writer refuses (a record above what its target takes, which
// the fetcher cannot see in a batch it does not decode) stops only its
// partition, exactly before it.
func TestPassThroughRefusedBatchStopsOnlyItsPartition(t *testing.T) {
	src := newSource(t, "ok", "big")
	prod := src.batchProducer(t, kgo.ProducerBatchCompression(kgo.NoCompression()))
	m := metrics.New(prometheus.NewRegistry())
	writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
	writer.RefuseBatchesAbove(5_000)
	r, _ := startRunnerOn(t, src, newWriters(t, writer.Addr()), m, defaults, "ok", "big")
	produceBatch(t, prod, numbered("big", 0, 3))
	writertest.WaitFor(t, 10*time.Second, "3 records of big committed", func() bool { return committedOf(m, "big")() == 3 })
	produceBatch(t, prod, []*kgo.Record{{Topic: "big", Value: make([]byte, 20_000)}}) // offset 3
	produceBatch(t, prod, numbered("big", 4, 2))
	writertest.WaitFor(t, 10*time.Second, "big/0 stopped", func() bool { return stops(m, "big", ReasonRecordTooLarge)() == 1 })
	if s := r.Status().Partitions["big/0"].Stopped; !strings.Contains(s, "big/0 offset 3") {
		t.Errorf("/status says %q", s)
	}
	produceBatch(t, prod, numbered("ok", 0, 20))
	writertest.WaitFor(t, 10*time.Second, "20 records of ok committed", func() bool { return committedOf(m, "ok")() == 20 })
	if got := committedOf(m, "big")(); got != 3 {
		t.Fatalf("big/0 committed to %v, want 3", got)
	}
}

// A fetch error that fetching again will not fix (here an authorization
// failure) stops its partition, source_unreadable, and the others go on.
func TestPassThroughUnreadablePartitionStops(t *testing.T) {
	src := newSource(t, "ok", "bad")
	badID := src.topicID(t, "bad")
	src.cluster.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.FetchRequest)
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition, sp.HighWatermark = rp.Partition, -1
				if rt.Topic == "bad" || bytes.Equal(rt.TopicID[:], badID) {
					sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
				}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true // once: the next rounds read the log
	})
	m := metrics.New(prometheus.NewRegistry())
	writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
	r, _ := startRunnerOn(t, src, newWriters(t, writer.Addr()), m, defaults, "ok", "bad")
	writertest.WaitFor(t, 10*time.Second, "bad/0 stopped", func() bool { return stops(m, "bad", ReasonSourceUnreadable)() == 1 })
	if s := r.Status().Partitions["bad/0"].Stopped; !strings.Contains(s, "TOPIC_AUTHORIZATION_FAILED") {
		t.Errorf("/status says %q", s)
	}
	src.produce(t, "ok", 5)
	writertest.WaitFor(t, 10*time.Second, "5 records of ok committed", func() bool { return committedOf(m, "ok")() == 5 })
}

// topicID is the source topic's id, nil if it has none (no such topic).
func (s *source) topicID(t *testing.T, topic string) []byte {
	t.Helper()
	// A client of its own: kadm answers from metadata its client learned
	// shortly before, which may be a recreated topic's old id.
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	details, err := kadm.NewClient(cl).ListTopics(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	id := details[topic].ID
	if id == ([16]byte{}) {
		return nil
	}
	return id[:]
}

// With a tracer, a sampled source record gets its ferry.fetch span in its
// own trace, and the wire batch that carries it carries its ferry.batch
// span's context, linked to the record.
//
// The traced record is not in the first wire batch: a producer may split
// records it was handed together (kgo drains a partition's buffer while
// the topic's metadata is still arriving, as happened under load, and the
// fetcher then read the first of two Kafka batches alone), so the test
// sends record 0 on its own and waits for it to be copied before the
// traced record and its neighbour. The batch span looked for is the one
// of the wire batch holding the traced offset, never simply the first.
// Every record carries a traceparent, sampled or not, as an instrumented
// producer sends them: after a batch without any, the record probe passes
// the next batch undecoded (docs/tracing.md), which is what left the
// split batch's record without its span.
func TestPassThroughTracesSampledRecords(t *testing.T) {
	const topic = "t"
	src := newSource(t, topic)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled,
	})
	const traced = 1 // the offset of the record carrying parent
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{7}, SpanID: trace.SpanID{8}})
	recs := numbered(topic, 0, 3)
	for i, r := range recs {
		sc := unsampled
		if i == traced {
			sc = parent
		}
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: tracing.TraceparentHeader, Value: []byte(tracing.FormatTraceparent(sc))})
	}
	prod := src.batchProducer(t, kgo.ProducerBatchCompression(kgo.Lz4Compression()))

	m := metrics.New(prometheus.NewRegistry())
	writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
	startRunnerDeps(t, src, newWriters(t, writer.Addr()), m, defaults, func(d *Deps) { d.Tracer = tp.Tracer("test") }, make(chan struct{}), topic)
	produceBatch(t, prod, recs[:traced])
	writertest.WaitFor(t, 10*time.Second, "record 0 committed", func() bool { return committedOf(m, topic)() == 1 })
	produceBatch(t, prod, recs[traced:])
	writertest.WaitFor(t, 10*time.Second, "3 records committed", func() bool { return committedOf(m, topic)() == 3 })

	var batchSC trace.SpanContext
	for _, b := range writer.Received() {
		if b.GetFirstOffset() <= traced && traced <= b.GetLastOffset() {
			batchSC = tracing.ParseTraceparent(b.GetTraceparent())
		}
	}
	if !batchSC.IsValid() {
		t.Fatal("the wire batch carrying the traced record carries no traceparent")
	}
	var fetched, batched bool
	writertest.WaitFor(t, 10*time.Second, "the record's and the batch's spans", func() bool {
		for _, s := range rec.Ended() {
			switch {
			case s.Name() == "ferry.fetch" && s.SpanKind() == trace.SpanKindConsumer && s.Parent().SpanID() == parent.SpanID():
				fetched = s.SpanContext().TraceID() == parent.TraceID()
			case s.Name() == "ferry.batch" && s.SpanContext().SpanID() == batchSC.SpanID():
				batched = len(s.Links()) == 1 && s.Links()[0].SpanContext.SpanID() == parent.SpanID()
			}
		}
		return fetched && batched
	})
}

// The fetch loop ends at once on a drain (the stream is then closed after
// the last acks) and on a lost lease.
func TestPassThroughStopsPromptly(t *testing.T) {
	const topic = "t"
	within := func(t *testing.T, what string, done <-chan struct{}) {
		t.Helper()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: not within 10s", what)
		}
	}
	t.Run("drain", func(t *testing.T) {
		src := newSource(t, topic)
		m := metrics.New(prometheus.NewRegistry())
		writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
		_, stop := startRunnerOn(t, src, newWriters(t, writer.Addr()), m, defaults, topic)
		src.produce(t, topic, 10)
		writertest.WaitFor(t, 10*time.Second, "10 records committed", func() bool { return committedOf(m, topic)() == 10 })
		stopped := make(chan struct{})
		go func() { defer close(stopped); stop() }()
		within(t, "drained", stopped)
		if writer.Closed() != 1 {
			t.Error("the stream was not drained and closed")
		}
	})
	t.Run("lost lease", func(t *testing.T) {
		src := newSource(t, topic)
		m := metrics.New(prometheus.NewRegistry())
		writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
		lost := make(chan struct{})
		_, _, done := startLeasedRunner(t, src, newWriters(t, writer.Addr()), m, defaults, lost, topic)
		src.produce(t, topic, 10)
		writertest.WaitFor(t, 10*time.Second, "10 records committed", func() bool { return committedOf(m, topic)() == 10 })
		close(lost)
		within(t, "stopped after the lease was lost", done)
	})
}

// A source batch larger than the writers take (writers.max_message_bytes;
// its topic's max.message.bytes is higher) cannot travel whole: its
// records travel in Ferry's format, cut under the limit, and one record
// above the limit stops the partition exactly before it.
func TestPassThroughBatchAboveTheWritersLimitTravelsAsRecords(t *testing.T) {
	src := newSource(t, "big")
	prod := src.batchProducer(t, kgo.ProducerBatchCompression(kgo.NoCompression()))
	m := metrics.New(prometheus.NewRegistry())
	writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
	r, _ := startRunnerOn(t, src, newWriters(t, writer.Addr()), m, func(s *Settings) {
		s.MaxMessageBytes, s.BatchMaxBytes = 4_000, 4_000
	}, "big")
	recs := numbered("big", 0, 60)                                             // about 110 bytes each: one source batch above 4,000
	recs = append(recs, &kgo.Record{Topic: "big", Value: make([]byte, 5_000)}) // offset 60
	recs = append(recs, numbered("big", 61, 2)...)
	produceBatch(t, prod, recs)
	writertest.WaitFor(t, 10*time.Second, "big/0 stopped", func() bool { return stops(m, "big", ReasonRecordTooLarge)() == 1 })
	writertest.WaitFor(t, 10*time.Second, "60 records committed", func() bool { return committedOf(m, "big")() == 60 })
	if s := r.Status().Partitions["big/0"].Stopped; !strings.Contains(s, "big/0 offset 60") || !strings.Contains(s, "writers.max_message_bytes") {
		t.Errorf("/status says %q", s)
	}
	n := 0
	for _, b := range writer.Received() {
		if b.GetFormat() != ferryv1.PayloadFormat_PAYLOAD_FORMAT_FERRY_V1 || len(b.GetPayload()) > 4_000 {
			t.Errorf("batch %d..%d travelled as %v in %d bytes, want Ferry's format under 4,000", b.GetFirstOffset(), b.GetLastOffset(), b.GetFormat(), len(b.GetPayload()))
		}
		n += int(b.GetRecordCount())
	}
	if n != 60 || len(writer.Received()) < 2 {
		t.Errorf("%d records in %d batches, want the 60 before the large one, in several", n, len(writer.Received()))
	}
}

// With link.skip_replicated, the batches a Ferry writer copied into the
// source from this link's own target are not copied back (active-active:
// B→A leaves out what A→B wrote into B), while a link chained on to a
// third cluster copies them (B→C delivers to C what A→B wrote into B).
// Batches of the source's own producers, of producers with no id (-1),
// and of entries naming no source cluster (an old writer's: counted) are
// copied by both. When the last batches are left out the partition's
// checkpoint still reaches its end, through a Skip. The Open names the
// source cluster, which the writer records with its producer id.
func TestPassThroughSkipsOnlyWhatCameFromTheTarget(t *testing.T) {
	for _, tc := range []struct {
		name, target string
		skipped      bool
	}{
		{name: "active-active B to A", target: "cluster-a", skipped: true},
		{name: "chain B to C", target: "cluster-c", skipped: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const topic = "t"
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			src := newSource(t, topic) // cluster B
			if _, err := kadm.NewClient(src.producer).CreateTopic(ctx, 1, 1, nil, provenance.Topic); err != nil {
				t.Fatal(err)
			}
			local := src.batchProducer(t)
			plain := src.batchProducer(t, kgo.DisableIdempotentWrite()) // producer id -1
			fromA := src.batchProducer(t)                               // the writer of A→B
			oldWriter := src.batchProducer(t)                           // a writer older than source clusters
			rec, err := provenance.NewRecorder([]kgo.Opt{kgo.SeedBrokers(src.addrs...)}, "writer-b", nil, provenance.KeyByStream)
			if err != nil {
				t.Fatal(err)
			}
			defer rec.Close()
			for cl, source := range map[*kgo.Client]string{fromA: "cluster-a", oldWriter: ""} {
				id, _, err := cl.ProducerID(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := rec.Record(ctx, id, "a-to-b", 0, source); err != nil {
					t.Fatal(err)
				}
			}
			var want []*kgo.Record
			n, skipped, unattributed := 0, 0, 0
			batchOf := func(cl *kgo.Client, count int) {
				recs := numbered(topic, n, count)
				produceBatch(t, cl, recs)
				n += count
				switch {
				case cl == fromA && tc.skipped:
					skipped += count
					return
				case cl == oldWriter:
					unattributed += count
				}
				want = append(want, recs...)
			}
			batchOf(fromA, 4) // leading
			batchOf(local, 3)
			batchOf(fromA, 5) // between
			batchOf(plain, 2)
			batchOf(oldWriter, 3)
			batchOf(local, 1)
			batchOf(fromA, 6) // trailing: a Skip when left out
			batchOf(fromA, 2)

			m := metrics.New(prometheus.NewRegistry())
			writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
			writer.SetTargetCluster(tc.target)
			view, err := provenance.NewView([]kgo.Opt{kgo.SeedBrokers(src.addrs...)}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer view.Close()
			_, stop, _ := startRunnerDeps(t, src, newWriters(t, writer.Addr()),
				m, func(s *Settings) { s.SourceCluster = "cluster-b" },
				func(d *Deps) { d.Provenance = view }, make(chan struct{}), topic)
			defer stop()
			writertest.WaitFor(t, 10*time.Second, "the checkpoint at the partition's end", func() bool { return committedOf(m, topic)() == float64(n) })

			got := writer.Received()
			sameRecords(t, copiedRecords(t, got), want)
			if last := got[len(got)-1]; tc.skipped && (last.GetRecordCount() != 0 || last.GetLastOffset() != int64(n-1)) {
				t.Errorf("last wire batch %d..%d holds %d records, want a Skip to %d", last.GetFirstOffset(), last.GetLastOffset(), last.GetRecordCount(), n-1)
			}
			if tc.skipped {
				skipsCarryHighWatermark(t, got, int64(n))
			}
			if v := testutil.ToFloat64(m.Replicated.WithLabelValues(testLink, topic, "0")); v != float64(skipped) {
				t.Errorf("replicated records skipped: %v, want %d", v, skipped)
			}
			if v := testutil.ToFloat64(m.Unattributed.WithLabelValues(testLink, topic, "0")); v != float64(unattributed) {
				t.Errorf("unattributed records copied: %v, want %d", v, unattributed)
			}
			if opens := writer.OpenRequests(); len(opens) == 0 || opens[0].GetSourceClusterId() != "cluster-b" {
				t.Errorf("the Open does not name the source cluster: %v", opens)
			}
		})
	}
}

// A writer that does not name its target cluster (older than the field)
// cannot tell a link that skips replicated batches which ones came from
// its target: the session fails and retries, copying nothing, rather
// than lose a chain's data or loop.
func TestSkipReplicatedNeedsTheTargetCluster(t *testing.T) {
	const topic = "t"
	src := newSource(t, topic)
	produceBatch(t, src.batchProducer(t), numbered(topic, 0, 3))
	m := metrics.New(prometheus.NewRegistry())
	writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
	view, err := provenance.NewView([]kgo.Opt{kgo.SeedBrokers(src.addrs...)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer view.Close()
	r, stop, _ := startRunnerDeps(t, src, newWriters(t, writer.Addr()), m, defaults,
		func(d *Deps) { d.Provenance = view }, make(chan struct{}), topic)
	defer stop()
	writertest.WaitFor(t, 10*time.Second, "two failed opens", func() bool { return writer.Opens() >= 2 })
	if n := len(writer.Received()); n != 0 {
		t.Errorf("%d batches sent to a writer naming no target cluster", n)
	}
	if e := r.Status().LastError; !strings.Contains(e, "target cluster") {
		t.Errorf("shard's last error %q, want it to name the missing target cluster", e)
	}
}

// contiguous joins batches that follow each other in the response's bytes
// without copying them, and refuses any other layout (the caller copies
// then).
func TestContiguousAliasesConsecutiveBatches(t *testing.T) {
	var resp []byte
	var ks []batch.KafkaBatch
	for i := range 4 {
		resp = append(resp, sourceTestBatch(t, int64(i*3), 3)...)
	}
	raws, _, err := recordbatch.Split(resp)
	if err != nil || len(raws) != 4 {
		t.Fatal(raws, err)
	}
	for _, raw := range raws {
		ks = append(ks, batch.KafkaBatch{Raw: raw})
	}
	joined := contiguous(resp, ks[1:3])
	want := append(append([]byte{}, raws[1]...), raws[2]...)
	if !bytes.Equal(joined, want) || &joined[0] != &raws[1][0] || cap(joined) != len(joined) {
		t.Fatalf("contiguous: %d bytes (cap %d), want batches 1 and 2 aliased, capped", len(joined), cap(joined))
	}
	for name, group := range map[string][]batch.KafkaBatch{
		"a batch left out between": {ks[0], ks[2]},
		"out of order":             {ks[1], ks[0]},
		"a copy":                   {ks[0], {Raw: bytes.Clone(raws[1])}},
		"not in the response":      {{Raw: bytes.Clone(raws[0])}},
	} {
		if got := contiguous(resp, group); got != nil {
			t.Errorf("%s: contiguous = %d bytes, want nil", name, len(got))
		}
	}
}

// sourceTestBatch is one uncompressed batch of n records from offset base.
func sourceTestBatch(t *testing.T, base int64, n int) []byte {
	t.Helper()
	recs := make([]recordbatch.Record, n)
	for i := range recs {
		recs[i] = recordbatch.Record{Timestamp: 1, Value: []byte(strconv.Itoa(i))}
	}
	raw, err := recordbatch.Build(nil, recs, recordbatch.None)
	if err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint64(raw, uint64(base)) // the base offset is not under the CRC
	return raw
}
