package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"

	"github.com/ferry-replicator/ferry/pkg/groupcommit"
	"github.com/ferry-replicator/ferry/pkg/groupsync"
	"github.com/ferry-replicator/ferry/services/writer/internal/groupsyncer"
	"github.com/ferry-replicator/ferry/services/writer/internal/heartbeat"
	"github.com/ferry-replicator/ferry/services/writer/internal/metrics"
)

// Group sync, the stream's part (the fetchers read the source's groups,
// link.groups; package groupsyncer commits them on the target): a
// stream's GroupOffsets is checked whole, each offset is translated at
// once with the shard's in-memory index (package translation), and the
// result is offered to the writer's one group syncer.

// errBadGroupOffsets is a GroupOffsets message the writer refuses: for a
// partition the stream's Open does not list, a negative offset, a group
// id groupsync.CheckName refuses, a group or partition listed twice, or
// more than groupsync.MaxEntries offsets.
var errBadGroupOffsets = errors.New("bad group offsets")

// groupOffsets checks m whole against the stream's Open, translates it
// and hands it to the syncer; nothing of a refused message is kept.
func (ss *session) groupOffsets(m *ferryv1.GroupOffsets) error {
	if cur := ss.s.currentEpoch(ss.link.Name, ss.shard); m.GetEpoch() != ss.epoch || m.GetEpoch() < cur {
		ss.s.metrics.StaleEpochs.WithLabelValues(ss.link.Name).Inc()
		return fmt.Errorf("%w: group offsets epoch %d on a stream of epoch %d, shard at %d", errStaleEpoch, m.GetEpoch(), ss.epoch, cur)
	}
	n := 0
	for _, g := range m.GetGroups() {
		n += len(g.GetPartitions())
	}
	if n > groupsync.MaxEntries {
		return fmt.Errorf("%w: %d offsets in one message, above %d", errBadGroupOffsets, n, groupsync.MaxEntries)
	}
	seenGroup := make(map[string]bool, len(m.GetGroups()))
	for i, g := range m.GetGroups() {
		field := fmt.Sprintf("group_offsets.groups[%d]", i)
		if err := groupsync.CheckName(g.GetGroup()); err != nil {
			return fmt.Errorf("%w: %s.group: %v", errBadGroupOffsets, field, err)
		}
		if seenGroup[g.GetGroup()] {
			return fmt.Errorf("%w: %s: group %q listed twice", errBadGroupOffsets, field, g.GetGroup())
		}
		seenGroup[g.GetGroup()] = true
		seen := make(map[topicPartition]bool, len(g.GetPartitions()))
		for j, p := range g.GetPartitions() {
			tp := topicPartition{Topic: p.GetTopic(), Partition: p.GetPartition()}
			pf := fmt.Sprintf("%s.partitions[%d]", field, j)
			if !ss.opened[tp] {
				return fmt.Errorf("%w: %s: %s/%d is not in shard %d's open", errBadGroupOffsets, pf, Clip(tp.Topic), tp.Partition, ss.shard)
			}
			if seen[tp] {
				return fmt.Errorf("%w: %s: %s/%d listed twice", errBadGroupOffsets, pf, tp.Topic, tp.Partition)
			}
			seen[tp] = true
			if p.GetOffset() < 0 {
				return fmt.Errorf("%w: %s.offset %d is negative", errBadGroupOffsets, pf, p.GetOffset())
			}
		}
	}
	if ss.s.groups == nil {
		return nil // this writer syncs no groups (its Opened said so)
	}
	readAt := time.UnixMilli(m.GetReadAt())
	for _, g := range m.GetGroups() {
		parts := make(map[topicPartition]groupsyncer.Want, len(g.GetPartitions()))
		for _, p := range g.GetPartitions() {
			tp := topicPartition{Topic: p.GetTopic(), Partition: p.GetPartition()}
			pos, why, ok := ss.progress.tr.Translate(tp, p.GetOffset())
			parts[tp] = groupsyncer.Want{Reported: p.GetOffset(), ReadAt: readAt, Pos: pos, OK: ok, Why: why,
				Target: groupcommit.TopicPartition{Topic: ss.link.Naming.Target(tp.Topic), Partition: tp.Partition}}
		}
		ss.s.groups.Offer(groupsyncer.Key{Link: ss.link.Name, Group: g.GetGroup()}, parts, ss.progress.tr)
	}
	return nil
}

// Groups is the group sync's state, by link and group.
func (s *Server) Groups() []groupsyncer.Status {
	if s.groups == nil {
		return nil
	}
	return s.groups.Status(time.Now(), func(link string, tp topicPartition) int64 {
		return s.committed(heartbeat.Key{Link: link, Topic: tp.Topic, Partition: tp.Partition})
	})
}

// groupMetrics is the group sync's state as the metrics serve it.
func (s *Server) groupMetrics() []metrics.GroupSync {
	var out []metrics.GroupSync
	for _, gs := range s.Groups() {
		m := metrics.GroupSync{Link: gs.Link, Group: gs.Group}
		if gs.SyncAge != nil {
			m.Age, m.HasAge = *gs.SyncAge, true
		}
		if gs.RereadRecords != nil {
			m.Reread, m.HasReread = *gs.RereadRecords, true
		}
		out = append(out, m)
	}
	return out
}

// RunGroupSync runs the writer's group syncer until ctx ends; it returns
// at once when the writer syncs no groups (Options.Groups nil).
func (s *Server) RunGroupSync(ctx context.Context) {
	if s.groups != nil {
		s.groups.Run(ctx)
	}
}

// durableTimeout bounds Durable's writes.
const durableTimeout = 5 * time.Second

// Durable writes what the heartbeats and the group sync changed since
// their last writes before a report of a link that does not run is given
// (control.Service.Status): the partitions and groups ferryctl failover and
// failback print then survive a writer killed the moment after, though
// the persist interval had not come round.
func (s *Server) Durable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, durableTimeout)
	defer cancel()
	if f := s.opts.FlushHeartbeats; f != nil {
		if err := f(ctx); err != nil {
			return fmt.Errorf("heartbeats.topic: %w", err)
		}
	}
	if s.groups == nil {
		return nil
	}
	if err := s.groups.Persist(ctx); err != nil {
		return fmt.Errorf("group_state.topic: %w", err)
	}
	return nil
}

// HandBackGroups returns link's groups to the group sync after a round
// trip (ControlService.HandBackGroups): known are the groups its sync
// follows, now handed back and written to the group state topic before
// it answers; unknown the rest. Without group sync every group is
// unknown.
func (s *Server) HandBackGroups(ctx context.Context, link string, groups []string) (known, unknown []string, err error) {
	if s.groups == nil {
		return nil, groups, nil
	}
	known, unknown = s.groups.HandBack(link, groups)
	if len(known) > 0 {
		if err := s.Durable(ctx); err != nil {
			return nil, nil, err
		}
	}
	return known, unknown, nil
}

// RestoreGroups reads the group state topic back into the group syncer;
// it does nothing without one (Options.GroupState nil, or no group sync).
// Called once, before the writer serves.
func (s *Server) RestoreGroups(ctx context.Context) error {
	if s.groups == nil {
		return nil
	}
	return s.groups.Restore(ctx, func(link string) bool { _, ok := s.links[link]; return ok })
}
