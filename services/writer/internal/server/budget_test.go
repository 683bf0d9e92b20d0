package server

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kmsg"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/pkg/shards"
)

// budgetBatches are n wire batches of orders copying records 0 to n*size
// uncompressed, so their payloads (what the budget counts) are about the
// same size; widest is the largest payload.
func budgetBatches(t *testing.T, n, size int) (bs []*ferryv1.Batch, widest int64) {
	t.Helper()
	for i := range n {
		first := int64(i * size)
		b := wireKafka(t, first, sourceBatch(t, first, size, nil, recordbatch.None, 0))
		bs, widest = append(bs, b), max(widest, int64(len(b.GetPayload())))
	}
	return bs, widest
}

// openPartition opens, as its shard, orders/partition, orders having
// two partitions, and waits for the writer's Opened.
func (w *testWriter) openPartition(ctx context.Context, t *testing.T, partition int32) ferryv1.ReplicationService_ReplicateClient {
	t.Helper()
	stream, err := w.client.Replicate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	shard := uint32(shards.Of("orders", partition, int(w.srv.links["east"].Shards)))
	open := &ferryv1.Open{Link: "east", Shard: shard, Epoch: 1, Fetcher: "f1",
		Topics:     []*ferryv1.TopicSpec{{Name: "orders", PartitionCount: 2}},
		Partitions: []*ferryv1.TopicPartition{{Topic: "orders", Partition: partition}}}
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Open{Open: open}}); err != nil {
		t.Fatal(err)
	}
	if resp, err := stream.Recv(); err != nil || resp.GetOpened() == nil {
		t.Fatalf("open answered %v, %v; want Opened", resp, err)
	}
	return stream
}

// holdProduce holds the first produce request carrying records of
// orders/partition at the target, without holding the others (each stream
// has its own client, so its own connection), until release is called;
// held is closed when it arrives.
func (w *testWriter) holdProduce(t *testing.T, partition int32) (held <-chan struct{}, release func()) {
	arrived, released := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(released) }) }
	t.Cleanup(release)
	var taken atomic.Bool
	w.cluster.ControlKey(kmsg.Produce.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		w.cluster.KeepControl()
		for _, rt := range req.(*kmsg.ProduceRequest).Topics {
			for _, rp := range rt.Partitions {
				if rt.Topic == "orders" && rp.Partition == partition && taken.CompareAndSwap(false, true) {
					close(arrived)
					w.cluster.SleepControl(func() { <-released })
				}
			}
		}
		return nil, nil, false // then served as usual
	})
	return arrived, release
}

// buffered is the writer's ferry_writer_buffered_bytes.
func (w *testWriter) buffered() int64 { return int64(testutil.ToFloat64(w.srv.metrics.BufferedBytes)) }

// waitWaiting waits until a receiver waits for the budget.
func waitWaiting(t *testing.T, w *testWriter, why string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for w.srv.budget.Waiting() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s: no receiver waits for the budget", why)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitBuffered waits until the budget holds want bytes.
func (w *testWriter) waitBuffered(t *testing.T, want int64, why string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for w.srv.budget.InUse() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: the budget holds %d bytes, want %d", why, w.srv.budget.InUse(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := w.buffered(); got != want {
		t.Fatalf("%s: ferry_writer_buffered_bytes %d, want %d", why, got, want)
	}
}

// sampleBudget records the most the budget and its gauge held until the
// returned stop is called (or the test ends), which returns it.
func (w *testWriter) sampleBudget(t *testing.T) (stop func() int64) {
	var (
		most int64
		once sync.Once
	)
	done, ended := make(chan struct{}), make(chan struct{})
	stop = func() int64 {
		once.Do(func() { close(done) })
		<-ended
		return most
	}
	t.Cleanup(func() { stop() })
	go func() {
		defer close(ended)
		for {
			most = max(most, w.srv.budget.InUse(), w.buffered())
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return stop
}

// waitHeld waits for a produce holdProduce holds.
func waitHeld(ctx context.Context, t *testing.T, held <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatalf("%s never reached the target", what)
	}
}

// TestBufferedBytesAreSharedByStreams: two shards on a writer whose
// max_buffered_bytes holds one wire batch, not two. While shard 1's batch
// is held at the target, shard 2's batch waits in its receiver (nothing of
// it reaches the target); once shard 1's batch is committed and
// acknowledged shard 2's proceeds; then both send all their batches at
// once. The writer never holds more than the budget, and every record of
// both streams reaches the target once, in order.
func TestBufferedBytesAreSharedByStreams(t *testing.T) {
	for _, exactlyOnce := range []bool{false, true} {
		t.Run(fmt.Sprintf("exactly-once %v", exactlyOnce), func(t *testing.T) {
			const n, size = 4, 20
			as, widest := budgetBatches(t, n, size)
			bs, _ := budgetBatches(t, n, size)
			limit := widest + widest/2
			if 2*int64(len(as[0].GetPayload())) <= limit {
				t.Fatalf("batches of %d and %d bytes: two fit in a budget of %d", len(as[0].GetPayload()), widest, limit)
			}
			w := startWriterOptions(t, withShards(passthroughLinks(t, exactlyOnce), 8), func(o *Options) { o.MaxBufferedBytes = limit })
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			a, b := w.openPartition(ctx, t, 0), w.openPartition(ctx, t, 1)
			most := w.sampleBudget(t)

			held, release := w.holdProduce(t, 0)
			sendTo(t, a, 1, 0, as[0])
			waitHeld(ctx, t, held, "shard 1's batch")
			w.waitBuffered(t, int64(len(as[0].GetPayload())), "shard 1's batch at the target")
			hw := w.cluster.PartitionInfo("orders", 1).HighWatermark // exactly-once: the open's abort markers
			sendTo(t, b, 1, 1, bs[0])
			waitWaiting(t, w, "shard 2's receiver waiting for the budget")
			if got := w.cluster.PartitionInfo("orders", 1).HighWatermark; got != hw {
				t.Fatalf("shard 2's batch was produced (orders/1 at %d, was %d) while shard 1's held the budget", got, hw)
			}
			w.waitBuffered(t, int64(len(as[0].GetPayload())), "shard 2's batch waiting")
			release()
			if err := awaitAck(a, 1); err != nil {
				t.Fatalf("shard 1: stream ended: %v", err)
			}
			if err := awaitAck(b, 1); err != nil {
				t.Fatalf("shard 2: stream ended: %v", err)
			}

			// The rest at once, from both streams.
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i, s := range []struct {
				stream    ferryv1.ReplicationService_ReplicateClient
				partition int32
				batches   []*ferryv1.Batch
			}{{a, 0, as}, {b, 1, bs}} {
				for seq := uint64(2); seq <= n; seq++ {
					sendTo(t, s.stream, seq, s.partition, s.batches[seq-1])
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = awaitAck(s.stream, n)
				}()
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("shard %d: stream ended: %v", i+1, err)
				}
			}
			// Acknowledged batches are given back while the streams stay open.
			w.waitBuffered(t, 0, "all acknowledged")
			if got := most(); got > limit {
				t.Errorf("the writer held %d bytes of batches, above max_buffered_bytes %d", got, limit)
			}
			for p := range int32(2) {
				if got, want := partitionValues(t, w, p), vals(0, n*size); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("target orders/%d values %v, want %v", p, got, want)
				}
			}
		})
	}
}

