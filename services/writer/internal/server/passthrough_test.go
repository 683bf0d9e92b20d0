package server

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ferry-replicator/ferry/pkg/batch"
	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/provenance"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/services/writer/internal/checkpoint"
	"github.com/ferry-replicator/ferry/services/writer/internal/topicfilter"
)

// sendKafka sends the Kafka batches of orders/0 as one wire batch copying
// from first, and returns the stream's end: nil after an ack.
func sendKafka(t *testing.T, stream ferryv1.ReplicationService_ReplicateClient, seq uint64, first int64, raws ...[]byte) error {
	t.Helper()
	_, err := sendWire(t, stream, seq, wireKafka(t, first, raws...))
	return err
}

// sendWire sends b as batch seq of orders/0 and returns its ack, or the
// stream's end.
func sendWire(t *testing.T, stream ferryv1.ReplicationService_ReplicateClient, seq uint64, b *ferryv1.Batch) (*ferryv1.Ack, error) {
	t.Helper()
	b.Sequence, b.Epoch, b.Topic, b.Partition = seq, 1, "orders", 0
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Batch{Batch: b}}); err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		if ack := resp.GetAck(); ack != nil && ack.GetSequence() == seq {
			return ack, nil
		}
	}
}

// targetBatches fetches orders/0's batches raw from the target.
func targetBatches(t *testing.T, w *testWriter) []recordbatch.Info {
	t.Helper()
	out, _ := targetRaw(t, w)
	return out
}

func targetRaw(t *testing.T, w *testWriter) ([]recordbatch.Info, [][]byte) {
	t.Helper()
	return partitionRaw(t, w, 0)
}

// targetValues are the values of orders/0 in order.
func targetValues(t *testing.T, w *testWriter) []string {
	t.Helper()
	return partitionValues(t, w, 0)
}

func passthroughLinks(t *testing.T, exactlyOnce bool) []Link {
	return []Link{{Name: "east", ExactlyOnce: exactlyOnce, Topics: mustFilter(t, topicfilter.DefaultInclude, topicfilter.DefaultExclude)}}
}

// TestKafkaBatchesPassThroughUntouched: a source's compressed batches reach
// the target with their records section byte for byte (no decompression,
// no recompression), under the writer's producer id and sequences.
func TestKafkaBatchesPassThroughUntouched(t *testing.T) {
	for _, tc := range []struct {
		c           recordbatch.Compression
		exactlyOnce bool
	}{{recordbatch.None, false}, {recordbatch.LZ4, false}, {recordbatch.Zstd, false}, {recordbatch.LZ4, true}} {
		c := tc.c
		t.Run(fmt.Sprintf("%v exactly-once %v", c, tc.exactlyOnce), func(t *testing.T) {
			w := startWriter(t, passthroughLinks(t, tc.exactlyOnce))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			stream := w.openOrders(ctx, t, "east")
			// One round each: small batches of a partition sharing a round
			// are merged (TestSmallKafkaBatchesAreMerged).
			a, b := sourceBatch(t, 100, 10, nil, c, 0), sourceBatch(t, 110, 5, nil, c, 0)
			if err := sendKafka(t, stream, 1, 100, a); err != nil {
				t.Fatalf("stream ended: %v", err)
			}
			if err := sendKafka(t, stream, 2, 110, b); err != nil {
				t.Fatalf("stream ended: %v", err)
			}
			infos, raws := targetRaw(t, w)
			if len(raws) != 2 {
				t.Fatalf("target holds %d batches, want the source's 2", len(raws))
			}
			for i, src := range [][]byte{a, b} {
				if !bytes.Equal(raws[i][recordbatch.HeaderSize:], src[recordbatch.HeaderSize:]) || infos[i].Compression() != c {
					t.Errorf("target batch %d's records differ from the source's", i)
				}
				if infos[i].ProducerID == 77 || infos[i].BaseSequence != []int32{0, 10}[i] {
					t.Errorf("target batch %d: producer %d sequence %d, want the writer's producer and sequence %d", i, infos[i].ProducerID, infos[i].BaseSequence, []int32{0, 10}[i])
				}
			}
			if got, want := targetValues(t, w), vals(100, 115); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("target values %v, want %v", got, want)
			}
		})
	}
}

