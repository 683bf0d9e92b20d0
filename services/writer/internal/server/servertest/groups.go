package servertest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/groupcommit"
	"github.com/ferry-replicator/ferry/pkg/testwait"
	"github.com/ferry-replicator/ferry/services/writer/internal/groupstate"
	"github.com/ferry-replicator/ferry/services/writer/internal/groupsyncer"
)

// Group sync on orders/0, as the writer's group syncer does it and reports
// it (server.Server's Groups).

// GroupStateTopic is the test writers' group state topic.
const GroupStateTopic = "__ferry_groups"

// GroupCommitterOn is the group sync's committer on cluster.
func GroupCommitterOn(t *testing.T, cluster *kfake.Cluster) *groupcommit.Committer {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	sc, err := sarama.NewClient(cluster.ListenAddrs(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close() })
	gc, err := groupcommit.New(sc)
	if err != nil {
		t.Fatal(err)
	}
	return gc
}

// groupStateOn creates the group state topic on cluster, with one
// committed transactional record of someone else's in it (a reader
// waiting for the record at the high watermark minus one would wait for
// ever: a marker stands there) and one record that does not decode, and
// returns a store of it.
func groupStateOn(ctx context.Context, t *testing.T, cluster *kfake.Cluster) *groupstate.Store {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.TransactionalID("someone"), kgo.DefaultProduceTopic(GroupStateTopic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": new("compact")}, GroupStateTopic); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte("not a key"), Value: []byte("{}")}).FirstErr(); err == nil {
		t.Fatal("a transactional producer produced outside a transaction")
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte("not a key"), Value: []byte("{}")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	st, err := groupstate.NewStore([]kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}, GroupStateTopic)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// GroupStateCluster is a target cluster holding the group state topic
// as groupStateOn leaves it, and a store of it.
func GroupStateCluster(ctx context.Context, t *testing.T) (*kfake.Cluster, *groupstate.Store) {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	return cluster, groupStateOn(ctx, t, cluster)
}

// RunGroupSync runs a writer's group syncer (server.Server's
// RunGroupSync) until the test ends.
func RunGroupSync(t *testing.T, run func(context.Context)) {
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); run(ctx) }()
	t.Cleanup(func() { stop(); wg.Wait() })
}

// GroupOffsets is a GroupOffsets of orders/0, epoch 1: offset per group.
func GroupOffsets(offsets map[string]int64) *ferryv1.ReplicateRequest {
	m := &ferryv1.GroupOffsets{Epoch: 1, ReadAt: time.Now().UnixMilli()}
	for g, o := range offsets {
		m.Groups = append(m.Groups, &ferryv1.GroupOffset{Group: g, Partitions: []*ferryv1.GroupPartitionOffset{{Topic: "orders", Partition: 0, Offset: o}}})
	}
	return &ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_GroupOffsets{GroupOffsets: m}}
}

// GroupOf is link east's group in a writer's group sync state (groups:
// server.Server's Groups), if there.
func GroupOf(groups func() []groupsyncer.Status, group string) (groupsyncer.Status, bool) {
	for _, g := range groups() {
		if g.Link == "east" && g.Group == group {
			return g, true
		}
	}
	return groupsyncer.Status{}, false
}

// SyncUntil sends offsets, as a fetcher does each interval, until every
// group's status in groups satisfies ok (a first read can find the
// shard's index still loading).
func SyncUntil(t *testing.T, groups func() []groupsyncer.Status, stream ferryv1.ReplicationService_ReplicateClient, offsets map[string]int64, what string, ok func(groupsyncer.Status) bool) {
	t.Helper()
	synced := false
	defer func() {
		if !synced {
			t.Logf("groups %+v", groups())
		}
	}()
	testwait.For(t, 15*time.Second, what, func() bool {
		if err := stream.Send(GroupOffsets(offsets)); err != nil {
			t.Fatalf("send group offsets: %v", err)
		}
		for g := range offsets {
			if st, found := GroupOf(groups, g); !found || !ok(st) {
				return false
			}
		}
		return true
	})
	synced = true
}

// StandsFor is whether the group stands on orders/0 for source offset s,
// as Ferry's marker says: moved there by this sync or, when a later sync
// found it there already, unchanged (a poll can miss the sync that moved
// it). Where exactly it stands on the target each test checks after.
func StandsFor(g groupsyncer.Status, s int64) bool {
	return (g.Outcome == "moved" || g.Outcome == "unchanged") && len(g.Partitions) == 1 && g.Partitions[0].StandsFor == s
}
