package server

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
)

// The Report stream carries a Replicate stream's heartbeats and group
// offsets beside it. On the Replicate stream they queue behind batches
// wherever the writer holds data back from a slow target (its receiver
// waits on session.queued and session.hold, then HTTP/2 flow control
// stops the fetcher's sends): the region-loss soak measured the target
// side's view of the source 4 to 8 s old. A Report stream has none of
// that backpressure: each message is checked and kept as it arrives, by
// the same code as on the Replicate stream (session.other).

// errNoSession is a Report naming no Replicate stream open on this
// writer: never opened here, ended, or superseded.
var errNoSession = errors.New("no such replication stream")

// Report serves one Report stream.
func (s *Server) Report(stream ferryv1.ReplicationService_ReportServer) error {
	err := s.report(stream)
	if err != nil && !errors.Is(err, context.Canceled) && status.Code(err) != codes.Canceled {
		s.log.Warn("report stream ended", "err", err)
	}
	return toStatus(err)
}

func (s *Server) report(stream ferryv1.ReplicationService_ReportServer) error {
	ctx := stream.Context()
	if err := s.admitPeer(ctx); err != nil {
		return err
	}
	req, err := stream.Recv()
	if err != nil {
		return fmt.Errorf("receive report open: %w", err)
	}
	bind := req.GetOpen()
	if bind == nil {
		return fmt.Errorf("%w: the first message of a report stream must be a ReportOpen", errBadRequest)
	}
	sess, err := s.bound(ctx, bind)
	if err != nil {
		return err
	}
	reqs := make(chan *ferryv1.ReportRequest)
	failed := make(chan error, 1)
	// Ends when the stream does, which gRPC ends when this handler returns.
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				failed <- err
				return
			}
			select {
			case reqs <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case <-sess.ctx.Done():
			// The Replicate stream ended (or is ending): so does this one,
			// cleanly; the fetcher learns why on the Replicate stream.
			return stream.SendAndClose(&ferryv1.ReportResponse{})
		case err := <-failed:
			if errors.Is(err, io.EOF) {
				return stream.SendAndClose(&ferryv1.ReportResponse{})
			}
			return fmt.Errorf("receive report: %w", err)
		case req := <-reqs:
			if err := sess.reported(req); err != nil {
				// As on the Replicate stream, a refused report ends the
				// session: the fetcher sending it is not to be trusted.
				err = reject(s.metrics, sess.link.Name, err)
				sess.cancel(err)
				return err
			}
		}
	}
}

// bound returns the Replicate stream a ReportOpen names, if the caller may
// report for it: admitted for the link as for Replicate, the very identity
// that opened the stream, of the shard's current epoch, and the first
// Report of the stream.
func (s *Server) bound(ctx context.Context, bind *ferryv1.ReportOpen) (*session, error) {
	link, err := s.admitLink(ctx, bind.GetLink())
	if err != nil {
		return nil, err
	}
	key := shardKey{link.Name, bind.GetShard()}
	s.mu.Lock()
	st := s.shards[key]
	var sess *session
	var highest uint64
	if st != nil {
		sess, highest = st.active, st.highest
	}
	s.mu.Unlock()
	if bind.GetEpoch() < highest {
		s.metrics.StaleEpochs.WithLabelValues(link.Name).Inc()
		return nil, reject(s.metrics, link.Name, fmt.Errorf("%w: report for shard %d with epoch %d, but epoch %d exists", errStaleEpoch, bind.GetShard(), bind.GetEpoch(), highest))
	}
	if sess == nil || sess.epoch != bind.GetEpoch() || sess.id != bind.GetSession() {
		return nil, fmt.Errorf("%w: link %q shard %d epoch %d session %d is not open on this writer", errNoSession, link.Name, bind.GetShard(), bind.GetEpoch(), bind.GetSession())
	}
	if peer := tlsconfig.PeerIdentity(ctx); peer != sess.peer {
		return nil, reject(s.metrics, link.Name, fmt.Errorf("%w: report for link %q shard %d from %q, but %q opened it", errPeerRefused, link.Name, bind.GetShard(), peer, sess.peer))
	}
	if !sess.reporting.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("%w: link %q shard %d session %d has a report stream already", errNoSession, link.Name, bind.GetShard(), bind.GetSession())
	}
	return sess, nil
}

// reported handles one message of the stream's Report stream, as the
// Replicate stream would.
func (ss *session) reported(req *ferryv1.ReportRequest) error {
	switch m := req.GetMsg().(type) {
	case *ferryv1.ReportRequest_Heartbeat:
		_, err := ss.other(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Heartbeat{Heartbeat: m.Heartbeat}})
		return err
	case *ferryv1.ReportRequest_GroupOffsets:
		_, err := ss.other(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_GroupOffsets{GroupOffsets: m.GroupOffsets}})
		return err
	case *ferryv1.ReportRequest_Open:
		return fmt.Errorf("%w: a second ReportOpen on a report stream", errBadRequest)
	case nil:
		if len(req.ProtoReflect().GetUnknown()) > 0 {
			return nil // a message of a newer fetcher: passed over, as in other
		}
		return fmt.Errorf("%w: an empty report", errBadRequest)
	}
	return nil
}
