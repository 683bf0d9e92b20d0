package app

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/ferry-replicator/ferry/services/fetcher/internal/discovery"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/ownership"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/shard"
)

// supervisor keeps one runner per owned, non-empty shard. It rediscovers the
// source on an interval, and on a shorter, jittered one balances: it takes
// free shards up to its fair share, gives back (drain, then release) what is
// above it, drops runners whose lease was lost, and restarts a shard whose
// partitions changed.
type supervisor struct {
	id       string
	lister   discovery.Lister
	selector discovery.Selector
	shards   int
	discover time.Duration
	balance  time.Duration
	owner    ownership.Owner
	newRun   func(l ownership.Lease, topics []discovery.Topic, parts []discovery.Partition) *shard.Runner
	log      *slog.Logger
	onOwned  func(n int)

	mu      sync.Mutex
	running map[int]*running
	plan    *discovery.Plan
}

type running struct {
	runner *shard.Runner
	lease  ownership.Lease
	stop   context.CancelFunc // asks the runner to drain
	done   chan struct{}
}

func (s *supervisor) run(ctx context.Context) error {
	discoverTick := time.NewTicker(s.discover)
	defer discoverTick.Stop()
	s.rediscover()
	for {
		s.reconcile(ctx)
		// Jitter spreads fetchers' attempts so they do not all race for the
		// same free shards at the same moment.
		wait := s.balance/2 + rand.N(s.balance)
		select {
		case <-ctx.Done():
			s.stopAll()
			return nil
		case <-discoverTick.C:
			s.rediscover()
		case <-time.After(wait):
		}
	}
}

func (s *supervisor) rediscover() {
	plan, err := discovery.Discover(s.lister, s.selector, s.shards)
	if err != nil {
		s.log.Warn("discovery failed; keeping the current shards", "err", err)
		return
	}
	s.mu.Lock()
	s.plan = &plan
	s.mu.Unlock()
}

// preference orders shards differently for each fetcher (rendezvous
// hashing), so fetchers reach for different free shards first and give
// back the ones others prefer.
func (s *supervisor) preference(shardNum int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", s.id, shardNum)
	return h.Sum64()
}

func (s *supervisor) reconcile(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.plan == nil {
		return
	}
	plan := *s.plan
	for n, r := range s.running {
		select {
		case <-r.done: // the lease was lost and the runner stopped
			s.owner.Release(n)
			delete(s.running, n)
			continue
		default:
		}
		if want, ok := plan.Shards[n]; !ok || !slices.Equal(want, r.runner.Partitions()) {
			s.log.Info("shard changed; draining it", "shard", n, "partitions", len(want))
			s.stopLocked(n, r)
		}
	}
	target := s.owner.Target(len(plan.Shards))
	var candidates []int
	for n := range plan.Shards {
		if _, ok := s.running[n]; !ok && s.owner.Wants(n) {
			candidates = append(candidates, n)
		}
	}
	sort.Slice(candidates, func(i, j int) bool { return s.preference(candidates[i]) > s.preference(candidates[j]) })
	for _, n := range candidates {
		if len(s.running) >= target {
			break
		}
		lease, ok, err := s.owner.Acquire(ctx, n)
		if err != nil {
			s.log.Warn("acquire shard", "shard", n, "err", err)
			break // the lease store is in trouble; try again next round
		}
		if ok {
			s.startLocked(lease, plan)
		}
	}
	if surplus := len(s.running) - target; surplus > 0 {
		s.shedLocked(surplus)
	}
	s.onOwned(len(s.running))
}

func (s *supervisor) startLocked(lease ownership.Lease, plan discovery.Plan) {
	n := lease.Shard
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
	s.log.Info("shard acquired", "shard", n, "epoch", lease.Epoch, "partitions", len(parts))
	go func() {
		defer close(r.done)
		r.runner.Run(rctx)
	}()
}

// shedLocked gives back the shards this fetcher prefers least, one round at
// a time: other fetchers pick them up as they balance.
func (s *supervisor) shedLocked(n int) {
	held := make([]int, 0, len(s.running))
	for k := range s.running {
		held = append(held, k)
	}
	sort.Slice(held, func(i, j int) bool { return s.preference(held[i]) < s.preference(held[j]) })
	for _, k := range held[:n] {
		s.log.Info("giving back shard above fair share", "shard", k)
		s.stopLocked(k, s.running[k])
	}
}

// stopLocked drains a runner and releases its lease; s.mu is held, which
// keeps the shard from being restarted before its drain ends.
func (s *supervisor) stopLocked(n int, r *running) {
	r.stop()
	<-r.done
	s.owner.Release(n)
	delete(s.running, n)
}

// stopAll drains every runner at once and releases their leases.
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
		select {
		case <-r.done: // stopped after a lost lease; not owned any more
			continue
		default:
		}
		out = append(out, r.runner.Status())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Shard < out[j].Shard })
	return out
}

func (s *supervisor) isReady() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.plan != nil
}
