package ownership

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-replicator/ferry/pkg/consulclient"
)

// ConsulConfig configures shard leases in Consul.
type ConsulConfig struct {
	// Consul is how to reach the source region's agent: address, TLS,
	// token file and datacenter (the source region's; empty is the
	// agent's own). An empty address means no Consul: the in-process
	// Local backend, single fetcher only.
	consulclient.Config `yaml:",inline"`
	// KeyPrefix roots Ferry's keys: <prefix>/<link>/shards/<n>.
	KeyPrefix string `yaml:"key_prefix"`
	// SessionTTL is the lease session's TTL (Consul accepts 10s to 24h).
	// A fetcher that cannot renew stops its shards by this long after its
	// last successful renewal.
	SessionTTL time.Duration `yaml:"session_ttl"`
	// LockDelay is how long Consul keeps a dead session's shards from being
	// taken again (0 to 60s), a margin for a paused former owner.
	LockDelay time.Duration `yaml:"lock_delay"`
	// BalanceInterval is how often shares are checked and shards taken or
	// given back; each wait is jittered.
	BalanceInterval time.Duration `yaml:"balance_interval"`
}

// DefaultConsulConfig is used where the file is silent.
func DefaultConsulConfig() ConsulConfig {
	return ConsulConfig{KeyPrefix: "ferry", SessionTTL: 10 * time.Second, LockDelay: 5 * time.Second, BalanceInterval: 2 * time.Second}
}

// Metrics count lease events.
type Metrics struct {
	Acquired prometheus.Counter
	Released prometheus.Counter
	Lost     prometheus.Counter
	Members  prometheus.Gauge
	Takeover prometheus.Histogram
}

// NewMetrics registers lease metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Acquired: prometheus.NewCounter(prometheus.CounterOpts{Name: "ferry_lease_acquisitions_total", Help: "Shard leases this fetcher took."}),
		Released: prometheus.NewCounter(prometheus.CounterOpts{Name: "ferry_lease_releases_total", Help: "Shard leases this fetcher gave back after draining."}),
		Lost:     prometheus.NewCounter(prometheus.CounterOpts{Name: "ferry_lease_losses_total", Help: "Shard leases stopped because the lease session could not be renewed in time."}),
		Members:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "ferry_lease_fetchers_live", Help: "Live fetchers of the link, as this fetcher last saw them."}),
		Takeover: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ferry_lease_takeover_seconds",
			Help:    "How long this fetcher waited for a shard it wanted but another session held (a dead owner's TTL and lock delay, or a graceful handover).",
			Buckets: prometheus.ExponentialBuckets(0.1, 2, 12),
		}),
	}
	reg.MustRegister(m.Acquired, m.Released, m.Lost, m.Members, m.Takeover)
	return m
}

// Consul hands out shard leases as Consul KV locks held by one session per
// fetcher process. The lock's LockIndex, which grows with every
// acquisition, is the epoch. The session is the liveness signal: when it
// cannot be renewed, every lease is declared lost by the fetcher's own
// monotonic deadline (last renewal + TTL), which comes before Consul can
// free the locks (it waits the TTL, in practice up to twice that, plus the
// lock delay).
type Consul struct {
	cfg     ConsulConfig
	link    string
	id      string
	kv      *api.KV
	session *api.Session
	client  *consulclient.Client
	metrics *Metrics
	log     *slog.Logger
	// bg tracks the expiry timer's callback, from arming to its end: Run
	// waits for it, and for the session Destroy it makes.
	bg sync.WaitGroup

	mu       sync.Mutex
	sid      string // current session, "" while none
	deadline time.Time
	expiry   *time.Timer
	held     map[int]chan struct{}
	members  []string // live fetcher ids, sorted
	// waiting records when this fetcher first found a shard it wanted held
	// by someone else, to measure the takeover when it gets it.
	waiting map[int]time.Time
}

// NewConsul builds the backend for one fetcher of a link.
func NewConsul(cfg ConsulConfig, link, fetcherID string, m *Metrics, log *slog.Logger) (*Consul, error) {
	// Bounded calls: a hung request must not outlive a renewal period. The
	// transport is this backend's own, so Run can close its idle
	// connections when it ends.
	client, err := consulclient.New(cfg.Config, cfg.SessionTTL/3)
	if err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	return &Consul{
		cfg: cfg, link: link, id: fetcherID, kv: client.KV(), session: client.Session(), client: client,
		metrics: m, log: log.With("component", "lease"), held: map[int]chan struct{}{}, waiting: map[int]time.Time{},
	}, nil
}

