package admin

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A request still running at shutdown (here a 30 s CPU profile) is cut off,
// and the stop stays clean: Run returns nil.
func TestRunStopsCleanlyWithARequestRunning(t *testing.T) {
	s, err := Listen("127.0.0.1:0", prometheus.NewRegistry(), Options{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	requested := make(chan struct{})
	go func() {
		defer close(requested)
		resp, err := http.Get("http://" + s.Addr() + "/debug/pprof/profile?seconds=30")
		if err == nil {
			resp.Body.Close()
		}
	}()
	waitProfiling(t)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return within 15s of the stop")
	}
	select {
	case <-requested:
	case <-time.After(15 * time.Second):
		t.Fatal("the profile request was not cut off by the stop")
	}
}

// waitProfiling waits until the profile handler runs its profile: it has
// started the CPU profile and sleeps for its duration. The server runs in
// this process, so its handler's stack is in this process's stacks.
func waitProfiling(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	buf := make([]byte, 1<<20)
	for !bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("net/http/pprof.sleep")) {
		if time.Now().After(deadline) {
			t.Fatal("the CPU profile did not start within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
