package admin

import (
	"context"
	"io"
	"log/slog"
	"net/http"
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
	started := make(chan struct{})
	go func() {
		close(started)
		resp, err := http.Get("http://" + s.Addr() + "/debug/pprof/profile?seconds=30")
		if err == nil {
			resp.Body.Close()
		}
	}()
	<-started
	time.Sleep(300 * time.Millisecond) // let the profile start
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return within 15s of the stop")
	}
}