// TestKafkaBatchesThatCannotPassAreRebuilt: a batch straddling the resume
// offset, one with offset gaps (compaction) and one with LogAppendTime are
// rebuilt record by record, keeping exactly the records to copy.
func TestKafkaBatchesThatCannotPassAreRebuilt(t *testing.T) {
	w := startWriter(t, passthroughLinks(t, true))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream := w.openOrders(ctx, t, "east")
	straddle := sourceBatch(t, 100, 10, nil, recordbatch.LZ4, 0)                    // 100..109, copy from 104
	gaps := sourceBatch(t, 110, 0, []int32{0, 2, 3, 7}, recordbatch.None, 0)        // 110, 112, 113, 117
	logTime := sourceBatch(t, 118, 3, nil, recordbatch.None, 8 /* LogAppendTime */) // 118..120
	if err := sendKafka(t, stream, 1, 104, straddle, gaps, logTime); err != nil {
		t.Fatalf("stream ended: %v", err)
	}
	want := append(append(vals(104, 110), "v110", "v112", "v113", "v117"), vals(118, 121)...)
	if got := targetValues(t, w); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("target values %v, want %v", got, want)
	}
	for _, info := range targetBatches(t, w) {
		if info.LogAppendTime() || info.NumRecords != info.LastOffsetDelta+1 {
			t.Errorf("target batch at %d: LogAppendTime %v, %d records over %d offsets", info.BaseOffset, info.LogAppendTime(), info.NumRecords, info.LastOffsetDelta+1)
		}
	}
}

// TestDamagedKafkaBatchIsRefused: one flipped byte in a source batch (under
// its own CRC) refuses the whole wire batch as data loss, and nothing of it
// is written, not even its sound first Kafka batch.
func TestDamagedKafkaBatchIsRefused(t *testing.T) {
	w := startWriter(t, passthroughLinks(t, false))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream := w.openOrders(ctx, t, "east")
	good, bad := sourceBatch(t, 0, 5, nil, recordbatch.None, 0), sourceBatch(t, 5, 5, nil, recordbatch.None, 0)
	bad[len(bad)-2] ^= 0x40
	err := sendKafka(t, stream, 1, 0, good, bad)
	if status.Code(err) != codes.DataLoss {
		t.Fatalf("stream ended with %v, want DataLoss", err)
	}
	refusedWhole(t, w, "checksum")
}

// refusedWhole checks that one batch of orders/0 was refused for reason
// and that nothing of it reached the target.
func refusedWhole(t *testing.T, w *testWriter, reason string) {
	t.Helper()
	if got := w.rejected(t, "east", reason); got != 1 {
		t.Errorf("rejected{reason=%s} = %v, want 1", reason, got)
	}
	if hw := w.cluster.PartitionInfo("orders", 0).HighWatermark; hw != 0 {
		t.Errorf("target holds %d records of a refused batch", hw)
	}
}

// Many small source batches of one partition in a round (a source producer
// that lingers little, copied after an outage) are merged into as few
// target batches as the target takes, since Kafka takes one batch per
// partition in a produce request; a round of one small batch passes it
// as it is.
func TestSmallKafkaBatchesAreMerged(t *testing.T) {
	w := startWriter(t, passthroughLinks(t, true))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream := w.openOrders(ctx, t, "east")
	sendSmallBatches(t, w, stream)
	if n := len(targetBatches(t, w)); n != 1 {
		t.Errorf("50 small source batches became %d target batches, want 1", n)
	}
	alone := sourceBatch(t, 100, 3, nil, recordbatch.LZ4, 0)
	if err := sendKafka(t, stream, 2, 100, alone); err != nil {
		t.Fatalf("stream ended: %v", err)
	}
	_, got := targetRaw(t, w)
	if last := got[len(got)-1]; !bytes.Equal(last[recordbatch.HeaderSize:], alone[recordbatch.HeaderSize:]) {
		t.Error("a round's only small batch did not pass as it is")
	}
}

