package tlsconfig

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A SIGHUP reloads while ReloadOnHangup runs, and one that arrives after
// its context ended (a service stopping) is ignored instead of killing the
// process: with the default action given back, this test binary would die
// of the second signal, inside kill(2), which delivers a signal a process
// sends itself before it returns.
func TestHangupReloadsThenIsHarmlessAfterStop(t *testing.T) {
	ca := newCA(t, "ca")
	s := newSide(t, valid(t, ca, "spiffe://ferry.local/ferry/fetcher"), []string{"spiffe://ferry.local/ferry/writer"}, ca)
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	src := s.source(log)
	// The test's own channel keeps SIGHUP caught until the reloader has
	// registered, and tells when each signal has been dispatched.
	mine := make(chan os.Signal, 1)
	signal.Notify(mine, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		ReloadOnHangup(ctx, src, log)
	}()
	reloaded := func() bool { return strings.Contains(logs.String(), "SIGHUP: certificates reloaded") }
	// Until the reloader has registered, a signal reaches only mine: send
	// again until one reloads.
	deadline := time.Now().Add(10 * time.Second)
	for !reloaded() {
		if time.Now().After(deadline) {
			t.Fatalf("no reload after SIGHUP:\n%s", logs.String())
		}
		if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		<-mine // dispatched to every registered channel
		for wait := time.Now().Add(time.Second); !reloaded() && time.Now().Before(wait); {
			time.Sleep(10 * time.Millisecond) // poll interval of a deadline loop
		}
	}
	signal.Stop(mine)
	cancel()
	<-done
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
}

// Files rotated before the reloader listens (their SIGHUP ignored while
// the service started) are read as it starts.
func TestHangupReloaderReadsFilesRotatedBeforeIt(t *testing.T) {
	ca := newCA(t, "ca")
	s := newSide(t, valid(t, ca, "spiffe://ferry.local/ferry/fetcher"), []string{"spiffe://ferry.local/ferry/writer"}, ca)
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	src := s.source(log)
	before := src.cur.Load().cert.Leaf.SerialNumber
	s.writeLeaf(valid(t, ca, "spiffe://ferry.local/ferry/fetcher"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		ReloadOnHangup(ctx, src, log)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for src.cur.Load().cert.Leaf.SerialNumber.Cmp(before) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the rotated certificate was not read:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond) // poll interval of a deadline loop
	}
	cancel()
	<-done
}
