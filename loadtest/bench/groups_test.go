package bench

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The bench's groups stand at (i+1)/(n+1) of every partition's end, and
// groupsOn counts only groups holding offsets of the topic asked.
func TestCommitGroupsSpreadsOverEveryPartition(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := c.ListenAddrs()[0]
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// 30 records on partition 0, 60 on partition 1.
	for p, n := range []int{30, 60} {
		for range n {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Partition: int32(p), Value: []byte("v")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := readyCoordinator(ctx, addr); err != nil {
		t.Fatal(err)
	}
	if err := commitGroups(ctx, addr, "t", 2); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	want := map[string][2]int64{"bench-group-0": {10, 20}, "bench-group-1": {20, 40}}
	for g, w := range want {
		offs, err := adm.FetchOffsets(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		for p := range int32(2) {
			o, ok := offs.Lookup("t", p)
			if !ok || o.At != w[p] {
				t.Errorf("%s partition %d: committed %v (found %v), want %d", g, p, o.At, ok, w[p])
			}
		}
	}
	if n, err := groupsOn(ctx, addr, "t", 3); err != nil || n != 2 {
		t.Errorf("groupsOn t of 3 groups = %d, %v; want 2 (bench-group-2 was never committed)", n, err)
	}
	if n, err := groupsOn(ctx, addr, "other", 2); err != nil || n != 0 {
		t.Errorf("groupsOn other = %d, %v; want 0", n, err)
	}
}
