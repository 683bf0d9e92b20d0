package shard

import (
	"context"
	"strconv"
	"time"

	"github.com/IBM/sarama"

	"github.com/ferry-replicator/ferry/services/fetcher/internal/discovery"
)

// DefaultLagInterval is how often a runner asks the source for its
// partitions' high watermarks when Settings.LagInterval is zero.
const DefaultLagInterval = 5 * time.Second

// The lag of a partition is its source high watermark minus the next offset
// committed in the target. Acknowledgements bring both, but none come while
// the writer is down or stalled, which is when the lag matters most: so the
// runner also asks the source for the high watermarks on its own, every
// LagInterval for its whole life, whether a stream is open or not.

// watchHighWater refreshes the high watermarks until ctx ends.
func (r *Runner) watchHighWater(ctx context.Context) {
	every := r.set.LagInterval
	if every <= 0 {
		every = DefaultLagInterval
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		r.refreshHighWater()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// refreshHighWater asks each partition leader, in one ListOffsets request
// per broker, for the shard's high watermarks. Failures are left to the
// next round.
func (r *Runner) refreshHighWater() {
	reqs := map[*sarama.Broker]*sarama.OffsetRequest{}
	for _, p := range r.parts {
		b, err := r.deps.Client.Leader(p.Topic, p.Partition)
		if err != nil {
			continue
		}
		if reqs[b] == nil {
			reqs[b] = sarama.NewOffsetRequest(r.deps.Client.Config().Version)
		}
		reqs[b].AddBlock(p.Topic, p.Partition, sarama.OffsetNewest, 1)
	}
	for b, req := range reqs {
		resp, err := b.GetAvailableOffsets(req)
		if err != nil {
			// As sarama's own GetOffset does: a broken connection is
			// reopened by the client's next use of the broker.
			_ = b.Close()
			r.log.Debug("source high watermarks", "broker", b.Addr(), "err", err)
			continue
		}
		for _, p := range r.parts {
			if blk := resp.GetBlock(p.Topic, p.Partition); blk != nil && blk.Err == sarama.ErrNoError && len(blk.Offsets) == 1 {
				r.setHighWater(p, blk.Offsets[0])
			}
		}
	}
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
