package server

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
)

// checkpointRecords reads the checkpoint topic's records (read_committed
// when committed) and returns their values.
func checkpointRecords(t *testing.T, w *testWriter, committed bool) []string {
	t.Helper()
	opts := []kgo.Opt{kgo.SeedBrokers(w.cluster.ListenAddrs()...), kgo.ConsumeTopics(cpTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100 * time.Millisecond)}
	if committed {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var out []string
	for ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			if !strings.HasPrefix(string(r.Key), "barrier/") {
				out = append(out, string(r.Key))
			}
		})
	}
	return out
}

// At-least-once: when a batch's ack arrives upstream its checkpoint is in
// the checkpoint topic already, written after its records.
func TestAtLeastOnceAcksAfterTheCheckpoint(t *testing.T) {
	w := startWriter(t, passthroughLinks(t, false))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream := w.openOrders(ctx, t, "east")
	if err := sendKafka(t, stream, 1, 0, sourceBatch(t, 0, 5, nil, recordbatch.None, 0)); err != nil {
		t.Fatalf("stream ended: %v", err)
	}
	if cps := checkpointRecords(t, w, false); len(cps) != 1 || cps[0] != "east/orders/0" {
		t.Fatalf("checkpoint topic holds %v when the ack arrived, want the checkpoint of east/orders/0", cps)
	}
}

// Exactly-once: a round whose commit fails is never acknowledged, and
// neither its records nor its checkpoint become visible.
func TestExactlyOnceFailedCommitIsNotAcknowledged(t *testing.T) {
	w := startWriter(t, passthroughLinks(t, true))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream := w.openOrders(ctx, t, "east")
	w.failNextCommit(kerr.ProducerFenced)
	err := sendKafka(t, stream, 1, 0, sourceBatch(t, 0, 5, nil, recordbatch.None, 0))
	if err == nil {
		t.Fatal("a round whose commit failed was acknowledged")
	}
	if !strings.Contains(err.Error(), "outcome unknown") {
		t.Errorf("stream ended with %v, want the commit's unknown outcome", err)
	}
	if cps := checkpointRecords(t, w, true); len(cps) != 0 {
		t.Errorf("read_committed sees checkpoints %v of a round that did not commit", cps)
	}
	if got := targetValuesCommitted(t, w); len(got) != 0 {
		t.Errorf("read_committed sees records %v of a round that did not commit", got)
	}
}

// targetValuesCommitted are the values of orders/0 a read_committed reader
// sees.
func targetValuesCommitted(t *testing.T, w *testWriter) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.cluster.ListenAddrs()...), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var out []string
	for ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { out = append(out, string(r.Value)) })
	}
	return out
}

// Exactly-once: a stream whose round failed mid-transaction aborts the
// transaction as it ends, so read_committed readers of the target (and
// the checkpoint view, and with it the link's control records) move on at
// once instead of at the transaction's timeout; after a region loss no
// next owner of the shard comes to fence it.
func TestFailedRoundsTransactionIsAbortedAtOnce(t *testing.T) {
	w := startWriter(t, passthroughLinks(t, true))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream := w.openOrders(ctx, t, "east")
	w.failNextCommit(kerr.InvalidTxnState)
	if err := sendKafka(t, stream, 1, 0, sourceBatch(t, 0, 5, nil, recordbatch.None, 0)); err == nil {
		t.Fatal("a round whose commit failed was acknowledged")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	// Well inside the test writer's 10 s transaction timeout.
	var hw, lso int64
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ends, err1 := adm.ListEndOffsets(ctx, "orders")
		stable, err2 := adm.ListCommittedOffsets(ctx, "orders")
		if err1 == nil && err2 == nil {
			e, _ := ends.Lookup("orders", 0)
			s, _ := stable.Lookup("orders", 0)
			hw, lso = e.Offset, s.Offset
			if hw > 0 && lso == hw {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("orders/0 last stable offset %d, high watermark %d 3 s after the stream failed: the failed round's transaction is still open", lso, hw)
		}
	}
	if got := targetValuesCommitted(t, w); len(got) != 0 {
		t.Errorf("read_committed sees records %v of a round that did not commit", got)
	}
}

// failNextCommit makes the target answer the next transaction commit with
// err (an abort goes through): the round fails, its outcome as the broker
// sees it still open.
func (w *testWriter) failNextCommit(err *kerr.Error) {
	w.cluster.ControlKey(kmsg.EndTxn.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.EndTxnRequest)
		if !r.Commit {
			return nil, nil, false
		}
		resp := r.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = err.Code
		return resp, nil, true
	})
}

