package shard

import (
	"context"
	"maps"
	"strconv"
	"time"

	"github.com/ferry-replicator/ferry/services/fetcher/internal/discovery"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/rawfetch"
)

// DefaultHeartbeatInterval is how often a runner reads its partitions'
// source offsets when Settings.HeartbeatInterval is zero.
const DefaultHeartbeatInterval = time.Second

// The lag of a partition is its source high watermark minus the next offset
// committed in the target. Acknowledgements bring both, but none come while
// the writer is down or stalled, which is when the lag matters most: so the
// runner also asks the source for its offsets on its own, every
// HeartbeatInterval for its whole life, whether a stream is open or not.
// The same read is the heartbeat each open stream sends (heartbeat.go): one
// reader of the source's offsets, so the lag a fetcher shows and what its
// writers know of the source never disagree.

// sourceRead is the last read of each partition's source offsets.
type sourceRead map[discovery.Partition]observed

// observed are a partition's source offsets and when they were read.
type observed struct {
	rawfetch.Offsets
	at time.Time
}

// watchSource reads the source's offsets until ctx ends.
func (r *Runner) watchSource(ctx context.Context) {
	tick := time.NewTicker(r.heartbeatInterval())
	defer tick.Stop()
	for {
		r.readSource(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (r *Runner) heartbeatInterval() time.Duration {
	if r.set.HeartbeatInterval > 0 {
		return r.set.HeartbeatInterval
	}
	return DefaultHeartbeatInterval
}

// readSource takes the shard's source offsets, sets the lag and keeps the
// read for the heartbeats. A partition that could not be read keeps its
// previous read (its observation time says how old it is); failures are
// left to the next round.
//
// Asking costs the leader three ListOffsets requests (log start, high
// watermark, head) per shard every interval: in the catch-up benchmark
// about a fifth of the source broker's CPU per GB (docs/benchmark.md). So
// a partition is asked only when its fetch answers since the last read
// (which carry its high watermark and log start) say something moved, or
// when there were none (fetching paused, stalled or failing). A partition
// whose high watermark and log start did not move holds the same records,
// so its head is the one read before. (Only compaction could remove that
// record without moving either; the head kept is then newer than the
// truth, so the lag in seconds errs high, not low, until the next move.)
func (r *Runner) readSource(ctx context.Context) {
	r.mu.Lock()
	prev, fetched := r.source, r.fetched
	r.fetched = nil
	r.mu.Unlock()
	read := make(sourceRead, len(r.parts))
	var ask []rawfetch.Partition
	for _, p := range r.parts {
		f, seen := fetched[p]
		o, known := prev[p]
		if seen && known && f.highWater == o.HighWatermark && f.logStart == o.LogStart {
			o.at = later(o.at, f.at)
			read[p] = o
			continue
		}
		ask = append(ask, rawfetch.Partition{Topic: p.Topic, Partition: p.Partition})
	}
	if len(ask) > 0 {
		ctx, cancel := context.WithTimeout(ctx, max(r.heartbeatInterval(), 5*time.Second))
		got, err := r.deps.RawFetch.Offsets(ctx, ask)
		cancel()
		if err != nil {
			r.log.Debug("source offsets", "err", err)
		}
		now := time.Now()
		for rp, o := range got {
			p := discovery.Partition{Topic: rp.Topic, Partition: rp.Partition}
			r.setHighWater(p, o.HighWatermark)
			read[p] = observed{Offsets: o, at: now}
		}
	}
	if len(read) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.source == nil {
		r.source = sourceRead{}
	}
	maps.Copy(r.source, read)
	close(r.read)
	r.read = make(chan struct{})
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// fetchedBounds are a partition's high watermark and log start as a fetch
// answer carried them, and when it came.
type fetchedBounds struct {
	highWater, logStart int64
	at                  time.Time
}

// noteFetched keeps a fetch answer's high watermark and log start of p for
// the next read of the source's offsets; a log start the answer did not
// carry (-1) never matches a read, so p is asked then.
func (r *Runner) noteFetched(p discovery.Partition, highWater, logStart int64, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fetched == nil {
		r.fetched = map[discovery.Partition]fetchedBounds{}
	}
	r.fetched[p] = fetchedBounds{highWater: highWater, logStart: logStart, at: at}
}

// lastRead returns a copy of the last read of the source's offsets and a
// channel closed at the next one.
func (r *Runner) lastRead() (sourceRead, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.source), r.read
}

func (r *Runner) setCommitted(p discovery.Partition, next int64) {
	r.deps.Metrics.Committed.WithLabelValues(r.set.Link, p.Topic, strconv.Itoa(int(p.Partition))).Set(float64(next))
	r.updatePartition(p, func(ps *PartitionStatus) { ps.Committed = next })
}

func (r *Runner) setHighWater(p discovery.Partition, hw int64) {
	r.updatePartition(p, func(ps *PartitionStatus) { ps.HighWater = hw })
}

// updatePartition changes p's line of the status and, under the same
// lock, its lag gauge.
func (r *Runner) updatePartition(p discovery.Partition, fn func(*PartitionStatus)) {
	r.update(func(s *Status) {
		ps := s.Partitions[partKey(p)]
		fn(&ps)
		s.Partitions[partKey(p)] = ps
		r.setLagLocked(p, ps)
	})
}

// setLagLocked sets the lag gauge once both ends are known; r.mu is held,
// so the gauge follows the status in order.
func (r *Runner) setLagLocked(p discovery.Partition, ps PartitionStatus) {
	if ps.Committed >= 0 && ps.HighWater >= ps.Committed {
		r.deps.Metrics.LagRecords.WithLabelValues(r.set.Link, p.Topic, strconv.Itoa(int(p.Partition))).Set(float64(ps.HighWater - ps.Committed))
	}
}

// forgetGauges deletes the shard's per-partition gauges when the runner
// stops (drained, given back, lease lost): the shard is another fetcher's,
// or nobody's, now, and a fetcher must not report a lag it no longer
// follows. Counters stay; they only ever count what this process did.
func (r *Runner) forgetGauges() {
	for _, p := range r.parts {
		part := strconv.Itoa(int(p.Partition))
		r.deps.Metrics.LagRecords.DeleteLabelValues(r.set.Link, p.Topic, part)
		r.deps.Metrics.Committed.DeleteLabelValues(r.set.Link, p.Topic, part)
	}
}
