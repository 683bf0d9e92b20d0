package server

import (
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/services/writer/internal/heartbeat"
	"github.com/ferry-replicator/ferry/services/writer/internal/server/servertest"
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
	bind := &ferryv1.ReportOpen{Link: "east", Shard: 0, Epoch: epoch, Session: session}
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

// reportBound says whether the open stream of link's shard has a Report
// stream bound to it.
func (w *testWriter) reportBound(link string, shard uint32) bool {
	w.srv.mu.Lock()
	defer w.srv.mu.Unlock()
	st := w.srv.shards[shardKey{link, shard}]
	return st != nil && st.active != nil && st.active.reporting.Load()
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

// fill sends m batches of 1000 records each after the n of heldShard, on
// a goroutine of its own, and returns how many it has sent so far: once
// HTTP/2 flow control stops the stream (the writer's receiver reads
// nothing while it waits for the budget), its count stops below m. It
// ends when all are sent or the stream ends (the test's cleanup).
func fill(t *testing.T, stream ferryv1.ReplicationService_ReplicateClient, n, m int) (sent func() int64) {
	t.Helper()
	var bs []*ferryv1.Batch
	for i := range m {
		first := int64(n*20 + i*1000)
		b := wireKafka(t, first, sourceBatch(t, first, 1000, nil, recordbatch.None, 0))
		b.Sequence, b.Epoch, b.Topic, b.Partition = uint64(n+i+1), 1, "orders", 0
		bs = append(bs, b)
	}
	var count atomic.Int64
	done := make(chan struct{})
	t.Cleanup(func() { <-done })
	go func() {
		defer close(done)
		for _, b := range bs {
			if stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Batch{Batch: b}}) != nil {
				return
			}
			count.Add(1)
		}
	}()
	return count.Load
}

