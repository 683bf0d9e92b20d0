package control

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/linkstate"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/pkg/testwait"
	"github.com/ferry-replicator/ferry/services/writer/internal/checkpoint"
	"github.com/ferry-replicator/ferry/services/writer/internal/heartbeat"
	"github.com/ferry-replicator/ferry/services/writer/internal/server/servertest"
)

// Failback's SetCheckpoints moves every partition of a failed-over link
// in one pass: a few produce requests to the checkpoint topic, not three
// per partition (a pass each took 2.5-3 s, and a link of ten partitions
// outlived ferryctl's default timeout half moved). The moved checkpoints
// remember where the copy stood, so the failover meter (and a failback
// run again) still says what the target holds, also after the same move
// is asked again; the link's next round, once resumed, copies from the
// moved checkpoint and drops the memory.
func TestFailbackMovesEveryPartitionInOnePass(t *testing.T) {
	pki := servertest.NewPKI(t)
	w1 := startControlWriter(t, pki, nil, true, servertest.OperatorID)
	w2 := startControlWriter(t, pki, w1.Cluster, true, servertest.OperatorID)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	stream, err := servertest.OpenShard(ctx, t, w2.Client, "east", 0, testShards, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := servertest.SendToPartition(t, stream, 1, 0, 0, servertest.SourceBatch(t, 0, 5, nil, recordbatch.None, 0)); err != nil {
		t.Fatal(err)
	}
	w1.setState(ctx, t, linkstate.FailedOver, "region east lost")
	if _, err := untilEnd(stream, 5); err == nil {
		t.Fatal("the stream outlived the failover")
	}

	const parts = 40 // orders/0 copied to 5, the others never copied
	req := &ferryv1.SetCheckpointsRequest{Link: "east", Reason: "failback"}
	for p := range int32(parts) {
		req.Checkpoints = append(req.Checkpoints, &ferryv1.CheckpointPosition{Topic: "orders", Partition: p, NextSourceOffset: 50})
	}
	var produces atomic.Int64
	w1.Cluster.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		w1.Cluster.KeepControl()
		for _, tp := range r.(*kmsg.ProduceRequest).Topics {
			if tp.Topic == servertest.CheckpointTopic {
				produces.Add(1)
			}
		}
		return nil, nil, false
	})
	resp, err := w1.ctl.SetCheckpoints(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if n := produces.Load(); n > 6 {
		t.Errorf("%d produce requests to the checkpoint topic to move %d partitions, want a few (one pass)", n, parts)
	}
	if len(resp.GetChanges()) != parts {
		t.Fatalf("%d changes, want %d", len(resp.GetChanges()), parts)
	}
	for _, ch := range resp.GetChanges() {
		want := int64(-1)
		if ch.GetPartition() == 0 {
			want = 5
		}
		if ch.GetPreviousNextSourceOffset() != want || ch.GetNextSourceOffset() != 50 {
			t.Errorf("orders/%d moved from %d to %d, want from %d to 50", ch.GetPartition(), ch.GetPreviousNextSourceOffset(), ch.GetNextSourceOffset(), want)
		}
	}
	k := heartbeat.Key{Link: "east", Topic: "orders", Partition: 0}
	for _, w := range []*controlWriter{w1, w2} {
		if err := w.Store.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if next := w.resumeFrom(t, 0); next != 50 {
			t.Errorf("writer %s: checkpoint at %d, want 50", w.srv.ID(), next)
		}
		if got := copiedNext(t, w, k); got != 5 {
			t.Errorf("writer %s: committed %d after the move, want the copy's 5", w.srv.ID(), got)
		}
	}
	// Asked again (a rerun of failback): the same checkpoints, and the
	// copy's position still remembered.
	if _, err := w2.ctl.SetCheckpoints(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got := copiedNext(t, w2, k); got != 5 {
		t.Errorf("committed %d after the move asked again, want the copy's 5", got)
	}

	w1.setState(ctx, t, linkstate.Running, "failed back")
	stream, err = servertest.OpenShard(ctx, t, w2.Client, "east", 0, testShards, 2)
	if err != nil {
		t.Fatal(err)
	}
	b := servertest.WireKafka(t, 50, servertest.SourceBatch(t, 50, 5, nil, recordbatch.None, 0))
	b.Sequence, b.Epoch, b.Topic, b.Partition = 1, 2, "orders", 0
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Batch{Batch: b}}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the resumed copy committed", func() bool { return copiedNext(t, w2, k) == 55 })
}

// copiedNext is where the copy of k stands in w's checkpoint view, as the
// failover meter counts it: the copy's next offset, not where failback
// moved the checkpoint; -1 without a checkpoint that verifies.
func copiedNext(t *testing.T, w *controlWriter, k heartbeat.Key) int64 {
	t.Helper()
	if cp, ok, err := w.Store.Get(checkpoint.Key{Link: k.Link, Topic: k.Topic, Partition: k.Partition}); ok && err == nil {
		return cp.Copied()
	}
	return -1
}