// sendSmallBatches sends 50 small lz4 source batches of 2 records each in
// one wire batch, waits for its acknowledgement and checks the target
// holds their 100 values in order; it returns the source batches.
func sendSmallBatches(t *testing.T, w *testWriter, stream ferryv1.ReplicationService_ReplicateClient) [][]byte {
	t.Helper()
	var raws [][]byte
	for i := range int64(50) {
		raws = append(raws, sourceBatch(t, i*2, 2, nil, recordbatch.LZ4, 0))
	}
	if err := sendKafka(t, stream, 1, 0, raws...); err != nil {
		t.Fatalf("stream ended: %v", err)
	}
	if got, want := targetValues(t, w), vals(0, 100); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("target values %v, want %v", got, want)
	}
	return raws
}

// With producer.merge_below 0 every source batch that can pass does, each
// in a request of its own (pipelined): 50 small batches of a round reach
// the target as 50 batches, byte for byte past the header the producer
// rewrites.
func TestMergeBelowZeroPassesEveryBatch(t *testing.T) {
	for _, exactlyOnce := range []bool{false, true} {
		t.Run(fmt.Sprintf("exactly-once %v", exactlyOnce), func(t *testing.T) {
			w := startWriterWith(t, passthroughLinks(t, exactlyOnce), func(p *ProducerSettings) { p.MergeBelow = 0 })
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			raws := sendSmallBatches(t, w, w.openOrders(ctx, t, "east"))
			_, data := targetRaw(t, w)
			if len(data) != len(raws) {
				t.Fatalf("50 small source batches became %d target batches, want 50", len(data))
			}
			for i := range raws {
				if !bytes.Equal(data[i][recordbatch.HeaderSize:], raws[i][recordbatch.HeaderSize:]) {
					t.Fatalf("target batch %d differs from source batch %d past the header", i, i)
				}
			}
		})
	}
}

// A Skip (offsets holding only batches a Ferry writer produced into the
// source, left out against loops) writes nothing and moves the partition's
// checkpoint past it, keeping the target offset after the last record
// copied (-1 before any: step 1, a Skip first on a new partition) while a
// record batch moves it.
func TestSkipBatchesMoveTheCheckpointOnly(t *testing.T) {
	for _, exactlyOnce := range []bool{false, true} {
		t.Run(fmt.Sprintf("exactly-once %v", exactlyOnce), func(t *testing.T) {
			w := startWriter(t, passthroughLinks(t, exactlyOnce))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			stream := w.openOrders(ctx, t, "east")
			key := checkpoint.Key{Link: "east", Topic: "orders", Partition: 0}
			// The target offset after the last record copied, as the
			// target holds it (exactly-once: the open's abort and each
			// commit leave markers between the records).
			copied := func() int64 {
				infos := targetBatches(t, w)
				if len(infos) == 0 {
					return -1
				}
				last := infos[len(infos)-1]
				return last.BaseOffset + int64(last.LastOffsetDelta) + 1
			}
			step := func(seq uint64, b *ferryv1.Batch, next int64) {
				t.Helper()
				target := copied()
				ack, err := sendWire(t, stream, seq, b)
				if err != nil {
					t.Fatalf("batch %d: stream ended: %v", seq, err)
				}
				if len(ack.GetCommitted()) != 1 || ack.GetCommitted()[0].GetNextOffset() != next {
					t.Fatalf("batch %d acknowledged at %v, want next offset %d", seq, ack.GetCommitted(), next)
				}
				if err := w.store.Sync(ctx); err != nil {
					t.Fatal(err)
				}
				cp, ok, err := w.store.Get(key)
				if b.GetRecordCount() > 0 {
					target = copied()
				}
				if !ok || err != nil || cp.NextSourceOffset != next || cp.TargetOffset != target {
					t.Fatalf("batch %d: checkpoint %+v (found %v, %v), want next %d target %d", seq, cp, ok, err, next, target)
				}
			}
			step(1, batch.Skip(0, 4, 5), 5)
			step(2, wireKafka(t, 5, sourceBatch(t, 5, 10, nil, recordbatch.LZ4, 0)), 15)
			step(3, batch.Skip(15, 19, 25), 20)
			step(4, wireKafka(t, 20, sourceBatch(t, 20, 5, nil, recordbatch.None, 0)), 25)
			if got, want := targetValues(t, w), append(vals(5, 15), vals(20, 25)...); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("target values %v, want %v", got, want)
			}
		})
	}
}

