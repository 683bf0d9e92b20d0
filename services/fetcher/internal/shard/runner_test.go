package shard

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The restart reason is the gRPC code in snake case, through wrapping, and
// other for errors without one.
func TestRestartReason(t *testing.T) {
	for err, want := range map[error]string{
		status.Error(codes.PermissionDenied, "not in allowed_ids"):                           "permission_denied",
		fmt.Errorf("open stream: %w", status.Error(codes.Unavailable, "connection refused")): "unavailable",
		status.Error(codes.FailedPrecondition, "epoch fenced"):                               "failed_precondition",
		status.Error(codes.Unknown, "?"):                                                     "other",
		errors.New("source: broker gone"):                                                    "other",
		fmt.Errorf("no answer within 2m0s: %w", context.DeadlineExceeded):                    "deadline_exceeded",
	} {
		if got := restartReason(err); got != want {
			t.Errorf("restartReason(%v) = %q, want %q", err, got, want)
		}
	}
}
