package server

import (
	"context"
	"fmt"
	"testing"

	"github.com/ferry-replicator/ferry/pkg/batch"
	"github.com/ferry-replicator/ferry/pkg/linkstate"
	"github.com/ferry-replicator/ferry/pkg/refusal"
)

// Every refusal the writer counts takes its rejected_total reason from the
// status table's reason column: an Open's bad request apart from a
// batch's, a refusal by its kind, anything unknown as malformed.
func TestRejectReasons(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: open of shard 1", errBadOpen), "bad_open"},
		{fmt.Errorf("%w: batch sequence 3, want 2", errBadRequest), "malformed"},
		{fmt.Errorf("batch 2: %w", batch.ErrMalformed), "malformed"},
		{fmt.Errorf("x: %w", batch.ErrChecksum), "checksum"},
		{fmt.Errorf("x: %w", batch.ErrTooLarge), "too_large"},
		{fmt.Errorf("x: %w", errStaleEpoch), "stale_epoch"},
		{fmt.Errorf("x: %w", errNotInShard), "not_in_shard"},
		{fmt.Errorf("x: %w", errOutOfOrder), "out_of_order"},
		{fmt.Errorf("x: %w", errBeyondSource), "beyond_source"},
		{fmt.Errorf("x: %w", errUnknownLink), "unknown_link"},
		{fmt.Errorf("x: %w", errPeerRefused), "peer_refused"},
		{fmt.Errorf("x: %w", errTopicRefused), "topic_refused"},
		{fmt.Errorf("x: %w", errTooManyStreams), "too_many_streams"},
		{fmt.Errorf("produce: %w", refusal.Refusal{Reason: refusal.RecordTooLarge, Topic: "t"}), "record_too_large"},
		{refusal.Refusal{Reason: refusal.BatchTooLarge, Topic: "t"}, "batch_too_large"},
		{refusal.Refusal{Reason: refusal.TargetRefused, Topic: "t"}, "target_refused"},
		{fmt.Errorf("%w: %w", errLinkPaused, linkstate.Refusal{Link: "east", State: linkstate.Paused}), "link_paused"},
		{fmt.Errorf("%w: %w", errLinkFailedOver, linkstate.Refusal{Link: "east", State: linkstate.FailedOver}), "link_failed_over"},
		{fmt.Errorf("something else"), "malformed"},
	} {
		if got := reasonOf(tc.err); got != tc.want {
			t.Errorf("reasonOf(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
	// An Open's bad request reads and maps as any bad request.
	err := fmt.Errorf("%w: open of shard 1", errBadOpen)
	if got, want := err.Error(), "bad request: open of shard 1"; got != want {
		t.Errorf("bad open reads %q, want %q", got, want)
	}
	if got := toStatus(err); got.Error() != toStatus(fmt.Errorf("%w: open of shard 1", errBadRequest)).Error() {
		t.Errorf("bad open maps to %v", got)
	}
	// A link not running reaches the fetcher as its refusal.
	if r, ok := linkstate.From(toStatus(fmt.Errorf("%w: %w", errLinkPaused, linkstate.Refusal{Link: "east", State: linkstate.Paused, Why: "x"}))); !ok || r.State != linkstate.Paused || r.Why != "x" {
		t.Errorf("link_paused maps to %v, %v", r, ok)
	}
	if got := toStatus(context.Canceled); got == nil {
		t.Error("canceled maps to nil")
	}
}