// A Skip must be empty: one with a payload is refused, and nothing written.
func TestSkipWithPayloadIsRefused(t *testing.T) {
	w := startWriter(t, passthroughLinks(t, false))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream := w.openOrders(ctx, t, "east")
	b := batch.Skip(0, 9, 10)
	b.Payload = sourceBatch(t, 0, 10, nil, recordbatch.None, 0)
	b.UncompressedSize, b.Crc32C = uint32(len(b.Payload)), batch.Checksum(b.Payload)
	if _, err := sendWire(t, stream, 1, b); status.Code(err) != codes.DataLoss && status.Code(err) != codes.InvalidArgument {
		t.Fatalf("stream ended with %v, want a refusal", err)
	}
	refusedWhole(t, w, "malformed")
}

// Each stream's producer id is in the target's provenance topic with the
// cluster the stream copies from (the Open's source cluster id), and the
// writer names its target cluster in the Opened: a link reading the target
// back to that source skips what the writer wrote there, and a link
// chained on to a third cluster copies it.
func TestProducerIDIsRecordedWithItsSource(t *testing.T) {
	for _, exactlyOnce := range []bool{false, true} {
		t.Run(fmt.Sprintf("exactly-once %v", exactlyOnce), func(t *testing.T) {
			w := startWriter(t, passthroughLinks(t, exactlyOnce))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			stream, opened := w.openOrdersFrom(ctx, t, "east", "cluster-a")
			cl, err := kgo.NewClient(kgo.SeedBrokers(w.cluster.ListenAddrs()...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			target, err := provenance.ClusterID(ctx, cl)
			if err != nil || target == "" {
				t.Fatalf("target cluster id %q, %v", target, err)
			}
			if opened.GetTargetClusterId() != target {
				t.Errorf("Opened names target cluster %q, want %q", opened.GetTargetClusterId(), target)
			}
			if err := sendKafka(t, stream, 1, 0, sourceBatch(t, 0, 5, nil, recordbatch.LZ4, 0)); err != nil {
				t.Fatalf("stream ended: %v", err)
			}
			infos := targetBatches(t, w)
			if len(infos) != 1 {
				t.Fatalf("target holds %d batches, want 1", len(infos))
			}
			v, err := provenance.NewView([]kgo.Opt{kgo.SeedBrokers(w.cluster.ListenAddrs()...)}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			id := infos[0].ProducerID
			for from, want := range map[string]provenance.Origin{"cluster-a": provenance.CopiedFrom, "cluster-c": provenance.CopiedFromOther} {
				got, err := v.Origins(ctx, []int64{id, 77}, from)
				if err != nil {
					t.Fatal(err)
				}
				if got[id] != want || got[77] != provenance.NotCopied {
					t.Errorf("asked about %s: writer's producer %d: %v, want %v; the source's 77: %v", from, id, got[id], want, got[77])
				}
			}
		})
	}
}