func (c *Consul) shardKey(shard int) string {
	return c.cfg.KeyPrefix + "/" + c.link + "/shards/" + strconv.Itoa(shard)
}

func (c *Consul) memberPrefix() string { return c.cfg.KeyPrefix + "/" + c.link + "/fetchers/" }

// Run keeps the session alive until ctx ends, then gives every lease back
// and destroys the session, so a clean stop frees shards at once. It
// returns once nothing it started runs any more.
func (c *Consul) Run(ctx context.Context) error {
	tick := time.NewTicker(c.cfg.SessionTTL / 3)
	defer tick.Stop()
	for {
		c.maintain(ctx)
		select {
		case <-ctx.Done():
			c.leave()
			c.bg.Wait()
			c.client.Close()
			return nil
		case <-tick.C:
		}
	}
}

// maintain creates the session when there is none, else renews it, and
// refreshes the count of live fetchers.
func (c *Consul) maintain(ctx context.Context) {
	c.mu.Lock()
	sid := c.sid
	c.mu.Unlock()
	start := time.Now()
	if sid == "" {
		id, _, err := c.session.Create(&api.SessionEntry{
			Name:      "ferry-fetcher " + c.id,
			TTL:       c.cfg.SessionTTL.String(),
			LockDelay: c.cfg.LockDelay,
			Behavior:  api.SessionBehaviorRelease,
		}, (&api.WriteOptions{}).WithContext(ctx))
		if err != nil {
			c.log.Warn("create lease session", "err", err)
			return
		}
		c.mu.Lock()
		c.sid = id
		c.extendLocked(start)
		c.mu.Unlock()
		sid = id
		c.log.Info("lease session created", "session", id, "ttl", c.cfg.SessionTTL)
	} else {
		entry, _, err := c.session.Renew(sid, (&api.WriteOptions{}).WithContext(ctx))
		switch {
		case err != nil:
			c.log.Warn("renew lease session", "err", err, "deadline_in", time.Until(c.deadlineNow()).Round(time.Millisecond))
			return
		case entry == nil: // Consul says the session is gone: so are the locks, nothing to destroy
			c.expire(sid, "session no longer exists")
			return
		}
		c.mu.Lock()
		if c.sid == sid {
			c.extendLocked(start)
		}
		c.mu.Unlock()
	}
	pairs, _, err := c.kv.List(c.memberPrefix(), (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		return
	}
	var live []string
	registered := false
	for _, p := range pairs {
		if p.Session != "" {
			live = append(live, strings.TrimPrefix(p.Key, c.memberPrefix()))
		}
		registered = registered || (p.Key == c.memberPrefix()+c.id && p.Session == sid)
	}
	if !registered {
		// Register (again): after a Consul outage the key may still be held
		// by this fetcher's expired session, and is taken only once that
		// session is gone and its lock delay has passed. Until then the
		// others do not count this fetcher, nor leave it a share.
		if _, _, err := c.kv.Acquire(&api.KVPair{Key: c.memberPrefix() + c.id, Value: []byte(c.id), Session: sid}, nil); err != nil {
			c.log.Warn("register as live fetcher", "err", err)
		}
	}
	sort.Strings(live)
	c.mu.Lock()
	c.members = live
	c.mu.Unlock()
	c.metrics.Members.Set(float64(len(live)))
}

func (c *Consul) deadlineNow() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadline
}

// extendLocked moves the deadline to start+TTL, start being taken before
// the successful call (so the deadline never outruns Consul's own timer),
// and arms the expiry timer for it.
func (c *Consul) extendLocked(start time.Time) {
	c.deadline = start.Add(c.cfg.SessionTTL)
	sid := c.sid
	c.disarmLocked()
	c.bg.Add(1)
	c.expiry = time.AfterFunc(time.Until(c.deadline), func() {
		defer c.bg.Done()
		if c.expire(sid, "session not renewed within its TTL") {
			// Best effort: if Consul is reachable, free the old locks now
			// rather than after the TTL (the lock delay still applies).
			_, _ = c.session.Destroy(sid, nil)
		}
	})
}

// disarmLocked stops the expiry timer; a callback already running ends on
// its own (and Run waits for it).
func (c *Consul) disarmLocked() {
	if c.expiry != nil && c.expiry.Stop() {
		c.bg.Done()
	}
	c.expiry = nil
}

