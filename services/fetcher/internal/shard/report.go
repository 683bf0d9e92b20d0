package shard

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
)

// Heartbeats and group offsets go on a Report stream of their own to a
// writer whose Opened sets reports. On the Replicate stream they queue
// behind batches wherever a slow target holds data back: the sender's
// turn (sendMu), HTTP/2's flow-control window of the stream, the writer's
// receiver waiting for its budget; the region-loss soak measured the
// target side's view of the source 4 to 8 s old. The Report stream shares
// the connection, but HTTP/2 windows are per stream and gRPC refills the
// connection's as data arrives, so a stalled data stream does not stall
// it.
//
// A Report stream that fails ends the session, as a failed data stream
// does, rather than being reopened on its own: it is bound to the session
// (Opened.session), so it almost always fails with it (same connection,
// same writer), and a failure of its own (the writer refused a report)
// ends the data stream at the writer too. The session's reconnect path
// (back off, open, resume from the writer's checkpoints) is the one
// already proven; a second one for the side stream would only add states.

// openReports opens the session's Report stream on conn and binds it to
// the stream opened. It lives on ctx, the data stream's: it ends with it.
func (r *Runner) openReports(ctx context.Context, conn grpc.ClientConnInterface, opened *ferryv1.Opened) (ferryv1.ReplicationService_ReportClient, error) {
	rep, err := ferryv1.NewReplicationServiceClient(conn).Report(ctx)
	if err != nil {
		return nil, err
	}
	bind := &ferryv1.ReportOpen{Link: r.set.Link, Shard: uint32(r.shard), Epoch: r.epoch, Session: opened.GetSession()}
	if err := rep.Send(&ferryv1.ReportRequest{Msg: &ferryv1.ReportRequest_Open{Open: bind}}); err != nil {
		return nil, reportEnded(rep, err)
	}
	return rep, nil
}

// report sends a heartbeat or group offsets on the Report stream, or on
// the data stream to a writer older than it.
func (s *session) report(req *ferryv1.ReplicateRequest) error {
	if s.reports == nil {
		return s.sendRequest(req)
	}
	rr := &ferryv1.ReportRequest{}
	switch m := req.GetMsg().(type) {
	case *ferryv1.ReplicateRequest_Heartbeat:
		rr.Msg = &ferryv1.ReportRequest_Heartbeat{Heartbeat: m.Heartbeat}
	case *ferryv1.ReplicateRequest_GroupOffsets:
		rr.Msg = &ferryv1.ReportRequest_GroupOffsets{GroupOffsets: m.GroupOffsets}
	default:
		return fmt.Errorf("report of %T: not a heartbeat or group offsets", m)
	}
	s.reportMu.Lock()
	defer s.reportMu.Unlock()
	if s.reportsClosed {
		return nil
	}
	err := s.reports.Send(rr)
	if err == nil {
		return nil
	}
	if err = reportEnded(s.reports, err); errors.Is(err, errReportsClosed) {
		// The writer ends a Report stream cleanly only as its Replicate
		// stream ends, whose status says why (a refusal may stop a
		// partition): the session reads it there, and this must not race
		// it with an error of its own. Reports stop until then.
		s.reportsClosed = true
		return nil
	}
	return err
}

// errReportsClosed is a Report stream the writer ended cleanly.
var errReportsClosed = errors.New("writer ended the report stream")

// reportEnded is why the Report stream rep ended, when a Send on it
// failed with err: gRPC answers io.EOF to a Send on a stream the writer
// ended, and keeps the writer's status for the receive.
func reportEnded(rep ferryv1.ReplicationService_ReportClient, err error) error {
	if !errors.Is(err, io.EOF) {
		return fmt.Errorf("report stream: %w", err)
	}
	if _, err := rep.CloseAndRecv(); err != nil {
		return fmt.Errorf("report stream: %w", err)
	}
	return errReportsClosed
}