// A heartbeat sent while the shard's batches wait for a slow target (the
// first held at the target, the next queued behind the writer's budget,
// and a megabyte more stopped by HTTP/2 flow control on their way)
// reaches the failover meter within about its interval, not after the
// data; the data is then copied whole.
func TestHeartbeatOvertakesHeldData(t *testing.T) {
	const n, m = 8, 64
	_, widest := budgetBatches(t, 1, 20)
	w := startWriterOptions(t, passthroughLinks(t, false), func(o *Options) { o.MaxBufferedBytes = widest + widest/2 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream, opened, release := heldShard(ctx, t, w, n)
	filled := fill(t, stream, n, m)
	waitWithin(t, 10*time.Second, "two batches of the fill sent", func() bool { return filled() >= 2 })

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
	if got := filled(); got == m {
		t.Fatalf("all %d batches of the fill were sent: flow control held none of them", m)
	}
	release()
	if err := awaitAck(stream, n+m); err != nil {
		t.Fatalf("stream ended: %v", err)
	}
	meterOf(t, w, "every record committed", func(e heartbeat.Exposure) bool { return e.Committed == n*20+m*1000 })
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

// openAt opens shard 1 of link over orders/0 at epoch on c and returns
// the stream and the writer's Opened.
func openAt(ctx context.Context, t *testing.T, c ferryv1.ReplicationServiceClient, link string, epoch uint64) (ferryv1.ReplicationService_ReplicateClient, *ferryv1.Opened) {
	t.Helper()
	stream, err := c.Replicate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	open := &ferryv1.Open{Link: link, Shard: 0, Epoch: epoch, Fetcher: "f",
		Topics:     []*ferryv1.TopicSpec{{Name: "orders", PartitionCount: 1}},
		Partitions: []*ferryv1.TopicPartition{{Topic: "orders", Partition: 0}}}
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Open{Open: open}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil || resp.GetOpened() == nil {
		t.Fatalf("open answered %v, %v; want Opened", resp, err)
	}
	return stream, resp.GetOpened()
}

// reportAnswer binds a Report stream on c as bind says and closes it: nil
// when the writer took it.
func reportAnswer(ctx context.Context, t *testing.T, c ferryv1.ReplicationServiceClient, bind *ferryv1.ReportOpen) error {
	t.Helper()
	rep, err := c.Report(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// io.EOF: the writer ended the stream before reading it (a peer it
	// does not admit); CloseAndRecv gives the status it ended with.
	if err := rep.Send(&ferryv1.ReportRequest{Msg: &ferryv1.ReportRequest_Open{Open: bind}}); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	_, err = rep.CloseAndRecv()
	return err
}

// A Report stream binds only to a Replicate stream open on the writer, of
// the shard's current epoch and session, from the identity that opened it
// (admitted for the link as for Replicate), once; anything else is
// refused, and the Replicate stream goes on.
func TestReportIsBoundToAnOpenStream(t *testing.T) {
	w, east, west := boundWriter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bind := func(link string, epoch, session uint64) *ferryv1.ReportOpen {
		return &ferryv1.ReportOpen{Link: link, Shard: 0, Epoch: epoch, Session: session}
	}

	wantRefusal(t, reportAnswer(ctx, t, east, bind("east", 1, 1)), codes.FailedPrecondition, "not open on this writer")
	wantRefusal(t, reportAnswer(ctx, t, east, bind("nowhere", 1, 1)), codes.FailedPrecondition, "unknown link")

	_, old := openAt(ctx, t, east, "east", 1)
	stream, opened := openAt(ctx, t, east, "east", 2) // supersedes epoch 1's stream
	if !opened.GetReports() || opened.GetSession() == old.GetSession() {
		t.Fatalf("Opened %v after %v: want reports and a new session", opened, old)
	}
	wantRefusal(t, reportAnswer(ctx, t, east, bind("east", 1, old.GetSession())), codes.FailedPrecondition, "stale epoch", "epoch 1", "epoch 2 exists")
	wantRefusal(t, reportAnswer(ctx, t, east, bind("east", 2, old.GetSession())), codes.FailedPrecondition, "not open on this writer")
	wantRefusal(t, reportAnswer(ctx, t, east, bind("east", 3, opened.GetSession())), codes.FailedPrecondition, "not open on this writer")
	wantRefusal(t, reportAnswer(ctx, t, west, bind("east", 2, opened.GetSession())), codes.PermissionDenied, `link "east"`, westFetcher, "links[].allowed_ids")

	if err := reportAnswer(ctx, t, east, bind("east", 2, opened.GetSession())); err != nil {
		t.Fatalf("the stream's own report refused: %v", err)
	}
	wantRefusal(t, reportAnswer(ctx, t, east, bind("east", 2, opened.GetSession())), codes.FailedPrecondition, "has a report stream already")
	b := wireKafka(t, 0, sourceBatch(t, 0, 5, nil, recordbatch.None, 0))
	b.Sequence, b.Epoch, b.Topic, b.Partition = 1, 2, "orders", 0
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Batch{Batch: b}}); err != nil {
		t.Fatal(err)
	}
	if err := awaitAck(stream, 1); err != nil {
		t.Fatalf("the Replicate stream ended after refused reports: %v", err)
	}

	// West's link admits any fetcher, but a report comes from the one
	// that opened the stream.
	_, wopened := openAt(ctx, t, east, "west", 1)
	w2 := &ferryv1.ReportOpen{Link: "west", Shard: 0, Epoch: 1, Session: wopened.GetSession()}
	wantRefusal(t, reportAnswer(ctx, t, west, w2), codes.PermissionDenied, westFetcher, eastFetcher)
	if got := w.rejected(t, "east", "stale_epoch"); got != 1 {
		t.Errorf("rejected{link=east,reason=stale_epoch} = %v, want 1", got)
	}
}

// A report the writer refuses ends the Replicate stream too, as it would
// on the Replicate stream; a Report stream ends when its Replicate stream
// does.
func TestReportEndsWithItsStream(t *testing.T) {
	w := startWriter(t, passthroughLinks(t, false))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	stream, opened := w.openOrdersFrom(ctx, t, "east", "")
	rep := openReport(ctx, t, w.client, 1, opened.GetSession())
	bad := &ferryv1.Heartbeat{Epoch: 1, Partitions: []*ferryv1.PartitionHeartbeat{{Topic: "orders", Partition: 7, ObservedAt: 1}}}
	if err := rep.Send(&ferryv1.ReportRequest{Msg: &ferryv1.ReportRequest_Heartbeat{Heartbeat: bad}}); err != nil {
		t.Fatal(err)
	}
	_, err := rep.CloseAndRecv()
	wantRefusal(t, err, codes.InvalidArgument, "orders/7 is not in shard 0")
	_, err = stream.Recv()
	wantRefusal(t, err, codes.InvalidArgument, "orders/7 is not in shard 0")
	if got := w.rejected(t, "east", "bad_heartbeat"); got != 1 {
		t.Errorf("rejected{reason=bad_heartbeat} = %v, want 1", got)
	}

	stream, opened = w.openOrdersFrom(ctx, t, "east", "")
	rep = openReport(ctx, t, w.client, 1, opened.GetSession())
	// A ReportOpen has no answer: wait until the writer has bound it, or
	// the Replicate stream may end first and the bind be refused (CI saw
	// "session 2 is not open"), which is right but not what is tested.
	waitWithin(t, 10*time.Second, "the report stream bound", func() bool { return w.reportBound("east", 0) })
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("Replicate stream ended with %v, want its clean end", err)
	}
	done := make(chan error, 1)
	go func() { _, err := rep.CloseAndRecv(); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("report stream ended with %v, want its clean end", err)
		}
	case <-ctx.Done():
		t.Fatal("the report stream outlived its Replicate stream")
	}
}

// An operator (control.allowed_ids), whom the gRPC port admits, may not
// report for a link any more than replicate it, even naming a stream the
// link's fetcher has open.
func TestOperatorMayNotReport(t *testing.T) {
	pki := servertest.NewPKI(t)
	w := startTLSWriter(t, pki)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, opened := openAt(ctx, t, w.client, "east", 1)
	bind := &ferryv1.ReportOpen{Link: "east", Shard: 0, Epoch: 1, Session: opened.GetSession()}
	wantRefusal(t, reportAnswer(ctx, t, w.dial(t, servertest.Creds(pki.Operator)), bind), codes.PermissionDenied, servertest.OperatorID, "tls.allowed_ids")
	if err := reportAnswer(ctx, t, w.client, bind); err != nil {
		t.Fatalf("the fetcher's own report refused: %v", err)
	}
}
