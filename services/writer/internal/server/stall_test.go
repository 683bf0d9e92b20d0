package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/pkg/shards"
)

// stallTopic has a long name, so that each acknowledgement of its
// partitions is large and a peer reading none fills the HTTP/2 windows
// (64 KiB on the peer's side, as much again in the writer's transport) in
// a few hundred batches.
var stallTopic = "stall-" + strings.Repeat("x", 190)

// dialFixedWindows connects a client whose HTTP/2 windows are fixed at
// gRPC's smallest (no bandwidth estimate grows them): one that stops
// reading blocks the writer's sends soon.
func (w *testWriter) dialFixedWindows(t *testing.T) ferryv1.ReplicationServiceClient {
	t.Helper()
	return w.h.Dial(t, insecure.NewCredentials(), grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
}

// ackWithin is awaitAck bounded by d.
func ackWithin(stream ferryv1.ReplicationService_ReplicateClient, seq uint64, d time.Duration) error {
	got := make(chan error, 1) // the Recv ends with the stream's context
	go func() { got <- awaitAck(stream, seq) }()
	select {
	case err := <-got:
		return err
	case <-time.After(d):
		return errors.New("no acknowledgement within " + d.String())
	}
}

// TestPeerReadingNoAcksStallsNoOtherStream (issue 41, item 6): a peer that
// sends batches and stops reading its stream's acknowledgements must not take the writer's whole budget from
// the other streams until its connection's maximum age. Its stream ends
// within the ack timeout, naming the peer, and gives its bytes back; the
// other shard's stream, from another peer, copies on throughout. (The
// peer cannot lower its batches' charge by claiming a small uncompressed
// size: the claim must match the payload decompressed, and is charged
// only for a compressed payload, beside the wire bytes.)
func TestPeerReadingNoAcksStallsNoOtherStream(t *testing.T) {
	const (
		shardCount = 2
		topicParts = 400 // stallTopic's partitions
		stallParts = 100 // of them in the stalling shard
		perPart    = 20  // one-record batches of each
		size       = 20  // records in each batch of the other shard
		ackTimeout = 2 * time.Second
		bound      = 15 * time.Second // what the other shard may wait for an ack
	)
	_, widest := budgetBatches(t, 1, size)
	limit := 4 * widest
	w := startWriterOptions(t, withShards(passthroughLinks(t, false), shardCount), func(o *Options) {
		o.MaxBufferedBytes, o.AckTimeout = limit, ackTimeout
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The stalling peer's shard is the one orders/0 is not in.
	stallShard := 1 - shards.Of("orders", 0, shardCount)
	var parts []int32
	for p := int32(0); len(parts) < stallParts; p++ {
		if shards.Of(stallTopic, p, shardCount) == stallShard {
			parts = append(parts, p)
		}
	}
	open := &ferryv1.Open{Link: "east", Shard: uint32(stallShard), Epoch: 1, Fetcher: "staller",
		Topics: []*ferryv1.TopicSpec{{Name: stallTopic, PartitionCount: topicParts}}}
	for _, p := range parts {
		open.Partitions = append(open.Partitions, &ferryv1.TopicPartition{Topic: stallTopic, Partition: p})
	}
	// Round robin over the partitions, so a round's acknowledgement
	// carries a position for each of its batches.
	var flood []*ferryv1.Batch
	for off := range int64(perPart) {
		b := wireKafka(t, off, sourceBatch(t, off, 1, nil, recordbatch.None, 0))
		for _, p := range parts {
			c := proto.Clone(b).(*ferryv1.Batch)
			c.Sequence, c.Epoch, c.Topic, c.Partition = uint64(len(flood)+1), 1, stallTopic, p
			flood = append(flood, c)
		}
	}

	other := w.openPartition(ctx, t, 0)
	stalling, stopStalling := context.WithCancel(ctx)
	defer stopStalling()
	a, err := w.dialFixedWindows(t).Replicate(stalling)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Open{Open: open}}); err != nil {
		t.Fatal(err)
	}
	if resp, err := a.Recv(); err != nil || resp.GetOpened() == nil {
		t.Fatalf("open answered %v, %v; want Opened", resp, err)
	}
	// From here on the stalling peer reads nothing.
	flooded := make(chan error, 1)
	go func() {
		for _, b := range flood {
			if err := a.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Batch{Batch: b}}); err != nil {
				flooded <- err
				return
			}
		}
		flooded <- nil
	}()

	// The other shard copies a batch at a time until the stalling stream
	// has ended at the writer, and one more after that. (Its peer's end of
	// it stays open until the peer reads: gRPC writes a stream's status
	// after the data it queued for it.)
	streams := func() int { return int(testutil.ToFloat64(w.srv.metrics.Streams)) }
	stallEnded := false
	for seq := uint64(1); ; seq++ {
		first := int64(seq-1) * size
		sendTo(t, other, seq, 0, wireKafka(t, first, sourceBatch(t, first, size, nil, recordbatch.None, 0)))
		if err := ackWithin(other, seq, bound); err != nil {
			t.Fatalf("orders/0: batch %d: %v, while another peer reads no acks (the budget holds %d of %d bytes, %d receivers waiting)",
				seq, err, w.srv.budget.InUse(), limit, w.srv.budget.Waiting())
		}
		if stallEnded {
			break
		}
		stallEnded = streams() == 1
		select {
		case err := <-flooded:
			if err == nil {
				t.Fatalf("all %d batches of the stalling peer were taken: its acknowledgements never blocked the writer", len(flood))
			}
			t.Fatalf("the stalling peer's send: %v", err)
		default:
		}
		if ctx.Err() != nil {
			t.Fatal("the stalling peer's stream neither ended nor stalled the other stream")
		}
	}

	// The stalling stream ended on its acknowledgements, naming its peer.
	var end error
	for end == nil {
		_, end = a.Recv()
	}
	if msg := end.Error(); !strings.Contains(msg, "acknowledgement") || !strings.Contains(msg, "staller") {
		t.Errorf("stalling stream ended with %q, want the ack timeout naming its fetcher", msg)
	}
	w.waitBuffered(t, 0, "all acknowledged, the stalling stream gone")
}
