package cli

import (
	"fmt"
	"strings"
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
			l.countRereads()
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

// A group's re-read stops at what the target holds, as the writers' meter
// counts it: what it read on the source beyond is lost, and the
// partition's meter counts it (the region-loss soak, seed 747, saw
// ferryctl report both). Partitions whose position is not Ferry's count
// nothing; a group with none has no re-read figure.
func TestRereadStopsAtCommittedEnd(t *testing.T) {
	l := LinkReport{Partitions: []PartitionReport{
		{Topic: "orders", Partition: 0, Committed: 100},
		{Topic: "orders", Partition: 1, Committed: -1},
		{Topic: "orders", Partition: 4, Committed: 0},
	}}
	mergeGroup(&l, &ferryv1.LinkGroup{Group: "app", Outcome: "moved", Partitions: []*ferryv1.LinkGroupPartition{
		{Topic: "orders", Partition: 0, SourceOffset: 150, TargetOffset: 95, StandsForSourceOffset: 90},                       // 10: 50 more are lost
		{Topic: "orders", Partition: 1, SourceOffset: 60, TargetOffset: 41, StandsForSourceOffset: 40},                        // 20: nothing known committed
		{Topic: "orders", Partition: 2, SourceOffset: 70, TargetOffset: 71, StandsForSourceOffset: 70},                        // 0: caught up
		{Topic: "orders", Partition: 3, SourceOffset: 80, TargetOffset: -1, StandsForSourceOffset: -1, Note: "index_loading"}, // uncounted
		{Topic: "orders", Partition: 4, SourceOffset: 5, TargetOffset: -1, StandsForSourceOffset: -1, Note: "not_copied"},     // nothing on the target to read again
		{Topic: "orders", Partition: 5, SourceOffset: 0, TargetOffset: -1, StandsForSourceOffset: -1},                         // nothing read on the source
	}})
	mergeGroup(&l, &ferryv1.LinkGroup{Group: "owned", Outcome: "owned", Partitions: []*ferryv1.LinkGroupPartition{
		{Topic: "orders", Partition: 0, SourceOffset: 10, TargetOffset: -1, StandsForSourceOffset: -1},
	}})
	l.countRereads()
	show := func(g GroupReport) string {
		if g.Reread == nil {
			return g.Group + ": none"
		}
		return fmt.Sprintf("%s: %d", g.Group, *g.Reread)
	}
	if g := l.Groups[0]; g.Group != "app" || g.Reread == nil || *g.Reread != 30 {
		t.Errorf("re-read %s, want app: 30 (10 + 20 + 0)", show(g))
	}
	if g := l.Groups[1]; g.Group != "owned" || g.Reread != nil || g.Uncounted != nil {
		t.Errorf("re-read %s, uncounted %q, want owned: none, none (not Ferry's to count)", show(g), g.Uncounted)
	}
	app := l.Groups[0]
	var per []string
	for _, p := range app.Partitions {
		if p.Reread != nil {
			per = append(per, fmt.Sprintf("%d:%d", p.Partition, *p.Reread))
		}
	}
	if got, want := strings.Join(per, " "), "0:10 1:20 2:0"; got != want {
		t.Errorf("app's re-reads per partition %q, want %q", got, want)
	}
	if want := []UncountedPartition{{Topic: "orders", Partition: 3, Reason: "index_loading"}}; fmt.Sprint(app.Uncounted) != fmt.Sprint(want) {
		t.Errorf("app's uncounted partitions %+v, want %+v", app.Uncounted, want)
	}
	var out strings.Builder
	printGroups(&out, l.Groups)
	if !strings.Contains(out.String(), "group app: REREAD cannot count orders/3 (index_loading)") {
		t.Errorf("ferryctl's text does not name the uncounted partition:\n%s", out.String())
	}
}

// Two writers' meters merge per partition: the freshest heartbeat and the
// highest committed offset. The count of records lost is one writer's (its
// stream's reads less its commits): it stands only when that writer's
// committed offset is the merged one, in either order.
func TestMergeMeterKeepsTheCountOfTheCommittingWriter(t *testing.T) {
	part := func(committed int64, age float64, lost, unread int64) *ferryv1.LinkPartition {
		return &ferryv1.LinkPartition{Topic: "orders", CommittedNextOffset: committed, SourceHighWatermark: 100, HeartbeatAgeSeconds: age,
			LostRecords: lost, UnreadOffsets: unread, HasLostRecords: true}
	}
	for _, tc := range []struct {
		name       string
		views      []*ferryv1.LinkPartition
		lag        int64
		lost, read int64 // -1: unknown
	}{
		{"the fresh writer committed most", []*ferryv1.LinkPartition{part(80, 1, 12, 4), part(60, 9, 30, 10)}, 20, 12, 4},
		{"the same, the other order", []*ferryv1.LinkPartition{part(60, 9, 30, 10), part(80, 1, 12, 4)}, 20, 12, 4},
		{"another writer committed more", []*ferryv1.LinkPartition{part(60, 1, 30, 10), part(80, 9, 12, 4)}, 20, -1, -1},
		{"the same, the other order", []*ferryv1.LinkPartition{part(80, 9, 12, 4), part(60, 1, 30, 10)}, 20, -1, -1},
	} {
		var l LinkReport
		for _, v := range tc.views {
			mergePartition(&l, v)
		}
		p := l.Partitions[0]
		lost, unread := int64(-1), int64(-1)
		if p.LostRecords != nil {
			lost, unread = *p.LostRecords, *p.UnreadOffsets
		}
		if p.LagRecords != tc.lag || lost != tc.lost || unread != tc.read {
			t.Errorf("%s: lag %d, lost %d, unread %d; want %d, %d, %d", tc.name, p.LagRecords, lost, unread, tc.lag, tc.lost, tc.read)
		}
	}
}
