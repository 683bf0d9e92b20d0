package server

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
)

// openOrdersAs opens shard 1 of link over orders/0 with the given source
// topic id and returns the stream and orders/0's resume position.
func (w *testWriter) openOrdersAs(ctx context.Context, t *testing.T, link string, id []byte) (ferryv1.ReplicationService_ReplicateClient, *ferryv1.PartitionPosition) {
	t.Helper()
	stream, err := w.client.Replicate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	open := &ferryv1.Open{Link: link, Shard: 0, Epoch: 1, Fetcher: "f1",
		Topics:     []*ferryv1.TopicSpec{{Name: "orders", PartitionCount: 1, TopicId: id}},
		Partitions: []*ferryv1.TopicPartition{{Topic: "orders", Partition: 0}}}
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Open{Open: open}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil || resp.GetOpened() == nil || len(resp.GetOpened().GetResume()) != 1 {
		t.Fatalf("open answered %v, %v; want Opened", resp, err)
	}
	return stream, resp.GetOpened().GetResume()[0]
}

// A source topic deleted and created again starts its offsets anew: the
// checkpoint of the old one, which the writer reports with the old id so
// the fetcher stops the partition (or, under on_data_loss: skip, copies
// the new topic from its start), must not refuse the new topic's offsets
// as a replay. The same topic still may not go back.
func TestRecreatedTopicsCheckpointDoesNotBoundItsOffsets(t *testing.T) {
	for _, exactlyOnce := range []bool{false, true} {
		t.Run(fmt.Sprintf("exactly-once %v", exactlyOnce), func(t *testing.T) {
			w := startWriter(t, passthroughLinks(t, exactlyOnce))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			oldID, newID := bytes.Repeat([]byte{1}, 16), bytes.Repeat([]byte{2}, 16)

			stream, _ := w.openOrdersAs(ctx, t, "east", oldID)
			if err := sendKafka(t, stream, 1, 100, sourceBatch(t, 100, 10, nil, recordbatch.None, 0)); err != nil {
				t.Fatalf("old topic's batch: %v", err)
			}
			closeStream(t, stream)

			// The old topic again: going back is a replay.
			stream, pos := w.openOrdersAs(ctx, t, "east", oldID)
			if !pos.GetHasCheckpoint() || pos.GetNextOffset() != 110 || !bytes.Equal(pos.GetSourceTopicId(), oldID) {
				t.Fatalf("resume %v, want the old topic's checkpoint at 110", pos)
			}
			if err := sendKafka(t, stream, 1, 0, sourceBatch(t, 0, 5, nil, recordbatch.None, 0)); status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("a replay of the same topic ended with %v, want FailedPrecondition (out of order)", err)
			}

			// The new topic: the old checkpoint is reported, and its
			// offsets from 0 are taken.
			stream, pos = w.openOrdersAs(ctx, t, "east", newID)
			if !pos.GetHasCheckpoint() || !bytes.Equal(pos.GetSourceTopicId(), oldID) {
				t.Fatalf("resume %v, want the old topic's checkpoint, with its id", pos)
			}
			if err := sendKafka(t, stream, 1, 0, sourceBatch(t, 0, 5, nil, recordbatch.None, 0)); err != nil {
				t.Fatalf("the new topic's first batch: %v", err)
			}
			closeStream(t, stream)
			_, pos = w.openOrdersAs(ctx, t, "east", newID)
			if pos.GetNextOffset() != 5 || !bytes.Equal(pos.GetSourceTopicId(), newID) {
				t.Fatalf("resume %v, want the new topic's checkpoint at 5", pos)
			}
			if got, want := targetValues(t, w), append(vals(100, 110), vals(0, 5)...); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("target values %v, want %v", got, want)
			}
		})
	}
}
