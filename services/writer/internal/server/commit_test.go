package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

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
