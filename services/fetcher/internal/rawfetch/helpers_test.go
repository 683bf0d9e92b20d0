package rawfetch

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/pkg/recordbatch"
)

func newClient(t testing.TB, addrs []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func produce(t testing.TB, ctx context.Context, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// valueRecords are records of partition p of topic with the values given.
func valueRecords(topic string, p int32, values ...string) []*kgo.Record {
	var recs []*kgo.Record
	for _, v := range values {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: []byte(v)})
	}
	return recs
}

// numbered are values prefix-0 .. prefix-(n-1).
func numbered(prefix string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s-%d", prefix, i))
	}
	return out
}

// stats count what a read went through.
type stats struct {
	rounds  int // Fetch calls
	retries int // partition Results with Retry set
	data    map[Partition]int
}

// readAll runs rounds from the offsets in from until done says a
// partition is finished (default: Next reached the high watermark the
// round reported), and returns every batch per partition. It fails on any
// Err, on Next going back, and on batches that overlap or that a batch
// from a batch boundary would not start at.
func readAll(t testing.TB, ctx context.Context, f *Reader, from map[Partition]int64, done func(Partition, Result) bool) (map[Partition][][]byte, stats) {
	t.Helper()
	if done == nil {
		done = func(_ Partition, r Result) bool { return r.HighWatermark >= 0 && r.Next >= r.HighWatermark }
	}
	pos := make(map[Partition]int64, len(from))
	for p, o := range from {
		pos[p] = o
	}
	got := make(map[Partition][][]byte)
	st := stats{data: make(map[Partition]int)}
	for len(pos) > 0 {
		if err := ctx.Err(); err != nil {
			t.Fatalf("read: %v at %v after %d rounds, %d retries", err, pos, st.rounds, st.retries)
		}
		res, err := f.Fetch(ctx, pos)
		if err != nil {
			t.Fatalf("round %d: %v", st.rounds, err)
		}
		st.rounds++
		if len(res) != len(pos) {
			t.Fatalf("round %d: %d results for %d partitions", st.rounds, len(res), len(pos))
		}
		retried := false
		for p, r := range res {
			if r.Err != nil {
				t.Fatalf("round %d: %s: %v", st.rounds, p, r.Err)
			}
			if r.Next < pos[p] {
				t.Fatalf("round %d: %s: Next %d before the asked %d", st.rounds, p, r.Next, pos[p])
			}
			if r.Retry != nil {
				st.retries++
				retried = true
				if len(r.Batches) != 0 || r.Next != pos[p] {
					t.Fatalf("round %d: %s: retry (%v) with %d batches, Next %d", st.rounds, p, r.Retry, len(r.Batches), r.Next)
				}
				t.Logf("%s: retry: %v", p, r.Retry)
				continue
			}
			end := pos[p]
			for _, b := range r.Batches {
				info, err := recordbatch.Parse(b)
				if err != nil {
					t.Fatal(err)
				}
				if info.BaseOffset < end {
					t.Fatalf("round %d: %s: batch at %d, want %d or later", st.rounds, p, info.BaseOffset, end)
				}
				if info.Control() {
					t.Fatalf("round %d: %s: control batch at %d passed", st.rounds, p, info.BaseOffset)
				}
				end = info.BaseOffset + int64(info.LastOffsetDelta) + 1
			}
			if len(r.Batches) > 0 {
				st.data[p]++
				if r.Next < end {
					t.Fatalf("round %d: %s: Next %d inside the last batch, which ends at %d", st.rounds, p, r.Next, end)
				}
			}
			got[p] = append(got[p], r.Batches...)
			pos[p] = r.Next
			if done(p, r) {
				delete(pos, p)
			}
		}
		if retried {
			time.Sleep(10 * time.Millisecond) // as a caller backs off
		}
	}
	return got, st
}

// decode is the records of the batches, in order.
func decode(t testing.TB, batches [][]byte) []recordbatch.Record {
	t.Helper()
	var out []recordbatch.Record
	for _, b := range batches {
		if err := recordbatch.CheckCRC(b); err != nil {
			t.Fatal(err)
		}
		recs, err := recordbatch.Records(b, 64<<20)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, recs...)
	}
	return out
}

func values(recs []recordbatch.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, string(r.Value))
	}
	return out
}

