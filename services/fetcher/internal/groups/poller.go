package groups

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the poller's instruments.
type Metrics struct {
	// Reads counts reads by result: ok, or failed (nothing listed: the
	// previous snapshot stays).
	Reads *prometheus.CounterVec
	// Unread is how many selected groups the last read could not get the
	// offsets of: they are not synced until a read gets them.
	Unread prometheus.Gauge
}

// NewMetrics registers the poller's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_fetcher_group_reads_total",
			Help: "Reads of the source's consumer groups (link.groups), by result: ok, or failed (no group listed; the previous read's offsets are sent on).",
		}, []string{"result"}),
		Unread: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ferry_fetcher_groups_unread",
			Help: "Source consumer groups selected for sync whose committed offsets the last read could not get: not synced until a read gets them.",
		}),
	}
	reg.MustRegister(m.Reads, m.Unread)
	return m
}

// Poller reads a snapshot every interval, for the whole fetcher process:
// one read of the source's groups however many shards it runs, each shard
// sending the part of the latest snapshot that covers its partitions.
type Poller struct {
	reader   *Reader
	interval time.Duration
	copied   func(Partition) bool
	log      *slog.Logger
	m        *Metrics
	unread   map[string]string // group: why its offsets were not read; poll's own

	mu     sync.Mutex
	latest Snapshot
	has    bool
	next   chan struct{} // closed and replaced at each snapshot
}

// NewPoller returns a poller of r reading the partitions copied says the
// link copies, every interval.
func NewPoller(r *Reader, interval time.Duration, copied func(Partition) bool, log *slog.Logger, m *Metrics) *Poller {
	return &Poller{reader: r, interval: interval, copied: copied, log: log, m: m, unread: map[string]string{}, next: make(chan struct{})}
}

// Run reads until ctx ends. A failed read keeps the previous snapshot and
// is logged; the next interval tries again.
func (p *Poller) Run(ctx context.Context) {
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	for {
		p.poll()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (p *Poller) poll() {
	snap, err := p.reader.Read(p.copied)
	if err != nil {
		p.m.Reads.WithLabelValues("failed").Inc()
		p.log.Warn("source consumer groups not read", "err", err)
		return
	}
	p.m.Reads.WithLabelValues("ok").Inc()
	p.noteUnread(snap.Errors)
	if n := snap.Skipped["limit"]; n > 0 {
		p.log.Warn("source groups above link.groups.max are not synced", "skipped", n)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latest, p.has = snap, true
	close(p.next)
	p.next = make(chan struct{})
}

// noteUnread logs a group whose offsets could not be read when that
// starts (or its reason changes) and when it ends, not at every read: a
// group that stays unreadable is one line, and the gauge holds the count.
func (p *Poller) noteUnread(errs map[string]error) {
	p.m.Unread.Set(float64(len(errs)))
	for name, err := range errs {
		if p.unread[name] != err.Error() {
			p.log.Warn("offsets of a source group not read: not synced until they are", "group", name, "err", err)
			p.unread[name] = err.Error()
		}
	}
	for name := range p.unread {
		if _, ok := errs[name]; !ok {
			p.log.Info("offsets of a source group read again, or the group is gone", "group", name)
			delete(p.unread, name)
		}
	}
}

// Latest returns the last snapshot (ok false before the first) and a
// channel closed at the next one. The snapshot is shared: read it only.
func (p *Poller) Latest() (snap Snapshot, ok bool, next <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latest, p.has, p.next
}
