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

// TestAbort: an aborted start stops the admin goroutine and returns the
// start's error; a stop signal during the start returns nil; a failed
// admin server's error comes first.
func TestAbort(t *testing.T) {
	admin := func(ctx context.Context) error { <-ctx.Done(); return nil }
	refused := errors.New("refused")

	g := Begin(context.Background(), admin)
	if err := g.Abort(refused); !errors.Is(err, refused) {
		t.Fatalf("failed start: Abort = %v, want the start's error", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	g = Begin(ctx, admin)
	cancel()
	if err := g.Abort(context.Canceled); err != nil {
		t.Fatalf("stopped start: Abort = %v, want nil", err)
	}

	bind := errors.New("admin server: address in use")
	g = Begin(context.Background(), func(context.Context) error { return bind })
	<-g.Ctx.Done() // the admin's failure ends the group's context
	if err := g.Abort(context.Canceled); !errors.Is(err, bind) {
		t.Fatalf("failed admin: Abort = %v, want its error", err)
	}
}
