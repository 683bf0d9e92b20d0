package server

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/pkg/testwait"
	"github.com/ferry-replicator/ferry/services/writer/internal/topics"
)

// deletedTopicSpec is the source topic of TestDeletedTargetTopicIsRecreated:
// more partitions than the shard copies and configs to copy, so a
// recreation that forgot either shows.
var deletedTopicSpec = &ferryv1.TopicSpec{Name: "orders", PartitionCount: 3,
	Configs: map[string]string{"retention.ms": "123456789", "compression.type": "zstd"}}

// openDeleted opens orders/0 as deletedTopicSpec describes it and returns
// the stream and orders/0's resume position, or the open's refusal.
func (w *testWriter) openDeleted(ctx context.Context, t *testing.T) (ferryv1.ReplicationService_ReplicateClient, int64, error) {
	t.Helper()
	stream, err := w.client.Replicate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	open := &ferryv1.Open{Link: "east", Shard: 0, Epoch: 1, Fetcher: "f1",
		Topics:     []*ferryv1.TopicSpec{deletedTopicSpec},
		Partitions: []*ferryv1.TopicPartition{{Topic: "orders", Partition: 0}}}
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Open{Open: open}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, 0, err
	}
	if len(resp.GetOpened().GetResume()) != 1 {
		t.Fatalf("open answered %v; want Opened with orders/0's position", resp)
	}
	return stream, resp.GetOpened().GetResume()[0].GetNextOffset(), nil
}

// A target topic deleted under a running writer is created again, with
// the partitions and configs the writer creates it with, and copying goes
// on from the checkpoint: what the fetcher sends after the deletion is all
// on the target, within a bound. What was copied before is gone with the
// topic (the operator deleted it); the checkpoint is not rewound (see
// docs/operations.md, "A target topic deleted"). Before, the writer kept
// the topic as known forever: every open failed to describe it, or every
// produce was refused with UNKNOWN_TOPIC_OR_PARTITION, until a restart.
func TestDeletedTargetTopicIsRecreated(t *testing.T) {
	for _, exactlyOnce := range []bool{false, true} {
		t.Run(fmt.Sprintf("exactly-once %v", exactlyOnce), func(t *testing.T) {
			link := passthroughLinks(t, exactlyOnce)
			link[0].Configs = topics.ConfigCopy{Allow: allowSet(topics.DefaultConfigAllow...)}
			w := startWriter(t, link)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()

			stream, _, err := w.openDeleted(ctx, t)
			if err != nil {
				t.Fatal(err)
			}
			if err := sendKafka(t, stream, 1, 100, sourceBatch(t, 100, 10, nil, recordbatch.None, 0)); err != nil {
				t.Fatalf("batch before the deletion: %v", err)
			}
			created := w.targetConfigs(t, "orders")

			cl, err := kgo.NewClient(kgo.SeedBrokers(w.cluster.ListenAddrs()...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			resps, err := kadm.NewClient(cl).DeleteTopics(ctx, "orders")
			if err == nil {
				err = resps.Error()
			}
			if err != nil {
				t.Fatalf("delete target topic: %v", err)
			}

			// The fetcher goes on: it sends the source from the position
			// the writer resumes it at, opening again after each failed
			// stream, as it does.
			const end = 115
			seq, from := uint64(1), int64(110)
			var last error
			copied := func() bool {
				if stream == nil {
					if stream, from, last = w.openDeleted(ctx, t); last != nil {
						return false
					}
					seq = 0
				}
				seq++
				if last = sendKafka(t, stream, seq, from, sourceBatch(t, from, int(end-from), nil, recordbatch.None, 0)); last != nil {
					stream = nil // the fetcher opens again
					return false
				}
				return true
			}
			testwait.For(t, recreateWithin, "the shard to copy again after the target topic's deletion (a failed stream is opened again, as the fetcher does)", func() bool {
				if copied() {
					return true
				}
				t.Logf("not copied yet: %v", last)
				return false
			})
			closeStream(t, stream)

			if from != 110 {
				t.Errorf("the shard resumed at %d, want 110: the checkpoint goes on, the copied records are gone with the topic", from)
			}
			if got, want := targetValues(t, w), vals(110, end); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("recreated target topic holds %v, want %v", got, want)
			}
			if n := len(w.cluster.PartitionInfos("orders")); n != 3 {
				t.Errorf("recreated target topic has %d partitions, want 3", n)
			}
			if got := w.targetConfigs(t, "orders"); !maps.Equal(got, created) {
				t.Errorf("recreated target topic configs %v, want those it was created with, %v", got, created)
			}
			if got := testutil.ToFloat64(w.srv.metrics.TopicsRecreated.WithLabelValues("orders")); got != 1 {
				t.Errorf("ferry_writer_target_topics_recreated_total{topic=orders} = %v, want 1", got)
			}
		})
	}
}

// recreateWithin bounds how long a shard whose target topic was deleted
// takes to copy again.
const recreateWithin = 10 * time.Second
