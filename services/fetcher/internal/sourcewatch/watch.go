// Package sourcewatch reads what the source partitions of a fetcher's
// shards hold (log start, high watermark, and the offset and timestamp of
// the newest record), once per interval for the whole process: the lag
// gauges and the heartbeats every stream sends come from this one read.
//
// Each read costs every leader three ListOffsets requests however many
// partitions and shards it covers, so a fetcher of many shards loads the
// source no more than a fetcher of one. A partition whose fetch answers
// since the last read show that nothing moved is not asked at all.
package sourcewatch

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/ferry-replicator/ferry/services/fetcher/internal/discovery"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/rawfetch"
)

// Reader asks the source's leaders (rawfetch.Fetcher): Bounds for the log
// start and high watermark, Offsets for those and the head.
type Reader interface {
	Bounds(ctx context.Context, parts []rawfetch.Partition) (map[rawfetch.Partition]rawfetch.Offsets, error)
	Offsets(ctx context.Context, parts []rawfetch.Partition) (map[rawfetch.Partition]rawfetch.Offsets, error)
	WithHeads(ctx context.Context, bounds map[rawfetch.Partition]rawfetch.Offsets)
}

// Observed are a partition's source offsets and when they were last known
// to hold: read from its leader, or confirmed by a fetch answer since.
type Observed struct {
	rawfetch.Offsets
	At time.Time
}

// Watcher reads the followed partitions every interval until its Run ends.
type Watcher struct {
	reader   Reader
	interval time.Duration
	log      *slog.Logger
	// kick asks Run for a read before the next tick: a partition newly
	// followed is read at once, so a shard's first heartbeat does not wait
	// an interval. One pending kick is enough for any number of them.
	kick chan struct{}

	mu sync.Mutex
	// followers counts the followers of each partition: during a shard's
	// handover two runners may follow one partition.
	followers map[discovery.Partition]int
	// fetched are the bounds fetch answers carried since the last read,
	// which the next read takes instead of asking where nothing moved.
	fetched map[discovery.Partition]fetched
	last    map[discovery.Partition]Observed
	next    chan struct{} // closed and replaced at each read
}

// fetched are a partition's high watermark and log start as a fetch
// answer carried them, and when it came.
type fetched struct {
	highWater, logStart int64
	at                  time.Time
}

// New returns a watcher asking r every interval.
func New(r Reader, interval time.Duration, log *slog.Logger) *Watcher {
	return &Watcher{
		reader: r, interval: interval, log: log, kick: make(chan struct{}, 1),
		followers: map[discovery.Partition]int{}, fetched: map[discovery.Partition]fetched{},
		last: map[discovery.Partition]Observed{}, next: make(chan struct{}),
	}
}

// Run reads until ctx ends: at once, then every interval.
func (w *Watcher) Run(ctx context.Context) {
	tick := time.NewTicker(w.interval)
	defer tick.Stop()
	for {
		w.read(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-w.kick:
		}
	}
}

// Follow adds parts to what each read covers, until the returned function
// is called (once).
func (w *Watcher) Follow(parts []discovery.Partition) (unfollow func()) {
	w.mu.Lock()
	added := false
	for _, p := range parts {
		w.followers[p]++
		added = added || w.followers[p] == 1
	}
	w.mu.Unlock()
	if added {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	var once sync.Once
	return func() { once.Do(func() { w.unfollow(parts) }) }
}

func (w *Watcher) unfollow(parts []discovery.Partition) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range parts {
		if w.followers[p]--; w.followers[p] <= 0 {
			// Nobody shows it any more: a later follower reads it anew
			// rather than an old observation.
			delete(w.followers, p)
			delete(w.fetched, p)
			delete(w.last, p)
		}
	}
}

