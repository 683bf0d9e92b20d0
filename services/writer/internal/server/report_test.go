package server

import (
	"context"
	"testing"
	"time"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
)

// reportBound is how soon a heartbeat or group offsets sent while the
// shard's data waits must reach the writer: about the fetchers' heartbeat
// interval (1 s), far below the data's wait, which here lasts until the
// test releases the target.
const reportBound = 2 * time.Second

// heldShard opens shard 1 over orders/0 on w, holds its first produce at
// the target and sends n batches of 20 records behind it, until the
// stream's receiver waits for the writer's budget (max_buffered_bytes
// must hold about one batch): the data path is held, as under a slow
// target. release lets the target go on.
func heldShard(ctx context.Context, t *testing.T, w *testWriter, n int) (stream ferryv1.ReplicationService_ReplicateClient, opened *ferryv1.Opened, release func()) {
	t.Helper()
	bs, _ := budgetBatches(t, n, 20)
	stream, opened = w.openOrdersFrom(ctx, t, "east", "")
	held, release := w.holdProduce(t, 0)
	sendTo(t, stream, 1, 0, bs[0])
	waitHeld(ctx, t, held, "the first batch")
	for i := 1; i < n; i++ {
		sendTo(t, stream, uint64(i+1), 0, bs[i])
	}
	waitWaiting(t, w, "the receiver waiting for the budget behind the held batch")
	return stream, opened, release
}

// openReport opens a Report stream on c bound to shard 1 of link east at
// epoch, session.
func openReport(ctx context.Context, t *testing.T, c ferryv1.ReplicationServiceClient, epoch, session uint64) ferryv1.ReplicationService_ReportClient {
	t.Helper()
	rep, err := c.Report(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bind := &ferryv1.ReportOpen{Link: "east", Shard: 1, Epoch: epoch, Session: session}
	if err := rep.Send(&ferryv1.ReportRequest{Msg: &ferryv1.ReportRequest_Open{Open: bind}}); err != nil {
		t.Fatal(err)
	}
	return rep
}

// asReport is a Replicate stream's heartbeat or group offsets as a Report
// stream carries them.
func asReport(req *ferryv1.ReplicateRequest) *ferryv1.ReportRequest {
	if hb := req.GetHeartbeat(); hb != nil {
		return &ferryv1.ReportRequest{Msg: &ferryv1.ReportRequest_Heartbeat{Heartbeat: hb}}
	}
	return &ferryv1.ReportRequest{Msg: &ferryv1.ReportRequest_GroupOffsets{GroupOffsets: req.GetGroupOffsets()}}
}

// sendReport sends req's heartbeat or group offsets for the shard as a
// fetcher does to a writer that takes reports: on a Report stream bound
// to the shard's stream.
func sendReport(ctx context.Context, t *testing.T, w *testWriter, opened *ferryv1.Opened, req *ferryv1.ReplicateRequest) {
	t.Helper()
	if !opened.GetReports() || opened.GetSession() == 0 {
		t.Fatalf("Opened %v does not offer a report stream", opened)
	}
	if err := openReport(ctx, t, w.client, 1, opened.GetSession()).Send(asReport(req)); err != nil {
		t.Fatal(err)
	}
}

// waitWithin fails the test unless cond holds within d.
func waitWithin(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A heartbeat sent while the shard's batches wait for a slow target (the
// first held at the target, the rest queued behind the writer's budget)
// reaches the failover meter within about its interval, not after the
// data; the data is then copied whole.
func TestHeartbeatOvertakesHeldData(t *testing.T) {
	const n = 8
	_, widest := budgetBatches(t, 1, 20)
	w := startWriterOptions(t, passthroughLinks(t, false), func(o *Options) { o.MaxBufferedBytes = widest + widest/2 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, opened, release := heldShard(ctx, t, w, n)

	now := time.Now().UnixMilli()
	hb := &ferryv1.PartitionHeartbeat{Topic: "orders", Partition: 0, HighWatermark: 1000, LogStartOffset: 0, HeadOffset: -1, HeadTimestamp: -1, ObservedAt: now}
	sendReport(ctx, t, w, opened, &ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Heartbeat{
		Heartbeat: &ferryv1.Heartbeat{Epoch: 1, Partitions: []*ferryv1.PartitionHeartbeat{hb}}}})
	waitWithin(t, reportBound, "the heartbeat in the meter while the data waits", func() bool {
		for _, e := range w.srv.Failover() {
			if e.Topic == "orders" && e.Partition == 0 && e.SourceHighWatermark == 1000 {
				return true
			}
		}
		return false
	})
	if w.srv.budget.Waiting() == 0 {
		t.Fatal("the data stopped waiting before the heartbeat was checked: the test holds nothing")
	}
	release()
	if err := awaitAck(stream, n); err != nil {
		t.Fatalf("stream ended: %v", err)
	}
	meterOf(t, w, "all 160 records committed", func(e Exposure) bool { return e.Committed == n*20 })
}

// Group offsets sent while the shard's data waits reach the writer's
// group syncer within about their interval.
func TestGroupOffsetsOvertakeHeldData(t *testing.T) {
	const n = 8
	_, widest := budgetBatches(t, 1, 20)
	w := startGroupWriter(t, false, func(o *Options) { o.MaxBufferedBytes = widest + widest/2 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, opened, release := heldShard(ctx, t, w, n)

	sendReport(ctx, t, w, opened, groupOffsets(map[string]int64{"billing": 42}))
	waitWithin(t, reportBound, "billing's offset at the writer while the data waits", func() bool {
		g, ok := groupOf(w, "billing")
		return ok && len(g.Partitions) == 1 && g.Partitions[0].SourceOffset == 42
	})
	release()
	if err := awaitAck(stream, n); err != nil {
		t.Fatalf("stream ended: %v", err)
	}
}
