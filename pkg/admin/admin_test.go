package admin

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ferry-replicator/ferry/pkg/config"
)

// A request still running at shutdown (here a 30 s CPU profile) is cut off,
// and the stop stays clean: Run returns nil.
func TestRunStopsCleanlyWithARequestRunning(t *testing.T) {
	s, err := Listen(Config{Listen: "127.0.0.1:0", PprofListen: "127.0.0.1:0"}, prometheus.NewRegistry(), Options{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	requested := make(chan struct{})
	go func() {
		defer close(requested)
		resp, err := http.Get("http://" + s.PprofAddr() + "/debug/pprof/profile?seconds=30")
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

// The admin port, which the cluster reaches, serves no profile; pprof is
// served only when admin.pprof_listen asks for it, on its own port.
func TestProfilesOnlyOnTheirOwnPort(t *testing.T) {
	for _, pprofOn := range []bool{false, true} {
		cfg := Config{Listen: "127.0.0.1:0"}
		if pprofOn {
			cfg.PprofListen = "127.0.0.1:0"
		}
		s, err := Listen(cfg, prometheus.NewRegistry(), Options{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		status := func(addr, path string) int {
			t.Helper()
			resp, err := http.Get("http://" + addr + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		if got := status(s.Addr(), "/debug/pprof/goroutine"); got != http.StatusNotFound {
			t.Errorf("pprof %v: admin port answers /debug/pprof/goroutine with %d, want 404", pprofOn, got)
		}
		if got := status(s.Addr(), "/healthz"); got != http.StatusOK {
			t.Errorf("pprof %v: /healthz %d, want 200", pprofOn, got)
		}
		switch {
		case pprofOn && s.PprofAddr() == "":
			t.Error("pprof_listen set, but no profiling address")
		case pprofOn:
			if got := status(s.PprofAddr(), "/debug/pprof/goroutine"); got != http.StatusOK {
				t.Errorf("profiling port answers /debug/pprof/goroutine with %d, want 200", got)
			}
		case s.PprofAddr() != "":
			t.Errorf("profiling off, but it listens on %s", s.PprofAddr())
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run = %v", err)
		}
	}
}

func TestProfilesOnlyOnLoopback(t *testing.T) {
	for addr, ok := range map[string]bool{"": true, "127.0.0.1:7499": true, "localhost:7499": true, "[::1]:7499": true, "0.0.0.0:7499": false, ":7499": false, "10.0.0.5:7499": false} {
		var p config.Problems
		Config{Listen: "0.0.0.0:7401", PprofListen: addr}.Validate(&p)
		if err := p.Err(); (err == nil) != ok {
			t.Errorf("pprof_listen %q: %v, want ok=%v", addr, err, ok)
		} else if err != nil && !strings.Contains(err.Error(), "admin.pprof_listen") {
			t.Errorf("pprof_listen %q: %v, want it named", addr, err)
		}
	}
}

// ferry_ready says at each scrape what /readyz would answer, so that an
// alert sees a process that runs but cannot work (a writer whose target is
// unreachable) without probing it: 0 while Ready reports a reason, 1 once
// it does not.
func TestReadyGauge(t *testing.T) {
	reg := prometheus.NewRegistry()
	var notReady error = errors.New("target cluster unreachable")
	s, err := Listen(Config{Listen: "127.0.0.1:0"}, reg, Options{Ready: func() error { return notReady }}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	want := func(v string) string {
		return "# HELP ferry_ready 1 when the service can do its work (its /readyz answers 200), else 0.\n# TYPE ferry_ready gauge\nferry_ready " + v + "\n"
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want("0")), "ferry_ready"); err != nil {
		t.Fatalf("not ready: %v", err)
	}
	notReady = nil
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want("1")), "ferry_ready"); err != nil {
		t.Fatalf("ready: %v", err)
	}
}
