package server

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ferry-replicator/ferry/pkg/batch"
	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/pkg/refusal"
	"github.com/ferry-replicator/ferry/services/writer/internal/topicfilter"
)

// TestRecordTooLargeForTheTargetIsRefusedByName sends a batch holding one
// record the target can never take, above the producer's limit or above
// the target topic's max.message.bytes: the stream must end with a
// refusal naming topic, partition, offset, size and the limit's setting
// (so the fetcher stops that partition instead of retrying for ever),
// count it, and write nothing of the batch.
func TestRecordTooLargeForTheTargetIsRefusedByName(t *testing.T) {
	tests := []struct {
		name        string
		topicMax    int // target topic's max.message.bytes; 0: broker default
		valueBytes  int
		wantSetting string
		// lowerAfterOpen sets topicMax after the open instead, so only the
		// target's refusal can tell.
		lowerAfterOpen bool
	}{
		{"above producer.max_message_bytes", 0, 150_000, "producer.max_message_bytes", false},
		{"above the target topic's max.message.bytes", 20_000, 30_000, "target topic orders max.message.bytes 20000", false},
		{"refused by the target", 20_000, 30_000, "what the target accepts (topic orders max.message.bytes", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := startWriterWith(t, []Link{{Name: "east", Topics: mustFilter(t, topicfilter.DefaultInclude, topicfilter.DefaultExclude)}},
				func(c *ProducerSettings) { c.MaxMessageBytes, c.Compression = 100_000, recordbatch.None })
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cl, err := kgo.NewClient(kgo.SeedBrokers(w.cluster.ListenAddrs()...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			adm := kadm.NewClient(cl)
			limit := strconv.Itoa(tt.topicMax)
			if tt.topicMax > 0 && !tt.lowerAfterOpen {
				if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &limit}, "orders"); err != nil {
					t.Fatal(err)
				}
			}
			stream := w.openOrders(ctx, t, "east")
			if tt.lowerAfterOpen {
				res, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: &limit}}, "orders")
				if err == nil {
					_, err = res.On("orders", nil)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			codecs, err := batch.NewCodecs(2 << 20)
			if err != nil {
				t.Fatal(err)
			}
			defer codecs.Close()
			var enc batch.Encoder
			enc.Append(40, time.Now().UnixMilli(), []byte("small"), []byte("fits"), nil)
			enc.Append(41, time.Now().UnixMilli(), []byte("big"), bytes.Repeat([]byte("x"), tt.valueBytes), nil)
			b := codecs.Seal(&enc, ferryv1.Codec_CODEC_NONE)
			b.Sequence, b.Epoch, b.Topic, b.Partition = 1, 1, "orders", 0
			if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Batch{Batch: b}}); err != nil {
				t.Fatal(err)
			}
			var recvErr error
			for recvErr == nil {
				_, recvErr = stream.Recv()
			}
			if status.Code(recvErr) != codes.FailedPrecondition {
				t.Fatalf("stream ended with %v, want FailedPrecondition", recvErr)
			}
			r, ok := refusal.From(recvErr)
			if !ok {
				t.Fatalf("no refusal in %v", recvErr)
			}
			if r.Reason != refusal.RecordTooLarge || r.Topic != "orders" || r.Partition != 0 || r.Offset != 41 ||
				r.Size <= int64(tt.valueBytes) || (!tt.lowerAfterOpen && (r.Limit <= 0 || r.Limit >= r.Size)) || !strings.Contains(r.Setting, tt.wantSetting) {
				t.Fatalf("refusal %+v", r)
			}
			if got := w.rejected(t, "east", "record_too_large"); got != 1 {
				t.Errorf("rejected{reason=record_too_large} = %v, want 1", got)
			}
			// Refused before producing, nothing of the batch is written; a
			// refusal only the target could make may follow the batch's
			// smaller records (at-least-once: they are copied again).
			if hw := w.cluster.PartitionInfo("orders", 0).HighWatermark; hw != 0 && !tt.lowerAfterOpen {
				t.Errorf("target orders/0 high watermark %d: records of the refused batch were written", hw)
			}
		})
	}
}
