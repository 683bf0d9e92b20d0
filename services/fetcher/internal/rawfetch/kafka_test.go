package rawfetch

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/ferry-replicator/ferry/loadtest/kafkabroker"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
)

// TestApacheKafka reads from a real Apache Kafka 4.3.1 broker, which, unlike
// kfake, holds read_committed fetches at the last stable offset as Kafka
// does, builds the aborted transaction lists from its transaction index,
// cuts responses mid-batch at the byte limits, and answers an out-of-range
// fetch without the log's bounds. It fails, never skips, when the broker
// cannot start.
func TestApacheKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skips starting a real Apache Kafka 4.3.1 broker (a JVM, tens of seconds); CI runs without -short")
	}
	broker := kafkabroker.StartT(t, kafkabroker.Options{Name: "rawfetch-test"})
	addrs := []string{broker.Addr()}
	cl := newClient(t, addrs, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(cl)
	createTopic := func(t *testing.T, ctx context.Context, topic string, partitions int32) {
		t.Helper()
		resp, err := adm.CreateTopic(ctx, partitions, 1, nil, topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			t.Fatalf("create topic %s: %v", topic, err)
		}
	}
	byName := kversion.Stable()
	byName.SetMaxKeyVersion(int16(kmsg.Fetch), 12)

	// Five codecs on five partitions and a second topic, read at once
	// with limits the broker cuts batches at; the rotation splits the
	// first topic in two in some requests, which the broker must take.
	t.Run("records", func(t *testing.T) {
		ctx := timeout(t, 2*time.Minute)
		codecs := []kgo.CompressionCodec{kgo.NoCompression(), kgo.GzipCompression(), kgo.SnappyCompression(), kgo.Lz4Compression(), kgo.ZstdCompression()}
		createTopic(t, ctx, "codecs", int32(len(codecs)))
		createTopic(t, ctx, "second", 2)
		want := make(map[Partition][]*kgo.Record)
		for i, codec := range codecs {
			p := Partition{"codecs", int32(i)}
			pcl := newClient(t, addrs, kgo.ProducerBatchCompression(codec), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			recs := mixedRecords(p.Topic, p.Partition, 300)
			for j := 0; j < len(recs); j += 30 {
				produce(t, ctx, pcl, recs[j:j+30]...)
			}
			want[p] = recs
		}
		for i := range int32(2) {
			p := Partition{"second", i}
			want[p] = mixedRecords(p.Topic, p.Partition, 50)
			for _, r := range want[p] {
				produce(t, ctx, cl, r)
			}
		}
		limit := rawCut(t, ctx, addrs, Partition{"codecs", 1})
		for _, v := range []struct {
			name string
			max  *kversion.Versions
		}{{"by topic id", nil}, {"by name", byName}} {
			t.Run(v.name, func(t *testing.T) {
				var opts []kgo.Opt
				if v.max != nil {
					opts = append(opts, kgo.MaxVersions(v.max))
				}
				f := New(newClient(t, addrs, opts...), Options{MaxWait: 50 * time.Millisecond, PartitionMaxBytes: limit, MaxBytes: 4 * limit}).Reader()
				from := make(map[Partition]int64)
				for p := range want {
					from[p] = 0
				}
				got, st := readAll(t, ctx, f, from, nil)
				for p, recs := range want {
					sameRecords(t, p.String(), decode(t, got[p]), recs)
				}
				t.Logf("%d rounds, %d retries, rounds with data %v", st.rounds, st.retries, st.data)
			})
		}
	})

	t.Run("transactions", func(t *testing.T) {
		ctx := timeout(t, 2*time.Minute)
		const topic = "txn"
		createTopic(t, ctx, topic, 1)
		want := txnScenario(t, ctx, addrs, topic)
		p := Partition{topic, 0}
		limit := rawCut(t, ctx, addrs, p)
		for _, limits := range []Options{{}, {PartitionMaxBytes: limit}, {PartitionMaxBytes: 1, MaxBytes: 1}} {
			t.Run(fmt.Sprintf("partition max %d", limits.PartitionMaxBytes), func(t *testing.T) {
				f := New(cl, limits).Reader()
				var last Result
				txnBatches := 0
				got, st := readAll(t, ctx, f, map[Partition]int64{p: 0}, func(_ Partition, r Result) bool {
					last = r
					return r.Next >= r.HighWatermark
				})
				sameValues(t, "committed", values(decode(t, got[p])), want)
				if last.Next != last.HighWatermark || last.LastStableOffset != last.HighWatermark {
					t.Fatalf("ended at %d; high watermark %d, last stable %d", last.Next, last.HighWatermark, last.LastStableOffset)
				}
				for _, b := range got[p] {
					if info, _ := recordbatch.Parse(b); info.Transactional() {
						txnBatches++
					}
				}
				if txnBatches == 0 {
					t.Fatal("no committed transactional batch passed")
				}
				t.Logf("%d rounds, %d batches (%d of committed transactions), high watermark %d", st.rounds, len(got[p]), txnBatches, last.HighWatermark)
			})
		}
	})

	t.Run("open transaction", func(t *testing.T) {
		ctx := timeout(t, time.Minute)
		createTopic(t, ctx, "open", 1)
		openTransactionScenario(t, ctx, addrs, "open")
	})

	// Kafka answers OFFSET_OUT_OF_RANGE with -1 for the log start and
	// high watermark: Fetch asks ListOffsets for them.
	t.Run("out of range", func(t *testing.T) {
		ctx := timeout(t, time.Minute)
		const topic = "range"
		createTopic(t, ctx, topic, 1)
		for i := range 10 {
			produce(t, ctx, cl, valueRecords(topic, 0, numbered(fmt.Sprint("batch-", i), 3)...)...)
		}
		deleteRecords(t, ctx, cl, topic, 0, 12)
		outOfRangeCases(t, ctx, New(cl, Options{MaxWait: 20 * time.Millisecond}).Reader(), Partition{topic, 0}, 12, 30)
	})

	t.Run("mid batch", func(t *testing.T) {
		ctx := timeout(t, time.Minute)
		const topic = "mid"
		createTopic(t, ctx, topic, 1)
		produce(t, ctx, cl, valueRecords(topic, 0, numbered("one-batch", 10)...)...)
		p := Partition{topic, 0}
		r := roundWithoutRetry(t, ctx, New(cl, Options{}).Reader(), map[Partition]int64{p: 4})[p]
		if r.Err != nil || len(r.Batches) != 1 || r.Next != 10 {
			t.Fatalf("Err %v, %d batches, Next %d", r.Err, len(r.Batches), r.Next)
		}
		if info, _ := recordbatch.Parse(r.Batches[0]); info.BaseOffset != 0 || info.NumRecords != 10 {
			t.Fatalf("batch at %d with %d records, want the whole batch at 0", info.BaseOffset, info.NumRecords)
		}
	})
}

// rawCut picks a partition limit that ends halfway through the second
// batch of p and checks, with plain read_committed requests, that the
// broker cuts its answer there. It returns the limit.
func rawCut(t *testing.T, ctx context.Context, addrs []string, p Partition) int32 {
	t.Helper()
	v12 := kversion.Stable()
	v12.SetMaxKeyVersion(int16(kmsg.Fetch), 12) // by name, no topic id needed
	cl := newClient(t, addrs, kgo.MaxVersions(v12))
	fetch := func(limit int32) (batches [][]byte, partial int) {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = -1, 100, 1, 1<<20
		req.IsolationLevel, req.SessionEpoch = 1, -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = p.Topic
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.PartitionMaxBytes = p.Partition, limit
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl.Broker(1)) // kafkabroker's node id
		if err != nil {
			t.Fatal(err)
		}
		part := resp.Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(part.ErrorCode); err != nil {
			t.Fatal(err)
		}
		batches, partial, err = recordbatch.Split(part.RecordBatches)
		if err != nil {
			t.Fatal(err)
		}
		return batches, partial
	}
	all, _ := fetch(1 << 20)
	if len(all) < 2 {
		t.Fatalf("%s: %d batches, the test wants two at least", p, len(all))
	}
	limit := int32(len(all[0]) + len(all[1])/2)
	batches, partial := fetch(limit)
	if len(batches) != 1 || partial != len(all[1])/2 {
		t.Fatalf("%s, %d-byte limit: %d whole batches and %d bytes of a cut one, want 1 and %d", p, limit, len(batches), partial, len(all[1])/2)
	}
	t.Logf("%s, %d-byte limit: the broker cut the second batch after %d of its %d bytes", p, limit, partial, len(all[1]))
	return limit
}
