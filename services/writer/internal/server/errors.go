package server

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ferry-replicator/ferry/pkg/batch"
	"github.com/ferry-replicator/ferry/pkg/linkstate"
	"github.com/ferry-replicator/ferry/pkg/refusal"
	"github.com/ferry-replicator/ferry/services/writer/internal/metrics"
)

// Domain errors of the writer. toStatus is the one place they become gRPC
// status codes.
var (
	errBadRequest  = errors.New("bad request")
	errStaleEpoch  = errors.New("stale epoch")
	errNotInShard  = errors.New("partition not in shard")
	errUnknownLink = errors.New("unknown link")
	errOutOfOrder  = errors.New("batch out of offset order")
	errSuperseded  = errors.New("stream superseded by a newer open of the shard")
	errDraining    = errors.New("writer draining")
	// errTopicRefused is an Open naming a topic the link may not write:
	// outside its allow list, or onto a reserved target topic.
	errTopicRefused = errors.New("topic refused")
	// errPeerRefused is an Open from a peer the link does not admit
	// (links[].allowed_ids), although the writer admits it.
	errPeerRefused = errors.New("peer refused")
	// errBeyondSource is a batch whose range reaches past the source
	// high watermark it carries, or a Skip that carries none.
	errBeyondSource = errors.New("batch beyond the source")
	// errTooManyStreams is an Open above max_streams or
	// max_streams_per_peer.
	errTooManyStreams = errors.New("too many streams")
	// errOpenRate is an Open above open_rate_per_peer (openrate.go).
	errOpenRate = errors.New("opens too frequent")
	// errBadOpen is a bad request in an Open: it reads and maps as
	// errBadRequest, and is counted apart from a bad batch.
	errBadOpen error = badOpen{}
	// errLinkPaused and errLinkFailedOver refuse, or end, a stream of a
	// link an operator has paused or failed over (linkstate.go); the
	// error also wraps the linkstate.Refusal the fetcher reads.
	errLinkPaused     = errors.New("link paused")
	errLinkFailedOver = errors.New("link failed over")
)

type badOpen struct{}

func (badOpen) Error() string { return errBadRequest.Error() }
func (badOpen) Unwrap() error { return errBadRequest }

// statusTable maps each domain error to the status the fetcher sees and to
// the reason label the writer counts it under (rejected_total); errors
// with no reason are not refusals of the fetcher's input. The first row
// an error matches decides.
var statusTable = []struct {
	err    error
	code   codes.Code
	reason string
}{
	{batch.ErrChecksum, codes.DataLoss, "checksum"},
	{batch.ErrMalformed, codes.InvalidArgument, "malformed"},
	{batch.ErrTooLarge, codes.InvalidArgument, "too_large"},
	{errBadOpen, codes.InvalidArgument, "bad_open"},
	{errBadRequest, codes.InvalidArgument, "malformed"},
	{errStaleEpoch, codes.FailedPrecondition, "stale_epoch"},
	{errNotInShard, codes.FailedPrecondition, "not_in_shard"},
	{errUnknownLink, codes.FailedPrecondition, "unknown_link"},
	{errTopicRefused, codes.PermissionDenied, "topic_refused"},
	{errPeerRefused, codes.PermissionDenied, "peer_refused"},
	{errBeyondSource, codes.InvalidArgument, "beyond_source"},
	{errBadHeartbeat, codes.InvalidArgument, "bad_heartbeat"},
	{errBadGroupOffsets, codes.InvalidArgument, "bad_group_offsets"},
	{errTooManyStreams, codes.ResourceExhausted, "too_many_streams"},
	{errOpenRate, codes.ResourceExhausted, "open_rate"},
	{errLinkPaused, codes.FailedPrecondition, "link_paused"},
	{errLinkFailedOver, codes.FailedPrecondition, "link_failed_over"},
	{errOutOfOrder, codes.FailedPrecondition, "out_of_order"},
	{errNoSession, codes.FailedPrecondition, ""},
	{errSuperseded, codes.Aborted, ""},
	{errDraining, codes.Unavailable, ""},
	{context.Canceled, codes.Canceled, ""},
	{context.DeadlineExceeded, codes.DeadlineExceeded, ""},
}

// refusalReasons are the reason labels of the refusals (package refusal)
// the writer makes, which the fetcher reads apart from the table's codes.
var refusalReasons = map[string]string{
	refusal.RecordTooLarge: "record_too_large",
	refusal.BatchTooLarge:  "batch_too_large",
	refusal.TargetRefused:  "target_refused",
	// Not the fetcher's input, but counted with the refusals so one
	// counter shows every partition the writer stops.
	refusal.CheckpointUnverified: "checkpoint_unverified",
}

// reasonOf is the reason label err is counted under when the writer
// refuses the fetcher's input with it; what the table does not know is
// malformed input.
func reasonOf(err error) string {
	if r, ok := refusal.From(err); ok {
		if reason, ok := refusalReasons[r.Reason]; ok {
			return reason
		}
		return "record_too_large"
	}
	for _, e := range statusTable {
		if errors.Is(err, e.err) && e.reason != "" {
			return e.reason
		}
	}
	return "malformed"
}

// reject counts in m err, a refusal of link's input, under its reason; the
// link is unknownLink until the Open's link is known to be the writer's.
func reject(m *metrics.Metrics, link string, err error) error {
	m.Rejected.WithLabelValues(link, reasonOf(err)).Inc()
	return err
}

// toStatus maps an error to the status the fetcher sees. Anything not in
// the table is a target-side failure the fetcher should retry: Unavailable.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	// A record the target can never take stops its partition at the
	// fetcher; the refusal names it (package refusal).
	if r, ok := refusal.From(err); ok {
		return r.Status()
	}
	// A link not running: the fetcher waits and retries, keeping its
	// leases (package linkstate).
	if r, ok := linkstate.From(err); ok {
		return r.Status()
	}
	for _, e := range statusTable {
		if errors.Is(err, e.err) {
			return status.Error(e.code, err.Error())
		}
	}
	return status.Error(codes.Unavailable, err.Error())
}
