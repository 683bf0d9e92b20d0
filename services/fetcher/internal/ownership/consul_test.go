package ownership

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/ferry-replicator/ferry/loadtest/consulagent"
)

func TestTargetSharesAddUpToTotal(t *testing.T) {
	for _, tc := range []struct {
		members []string
		total   int
	}{
		{[]string{"a", "b", "c"}, 10},
		{[]string{"a", "b", "c", "d"}, 10},
		{[]string{"a"}, 7},
		{[]string{"a", "b"}, 1},
		{[]string{"a", "b", "c"}, 2000},
	} {
		sum := 0
		for _, id := range tc.members {
			c := &Consul{id: id, members: tc.members}
			share := c.Target(tc.total)
			if low := tc.total / len(tc.members); share < low || share > low+1 {
				t.Errorf("%v total %d: %s gets %d, want %d or %d", tc.members, tc.total, id, share, low, low+1)
			}
			sum += share
		}
		if sum != tc.total {
			t.Errorf("%v total %d: shares add up to %d", tc.members, tc.total, sum)
		}
	}
	// A fetcher not yet in the list counts itself in.
	c := &Consul{id: "b", members: []string{"a", "c"}}
	if got := c.Target(9); got != 3 {
		t.Errorf("unlisted fetcher of 3 with 9 shards gets %d, want 3", got)
	}
}

// A session that cannot be renewed loses its leases on the fetcher's own
// clock, and the backend then tries to destroy it: against a hung Consul
// that call hangs too. Run must wait for it, so nothing the backend
// started outlives Run.
func TestRunWaitsForTheLostSessionsDestroy(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Consul agent and waits out a session TTL")
	}
	ctx := context.Background()
	agent, err := consulagent.Start(ctx, consulagent.Options{})
	if err != nil {
		t.Fatalf("start Consul (make consul builds it): %v", err)
	}
	t.Cleanup(func() {
		_ = agent.Resume()
		_ = agent.Stop()
	})
	// What runs now (the agent's process watch, its client's connections)
	// is not the backend's.
	before := goleak.IgnoreCurrent()

	cfg := DefaultConsulConfig()
	cfg.Address = agent.HTTPAddr()
	cfg.LockDelay = 0
	c, err := NewConsul(cfg, "l", "f", NewMetrics(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	var runErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		runErr = c.Run(rctx)
	}()
	t.Cleanup(func() { cancel(); <-done })

	var lease Lease
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, ok, err := c.Acquire(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			lease = l
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no lease within 10s")
		}
		time.Sleep(20 * time.Millisecond) // the session is being created
	}

	if err := agent.Pause(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.Lost:
	case <-time.After(2 * cfg.SessionTTL):
		t.Fatalf("lease not lost within %v of Consul hanging", 2*cfg.SessionTTL)
	}
	cancel()
	select {
	case <-done:
		if runErr != nil {
			t.Fatal(runErr)
		}
	case <-time.After(cfg.SessionTTL):
		t.Fatal("Run did not return")
	}
	goleak.VerifyNone(t, before)
}
