package app

import (
	"context"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/ferry-replicator/ferry/services/fetcher/internal/discovery"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/ownership"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/shard"
)

// supervisor keeps one runner per owned, non-empty shard, in step with the
// source's topics: it rediscovers on an interval, starts runners for new
// shards, and restarts (drain, then reopen) a shard whose partitions changed.
type supervisor struct {
	lister   discovery.Lister
	selector discovery.Selector
	shards   int
	interval time.Duration
	owner    ownership.Owner
	newRun   func(l ownership.Lease, topics []discovery.Topic, parts []discovery.Partition) *shard.Runner
	log      *slog.Logger
	onOwned  func(n int)

	mu      sync.Mutex
	running map[int]*running
	ready   bool
}

type running struct {
	runner *shard.Runner
	lease  ownership.Lease
	stop   context.CancelFunc // asks the runner to drain
	done   chan struct{}
}

func (s *supervisor) run(ctx context.Context) error {
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	for {
		plan, err := discovery.Discover(s.lister, s.selector, s.shards)
		if err != nil {
			s.log.Warn("discovery failed; keeping the current shards", "err", err)
		} else {
			s.reconcile(ctx, plan)
		}
		select {
		case <-ctx.Done():
			s.stopAll()
			return nil
		case <-tick.C:
		}
	}
}

func (s *supervisor) reconcile(ctx context.Context, plan discovery.Plan) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ready = true
	// Stop runners whose shard vanished or changed; changed ones restart below.
	for n, r := range s.running {
		if want, ok := plan.Shards[n]; !ok || !slices.Equal(want, r.runner.Partitions()) {
			s.log.Info("shard changed; draining it", "shard", n, "partitions", len(want))
			s.stopLocked(n, r)
		}
	}
	nums := make([]int, 0, len(plan.Shards))
	for n := range plan.Shards {
		nums = append(nums, n)
	}
	sort.Ints(nums)
	for _, n := range nums {
		if _, ok := s.running[n]; ok || !s.owner.Wants(n) {
			continue
		}
		lease, ok, err := s.owner.Acquire(ctx, n)
		if err != nil {
			s.log.Warn("acquire shard", "shard", n, "err", err)
			continue
		}
		if !ok {
			continue
		}
		parts := plan.Shards[n]
		var topics []discovery.Topic
		seen := map[string]bool{}
		for _, p := range parts {
			if !seen[p.Topic] {
				seen[p.Topic] = true
				topics = append(topics, plan.Topics[p.Topic])
			}
		}
		rctx, stop := context.WithCancel(context.Background())
		r := &running{runner: s.newRun(lease, topics, parts), lease: lease, stop: stop, done: make(chan struct{})}
		s.running[n] = r
		go func() {
			defer close(r.done)
			r.runner.Run(rctx)
		}()
	}
	s.onOwned(len(s.running))
}

// stopLocked drains a runner and releases its lease; s.mu is held, which
// keeps the shard from being restarted before its drain ends.
func (s *supervisor) stopLocked(n int, r *running) {
	r.stop()
	<-r.done
	s.owner.Release(n)
	delete(s.running, n)
}

// stopAll drains every runner at once.
func (s *supervisor) stopAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.running {
		r.stop()
	}
	for n, r := range s.running {
		<-r.done
		s.owner.Release(n)
		delete(s.running, n)
	}
	s.onOwned(0)
}

func (s *supervisor) status() []shard.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]shard.Status, 0, len(s.running))
	for _, r := range s.running {
		out = append(out, r.runner.Status())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Shard < out[j].Shard })
	return out
}

func (s *supervisor) isReady() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}
