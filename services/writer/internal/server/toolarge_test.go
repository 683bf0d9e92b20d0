package server

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
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

// TestTargetRefusalNamesTheRecord has the target's brokers refuse the
// batch of orders/0 (kfake ControlKey), for good or for now, in both
// delivery modes: a refusal for good (producer.Permanent) ends the stream
// with a refusal naming topic, partition, the record's source offset (the
// one the target named, else the batch's first) and Kafka's error, so the
// fetcher stops only that partition; any other refusal ends it as
// Unavailable, so the fetcher reopens it. Nothing of the batch is written.
func TestTargetRefusalNamesTheRecord(t *testing.T) {
	tests := []struct {
		name       string
		code       int16
		record     int32 // the record the target names; -1 none
		wantOffset int64 // -1: no refusal, the stream ends Unavailable
	}{
		{"invalid record, named", kerr.InvalidRecord.Code, 1, 41},
		{"invalid timestamp, unnamed", kerr.InvalidTimestamp.Code, -1, 40},
		{"not enough replicas", kerr.NotEnoughReplicas.Code, -1, -1},
	}
	for _, tt := range tests {
		for _, exactlyOnce := range []bool{false, true} {
			t.Run(tt.name+"/exactly-once="+strconv.FormatBool(exactlyOnce), func(t *testing.T) {
				w := startWriterWith(t, []Link{{Name: "east", ExactlyOnce: exactlyOnce, Topics: mustFilter(t, topicfilter.DefaultInclude, topicfilter.DefaultExclude)}},
					func(c *ProducerSettings) { c.Compression = recordbatch.None })
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				stream := w.openOrders(ctx, t, "east")
				// Exactly-once opens end what older producers left open on
				// the data partitions: an abort marker may be there.
				hwBefore := w.cluster.PartitionInfo("orders", 0).HighWatermark
				w.cluster.ControlKey(kmsg.Produce.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
					r := req.(*kmsg.ProduceRequest)
					if len(r.Topics) == 0 || r.Topics[0].Topic != "orders" {
						w.cluster.KeepControl()
						return nil, nil, false // a checkpoint or registry write
					}
					resp := r.ResponseKind().(*kmsg.ProduceResponse)
					for _, rt := range r.Topics {
						st := kmsg.NewProduceResponseTopic()
						st.Topic = rt.Topic
						for _, rp := range rt.Partitions {
							sp := kmsg.NewProduceResponseTopicPartition()
							sp.Partition, sp.ErrorCode, sp.BaseOffset = rp.Partition, tt.code, -1
							sp.ErrorMessage = kmsg.StringPtr("refused by the test")
							if tt.record >= 0 {
								e := kmsg.NewProduceResponseTopicPartitionErrorRecord()
								e.RelativeOffset = tt.record
								sp.ErrorRecords = append(sp.ErrorRecords, e)
							}
							st.Partitions = append(st.Partitions, sp)
						}
						resp.Topics = append(resp.Topics, st)
					}
					return resp, nil, true
				})
				codecs, err := batch.NewCodecs(2 << 20)
				if err != nil {
					t.Fatal(err)
				}
				defer codecs.Close()
				var enc batch.Encoder
				enc.Append(40, time.Now().UnixMilli(), []byte("k"), []byte("first"), nil)
				enc.Append(41, time.Now().UnixMilli(), nil, []byte("second"), nil)
				b := codecs.Seal(&enc, ferryv1.Codec_CODEC_NONE)
				b.Sequence, b.Epoch, b.Topic, b.Partition = 1, 1, "orders", 0
				if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Batch{Batch: b}}); err != nil {
					t.Fatal(err)
				}
				var recvErr error
				for recvErr == nil {
					_, recvErr = stream.Recv()
				}
				r, ok := refusal.From(recvErr)
				if tt.wantOffset < 0 {
					if ok || status.Code(recvErr) != codes.Unavailable {
						t.Fatalf("stream ended with %v, want Unavailable without a refusal", recvErr)
					}
				} else {
					if !ok || status.Code(recvErr) != codes.FailedPrecondition {
						t.Fatalf("stream ended with %v, want a refusal", recvErr)
					}
					name := kerr.ErrorForCode(tt.code).(*kerr.Error).Message
					if r.Reason != refusal.TargetRefused || r.Topic != "orders" || r.Partition != 0 || r.Offset != tt.wantOffset ||
						!strings.Contains(r.Cause, name) || !strings.Contains(r.Cause, "refused by the test") {
						t.Fatalf("refusal %+v, want TARGET_REFUSED of orders/0 offset %d naming %s", r, tt.wantOffset, name)
					}
					if got := w.rejected(t, "east", "target_refused"); got != 1 {
						t.Errorf("rejected{reason=target_refused} = %v, want 1", got)
					}
				}
				// Read uncommitted: nothing of the batch reached the log (an
				// exactly-once stream's abort marker may follow hwBefore).
				if got := dataRecordsFrom(t, w, "orders", 0, hwBefore); len(got) != 0 {
					t.Errorf("target orders/0 holds %q from offset %d: records of the refused batch were written", got, hwBefore)
				}
			})
		}
	}
}

// dataRecordsFrom are the values of the data records (not transaction
// markers, committed or not) of topic/partition at or after offset.
func dataRecordsFrom(t *testing.T, w *testWriter, topic string, partition int32, offset int64) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.cluster.ListenAddrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(offset)}}),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var out []string
	for ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { out = append(out, string(r.Value)) })
	}
	return out
}
