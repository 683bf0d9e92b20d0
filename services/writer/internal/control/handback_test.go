package control

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/groupsync"
	"github.com/ferry-replicator/ferry/services/writer/internal/groupstate"
	"github.com/ferry-replicator/ferry/services/writer/internal/groupsyncer"
	"github.com/ferry-replicator/ferry/services/writer/internal/server"
	"github.com/ferry-replicator/ferry/services/writer/internal/server/servertest"
)

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
	cluster, store := servertest.GroupStateCluster(ctx, t)
	pki := servertest.NewPKI(t)
	w := startControlWriterWith(t, pki, cluster, true, func(o *server.Options) {
		o.Groups, o.GroupState, o.GroupStatePersist = servertest.GroupCommitterOn(t, cluster), store, time.Hour
	}, servertest.OperatorID)
	servertest.RunGroupSync(t, w.srv.RunGroupSync)
	stream, _ := servertest.OpenOrdersFrom(ctx, t, w.Client, "east", "")
	servertest.CopyWithGaps(t, stream)
	servertest.SyncUntil(t, w.srv.Groups, stream, map[string]int64{"g": 17}, "g synced", func(g groupsyncer.Status) bool { return servertest.StandsFor(g, 17) })

	// The outage: g's consumers read on the target and commit there.
	servertest.CommitOnTarget(ctx, t, w.Cluster, "g", 14, "")
	servertest.SyncUntil(t, w.srv.Groups, stream, map[string]int64{"g": 17}, "g owned", func(g groupsyncer.Status) bool { return g.Outcome == "owned" })

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
	if g, _ := servertest.GroupOf(w.srv.Groups, "g"); !g.HandedBack {
		t.Errorf("g's status after the hand-back: %+v, want handed back", g)
	}
	restarted := startControlWriterWith(t, pki, cluster, true, func(o *server.Options) {
		o.Groups, o.GroupState = servertest.GroupCommitterOn(t, cluster), store
	}, servertest.OperatorID)
	if err := restarted.srv.RestoreGroups(ctx); err != nil {
		t.Fatal(err)
	}
	if g, _ := servertest.GroupOf(restarted.srv.Groups, "g"); !g.HandedBack {
		t.Errorf("g's status on a writer started after the hand-back: %+v, want handed back", g)
	}

	// Back on the old source, g's consumers read on to 29: the sync takes
	// the target's offset 14 over with its marker, and the hand-back ends.
	servertest.SyncUntil(t, w.srv.Groups, stream, map[string]int64{"g": 29}, "g synced again", func(g groupsyncer.Status) bool { return servertest.StandsFor(g, 29) && !g.HandedBack })
	if at, md := servertest.TargetGroup(t, w.Cluster, "g"); md != groupsync.Marker(29) || at <= 14 {
		t.Errorf("g on the target after the hand-back: %d %q, want past 14 with Ferry's marker of 29", at, md)
	}
	servertest.CommitOnTarget(ctx, t, w.Cluster, "g", 30, "")
	servertest.SyncUntil(t, w.srv.Groups, stream, map[string]int64{"g": 29}, "g owned again", func(g groupsyncer.Status) bool { return g.Outcome == "owned" })
}
