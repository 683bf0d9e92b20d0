package startup

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

var errDown = errors.New("connection refused")

func retryDown(err error) bool { return errors.Is(err, errDown) }

func newWaiter() *Waiter {
	w := New(slog.New(slog.NewTextHandler(io.Discard, nil)))
	w.min = time.Millisecond
	return w
}

// TestDoWaitsForTheCluster: a step that fails with a retried error is
// tried again until it succeeds, and Err names it, with its last error,
// while it waits; Done ends the start.
func TestDoWaitsForTheCluster(t *testing.T) {
	w := newWaiter()
	if err := w.Err(); err == nil || err.Error() != "starting" {
		t.Fatalf("before any step: Err %v", err)
	}
	tries := 0
	var during error
	err := w.Do(context.Background(), "target cluster", retryDown, func() error {
		if tries++; tries < 4 {
			return errDown
		}
		during = w.Err()
		return nil
	})
	if err != nil || tries != 4 {
		t.Fatalf("Do = %v after %d tries, want nil after 4", err, tries)
	}
	if during == nil || !strings.Contains(during.Error(), "waiting for the target cluster") || !errors.Is(during, errDown) {
		t.Fatalf("Err while waiting = %v, want the step and its last error", during)
	}
	if err := w.Err(); err == nil || strings.Contains(err.Error(), "target cluster") {
		t.Fatalf("between steps: Err %v, want a plain starting", err)
	}
	w.Done()
	if err := w.Err(); err != nil {
		t.Fatalf("after Done: Err %v", err)
	}
}

// TestDoStopsAtARefusal: an error retry refuses ends Do at once, as it is.
func TestDoStopsAtARefusal(t *testing.T) {
	w := newWaiter()
	refused := errors.New("SASL authentication failed")
	tries := 0
	err := w.Do(context.Background(), "source cluster", retryDown, func() error { tries++; return refused })
	if !errors.Is(err, refused) || tries != 1 {
		t.Fatalf("Do = %v after %d tries, want the refusal after 1", err, tries)
	}
}

// TestDoEndsWithItsContext: a stop while waiting ends Do with ctx's error.
func TestDoEndsWithItsContext(t *testing.T) {
	w := newWaiter()
	ctx, cancel := context.WithCancel(context.Background())
	tries := 0
	err := w.Do(ctx, "source cluster", retryDown, func() error {
		if tries++; tries == 3 {
			cancel()
		}
		return errDown
	})
	if !errors.Is(err, context.Canceled) || tries != 3 {
		t.Fatalf("Do = %v after %d tries, want context.Canceled after 3", err, tries)
	}
}