// fromKgo is what r should decode to, offset delta aside.
func fromKgo(r *kgo.Record) recordbatch.Record {
	rec := recordbatch.Record{Timestamp: r.Timestamp.UnixMilli(), Key: r.Key, Value: r.Value}
	for _, h := range r.Headers {
		rec.Headers = append(rec.Headers, recordbatch.Header{Key: h.Key, Value: h.Value})
	}
	return rec
}

func sameRecords(t testing.TB, what string, got []recordbatch.Record, want []*kgo.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", what, len(got), len(want))
	}
	for i := range got {
		g, w := got[i], fromKgo(want[i])
		g.OffsetDelta = 0
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("%s: record %d:\n got %+v\nwant %+v", what, i, g, w)
		}
	}
}

func sameValues(t testing.TB, what string, got, want []string) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: %d values\n got %s\nwant %s", what, len(got), strings.Join(got, " "), strings.Join(want, " "))
	}
}

// mixedRecords are n records of partition p with keys, headers and values
// that compress, one with a null key and an empty value.
func mixedRecords(topic string, p int32, n int) []*kgo.Record {
	ts := time.UnixMilli(time.Now().UnixMilli())
	var recs []*kgo.Record
	for i := range n {
		r := &kgo.Record{
			Topic: topic, Partition: p, Timestamp: ts.Add(time.Duration(i) * time.Millisecond),
			Key:     fmt.Appendf(nil, "key-%d", i),
			Value:   []byte(strings.Repeat(fmt.Sprintf("value %d of %s/%d; ", i, topic, p), 1+i%7)),
			Headers: []kgo.RecordHeader{{Key: "h", Value: fmt.Appendf(nil, "%d", i)}},
		}
		if i%50 == 7 {
			r.Key, r.Value, r.Headers = nil, []byte{}, nil
		}
		recs = append(recs, r)
	}
	return recs
}

// txnScenario writes, to partition 0 of topic, plain records of an
// idempotent producer and transactions of two transactional producers, a
// and b, with different codecs: committed and aborted, several batches
// long, interleaved with the plain records and with each other (b commits
// while a's aborted transaction is open around it). It returns the values
// a read_committed reader must see, in order.
func txnScenario(t testing.TB, ctx context.Context, addrs []string, topic string) []string {
	t.Helper()
	common := []kgo.Opt{kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner())}
	plain := newClient(t, addrs, append(common, kgo.ProducerBatchCompression(kgo.GzipCompression()))...)
	a := newClient(t, addrs, append(common, kgo.TransactionalID("rawfetch-a"), kgo.ProducerBatchCompression(kgo.ZstdCompression()))...)
	b := newClient(t, addrs, append(common, kgo.TransactionalID("rawfetch-b"), kgo.ProducerBatchCompression(kgo.Lz4Compression()))...)

	var want []string
	send := func(cl *kgo.Client, keep bool, vs ...string) {
		t.Helper()
		produce(t, ctx, cl, valueRecords(topic, 0, vs...)...)
		if keep {
			want = append(want, vs...)
		}
	}
	begin := func(cl *kgo.Client) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
	}
	end := func(cl *kgo.Client, commit kgo.TransactionEndTry) {
		t.Helper()
		if err := cl.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}

	send(plain, true, numbered("plain-1", 3)...)
	begin(a) // committed, three batches
	send(a, true, numbered("a-commit-1", 4)...)
	send(a, true, numbered("a-commit-1b", 2)...)
	send(a, true, "a-commit-1c")
	end(a, kgo.TryCommit)
	begin(a) // aborted, with plain records inside it
	send(a, false, numbered("a-abort-1", 5)...)
	send(plain, true, numbered("plain-2", 2)...)
	send(a, false, numbered("a-abort-1b", 3)...)
	end(a, kgo.TryAbort)
	begin(a) // aborted around b's committed transaction
	begin(b)
	send(a, false, "a-abort-2")
	send(b, true, numbered("b-commit-1", 3)...)
	send(a, false, numbered("a-abort-2b", 2)...)
	send(b, true, "b-commit-1b")
	end(b, kgo.TryCommit)
	send(plain, true, "plain-3")
	send(a, false, "a-abort-2c")
	end(a, kgo.TryAbort)
	begin(b) // aborted at once after, same producer as a commit
	send(b, false, numbered("b-abort-1", 2)...)
	end(b, kgo.TryAbort)
	begin(a)
	send(a, true, numbered("a-commit-2", 2)...)
	end(a, kgo.TryCommit)
	send(plain, true, numbered("plain-4", 2)...)
	return want
}
