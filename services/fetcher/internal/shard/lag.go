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

// readSource asks the partition leaders (three ListOffsets requests per
// leader: log start, high watermark, head) for the shard's offsets, sets
// the lag and keeps the read for the heartbeats. A partition that could
// not be read keeps its previous read (its observation time says how old
// it is); failures are left to the next round.
func (r *Runner) readSource(ctx context.Context) {
	parts := make([]rawfetch.Partition, len(r.parts))
	for i, p := range r.parts {
		parts[i] = rawfetch.Partition{Topic: p.Topic, Partition: p.Partition}
	}
	ctx, cancel := context.WithTimeout(ctx, max(r.heartbeatInterval(), 5*time.Second))
	defer cancel()
	got, err := r.deps.RawFetch.Offsets(ctx, parts)
	if err != nil {
		r.log.Debug("source offsets", "err", err)
	}
	if len(got) == 0 {
		return
	}
	now := time.Now()
	for rp, o := range got {
		r.setHighWater(discovery.Partition{Topic: rp.Topic, Partition: rp.Partition}, o.HighWatermark)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.source == nil {
		r.source = sourceRead{}
	}
	for rp, o := range got {
		r.source[discovery.Partition{Topic: rp.Topic, Partition: rp.Partition}] = observed{Offsets: o, at: now}
	}
	close(r.read)
	r.read = make(chan struct{})
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
