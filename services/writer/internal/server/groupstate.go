package server

import (
	"context"
	"fmt"
	"time"

	"github.com/ferry-replicator/ferry/pkg/groupsync"
	"github.com/ferry-replicator/ferry/services/writer/internal/groupstate"
)

// The group syncer's state outlives the writer (package groupstate): what
// a sync changed is written to the target cluster at most once a persist
// interval, and a writer starting reads it all back (RestoreGroups) before
// it serves anything, so a failover report and failback's --move-groups
// after a writer restart see the groups the sync had followed, with their
// positions, outcomes (owned, active) and what each group last read on the
// source, though no fetcher reaches the writer any more.

// GroupStateStore reads and writes the group state topic
// (groupstate.Store).
type GroupStateStore interface {
	Load(ctx context.Context) (map[groupstate.Key]groupstate.Part, int, error)
	Write(ctx context.Context, parts map[groupstate.Key]groupstate.Part) error
}

// persistTimeout bounds the last write when the syncer stops.
const persistTimeout = 5 * time.Second

// markDirty notes that tp of group k changed; called with g.mu held.
func (g *groupSyncer) markDirty(k groupKey, tp topicPartition) {
	if g.store == nil {
		return
	}
	if g.dirty == nil {
		g.dirty = map[groupstate.Key]bool{}
	}
	g.dirty[groupstate.Key{Link: k.link, Group: k.group, Topic: tp.Topic, Partition: tp.Partition}] = true
}

// persist writes the group partitions changed since the last write; a
// failed write is tried again at the next, and returned.
func (g *groupSyncer) persist(ctx context.Context) error {
	if g.store == nil {
		return nil
	}
	g.writing.Lock()
	defer g.writing.Unlock()
	g.mu.Lock()
	if len(g.dirty) == 0 {
		g.mu.Unlock()
		return nil
	}
	dirty := g.dirty
	g.dirty = nil
	parts := make(map[groupstate.Key]groupstate.Part, len(dirty))
	for k := range dirty {
		st := g.state[groupKey{k.Link, k.Group}]
		if st == nil {
			continue
		}
		gp := st.parts[topicPartition{Topic: k.Topic, Partition: k.Partition}]
		if gp == nil {
			continue
		}
		parts[k] = groupstate.Part{
			Reported: gp.reported, ReportedAt: groupstate.Millis(gp.reportedAt),
			Target: gp.target, StandsFor: gp.standsFor, SyncedAt: groupstate.Millis(gp.syncedAt), Note: gp.note,
			Outcome: st.outcome, Detail: clipDetail(st.detail), Attempted: groupstate.Millis(st.attempted),
			HandedBack: st.handedBack,
		}
	}
	g.mu.Unlock()
	if err := g.store.Write(ctx, parts); err != nil {
		g.mu.Lock()
		if g.dirty == nil {
			g.dirty = map[groupstate.Key]bool{}
		}
		for k := range dirty {
			g.dirty[k] = true
		}
		g.mu.Unlock()
		if ctx.Err() == nil {
			g.log.Warn("group state not written; trying again", "partitions", len(parts), "err", err)
		}
		return err
	}
	return nil
}

// persistAtEnd writes what changed once more as the syncer stops.
func (g *groupSyncer) persistAtEnd() {
	ctx, cancel := context.WithTimeout(context.Background(), persistTimeout)
	defer cancel()
	_ = g.persist(ctx) // logged; nothing is left to try it again
}

// Durable writes what the heartbeats and the group sync changed since
// their last writes before a report of a link that does not run is given
// (Control.Status): the partitions and groups ferryctl failover and
// failback print then survive a writer killed the moment after, though
// the persist interval had not come round.
func (s *Server) Durable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, persistTimeout)
	defer cancel()
	if f := s.opts.FlushHeartbeats; f != nil {
		if err := f(ctx); err != nil {
			return fmt.Errorf("heartbeats.topic: %w", err)
		}
	}
	if s.groups == nil || s.groups.store == nil {
		return nil
	}
	if err := s.groups.persist(ctx); err != nil {
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
	known, unknown = s.groups.handBack(link, groups)
	if len(known) > 0 {
		if err := s.Durable(ctx); err != nil {
			return nil, nil, err
		}
	}
	return known, unknown, nil
}

// clipDetail keeps a record within groupstate's bound: details are
// error texts, some of them long.
func clipDetail(s string) string {
	const max = 1024
	if len(s) > max {
		return s[:max]
	}
	return s
}

// restore takes the state read back from the topic, for the links this
// writer serves, before the syncer runs: a group's outcome is its
// partitions' latest, and it counts against groupsync.MaxGroups as a
// group offered by a stream does.
func (g *groupSyncer) restore(parts map[groupstate.Key]groupstate.Part, serves func(link string) bool) (groups, restored int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, p := range parts {
		if !serves(k.Link) {
			continue
		}
		gk := groupKey{k.Link, k.Group}
		st := g.state[gk]
		if st == nil {
			if g.perLink[k.Link] >= groupsync.MaxGroups {
				continue
			}
			g.perLink[k.Link]++
			st = &groupState{parts: map[topicPartition]*groupPart{}}
			g.state[gk] = st
			groups++
		}
		if at := groupstate.Time(p.Attempted); !at.Before(st.attempted) {
			st.attempted, st.outcome, st.detail = at, p.Outcome, p.Detail
		}
		if at := groupstate.Time(p.SyncedAt); at.After(st.synced) {
			st.synced = at
		}
		// Every partition's record carries the group's flag, all
		// rewritten when it changes.
		st.handedBack = st.handedBack || p.HandedBack
		st.parts[topicPartition{Topic: k.Topic, Partition: k.Partition}] = &groupPart{
			reported: p.Reported, reportedAt: groupstate.Time(p.ReportedAt),
			target: p.Target, standsFor: p.StandsFor, syncedAt: groupstate.Time(p.SyncedAt), note: p.Note,
		}
		restored++
	}
	return groups, restored
}

// RestoreGroups reads the group state topic back into the group syncer;
// it does nothing without one (Options.GroupState nil, or no group sync).
// Called once, before the writer serves: a record that does not decode
// is counted and left out.
func (s *Server) RestoreGroups(ctx context.Context) error {
	if s.groups == nil || s.groups.store == nil {
		return nil
	}
	parts, refused, err := s.groups.store.Load(ctx)
	if err != nil {
		return err
	}
	groups, restored := s.groups.restore(parts, func(link string) bool { _, ok := s.links[link]; return ok })
	s.log.Info("group state read back", "groups", groups, "partitions", restored, "refused", refused)
	return nil
}
