package server

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ferry-replicator/ferry/pkg/batch"
	"github.com/ferry-replicator/ferry/pkg/refusal"
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
)

var statusTable = []struct {
	err  error
	code codes.Code
}{
	{batch.ErrChecksum, codes.DataLoss},
	{batch.ErrMalformed, codes.InvalidArgument},
	{batch.ErrTooLarge, codes.InvalidArgument},
	{errBadRequest, codes.InvalidArgument},
	{errStaleEpoch, codes.FailedPrecondition},
	{errNotInShard, codes.FailedPrecondition},
	{errUnknownLink, codes.FailedPrecondition},
	{errTopicRefused, codes.PermissionDenied},
	{errPeerRefused, codes.PermissionDenied},
	{errBeyondSource, codes.InvalidArgument},
	{errTooManyStreams, codes.ResourceExhausted},
	{errOutOfOrder, codes.FailedPrecondition},
	{errSuperseded, codes.Aborted},
	{errDraining, codes.Unavailable},
	{context.Canceled, codes.Canceled},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
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
	for _, e := range statusTable {
		if errors.Is(err, e.err) {
			return status.Error(e.code, err.Error())
		}
	}
	return status.Error(codes.Unavailable, err.Error())
}
