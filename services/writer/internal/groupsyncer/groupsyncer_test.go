package groupsyncer_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/pkg/groupcommit"
	"github.com/ferry-replicator/ferry/pkg/groupsync"
	"github.com/ferry-replicator/ferry/services/writer/internal/groupsyncer"
	"github.com/ferry-replicator/ferry/services/writer/internal/metrics"
	"github.com/ferry-replicator/ferry/services/writer/internal/offsetindex"
	"github.com/ferry-replicator/ferry/services/writer/internal/partkey"
	"github.com/ferry-replicator/ferry/services/writer/internal/server/servertest"
	"github.com/ferry-replicator/ferry/services/writer/internal/translation"
)

// target is a kfake cluster holding orders/0, a syncer committing to it
// (links in refused do not run), and a translator of orders/0 that has
// copied source [0, 10) to target [0, 10).
func target(t *testing.T, refused map[string]bool) (*kfake.Cluster, *groupsyncer.Syncer, *translation.Translator) {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	g := groupsyncer.New(groupsyncer.Config{Commit: servertest.GroupCommitterOn(t, cluster), Metrics: metrics.New(prometheus.NewRegistry()), Log: slog.New(slog.DiscardHandler),
		Refused: func(link string) error {
			if refused[link] {
				return errors.New("failed over")
			}
			return nil
		}})
	tr := translation.New()
	tr.Resumed(orders, 0, 0, nil)
	copyTo(tr, 0, 10)
	return cluster, g, tr
}

var orders = partkey.Partition{Topic: "orders", Partition: 0}

// copyTo confirms a round that copied source [from, next) one for one.
func copyTo(tr *translation.Translator, from, next int64) {
	tr.Confirm(orders, next, next, []offsetindex.Entry{{From: from, Next: next, TargetBefore: from,
		Runs: []offsetindex.Run{{Source: from, Target: from, Count: next - from}}}})
}

// offer hands g group's offset on orders/0 as a stream translates it.
func offer(g *groupsyncer.Syncer, tr *translation.Translator, link, group string, reported int64) {
	pos, why, ok := tr.Translate(orders, reported)
	g.Offer(groupsyncer.Key{Link: link, Group: group}, map[partkey.Partition]groupsyncer.Want{orders: {Reported: reported, ReadAt: time.Now(),
		Target: groupcommit.TopicPartition{Topic: "orders", Partition: 0}, Pos: pos, OK: ok, Why: why}}, tr)
}

func statusOf(t *testing.T, g *groupsyncer.Syncer, link, group string) groupsyncer.Status {
	t.Helper()
	for _, s := range g.Status(time.Now(), func(string, partkey.Partition) int64 { return 10 }) {
		if s.Link == link && s.Group == group {
			return s
		}
	}
	t.Fatalf("no status of %s/%s", link, group)
	return groupsyncer.Status{}
}

// A group that read past the copy lands at the copied end, marked as
// Ferry's, and moves on with the copy (Advance) without another read of
// the source group; one of a link that does not run is left where it
// stands.
func TestSyncerFollowsTheCopy(t *testing.T) {
	cluster, g, tr := target(t, map[string]bool{"west": true})
	offer(g, tr, "east", "app", 15)
	offer(g, tr, "west", "frozen", 15)
	g.SyncQueued()
	for _, k := range []groupsyncer.Key{{Link: "east", Group: "app"}, {Link: "west", Group: "frozen"}} {
		s := statusOf(t, g, k.Link, k.Group)
		if s.Outcome != string(groupcommit.Moved) || s.Partitions[0].TargetOffset != 10 || s.Partitions[0].StandsFor != 10 {
			t.Fatalf("%v after the first sync: %+v, want moved to target 10 standing for 10", k, s)
		}
		if at, md := servertest.TargetGroup(t, cluster, k.Group); at != 10 || !groupsync.IsFerry(md) {
			t.Fatalf("%v committed at %d %q on the target, want 10 with Ferry's marker", k, at, md)
		}
	}
	if r := statusOf(t, g, "east", "app").RereadRecords; r == nil || *r != 0 {
		t.Fatalf("re-read exposure %v, want 0 (the group read past the copied end)", r)
	}

	copyTo(tr, 10, 20)
	g.Advance()
	g.SyncQueued()
	if s := statusOf(t, g, "east", "app"); s.Partitions[0].TargetOffset != 15 || s.Partitions[0].StandsFor != 15 {
		t.Fatalf("after the copy moved on: %+v, want target 15 standing for 15 (what the group read)", s.Partitions[0])
	}
	if at, _ := servertest.TargetGroup(t, cluster, "app"); at != 15 {
		t.Fatalf("app committed at %d, want 15", at)
	}
	if s := statusOf(t, g, "west", "frozen"); s.Partitions[0].TargetOffset != 10 {
		t.Fatalf("a link that does not run moved: %+v, want left at 10", s.Partitions[0])
	}
}

// A group someone else commits on the target is theirs: Owned, its
// position unknown, until an operator hands it back; the next sync then
// takes it over and it is Ferry's again.
func TestSyncerHandsBackOwnedGroups(t *testing.T) {
	cluster, g, tr := target(t, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: "orders", Partition: 0, At: 2, LeaderEpoch: -1, Metadata: "consumer"})
	if _, err := kadm.NewClient(cl).CommitOffsets(context.Background(), "app", os); err != nil {
		t.Fatal(err)
	}
	offer(g, tr, "east", "app", 7)
	g.SyncQueued()
	if s := statusOf(t, g, "east", "app"); s.Outcome != string(groupcommit.Owned) || s.Partitions[0].TargetOffset != -1 {
		t.Fatalf("group committed by a consumer: %+v, want owned with no position", s)
	}
	known, unknown := g.HandBack("east", []string{"app", "nobody"})
	if !slices.Equal(known, []string{"app"}) || !slices.Equal(unknown, []string{"nobody"}) {
		t.Fatalf("hand back: known %v unknown %v, want [app] [nobody]", known, unknown)
	}
	offer(g, tr, "east", "app", 7)
	g.SyncQueued()
	s := statusOf(t, g, "east", "app")
	if s.HandedBack || s.Partitions[0].TargetOffset != 7 {
		t.Fatalf("after the hand back: %+v, want taken over at 7 and no longer handed back", s)
	}
	if at, md := servertest.TargetGroup(t, cluster, "app"); at != 7 || !groupsync.IsFerry(md) {
		t.Fatalf("app committed at %d %q, want 7 with Ferry's marker", at, md)
	}
}
