package cli

import (
	"testing"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
)

// Two writers' views of a group merge per partition by the latest source
// read: a shard that moved leaves an older view on its first writer,
// which must not win; the re-read count follows the merged partitions.
func TestMergeGroupLatestReadWins(t *testing.T) {
	part := func(p int32, source, target, stands, readAt int64) *ferryv1.LinkGroupPartition {
		return &ferryv1.LinkGroupPartition{Topic: "orders", Partition: p, SourceOffset: source, TargetOffset: target,
			StandsForSourceOffset: stands, SyncedReadAtUnixMs: readAt}
	}
	old := &ferryv1.LinkGroup{Group: "app", Outcome: "moved", SyncAgeSeconds: 30, HasSyncAge: true,
		Partitions: []*ferryv1.LinkGroupPartition{part(0, 10, 11, 10, 1000), part(1, 50, 52, 40, 1000)}}
	fresh := &ferryv1.LinkGroup{Group: "app", Outcome: "unchanged", SyncAgeSeconds: 1, HasSyncAge: true,
		Partitions: []*ferryv1.LinkGroupPartition{part(1, 60, 63, 60, 5000)}}
	for name, order := range map[string][]*ferryv1.LinkGroup{"old first": {old, fresh}, "fresh first": {fresh, old}} {
		t.Run(name, func(t *testing.T) {
			var l LinkReport
			for _, g := range order {
				mergeGroup(&l, g)
			}
			if len(l.Groups) != 1 {
				t.Fatalf("groups %+v, want app once", l.Groups)
			}
			g := l.Groups[0]
			if len(g.Partitions) != 2 || g.Partitions[0].TargetOffset != 11 || g.Partitions[1].TargetOffset != 63 || g.Partitions[1].StandsFor != 60 {
				t.Errorf("partitions %+v, want orders/0 from the only view and orders/1 from the later read", g.Partitions)
			}
			if g.Reread == nil || *g.Reread != 0 || g.Outcome != "unchanged" || g.SyncAge == nil || *g.SyncAge != 1 {
				t.Errorf("group %+v, want 0 re-read, the freshest sync's outcome and age", g)
			}
		})
	}
}
