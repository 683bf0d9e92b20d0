package groupsyncer

import (
	"context"
	"time"

	"github.com/ferry-replicator/ferry/pkg/groupsync"
	"github.com/ferry-replicator/ferry/services/writer/internal/groupstate"
	"github.com/ferry-replicator/ferry/services/writer/internal/partkey"
)

// The syncer's state outlives the writer (package groupstate): what a
// sync changed is written to the target cluster at most once a persist
// interval, and a writer starting reads it all back (Restore) before it
// serves anything, so a failover report and failback's --move-groups
// after a writer restart see the groups the sync had followed, with their
// positions, outcomes (owned, active) and what each group last read on the
// source, though no fetcher reaches the writer any more.

// Store reads and writes the group state topic
// (groupstate.Store).
type Store interface {
	Load(ctx context.Context) (map[groupstate.Key]groupstate.Part, int, error)
	Write(ctx context.Context, parts map[groupstate.Key]groupstate.Part) error
}

// persistTimeout bounds the last write when the syncer stops.
const persistTimeout = 5 * time.Second

// markDirty notes that tp of group k changed; called with g.mu held.
func (g *Syncer) markDirty(k Key, tp partkey.Partition) {
	if g.store == nil {
		return
	}
	if g.dirty == nil {
		g.dirty = map[groupstate.Key]bool{}
	}
	g.dirty[groupstate.Key{Link: k.Link, Group: k.Group, Topic: tp.Topic, Partition: tp.Partition}] = true
}

// persist writes the group partitions changed since the last write; a
// failed write is tried again at the next, and returned.
func (g *Syncer) Persist(ctx context.Context) error {
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
		st := g.state[Key{Link: k.Link, Group: k.Group}]
		if st == nil {
			continue
		}
		gp := st.parts[partkey.Partition{Topic: k.Topic, Partition: k.Partition}]
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
func (g *Syncer) persistAtEnd() {
	ctx, cancel := context.WithTimeout(context.Background(), persistTimeout)
	defer cancel()
	_ = g.Persist(ctx) // logged; nothing is left to try it again
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

// Restore reads the state topic back, for the links serves names, before
// Run: it does nothing without a store. A record that does not decode is
// counted and left out.
func (g *Syncer) Restore(ctx context.Context, serves func(link string) bool) error {
	if g.store == nil {
		return nil
	}
	parts, refused, err := g.store.Load(ctx)
	if err != nil {
		return err
	}
	groups, restored := g.restore(parts, serves)
	g.log.Info("group state read back", "groups", groups, "partitions", restored, "refused", refused)
	return nil
}

// restore takes the state read back from the topic, for the links this
// writer serves, before the syncer runs: a group's outcome is its
// partitions' latest, and it counts against groupsync.MaxGroups as a
// group offered by a stream does.
func (g *Syncer) restore(parts map[groupstate.Key]groupstate.Part, serves func(link string) bool) (groups, restored int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, p := range parts {
		if !serves(k.Link) {
			continue
		}
		gk := Key{Link: k.Link, Group: k.Group}
		st := g.state[gk]
		if st == nil {
			if g.perLink[k.Link] >= groupsync.MaxGroups {
				continue
			}
			g.perLink[k.Link]++
			st = &groupState{parts: map[partkey.Partition]*groupPart{}}
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
		st.parts[partkey.Partition{Topic: k.Topic, Partition: k.Partition}] = &groupPart{
			reported: p.Reported, reportedAt: groupstate.Time(p.ReportedAt),
			target: p.Target, standsFor: p.StandsFor, syncedAt: groupstate.Time(p.SyncedAt), note: p.Note,
		}
		restored++
	}
	return groups, restored
}
