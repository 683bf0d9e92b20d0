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
//
// Only the supervisor's loop starts runners and asks them to drain. Drains
// run concurrently, each in its runner's goroutine, which releases the
// lease and removes the runner when it ends; s.mu guards only the state,
// never a drain or a lease call, so /status and /readyz answer meanwhile.
// A shard stays in running until its runner has ended, so it is never
// started twice.
type supervisor struct {
	id     string
	lister discovery.Lister
	// acls lists the source's topic ACLs (link.sync_acls); nil: none are
	// sent.
	acls     discovery.ACLLister
	selector discovery.Selector
	shards   int
	discover time.Duration
	balance  time.Duration
	owner    ownership.Owner
	newRun   func(l ownership.Lease, topics []discovery.Topic, parts []discovery.Partition) *shard.Runner
	log      *slog.Logger
	onOwned  func(n int)

	wg    sync.WaitGroup // the runners' goroutines
	ended chan struct{}  // a runner ended: balance again now (buffered 1)

	mu      sync.Mutex
	running map[int]*running
	plan    *discovery.Plan
}

type running struct {
	runner   *shard.Runner
	lease    ownership.Lease
	stop     context.CancelFunc // asks the runner to drain
	draining bool
}

func (s *supervisor) run(ctx context.Context) error {
	discoverTick := time.NewTicker(s.discover)
	defer discoverTick.Stop()
	s.ended = make(chan struct{}, 1)
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
		case <-s.ended:
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
	prev := s.plan
	s.mu.Unlock()
	if s.acls != nil {
		if err := discovery.AddACLs(s.acls, &plan); err != nil {
			// Keeping what was read before keeps the shards open: a
			// failed read is no change to apply.
			s.log.Warn("listing source topic ACLs failed; keeping those read before (link.sync_acls needs Describe on the source's Cluster)", "err", err)
			keepACLs(&plan, prev)
		}
	}
	s.mu.Lock()
	s.plan = &plan
	s.mu.Unlock()
}

// keepACLs gives plan's topics the ACLs prev had for them.
func keepACLs(plan, prev *discovery.Plan) {
	if prev == nil {
		return
	}
	for name, t := range plan.Topics {
		t.ACLs = prev.Topics[name].ACLs
		plan.Topics[name] = t
	}
}

// settingsChanged says whether a topic of the running shard has other
// configs or ACLs in the plan than its opens carry.
func settingsChanged(plan discovery.Plan, running []discovery.Topic) bool {
	for _, t := range running {
		if now, ok := plan.Topics[t.Name]; ok && !now.SameSettings(t) {
			return true
		}
	}
	return false
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
	if s.plan == nil {
		s.mu.Unlock()
		return
	}
	plan := *s.plan
	for n, r := range s.running {
		if want, ok := plan.Shards[n]; !r.draining && (!ok || !slices.Equal(want, r.runner.Partitions())) {
			s.log.Info("shard changed; draining it", "shard", n, "partitions", len(want))
			s.drainLocked(r)
		} else if !r.draining && settingsChanged(plan, r.runner.Topics()) {
			// The writer takes a topic's configs and ACLs from the open
			// (its links[].config_sync applies them): reopening is how a
			// change reaches it, at the cost of one drain, as rare as
			// the change.
			s.log.Info("source topic configs or ACLs changed; reopening the shard so its writer applies them", "shard", n)
			s.drainLocked(r)
		}
	}
	// Draining shards count as held until released, so this fetcher never
	// holds more than its share plus what it is giving back.
	target := s.owner.Target(len(plan.Shards))
	held := len(s.running)
	var candidates []int
	for n := range plan.Shards {
		if _, ok := s.running[n]; !ok && s.owner.Wants(n) {
			candidates = append(candidates, n)
		}
	}
	s.mu.Unlock()

	// Only this loop adds runners, so the candidates stay free of them
	// while the lease store is asked, without the lock.
	sort.Slice(candidates, func(i, j int) bool { return s.preference(candidates[i]) > s.preference(candidates[j]) })
	for _, n := range candidates {
		if held >= target {
			break
		}
		lease, ok, err := s.owner.Acquire(ctx, n)
		if err != nil {
			s.log.Warn("acquire shard", "shard", n, "err", err)
			break // the lease store is in trouble; try again next round
		}
		if ok {
			s.start(lease, plan)
			held++
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	active := 0
	for _, r := range s.running {
		if !r.draining {
			active++
		}
	}
	if surplus := active - target; surplus > 0 {
		s.shedLocked(surplus)
	}
}

func (s *supervisor) start(lease ownership.Lease, plan discovery.Plan) {
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
	r := &running{runner: s.newRun(lease, topics, parts), lease: lease, stop: stop}
	s.mu.Lock()
	s.running[n] = r
	s.onOwned(len(s.running))
	s.mu.Unlock()
	s.log.Info("shard acquired", "shard", n, "epoch", lease.Epoch, "partitions", len(parts))
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		r.runner.Run(rctx) // until drained, or the lease is lost
		stop()
		s.owner.Release(n) // a lost lease is no longer held: a no-op
		s.mu.Lock()
		delete(s.running, n)
		s.onOwned(len(s.running))
		s.mu.Unlock()
		select {
		case s.ended <- struct{}{}:
		default:
		}
	}()
}

// shedLocked gives back the shards this fetcher prefers least, one round at
// a time: other fetchers pick them up as they balance.
func (s *supervisor) shedLocked(n int) {
	held := make([]int, 0, len(s.running))
	for k, r := range s.running {
		if !r.draining {
			held = append(held, k)
		}
	}
	sort.Slice(held, func(i, j int) bool { return s.preference(held[i]) < s.preference(held[j]) })
	for _, k := range held[:n] {
		s.log.Info("giving back shard above fair share", "shard", k)
		s.drainLocked(s.running[k])
	}
}

// drainLocked asks a runner to drain and returns at once; the runner's
// goroutine releases the lease when the drain ends.
func (s *supervisor) drainLocked(r *running) {
	r.draining = true
	r.stop()
}

// stopAll drains every runner at once and waits for them, which releases
// their leases.
func (s *supervisor) stopAll() {
	s.mu.Lock()
	for _, r := range s.running {
		s.drainLocked(r)
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *supervisor) status() []shard.Status {
	type entry struct {
		runner   *shard.Runner
		draining bool
	}
	s.mu.Lock()
	es := make([]entry, 0, len(s.running))
	for _, r := range s.running {
		es = append(es, entry{r.runner, r.draining})
	}
	s.mu.Unlock()
	out := make([]shard.Status, 0, len(es))
	for _, e := range es {
		st := e.runner.Status()
		st.Draining = e.draining
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Shard < out[j].Shard })
	return out
}

func (s *supervisor) isReady() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.plan != nil
}
