package ownership

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-replicator/ferry/loadtest/consulagent"
)

// countingTransport counts, in n, the HTTP requests a lease backend sends.
type countingTransport struct {
	n    *atomic.Int64
	next http.RoundTripper
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

// scaleFetcher is one simulated fetcher: a Consul backend plus the
// supervisor's balancing rule (take free shards in preference order up to
// the target, give back the least preferred above it), without streams.
type scaleFetcher struct {
	id    string
	owner *Consul
	held  map[int]bool
}

func (f *scaleFetcher) pref(shard int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", f.id, shard)
	return h.Sum64()
}

func (f *scaleFetcher) balance(ctx context.Context, shards int) {
	target := f.owner.Target(shards)
	order := make([]int, 0, shards)
	for s := range shards {
		if !f.held[s] {
			order = append(order, s)
		}
	}
	sort.Slice(order, func(i, j int) bool { return f.pref(order[i]) > f.pref(order[j]) })
	for _, s := range order {
		if len(f.held) >= target {
			break
		}
		if _, ok, err := f.owner.Acquire(ctx, s); err == nil && ok {
			f.held[s] = true
		}
	}
	if surplus := len(f.held) - target; surplus > 0 {
		mine := make([]int, 0, len(f.held))
		for s := range f.held {
			mine = append(mine, s)
		}
		sort.Slice(mine, func(i, j int) bool { return f.pref(mine[i]) < f.pref(mine[j]) })
		for _, s := range mine[:surplus] {
			f.owner.Release(s)
			delete(f.held, s)
		}
	}
}

// BenchmarkLeaseScale is the lease scale check: 2,000 shards across 4
// fetchers against one real Consul agent. It reports the time to full
// assignment, Consul requests per second in steady state, and the time for
// the other three to take over when one fetcher leaves cleanly. Run it
// with `make bench-leases`; it is not part of make test.
func BenchmarkLeaseScale(b *testing.B) {
	const shards, fetchers = 2000, 4
	ctx := context.Background()
	agent, err := consulagent.Start(ctx, consulagent.Options{})
	if err != nil {
		b.Fatalf("start Consul: %v", err)
	}
	defer agent.Stop()
	var requests atomic.Int64

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := DefaultConsulConfig()
	cfg.Address = agent.HTTPAddr()
	cfg.KeyPrefix = fmt.Sprintf("scale%d", time.Now().UnixNano())
	var fs []*scaleFetcher
	var wg sync.WaitGroup
	stops := make([]context.CancelFunc, fetchers)
	for i := range fetchers {
		id := fmt.Sprintf("fetcher-%d", i)
		owner, err := NewConsul(cfg, "scale", id, NewMetrics(prometheus.NewRegistry()), log)
		if err != nil {
			b.Fatal(err)
		}
		owner.client.HTTP.Transport = &countingTransport{n: &requests, next: owner.client.HTTP.Transport}
		rctx, stop := context.WithCancel(ctx)
		stops[i] = stop
		wg.Add(1)
		go func() { defer wg.Done(); _ = owner.Run(rctx) }()
		fs = append(fs, &scaleFetcher{id: id, owner: owner, held: map[int]bool{}})
	}
	defer func() {
		for _, s := range stops {
			s()
		}
		wg.Wait()
	}()
	// Balanced rounds start once every fetcher counts all of them live:
	// before that, each takes a share as if it were alone.
	waitMembers(b, fs, fetchers, 2*cfg.SessionTTL)

	rounds := func(members []*scaleFetcher, until func() bool) time.Duration {
		start := time.Now()
		for !until() {
			var rw sync.WaitGroup
			for _, f := range members {
				rw.Add(1)
				go func() { defer rw.Done(); f.balance(ctx, shards) }()
			}
			rw.Wait()
			if time.Since(start) > 5*time.Minute {
				b.Fatal("no full assignment within 5 minutes")
			}
		}
		return time.Since(start)
	}
	full := func(members []*scaleFetcher) func() bool {
		return func() bool {
			n := 0
			for _, f := range members {
				n += len(f.held)
			}
			return n == shards
		}
	}
	b.ResetTimer()
	assign := rounds(fs, full(fs))
	b.StopTimer()

	before := requests.Load()
	steady := 10 * time.Second
	deadline := time.Now().Add(steady)
	for time.Now().Before(deadline) {
		for _, f := range fs {
			f.balance(ctx, shards) // at target: no requests
		}
		time.Sleep(2 * time.Second) // the pace of steady state: a round every 2s while requests are counted
	}
	rate := float64(requests.Load()-before) / steady.Seconds()

	// One fetcher leaves cleanly: the lease Run's end releases its shards.
	stops[0]()
	leaving := fs[0]
	leaving.held = map[int]bool{}
	left := time.Now()
	// The others see the membership change at their next renewal.
	waitMembers(b, fs[1:], fetchers-1, 2*cfg.SessionTTL)
	refresh := time.Since(left)
	rebalance := rounds(fs[1:], full(fs[1:]))

	b.ReportMetric(assign.Seconds(), "s-full-assignment")
	b.ReportMetric(rate, "consul-req/s-steady")
	b.ReportMetric((refresh + rebalance).Seconds(), "s-rebalance-after-leave")
	b.Logf("%d shards, %d fetchers: full assignment %v, steady %.1f Consul requests/s, rebalance after a clean leave %v (+%v membership refresh)",
		shards, fetchers, assign.Round(time.Millisecond), rate, rebalance.Round(time.Millisecond), refresh.Round(time.Millisecond))
}

// waitMembers waits until each of fs lists exactly n live fetchers.
func waitMembers(tb testing.TB, fs []*scaleFetcher, n int, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var counts []int
		settled := true
		for _, f := range fs {
			f.owner.mu.Lock()
			live := len(f.owner.members)
			f.owner.mu.Unlock()
			counts = append(counts, live)
			settled = settled && live == n
		}
		if settled {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("fetchers list %v live fetchers after %v, want %d each", counts, timeout, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