// expire declares every lease of session sid lost, and reports whether it
// did (false: that session was already over). The timer fires on the
// fetcher's own clock, even while a Consul call hangs.
func (c *Consul) expire(sid, why string) bool {
	c.mu.Lock()
	if c.sid != sid || sid == "" {
		c.mu.Unlock()
		return false
	}
	c.sid = ""
	lost := c.held
	c.held = map[int]chan struct{}{}
	c.mu.Unlock()
	for _, ch := range lost {
		close(ch)
	}
	c.metrics.Lost.Add(float64(len(lost)))
	c.log.Error("lease session lost: stopped every shard", "why", why, "shards", len(lost))
	return true
}

// Wants is true for every shard: Target bounds how many are held.
func (c *Consul) Wants(int) bool { return true }

// Target is this fetcher's fair share. Every fetcher reads the same sorted
// list of live fetchers, so they agree without talking: each gets
// floor(total / live), and the first total % live of the list one more.
// The shares add up to total exactly, so shards spread evenly and none is
// left without an owner.
func (c *Consul) Target(total int) int {
	c.mu.Lock()
	ids := c.members
	c.mu.Unlock()
	rank := sort.SearchStrings(ids, c.id)
	if rank == len(ids) || ids[rank] != c.id { // not listed yet: count self in
		ids = slices.Insert(slices.Clone(ids), rank, c.id)
	}
	share := total / len(ids)
	if rank < total%len(ids) {
		share++
	}
	return share
}

// Acquire tries to lock the shard's key with this fetcher's session.
func (c *Consul) Acquire(ctx context.Context, shard int) (Lease, bool, error) {
	c.mu.Lock()
	sid := c.sid
	valid := sid != "" && time.Now().Before(c.deadline)
	c.mu.Unlock()
	if !valid {
		return Lease{}, false, nil
	}
	key := c.shardKey(shard)
	ok, _, err := c.kv.Acquire(&api.KVPair{Key: key, Value: []byte(c.id), Session: sid}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return Lease{}, false, fmt.Errorf("acquire %s: %w", key, err)
	}
	if !ok {
		c.mu.Lock()
		if _, seen := c.waiting[shard]; !seen {
			c.waiting[shard] = time.Now()
		}
		c.mu.Unlock()
		return Lease{}, false, nil
	}
	pair, _, err := c.kv.Get(key, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil || pair == nil || pair.Session != sid {
		// Unknown epoch: give it back rather than run without one.
		_, _, _ = c.kv.Release(&api.KVPair{Key: key, Session: sid}, nil)
		return Lease{}, false, err
	}
	lost := make(chan struct{})
	c.mu.Lock()
	if c.sid != sid { // the session expired meanwhile
		c.mu.Unlock()
		return Lease{}, false, nil
	}
	c.held[shard] = lost
	since, waited := c.waiting[shard]
	delete(c.waiting, shard)
	c.mu.Unlock()
	c.metrics.Acquired.Inc()
	if waited {
		c.metrics.Takeover.Observe(time.Since(since).Seconds())
	}
	return Lease{Shard: shard, Epoch: pair.LockIndex, Lost: lost}, true, nil
}

// Release unlocks the shard's key; the caller has drained the shard.
func (c *Consul) Release(shard int) {
	c.mu.Lock()
	_, ok := c.held[shard]
	delete(c.held, shard)
	sid := c.sid
	c.mu.Unlock()
	if !ok || sid == "" {
		return
	}
	if _, _, err := c.kv.Release(&api.KVPair{Key: c.shardKey(shard), Session: sid}, nil); err != nil {
		c.log.Warn("release shard", "shard", shard, "err", err)
		return
	}
	c.metrics.Released.Inc()
}

// leave gives everything back and ends the session.
func (c *Consul) leave() {
	c.mu.Lock()
	shards := make([]int, 0, len(c.held))
	for s := range c.held {
		shards = append(shards, s)
	}
	sid := c.sid
	c.mu.Unlock()
	for _, s := range shards {
		c.Release(s)
	}
	c.mu.Lock()
	c.sid = ""
	c.disarmLocked()
	c.mu.Unlock()
	if sid != "" {
		if _, err := c.session.Destroy(sid, nil); err != nil {
			c.log.Warn("destroy lease session", "err", err)
		}
	}
}
