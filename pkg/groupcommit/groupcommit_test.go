package groupcommit

import (
	"context"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/pkg/groupsync"
)

// target is a kfake cluster with topic "src.orders" (2 partitions), a
// franz-go client to look with and a Committer.
func target(t *testing.T) (*kfake.Cluster, *kadm.Client, *Committer) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "src.orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	for p := range int32(2) {
		for range 20 {
			if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "src.orders", Partition: p, Value: []byte("x")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	sc, err := sarama.NewClient(c.ListenAddrs(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close() })
	gc, err := New(sc)
	if err != nil {
		t.Fatal(err)
	}
	return c, kadm.NewClient(cl), gc
}

var p0, p1 = TopicPartition{"src.orders", 0}, TopicPartition{"src.orders", 1}

// committed is the group's committed offset and metadata on tp.
func committed(t *testing.T, adm *kadm.Client, group string, tp TopicPartition) (int64, string) {
	t.Helper()
	os, err := adm.FetchOffsets(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := os.Lookup(tp.Topic, tp.Partition)
	if !ok {
		return -1, ""
	}
	return o.At, o.Metadata
}

func sync(t *testing.T, gc *Committer, group string, want map[TopicPartition]Position) Result {
	t.Helper()
	res, err := gc.Sync(group, want)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestGroupMovesForwardOnly(t *testing.T) {
	_, adm, gc := target(t)
	if res := sync(t, gc, "app", map[TopicPartition]Position{p0: {Target: 5, Source: 105}, p1: {Target: 7, Source: 207}}); res.Outcome != Moved || res.Moved != 2 {
		t.Fatalf("first sync: %+v", res)
	}
	if o, md := committed(t, adm, "app", p0); o != 5 || md != groupsync.Marker(105) {
		t.Fatalf("p0 at %d %q, want 5 %q", o, md, groupsync.Marker(105))
	}
	if res := sync(t, gc, "app", map[TopicPartition]Position{p0: {Target: 5, Source: 105}}); res.Outcome != Unchanged {
		t.Fatalf("same position: %+v", res)
	}
	// p0 forward, p1 backwards: only p0 moves.
	res := sync(t, gc, "app", map[TopicPartition]Position{p0: {Target: 9, Source: 109}, p1: {Target: 3, Source: 203}})
	if res.Outcome != Moved || res.Moved != 1 || res.Backwards != 1 {
		t.Fatalf("forward and backwards: %+v", res)
	}
	if o, _ := committed(t, adm, "app", p0); o != 9 {
		t.Fatalf("p0 at %d, want 9", o)
	}
	if o, md := committed(t, adm, "app", p1); o != 7 || md != groupsync.Marker(207) {
		t.Fatalf("p1 moved backwards to %d %q", o, md)
	}
	// Where the group stands after the Sync, as its markers say: p0 at
	// its new position, p1 where it was, standing for source 207.
	if res.At[p0] != (Position{Target: 9, Source: 109}) || res.At[p1] != (Position{Target: 7, Source: 207}) {
		t.Fatalf("positions after the sync %+v, want p0 9 (source 109), p1 7 (source 207)", res.At)
	}
}

// A group with members on the target is never moved: the broker refuses
// the commit, in the same step.
func TestActiveGroupIsNeverMoved(t *testing.T) {
	c, adm, gc := target(t)
	sync(t, gc, "app", map[TopicPartition]Position{p0: {Target: 2, Source: 102}})
	assigned := make(chan struct{}, 1)
	cons, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup("app"), kgo.ConsumeTopics("src.orders"),
		kgo.DisableAutoCommit(),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {
			select {
			case assigned <- struct{}{}:
			default:
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() { // polling keeps the member in the group
		for ctx.Err() == nil {
			cons.PollFetches(ctx)
		}
	}()
	select {
	case <-assigned:
	case <-ctx.Done():
		t.Fatal("the consumer never joined")
	}
	if res := sync(t, gc, "app", map[TopicPartition]Position{p0: {Target: 9, Source: 109}}); res.Outcome != Active {
		t.Fatalf("sync of an active group: %+v", res)
	}
	if o, _ := committed(t, adm, "app", p0); o != 2 {
		t.Fatalf("an active group moved to %d", o)
	}
	cancel()
}

// Offsets someone else committed on the target (a consumer that moved
// there, or one using assign()) make the group theirs.
func TestGroupCommittedByOthersIsLeftAlone(t *testing.T) {
	for name, metadata := range map[string]string{"plain": "", "app's own": "checkpoint-7", "forged marker": groupsync.MarkerPrefix + "x"} {
		t.Run(name, func(t *testing.T) {
			_, adm, gc := target(t)
			sync(t, gc, "app", map[TopicPartition]Position{p0: {Target: 2, Source: 102}})
			os := kadm.Offsets{}
			os.Add(kadm.Offset{Topic: p0.Topic, Partition: p0.Partition, At: 4, LeaderEpoch: -1, Metadata: metadata})
			if _, err := adm.CommitOffsets(context.Background(), "app", os); err != nil {
				t.Fatal(err)
			}
			res := sync(t, gc, "app", map[TopicPartition]Position{p0: {Target: 9, Source: 109}, p1: {Target: 9, Source: 209}})
			if res.Outcome != Owned {
				t.Fatalf("sync over another client's offsets: %+v", res)
			}
			if o, _ := committed(t, adm, "app", p0); o != 4 {
				t.Fatalf("p0 moved to %d", o)
			}
			if o, _ := committed(t, adm, "app", p1); o != -1 {
				t.Fatalf("p1 committed (%d) for a group someone else owns", o)
			}
		})
	}
}

// Move with Options, as ferryctl failback --move-groups moves groups back
// to the old source: TakeOver commits over another client's offsets,
// forward only by the target offset (StepMoved, StepMarked where it
// stands, StepBackwards left) unless Backwards; DryRun commits nothing.
func TestMoveTakesOverForwardOnly(t *testing.T) {
	_, adm, gc := target(t)
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: p0.Topic, Partition: p0.Partition, At: 4, LeaderEpoch: -1, Metadata: "app's"})
	os.Add(kadm.Offset{Topic: p1.Topic, Partition: p1.Partition, At: 8, LeaderEpoch: -1, Metadata: "app's"})
	if _, err := adm.CommitOffsets(context.Background(), "app", os); err != nil {
		t.Fatal(err)
	}
	want := map[TopicPartition]Position{p0: {Target: 4, Source: 104}, p1: {Target: 6, Source: 206}}
	for _, c := range []struct {
		name   string
		o      Options
		steps  map[TopicPartition]string
		p0, p1 int64
	}{
		{"dry run", Options{TakeOver: true, DryRun: true}, map[TopicPartition]string{p0: StepMarked, p1: StepBackwards}, 4, 8},
		{"take over", Options{TakeOver: true}, map[TopicPartition]string{p0: StepMarked, p1: StepBackwards}, 4, 8},
		{"backwards", Options{TakeOver: true, Backwards: true}, map[TopicPartition]string{p0: StepUnchanged, p1: StepMoved}, 4, 6},
	} {
		res, err := gc.Move("app", want, c.o)
		if err != nil {
			t.Fatal(err)
		}
		for tp, step := range c.steps {
			if res.Steps[tp].Action != step {
				t.Errorf("%s: %s/%d %+v, want %s", c.name, tp.Topic, tp.Partition, res.Steps[tp], step)
			}
		}
		o0, md0 := committed(t, adm, "app", p0)
		o1, _ := committed(t, adm, "app", p1)
		if o0 != c.p0 || o1 != c.p1 {
			t.Errorf("%s: group at %d, %d, want %d, %d", c.name, o0, o1, c.p0, c.p1)
		}
		if marked := md0 == groupsync.Marker(104); marked == c.o.DryRun {
			t.Errorf("%s: p0's metadata %q", c.name, md0)
		}
	}
	if res := sync(t, gc, "other", want); res.Outcome != Moved {
		t.Fatalf("a group without offsets: %+v", res)
	}
}
