package servertest

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/shards"
)

// The fetcher's side of a stream, on topic orders.

// OpenShard sends an Open as shard of link (n shards) at epoch, listing
// the shard's first partition of orders (orders/0 in a link of one
// shard), and returns the stream and its first answer's error (nil:
// Opened).
func OpenShard(ctx context.Context, t *testing.T, c ferryv1.ReplicationServiceClient, link string, shard, n uint32, epoch uint64) (ferryv1.ReplicationService_ReplicateClient, error) {
	t.Helper()
	stream, err := c.Replicate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := int32(0)
	if shard < n {
		p = InShard("orders", shard, n)
	}
	open := &ferryv1.Open{Link: link, Shard: shard, Epoch: epoch, Fetcher: "f",
		Topics:     []*ferryv1.TopicSpec{{Name: "orders", PartitionCount: p + 1}},
		Partitions: []*ferryv1.TopicPartition{{Topic: "orders", Partition: p}}}
	// A writer that refuses the peer (tls.allowed_ids) ends the stream
	// before it reads the Open: Send then says only io.EOF, and Recv
	// gives the refusal.
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Open{Open: open}}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err == nil && resp.GetOpened() == nil {
		t.Fatalf("open answered %v, want Opened", resp)
	}
	return stream, err
}

// InShard is the first partition of topic in shard when the link has n
// shards (shards.Of, as the fetchers place them).
func InShard(topic string, shard, n uint32) int32 {
	for p := int32(0); ; p++ {
		if shards.Of(topic, p, int(n)) == int(shard) {
			return p
		}
	}
}

// OpenOrdersFrom opens shard 0 of link over partition 0 of topic orders,
// from the source cluster whose Kafka cluster id is source, and returns
// the stream and the writer's Opened.
func OpenOrdersFrom(ctx context.Context, t *testing.T, c ferryv1.ReplicationServiceClient, link, source string) (ferryv1.ReplicationService_ReplicateClient, *ferryv1.Opened) {
	t.Helper()
	stream, err := c.Replicate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	open := &ferryv1.Open{Link: link, Shard: 0, Epoch: 1, Fetcher: "f1", SourceClusterId: source,
		Topics:     []*ferryv1.TopicSpec{{Name: "orders", PartitionCount: 1}},
		Partitions: []*ferryv1.TopicPartition{{Topic: "orders", Partition: 0}}}
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Open{Open: open}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil || resp.GetOpened() == nil {
		t.Fatalf("open answered %v, %v; want Opened", resp, err)
	}
	return stream, resp.GetOpened()
}

// CloseStream ends a stream as a fetcher closing its shard does, and
// waits for the writer to end it.
func CloseStream(t *testing.T, stream ferryv1.ReplicationService_ReplicateClient) {
	t.Helper()
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := stream.Recv(); err != nil {
			return
		}
	}
}

// SendTo sends b as batch seq of orders/partition without waiting.
func SendTo(t *testing.T, stream ferryv1.ReplicationService_ReplicateClient, seq uint64, partition int32, b *ferryv1.Batch) {
	t.Helper()
	b.Sequence, b.Epoch, b.Topic, b.Partition = seq, 1, "orders", partition
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Batch{Batch: b}}); err != nil {
		t.Fatal(err)
	}
}

// AwaitAck waits for the ack of batch seq (or of a later one) or the
// stream's end.
func AwaitAck(stream ferryv1.ReplicationService_ReplicateClient, seq uint64) error {
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		if ack := resp.GetAck(); ack != nil && ack.GetSequence() >= seq {
			return nil
		}
	}
}

// SendToPartition sends a wire batch of Kafka batches to orders/partition
// as batch seq, and returns its ack or the stream's end.
func SendToPartition(t *testing.T, stream ferryv1.ReplicationService_ReplicateClient, seq uint64, partition int32, first int64, raws ...[]byte) error {
	t.Helper()
	b := WireKafka(t, first, raws...)
	b.Sequence, b.Epoch, b.Topic, b.Partition = seq, 1, "orders", partition
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Batch{Batch: b}}); err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		if ack := resp.GetAck(); ack != nil && ack.GetSequence() == seq {
			return nil
		}
	}
}

// MustSend sends the Kafka batches as one wire batch of orders/partition
// copying from first, as batch seq, and waits for its acknowledgement.
func MustSend(t *testing.T, stream ferryv1.ReplicationService_ReplicateClient, seq uint64, partition int32, first int64, raws ...[]byte) {
	t.Helper()
	if err := SendToPartition(t, stream, seq, partition, first, raws...); err != nil {
		t.Fatalf("batch %d: stream ended: %v", seq, err)
	}
}

// WantRefusal fails the test unless err is a status of code whose
// message says each of parts.
func WantRefusal(t *testing.T, err error, code codes.Code, parts ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("answered %v (%v), want %v", status.Code(err), err, code)
	}
	for _, p := range parts {
		if !strings.Contains(status.Convert(err).Message(), p) {
			t.Errorf("refusal %q does not say %q", status.Convert(err).Message(), p)
		}
	}
}

// BothModes runs f as a subtest in each delivery mode.
func BothModes(t *testing.T, f func(t *testing.T, exactlyOnce bool)) {
	for _, exactlyOnce := range []bool{false, true} {
		t.Run(map[bool]string{false: "at-least-once", true: "exactly-once"}[exactlyOnce], func(t *testing.T) { f(t, exactlyOnce) })
	}
}
