package server

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/groupsync"
	"github.com/ferry-replicator/ferry/pkg/linkstate"
	"github.com/ferry-replicator/ferry/services/writer/internal/groupstate"
	"github.com/ferry-replicator/ferry/services/writer/internal/groupsyncer"
	"github.com/ferry-replicator/ferry/services/writer/internal/heartbeat"
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

// What a report of a stopped link shows is on the target cluster before
// the report is given: ferryctl failover prints the groups of a failed
// over link from the writers' Status, and a writer killed the moment
// after (a region loss goes on; its pod is rescheduled) must come back
// knowing them, though the persist interval had not come round. While
// the link runs, the interval alone writes the state.
func TestFailoverReportIsOnTheTarget(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cluster, store := groupStateCluster(ctx, t)
	const beatsTopic = "__ferry_heartbeats"
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	_, err = kadm.NewClient(cl).CreateTopic(ctx, 1, -1, nil, beatsTopic)
	cl.Close()
	if err != nil {
		t.Fatal(err)
	}
	beats := heartbeat.NewTable()
	beatsStore, err := heartbeat.NewStore([]kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}, beatsTopic, beats, time.Hour, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(beatsStore.Close)
	w := startControlWriterWith(t, newControlPKI(t), cluster, true, func(o *Options) {
		o.Groups, o.GroupState, o.GroupStatePersist = groupCommitterOn(t, cluster), store, time.Hour
		o.Heartbeats, o.HeartbeatsTopic, o.FlushHeartbeats = beats, beatsTopic, beatsStore.Flush
	}, operatorID)
	runGroupSync(t, w.srv)
	stream, _ := w.openOrdersFrom(ctx, t, "east", "")
	copyWithGaps(t, stream)
	offsets := map[string]int64{"g3": 3, "g17": 17}
	syncUntil(t, w.testWriter, stream, offsets, "every group synced", func(g groupsyncer.Status) bool { return standsFor(g, offsets[g.Group]) })

	stored := func() map[groupstate.Key]groupstate.Part {
		t.Helper()
		parts, _, err := store.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return parts
	}
	if _, err := w.ctl.Status(ctx, &ferryv1.StatusRequest{Link: "east"}); err != nil {
		t.Fatal(err)
	}
	if got := stored(); len(got) != 0 {
		t.Fatalf("a running link's status wrote the group state: %v (the interval is an hour)", got)
	}

	w.setState(ctx, t, linkstate.FailedOver, "region lost")
	resp, err := w.ctl.Status(ctx, &ferryv1.StatusRequest{Link: "east"})
	if err != nil {
		t.Fatal(err)
	}
	got := stored()
	readBack := heartbeat.NewTable()
	rb, err := heartbeat.NewStore([]kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}, beatsTopic, readBack, time.Hour, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()
	if _, _, err := rb.Load(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if st, ok := readBack.Get(heartbeat.Key{Link: "east", Topic: "orders", Partition: 0}); !ok || st.CommittedNext != 30 {
		t.Errorf("orders/0's heartbeat state on the target cluster: %+v (found %v), want committed next offset 30 as the writer knows it: %+v", st, ok, beats.All())
	}
	reported := resp.GetLinks()[0].GetGroups()
	if len(reported) != len(offsets) {
		t.Fatalf("the failover report shows %d groups, want %d: %v", len(reported), len(offsets), reported)
	}
	for _, g := range reported {
		for _, p := range g.GetPartitions() {
			k := groupstate.Key{Link: "east", Group: g.GetGroup(), Topic: p.GetTopic(), Partition: p.GetPartition()}
			s, ok := got[k]
			if !ok || s.Target != p.GetTargetOffset() || s.StandsFor != p.GetStandsForSourceOffset() || s.Reported != p.GetSourceOffset() {
				t.Errorf("%v on the target cluster: %+v (found %v); the report shows %v", k, s, ok, p)
			}
		}
	}
}

// After a round trip a group's consumers committed on the target without
// Ferry's marker, so the sync leaves the group alone (owned) for good;
// handed back (failback --move-groups), the group's next sync takes those
// offsets over, forward only, with Ferry's marker, and the hand-back
// ends there: a consumer's commit afterwards makes the group owned again.
// The hand-back is on the target cluster before the call answers (the
// persist interval is an hour), and a group the writer never synced is
// answered unknown.
func TestHandBackGroupsAfterARoundTrip(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cluster, store := groupStateCluster(ctx, t)
	w := startControlWriterWith(t, newControlPKI(t), cluster, true, func(o *Options) {
		o.Groups, o.GroupState, o.GroupStatePersist = groupCommitterOn(t, cluster), store, time.Hour
	}, operatorID)
	runGroupSync(t, w.srv)
	stream, _ := w.openOrdersFrom(ctx, t, "east", "")
	copyWithGaps(t, stream)
	syncUntil(t, w.testWriter, stream, map[string]int64{"g": 17}, "g synced", func(g groupsyncer.Status) bool { return standsFor(g, 17) })

	// The outage: g's consumers read on the target and commit there.
	commitOnTarget(ctx, t, w.testWriter, "g", 14, "")
	syncUntil(t, w.testWriter, stream, map[string]int64{"g": 17}, "g owned", func(g groupsyncer.Status) bool { return g.Outcome == "owned" })

	if _, err := w.ctl.HandBackGroups(ctx, &ferryv1.HandBackGroupsRequest{Link: "east"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a hand-back of no group: %v, want InvalidArgument", err)
	}
	if _, err := w.ctl.HandBackGroups(ctx, &ferryv1.HandBackGroupsRequest{Link: "east", Groups: []string{"g", "g"}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a hand-back naming g twice: %v, want InvalidArgument", err)
	}
	resp, err := w.ctl.HandBackGroups(ctx, &ferryv1.HandBackGroupsRequest{Link: "east", Groups: []string{"g", "nobody"}})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(resp.GetHandedBack(), resp.GetUnknown()) != "[g] [nobody]" {
		t.Errorf("handed back %v, unknown %v; want [g] and [nobody]", resp.GetHandedBack(), resp.GetUnknown())
	}
	parts, _, err := store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := parts[groupstate.Key{Link: "east", Group: "g", Topic: "orders", Partition: 0}]; !ok || !p.HandedBack {
		t.Errorf("g's record on the target cluster after the hand-back: %+v (found %v), want handed back", p, ok)
	}
	if g, _ := groupOf(w.testWriter, "g"); !g.HandedBack {
		t.Errorf("g's status after the hand-back: %+v, want handed back", g)
	}
	restarted := groupWriterOn(t, cluster, true, func(o *Options) { o.GroupState = store })
	if err := restarted.srv.RestoreGroups(ctx); err != nil {
		t.Fatal(err)
	}
	if g, _ := groupOf(restarted, "g"); !g.HandedBack {
		t.Errorf("g's status on a writer started after the hand-back: %+v, want handed back", g)
	}

	// Back on the old source, g's consumers read on to 29: the sync takes
	// the target's offset 14 over with its marker, and the hand-back ends.
	syncUntil(t, w.testWriter, stream, map[string]int64{"g": 29}, "g synced again", func(g groupsyncer.Status) bool { return standsFor(g, 29) && !g.HandedBack })
	if at, md := w.targetGroup(t, "g"); md != groupsync.Marker(29) || at <= 14 {
		t.Errorf("g on the target after the hand-back: %d %q, want past 14 with Ferry's marker of 29", at, md)
	}
	commitOnTarget(ctx, t, w.testWriter, "g", 30, "")
	syncUntil(t, w.testWriter, stream, map[string]int64{"g": 29}, "g owned again", func(g groupsyncer.Status) bool { return g.Outcome == "owned" })
}