// TestFailedStreamGivesBackItsBytes: a stream holding a batch in a round
// (held at the target) and one queued ends, as a fetcher's bad batch or
// its cancel (with one more batch waiting in the receiver) ends it. All its
// bytes come back, so another stream can then take the whole budget with
// one batch larger than it (admitted alone, capped at the limit).
func TestFailedStreamGivesBackItsBytes(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func(t *testing.T, w *testWriter, stream ferryv1.ReplicationService_ReplicateClient, cancel context.CancelFunc)
	}{
		{"bad batch", func(t *testing.T, _ *testWriter, stream ferryv1.ReplicationService_ReplicateClient, _ context.CancelFunc) {
			bad := wireKafka(t, 1000, sourceBatch(t, 1000, 5, nil, recordbatch.None, 0))
			bad.Crc32C ^= 1
			sendTo(t, stream, 3, 0, bad)
		}},
		{"fetcher cancels", func(t *testing.T, w *testWriter, stream ferryv1.ReplicationService_ReplicateClient, cancel context.CancelFunc) {
			// Does not fit: it waits in the receiver when the stream ends.
			sendTo(t, stream, 3, 0, wireKafka(t, 1000, sourceBatch(t, 1000, 20, nil, recordbatch.None, 0)))
			waitWaiting(t, w, "the batch waiting in the receiver")
			cancel()
		}},
	} {
		for _, exactlyOnce := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s exactly-once %v", tc.name, exactlyOnce), func(t *testing.T) {
				const size = 20
				bs, widest := budgetBatches(t, 2, size)
				limit := 2*widest + widest/2
				big := wireKafka(t, 0, sourceBatch(t, 0, 3*size, nil, recordbatch.None, 0))
				if int64(len(big.GetPayload())) <= limit {
					t.Fatalf("a batch of %d bytes is not above the budget of %d", len(big.GetPayload()), limit)
				}
				w := startWriterOptions(t, withShards(passthroughLinks(t, exactlyOnce), 8), func(o *Options) { o.MaxBufferedBytes = limit })
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()

				failing, cancelFailing := context.WithCancel(ctx)
				defer cancelFailing()
				a := w.openPartition(failing, t, 0)
				held, release := w.holdProduce(t, 0)
				sendTo(t, a, 1, 0, bs[0])
				waitHeld(ctx, t, held, "the round")
				sendTo(t, a, 2, 0, bs[1])
				w.waitBuffered(t, int64(len(bs[0].GetPayload())+len(bs[1].GetPayload())), "a round and a queued batch")
				tc.fail(t, w, a, cancelFailing)
				if err := awaitAck(a, 1); err == nil {
					t.Fatal("a batch of the failing stream was acknowledged")
				}
				if exactlyOnce {
					// The round's transaction is aborted as the stream ends:
					// its bytes come back though the target holds it.
					w.waitBuffered(t, 0, "the failed stream ended")
					release()
				} else {
					// At-least-once, the round in flight is let finish (up to
					// cutGrace): the target may write its records, and only
					// its answer says so. Its bytes come back once it has.
					release()
					w.waitBuffered(t, 0, "the failed stream ended")
				}

				c := w.openPartition(ctx, t, 1)
				held, release = w.holdProduce(t, 1)
				sendTo(t, c, 1, 1, big)
				waitHeld(ctx, t, held, "the large batch")
				w.waitBuffered(t, limit, "a batch above the budget at the target")
				release()
				if err := awaitAck(c, 1); err != nil {
					t.Fatalf("stream ended: %v", err)
				}
				w.waitBuffered(t, 0, "the large batch acknowledged")
				if got, want := partitionValues(t, w, 1), vals(0, 3*size); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("target orders/1 values %v, want %v", got, want)
				}
			})
		}
	}
}