// heldCut is a request a cut stream's round makes, held at the target
// until the writer has seen the cut: the first request of kind key that
// pick picks, then answered with answer (nil: as the target would).
type heldCut struct {
	key    kmsg.Key
	pick   func(kmsg.Request) bool
	answer error
}

// cutWhileHeld copies one batch of 5 records on a stream of w that is cut
// while h's request is held; before runs on the stream first. It returns
// once the cut stream has ended.
func cutWhileHeld(t *testing.T, w *testWriter, h heldCut, before func(ferryv1.ReplicationService_ReplicateClient)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sctx, cut := context.WithCancel(ctx)
	defer cut()
	stream, _ := w.openOrdersFrom(sctx, t, "east", "")
	var armed atomic.Bool
	armed.Store(true)
	held, release := make(chan struct{}), make(chan struct{})
	w.cluster.ControlKey(h.key.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		w.cluster.KeepControl()
		if h.pick(req) && armed.CompareAndSwap(true, false) {
			close(held)
			w.cluster.SleepControl(func() { <-release })
			if h.answer != nil {
				return nil, h.answer, true
			}
		}
		return nil, nil, false
	})
	if before != nil {
		before(stream)
	}
	b := wireKafka(t, 0, sourceBatch(t, 0, 5, nil, recordbatch.None, 0))
	b.Sequence, b.Epoch, b.Topic, b.Partition = 1, 1, "orders", 0
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Batch{Batch: b}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the request to hold was never sent")
	}
	cut()
	waitFor(t, "the writer to see the stream cut", func() bool {
		w.srv.mu.Lock()
		defer w.srv.mu.Unlock()
		st := w.srv.shards[shardKey{"east", 0}]
		return st.active == nil || st.active.ctx.Err() != nil
	})
	close(release)
	waitFor(t, "the cut stream's end", func() bool { return testutil.ToFloat64(w.srv.metrics.Streams) == 0 })
}

// cutDuringProduce is cutWhileHeld at-least-once, holding the first
// produce to a topic hold picks: it returns the writer and where a new
// stream of the shard resumes.
func cutDuringProduce(t *testing.T, hold func(topic string) bool, answer error) (*testWriter, *ferryv1.PartitionPosition) {
	t.Helper()
	w := startWriter(t, passthroughLinks(t, false))
	produces := func(req kmsg.Request) bool {
		return slices.ContainsFunc(req.(*kmsg.ProduceRequest).Topics, func(rt kmsg.ProduceRequestTopic) bool { return hold(rt.Topic) })
	}
	cutWhileHeld(t, w, heldCut{key: kmsg.Produce, pick: produces, answer: answer}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, opened := w.openOrdersFrom(ctx, t, "east", "")
	if r := opened.GetResume(); len(r) == 1 {
		return w, r[0]
	}
	t.Fatalf("resume %+v after the cut, want orders/0's", opened.GetResume())
	return nil, nil
}

// At-least-once, a round's checkpoints ride with the next round. A stream
// cut (the source region lost, its fetcher gone) before they are written
// used to leave the round's records on the target past their checkpoint:
// the failover counted them lost, and failback --copy-stranded copied
// them again. The writer now writes those checkpoints as the stream ends.
// Here the batch's checkpoint produce (in the round after its records) is
// held until the cut, then dropped with its connection: it never lands.
func TestCutStreamCheckpointsWhatLanded(t *testing.T) {
	_, r := cutDuringProduce(t, func(topic string) bool { return topic == cpTopic }, errors.New("connection lost"))
	if !r.GetHasCheckpoint() || r.GetNextOffset() != 5 {
		t.Fatalf("resume %+v after the cut, want from 5: the records that landed are checkpointed", r)
	}
}

// The round in flight at a cut: its records' produce reached the target
// as the stream was cut, and the target wrote them. A produce the cut
// abandoned would leave them there without a checkpoint: counted lost at
// a failover, copied again by --copy-stranded and by the next stream. The
// round is let finish (bounded), and settle writes its checkpoints.
func TestCutStreamCheckpointsTheRoundInFlight(t *testing.T) {
	w, r := cutDuringProduce(t, func(topic string) bool { return topic != cpTopic && topic != indexTopic }, nil)
	if !r.GetHasCheckpoint() || r.GetNextOffset() != 5 {
		t.Fatalf("resume %+v after the cut, want from 5: the round in flight landed and is checkpointed", r)
	}
	if got := targetValuesCommitted(t, w); len(got) != 5 {
		t.Fatalf("target holds %d records, want the round's 5 once", len(got))
	}
}
