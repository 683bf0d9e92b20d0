package control

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/linkstate"
	"github.com/ferry-replicator/ferry/services/writer/internal/groupstate"
	"github.com/ferry-replicator/ferry/services/writer/internal/groupsyncer"
	"github.com/ferry-replicator/ferry/services/writer/internal/heartbeat"
	"github.com/ferry-replicator/ferry/services/writer/internal/server"
	"github.com/ferry-replicator/ferry/services/writer/internal/server/servertest"
)

// An open names its topics' configs: the writer's status lists the
// link's topics the index cannot cover, and drops one whose retention
// was brought within it at a later open.
func TestStatusNamesTopicsTheIndexCannotCover(t *testing.T) {
	pki := servertest.NewPKI(t)
	w := startControlWriterWith(t, pki, nil, true, func(o *server.Options) { o.Index.Retention = 24 * time.Hour }, servertest.OperatorID)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func(epoch uint64, retention string) {
		t.Helper()
		stream, err := w.Client.Replicate(ctx)
		if err != nil {
			t.Fatal(err)
		}
		o := &ferryv1.Open{Link: "east", Shard: 0, Epoch: epoch, Fetcher: "f",
			Topics:     []*ferryv1.TopicSpec{{Name: "orders", PartitionCount: 1, Configs: map[string]string{"retention.ms": retention}}},
			Partitions: []*ferryv1.TopicPartition{{Topic: "orders", Partition: 0}}}
		if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Open{Open: o}}); err != nil {
			t.Fatal(err)
		}
		if resp, err := stream.Recv(); err != nil || resp.GetOpened() == nil {
			t.Fatalf("open: %v, %v", resp, err)
		}
		servertest.CloseStream(t, stream)
	}
	gaps := func() []*ferryv1.LinkIndexGap {
		t.Helper()
		resp, err := w.ctl.Status(ctx, &ferryv1.StatusRequest{Link: "east"})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetLinks()[0].GetIndexGaps()
	}
	open(1, "-1")
	if g := gaps(); len(g) != 1 || g[0].GetTopic() != "orders" || !strings.Contains(g[0].GetReason(), "retention.ms -1") {
		t.Fatalf("index gaps %v, want orders named for its retention.ms -1", g)
	}
	if ls := w.srv.LinkStates(); len(ls[0].IndexGaps) != 1 {
		t.Errorf("/status link states %+v, want orders's gap", ls)
	}
	open(2, "3600000")
	if g := gaps(); len(g) != 0 {
		t.Fatalf("index gaps %v after the topic's retention came within the index's, want none", g)
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
	cluster, store := servertest.GroupStateCluster(ctx, t)
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
	w := startControlWriterWith(t, servertest.NewPKI(t), cluster, true, func(o *server.Options) {
		o.Groups, o.GroupState, o.GroupStatePersist = servertest.GroupCommitterOn(t, cluster), store, time.Hour
		o.Heartbeats, o.HeartbeatsTopic, o.FlushHeartbeats = beats, beatsTopic, beatsStore.Flush
	}, servertest.OperatorID)
	servertest.RunGroupSync(t, w.srv.RunGroupSync)
	stream, _ := servertest.OpenOrdersFrom(ctx, t, w.Client, "east", "")
	servertest.CopyWithGaps(t, stream)
	offsets := map[string]int64{"g3": 3, "g17": 17}
	servertest.SyncUntil(t, w.srv.Groups, stream, offsets, "every group synced", func(g groupsyncer.Status) bool { return servertest.StandsFor(g, offsets[g.Group]) })

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
