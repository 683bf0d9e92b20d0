package groups

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Poller reads a snapshot every interval, for the whole fetcher process:
// one read of the source's groups however many shards it runs, each shard
// sending the part of the latest snapshot that covers its partitions.
type Poller struct {
	reader   *Reader
	interval time.Duration
	copied   func(Partition) bool
	log      *slog.Logger

	mu     sync.Mutex
	latest Snapshot
	has    bool
	next   chan struct{} // closed and replaced at each snapshot
}

// NewPoller returns a poller of r reading the partitions copied says the
// link copies, every interval.
func NewPoller(r *Reader, interval time.Duration, copied func(Partition) bool, log *slog.Logger) *Poller {
	return &Poller{reader: r, interval: interval, copied: copied, log: log, next: make(chan struct{})}
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
		p.log.Warn("source consumer groups not read", "err", err)
		return
	}
	for name, err := range snap.Errors {
		p.log.Debug("offsets of a source group not read", "group", name, "err", err)
	}
	if n := snap.Skipped["limit"]; n > 0 {
		p.log.Warn("source groups above link.groups.max are not synced", "skipped", n)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latest, p.has = snap, true
	close(p.next)
	p.next = make(chan struct{})
}

// Latest returns the last snapshot (ok false before the first) and a
// channel closed at the next one. The snapshot is shared: read it only.
func (p *Poller) Latest() (snap Snapshot, ok bool, next <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latest, p.has, p.next
}
