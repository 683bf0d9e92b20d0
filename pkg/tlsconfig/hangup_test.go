package tlsconfig

import (
	"context"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A SIGHUP reloads while ReloadOnHangup runs, and one that arrives after
// its context ended (a service stopping) is ignored instead of killing the
// process: with the handler given back to the default, this test binary
// would die of the second signal.
func TestHangupReloadsThenIsHarmlessAfterStop(t *testing.T) {
	ca := newCA(t, "ca")
	s := newSide(t, valid(t, ca, "spiffe://ferry.local/ferry/fetcher"), []string{"spiffe://ferry.local/ferry/writer"}, ca)
	var logs syncBuffer
	src := s.source(slog.New(slog.NewTextHandler(&logs, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		ReloadOnHangup(ctx, src, slog.New(slog.NewTextHandler(&logs, nil)))
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "SIGHUP: certificates reloaded") {
		if time.Now().After(deadline) {
			t.Fatalf("no reload after SIGHUP:\n%s", logs.String())
		}
		if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-done
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the default action would have ended the process by now
}
