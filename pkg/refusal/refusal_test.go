package refusal

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestStatusRoundTrip(t *testing.T) {
	for _, r := range []Refusal{
		{Reason: RecordTooLarge, Topic: "orders", Partition: 3, Offset: 1234, Size: 2 << 20, Limit: 1 << 20, Setting: "producer.max_message_bytes"},
		{Reason: TargetRefused, Topic: "orders", Partition: 1, Offset: 7, Cause: "INVALID_RECORD: ..."},
		{Reason: BatchTooLarge, Topic: "orders", Partition: 2, Offset: 100, Size: 7_000_000, Limit: 4 << 20, Setting: "max_batch_bytes",
			Cause: "1000000 records, 729 bytes zstd, at least 7000000 bytes decompressed"},
	} {
		roundTrip(t, r)
	}
}

func roundTrip(t *testing.T, r Refusal) {
	t.Helper()
	err := r.Status()
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("code %v", status.Code(err))
	}
	got, ok := From(err)
	if !ok || got != r {
		t.Fatalf("From(Status()) = %+v, %v; want %+v", got, ok, r)
	}
	if got, ok := From(fmt.Errorf("session: %w", r)); !ok || got != r {
		t.Fatalf("From(wrapped) = %+v, %v", got, ok)
	}
	for _, other := range []error{errors.New("x"), status.Error(codes.FailedPrecondition, "stale epoch"), status.Error(codes.Unavailable, r.Error())} {
		if _, ok := From(other); ok {
			t.Errorf("From(%v) found a refusal", other)
		}
	}
}
