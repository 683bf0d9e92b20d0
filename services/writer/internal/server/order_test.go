package server

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferry-replicator/ferry/pkg/batch"
	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/services/writer/internal/topicfilter"
)

// TestFailedRoundLeavesAPrefix is the at-least-once reordering the fault
// soak found (seed 105), forced: a round whose records need several target
// batches of one partition has its second produce request refused. The
// stream must end unacknowledged, and the target partition must hold only
// the records before the refused batch, none after it, so the resent round
// lands after a prefix of itself: duplicates, never reordering. (sarama's
// producer rolled its idempotent epoch over and wrote the later batches.)
func TestFailedRoundLeavesAPrefix(t *testing.T) {
	w := startWriterWith(t, []Link{{Name: "east", Topics: mustFilter(t, topicfilter.DefaultInclude, topicfilter.DefaultExclude)}},
		func(c *ProducerSettings) { c.MaxMessageBytes, c.Compression = 4096, recordbatch.None })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream := w.openOrders(ctx, t, "east")

	produces := 0
	w.cluster.ControlKey(kmsg.Produce.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		w.cluster.KeepControl()
		r := req.(*kmsg.ProduceRequest)
		if len(r.Topics) != 1 || r.Topics[0].Topic != "orders" {
			return nil, nil, false
		}
		if produces++; produces != 2 {
			return nil, nil, false
		}
		resp := r.ResponseKind().(*kmsg.ProduceResponse)
		st := kmsg.NewProduceResponseTopic()
		st.Topic = "orders"
		for _, rp := range r.Topics[0].Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition, sp.ErrorCode = rp.Partition, kerr.NotEnoughReplicas.Code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
		return resp, nil, true
	})

	codecs, err := batch.NewCodecs(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer codecs.Close()
	var enc batch.Encoder
	const records = 30 // 500 bytes each: several batches under 4 KiB
	for i := range records {
		enc.Append(int64(i), time.Now().UnixMilli(), nil, bytes.Repeat([]byte{byte('a' + i%26)}, 500), nil)
	}
	b := codecs.Seal(&enc, ferryv1.Codec_CODEC_NONE)
	b.Sequence, b.Epoch, b.Topic, b.Partition = 1, 1, "orders", 0
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Batch{Batch: b}}); err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			break
		}
		if resp.GetAck() != nil {
			t.Fatal("a round that failed in part was acknowledged")
		}
	}
	if produces < 2 {
		t.Fatalf("%d produce requests for orders: the round did not need several batches", produces)
	}

	hw := w.cluster.PartitionInfo("orders", 0).HighWatermark
	if hw == 0 || hw >= records {
		t.Fatalf("target orders/0 holds %d records, want the first batch's only (between 1 and %d)", hw, records-1)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.cluster.ListenAddrs()...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"orders": {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []string
	for int64(len(got)) < hw {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading orders/0: %v", ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value[:1])) })
	}
	for i, v := range got {
		if want := string(rune('a' + i%26)); v != want {
			t.Fatalf("target record %d is source record %q, want %q: the target is not a prefix of the round (%v)", i, v, want, got)
		}
	}
	t.Logf("the failed round left the first %d of %d records", hw, records)
}
