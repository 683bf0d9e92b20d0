package server

import (
	"context"
	"testing"
	"time"

	"github.com/ferry-replicator/ferry/services/writer/internal/groupsyncer"
)

// comparable is a group's status as it must read after a restart: what
// the sync knew (times to the millisecond, as the topic keeps them).
type groupView struct {
	outcome string
	parts   []groupsyncer.PartitionStatus
}

func viewOf(gs []groupsyncer.Status) map[string]groupView {
	out := map[string]groupView{}
	for _, g := range gs {
		v := groupView{outcome: g.Outcome}
		for _, p := range g.Partitions {
			if p.SyncedReadAt != nil {
				at := p.SyncedReadAt.Truncate(time.Millisecond)
				p.SyncedReadAt = &at
			}
			v.parts = append(v.parts, p)
		}
		out[g.Group] = v
	}
	return out
}

func sameView(a, b groupView) bool {
	if a.outcome != b.outcome || len(a.parts) != len(b.parts) {
		return false
	}
	for i := range a.parts {
		p, q := a.parts[i], b.parts[i]
		if p.Topic != q.Topic || p.Partition != q.Partition || p.SourceOffset != q.SourceOffset || p.TargetOffset != q.TargetOffset ||
			p.StandsFor != q.StandsFor || p.Note != q.Note || (p.SyncedReadAt == nil) != (q.SyncedReadAt == nil) ||
			(p.SyncedReadAt != nil && !p.SyncedReadAt.Equal(*q.SyncedReadAt)) {
			return false
		}
	}
	return true
}

// What the group sync knows outlives the writer: a writer started on the
// same target after the first one crashed (its syncer never stopped, so
// only what it persisted while running counts) reports every group as the
// first did, synced ones with their positions and one a consumer owns on
// the target as owned, without any stream reaching it: the failover
// report and failback's --move-groups after a writer restart in a region
// loss. Without the topic the restarted writer knew no group.
func TestGroupStateSurvivesARestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cluster, store := groupStateCluster(ctx, t)
	persisted := func(o *Options) { o.GroupState, o.GroupStatePersist = store, 50*time.Millisecond }

	first := groupWriterOn(t, cluster, true, persisted)
	runGroupSync(t, first.srv)
	stream, _ := first.openOrdersFrom(ctx, t, "east", "")
	copyWithGaps(t, stream)
	// "theirs" is a consumer's on the target: committed there without
	// Ferry's marker, so the sync leaves it (owned).
	commitOnTarget(ctx, t, first, "theirs", 2, "")
	offsets := map[string]int64{"g3": 3, "g17": 17, "g29": 29, "theirs": 5}
	syncUntil(t, first, stream, offsets, "every group synced or owned", func(g groupsyncer.Status) bool {
		if g.Group == "theirs" {
			return g.Outcome == "owned"
		}
		return standsFor(g, offsets[g.Group])
	})
	// The first writer crashes: only what it wrote while running counts.
	// What it knows now is what the topic must hold, once written.
	var want map[string]groupView
	waitWithin(t, 10*time.Second, "the state persisted", func() bool {
		want = viewOf(first.srv.Groups())
		parts, refused, err := store.Load(ctx)
		if err != nil || refused != 1 {
			t.Logf("load: %d refused, %v", refused, err)
			return false
		}
		got := 0
		for k, p := range parts {
			v := want[k.Group]
			if len(v.parts) == 1 && p.Target == v.parts[0].TargetOffset && p.Reported == v.parts[0].SourceOffset && p.Outcome == v.outcome {
				got++
			}
		}
		return got == len(offsets)
	})

	second := groupWriterOn(t, cluster, true, persisted)
	if err := second.srv.RestoreGroups(ctx); err != nil {
		t.Fatal(err)
	}
	got := viewOf(second.srv.Groups())
	if len(got) != len(want) {
		t.Fatalf("the restarted writer knows %d groups, want %d: %+v", len(got), len(want), got)
	}
	for g, v := range want {
		if !sameView(got[g], v) {
			t.Errorf("group %s after the restart: %+v, want %+v", g, got[g], v)
		}
	}
	if g, ok := groupOf(second, "g17"); !ok || g.RereadRecords == nil || *g.RereadRecords != 0 {
		t.Errorf("g17's re-read exposure after the restart: %+v, want 0 (caught up)", g)
	}
}
