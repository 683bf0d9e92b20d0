package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// benchGroup names the i-th consumer group the catch-up runs commit on the
// source (Config.Groups).
func benchGroup(i int) string { return fmt.Sprintf("bench-group-%d", i) }

// commitGroups commits n member-less consumer groups on the source topic,
// group i at (i+1)/(n+1) of every partition's end, so that a replicator
// syncing groups has positions to translate on every shard: those the
// copy has passed need its offset index, the others land at the copied
// end and move on as data arrives.
func commitGroups(ctx context.Context, addr, topic string, n int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("groups: end offsets of %s: %w", topic, err)
	}
	for i := range n {
		var offs kadm.Offsets
		ends.Each(func(o kadm.ListedOffset) {
			offs.AddOffset(o.Topic, o.Partition, o.Offset*int64(i+1)/int64(n+1), -1)
		})
		resp, err := adm.CommitOffsets(ctx, benchGroup(i), offs)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			return fmt.Errorf("groups: commit %s: %w", benchGroup(i), err)
		}
	}
	return nil
}

// groupsOn counts the bench's groups holding committed offsets for topic
// on the cluster at addr: on the target, the groups a replicator synced.
func groupsOn(ctx context.Context, addr, topic string, n int) (int, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	found := 0
	for i := range n {
		offs, err := adm.FetchOffsets(ctx, benchGroup(i))
		if errors.Is(err, kerr.GroupIDNotFound) {
			continue // not synced (Kafka answers an empty list, kfake this)
		}
		if err != nil {
			return 0, fmt.Errorf("groups: fetch %s: %w", benchGroup(i), err)
		}
		if len(offs[topic]) > 0 {
			found++
		}
	}
	return found, nil
}

// readyCoordinator has the cluster at addr create its group coordinator
// (the __consumer_offsets topic) and waits until it answers. A target
// where consumers run has one already; created inside a measured copy, it
// would be charged to the first system that commits a group there.
func readyCoordinator(ctx context.Context, addr string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		r := adm.FindGroupCoordinators(ctx, benchGroup(0))[benchGroup(0)]
		if r.Err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("groups: no group coordinator at %s: %w", addr, r.Err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
