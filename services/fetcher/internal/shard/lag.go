package shard

import (
	"context"
	"strconv"
	"time"

	"github.com/ferry-replicator/ferry/services/fetcher/internal/discovery"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/sourcewatch"
)

// DefaultHeartbeatInterval is how often a runner without Deps.Source reads
// its partitions' source offsets when Settings.HeartbeatInterval is zero.
const DefaultHeartbeatInterval = time.Second

// The lag of a partition is its source high watermark minus the next offset
// committed in the target. Acknowledgements bring both, but none come while
// the writer is down or stalled, which is when the lag matters most: so the
// runner also follows the source's offsets on its own, for its whole life,
// whether a stream is open or not. The fetcher reads them once per
// HeartbeatInterval for all its shards (package sourcewatch); the same read
// is the heartbeat each open stream sends (heartbeat.go): one reader of
// the source's offsets, so the lag a fetcher shows and what its writers
// know of the source never disagree.

// watchSource follows the shard's partitions until ctx ends, setting their
// high watermarks from each read.
func (r *Runner) watchSource(ctx context.Context) {
	unfollow := r.source.Follow(r.parts)
	defer unfollow()
	for {
		read, next := r.source.Last(r.parts)
		for p, o := range read {
			r.setHighWater(p, o.HighWatermark)
		}
		select {
		case <-ctx.Done():
			return
		case <-next:
		}
	}
}

func (r *Runner) heartbeatInterval() time.Duration {
	if r.set.HeartbeatInterval > 0 {
		return r.set.HeartbeatInterval
	}
	return DefaultHeartbeatInterval
}

// noteFetched keeps a fetch answer's high watermark and log start of p for
// the next read of the source's offsets, which asks p's leader only if
// they moved.
func (r *Runner) noteFetched(p discovery.Partition, highWater, logStart int64, at time.Time) {
	r.source.NoteFetched(p, highWater, logStart, at)
}

// lastRead returns the last read of the shard's source offsets and a
// channel closed at the next one.
func (r *Runner) lastRead() (map[discovery.Partition]sourcewatch.Observed, <-chan struct{}) {
	return r.source.Last(r.parts)
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