// NoteFetched keeps a fetch answer's high watermark and log start of p,
// which came at at, for the next read; a log start the answer did not
// carry (-1) never matches a read, so p is asked then.
func (w *Watcher) NoteFetched(p discovery.Partition, highWater, logStart int64, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.followers[p] > 0 {
		w.fetched[p] = fetched{highWater: highWater, logStart: logStart, at: at}
	}
}

// Last returns the last read of those of parts read so far, and a channel
// closed at the next read.
func (w *Watcher) Last(parts []discovery.Partition) (map[discovery.Partition]Observed, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[discovery.Partition]Observed, len(parts))
	for _, p := range parts {
		if o, ok := w.last[p]; ok {
			out[p] = o
		}
	}
	return out, w.next
}

// read takes the followed partitions' offsets. A partition whose fetch
// answers since the last read carried the high watermark and log start
// read before holds the same records, so its head is the one read before
// and it is not asked (only compaction could remove that record without
// moving either; the head kept is then newer than the truth, so the lag
// in seconds errs high, not low, until the next move). The others are
// asked their bounds, and only those whose bounds moved (or were never
// read) their head too: reading the head costs the leader a record batch
// read from its log and decompressed, the bounds nothing but memory, and
// while the shard is still fetching (a catch-up held back by the writer)
// they rarely move. A partition that could not be read keeps its previous
// read, whose time says how old it is; failures are left to the next
// round.
func (w *Watcher) read(ctx context.Context) {
	w.mu.Lock()
	var ask []rawfetch.Partition
	before := map[discovery.Partition]Observed{}
	still := map[discovery.Partition]Observed{}
	for p := range w.followers {
		f, seen := w.fetched[p]
		o, known := w.last[p]
		switch {
		case seen && known && f.highWater == o.HighWatermark && f.logStart == o.LogStart:
			o.At = later(o.At, f.at)
			still[p] = o
			continue
		case known:
			before[p] = o
		}
		ask = append(ask, rawfetch.Partition(p))
	}
	clear(w.fetched)
	w.mu.Unlock()

	got := w.ask(ctx, ask, before)
	now := time.Now()

	w.mu.Lock()
	defer w.mu.Unlock()
	for p, o := range still {
		if w.followers[p] > 0 {
			w.last[p] = o
		}
	}
	for rp, o := range got {
		if p := discovery.Partition(rp); w.followers[p] > 0 {
			w.last[p] = Observed{Offsets: o, At: now}
		}
	}
	close(w.next)
	w.next = make(chan struct{})
}

// ask reads the offsets of parts: the bounds of those read before, keeping
// the head read then where they did not move, and everything of the rest.
func (w *Watcher) ask(ctx context.Context, parts []rawfetch.Partition, before map[discovery.Partition]Observed) map[rawfetch.Partition]rawfetch.Offsets {
	if len(parts) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, max(w.interval, 5*time.Second))
	defer cancel()
	var known, unknown []rawfetch.Partition
	for _, p := range parts {
		if _, ok := before[discovery.Partition(p)]; ok {
			known = append(known, p)
		} else {
			unknown = append(unknown, p)
		}
	}
	got := map[rawfetch.Partition]rawfetch.Offsets{}
	if len(known) > 0 {
		bounds, err := w.reader.Bounds(ctx, known)
		if err != nil {
			w.log.Debug("source offsets", "err", err)
		}
		moved := map[rawfetch.Partition]rawfetch.Offsets{}
		for p, b := range bounds {
			o := before[discovery.Partition(p)]
			if b.HighWatermark == o.HighWatermark && b.LogStart == o.LogStart {
				got[p] = o.Offsets
			} else {
				moved[p] = b
			}
		}
		// The bounds just read, with the head read after them.
		w.reader.WithHeads(ctx, moved)
		maps.Copy(got, moved)
	}
	if len(unknown) > 0 {
		offs, err := w.reader.Offsets(ctx, unknown)
		if err != nil {
			w.log.Debug("source offsets", "err", err)
		}
		maps.Copy(got, offs)
	}
	return got
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
