package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kmsg"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/pkg/refusal"
)

// bombBatch is a zstd source batch at base of n minimal records, all the
// same (7 bytes each: deltas 0, null key and value, no headers), with the
// given extra attributes: a few KB that inflate to 7n bytes, and to n
// decoded records. Only a fetcher could send it (a broker would not hold
// it): the writer must not trust the fetcher that far.
func bombBatch(t *testing.T, base int64, n int, attrs int16) []byte {
	t.Helper()
	return claimedBomb(t, base, n, n, attrs)
}

// claimedBomb is bombBatch of n records whose header counts claimed.
func claimedBomb(t *testing.T, base int64, n, claimed int, attrs int16) []byte {
	t.Helper()
	one := appendRecord(nil, &kmsg.Record{})
	recs := make([]byte, 0, n*len(one))
	for range n {
		recs = append(recs, one...)
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBestCompression))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	now := time.Now().UnixMilli()
	rb := kmsg.RecordBatch{
		FirstOffset: base, PartitionLeaderEpoch: 3, Magic: 2, Attributes: int16(recordbatch.Zstd) | attrs,
		LastOffsetDelta: int32(claimed - 1), FirstTimestamp: now, MaxTimestamp: now,
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(claimed), Records: enc.EncodeAll(recs, nil),
	}
	rb.Length = int32(recordbatch.HeaderSize - 12 + len(rb.Records))
	raw := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}

// openTwo opens shard 1 of link east with orders/0 and orders/1.
func (w *testWriter) openTwo(ctx context.Context, t *testing.T) ferryv1.ReplicationService_ReplicateClient {
	t.Helper()
	stream, err := w.client.Replicate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	open := &ferryv1.Open{Link: "east", Shard: 0, Epoch: 1, Fetcher: "f1",
		Topics:     []*ferryv1.TopicSpec{{Name: "orders", PartitionCount: 2}},
		Partitions: []*ferryv1.TopicPartition{{Topic: "orders", Partition: 0}, {Topic: "orders", Partition: 1}}}
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Open{Open: open}}); err != nil {
		t.Fatal(err)
	}
	if resp, err := stream.Recv(); err != nil || resp.GetOpened() == nil {
		t.Fatalf("open answered %v, %v; want Opened", resp, err)
	}
	return stream
}

// TestDecompressionBombStopsItsPartition: a source batch of a few hundred
// bytes that must be rebuilt (LogAppendTime) and would inflate to a
// million records (7 MB decompressed, 176 MB of decoded records) is
// refused before it is inflated and decoded (300 MB allocated before): by
// its record count against max_batch_bytes (1 MiB), by inflating past it
// when the count hides the size, or by the index its records would take
// against the writer's whole budget. The stream ends with a refusal naming
// the batch and the limit, so the fetcher stops that partition alone, and
// the writer copies the shard's other partition on the next stream.
func TestDecompressionBombStopsItsPartition(t *testing.T) {
	for _, tc := range []struct {
		name        string
		bomb        func(t *testing.T) []byte
		budget      int64
		wantSetting string
		wantCause   string
	}{
		{"record count above max_batch_bytes", func(t *testing.T) []byte { return bombBatch(t, 100, 1_000_000, 8) },
			64 << 20, "max_batch_bytes", "1000000 records in"},
		{"inflating past max_batch_bytes", func(t *testing.T) []byte { return claimedBomb(t, 100, 1_000_000, 1000, 8) },
			64 << 20, "max_batch_bytes", "decompressed size over the limit"},
		{"records above the budget", func(t *testing.T) []byte { return bombBatch(t, 100, 100_000, 8) },
			4 << 20, "max_buffered_bytes", "17600000 bytes decoded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := startWriterOptions(t, passthroughLinks(t, false), func(o *Options) { o.MaxBufferedBytes = tc.budget })
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			stream := w.openTwo(ctx, t)
			if err := sendToPartition(t, stream, 1, 1, 0, sourceBatch(t, 0, 5, nil, recordbatch.LZ4, 0)); err != nil {
				t.Fatalf("orders/1: stream ended: %v", err)
			}
			bomb := tc.bomb(t)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			err := sendToPartition(t, stream, 2, 0, 100, bomb)
			runtime.ReadMemStats(&after)
			if got := after.TotalAlloc - before.TotalAlloc; got > 64<<20 {
				t.Errorf("the writer allocated %d MB for a %d-byte batch", got>>20, len(bomb))
			}
			ref, ok := refusal.From(err)
			if !ok {
				t.Fatalf("stream ended with %v, want a refusal", err)
			}
			if ref.Reason != refusal.BatchTooLarge || ref.Topic != "orders" || ref.Partition != 0 || ref.Offset != 100 ||
				!strings.Contains(ref.Setting, tc.wantSetting) || ref.Limit == 0 || !strings.Contains(ref.Error(), tc.wantCause) {
				t.Errorf("refusal %q (%+v): want BATCH_TOO_LARGE of orders/0 at 100, above %s, saying %q", ref.Error(), ref, tc.wantSetting, tc.wantCause)
			}
			if got := w.rejected(t, "east", "batch_too_large"); got != 1 {
				t.Errorf("rejected{reason=batch_too_large} = %v, want 1", got)
			}
			if hw := w.cluster.PartitionInfo("orders", 0).HighWatermark; hw != 0 {
				t.Errorf("target orders/0 holds %d records of a refused batch", hw)
			}

			// The fetcher reopens without the stopped partition's batches:
			// the other partition goes on.
			stream = w.openTwo(ctx, t)
			if err := sendToPartition(t, stream, 1, 1, 5, sourceBatch(t, 5, 5, nil, recordbatch.LZ4, 0)); err != nil {
				t.Fatalf("orders/1 after the refusal: stream ended: %v", err)
			}
			if got := partitionValues(t, w, 1); len(got) != 10 {
				t.Errorf("target orders/1 holds %v, want its 10 records", got)
			}
		})
	}
}

// TestMergingInflatesAtMostABatch: a small, highly compressible source
// batch sharing a round with another batch of its partition (what any
// producer on the source can write) is merged only if its records fit a
// target batch, found without inflating more than a batch: a million
// records in under 1 MiB of zstd (9 MB decompressed, 88 MB indexed by the
// record-by-record fallback before) pass as they are instead.
func TestMergingInflatesAtMostABatch(t *testing.T) {
	w := startWriterWith(t, passthroughLinks(t, false), func(p *ProducerSettings) { p.MergeBelow = 1 << 20 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream := w.openOrders(ctx, t, "east")
	small := sourceBatch(t, 0, 3, nil, recordbatch.LZ4, 0)
	const n = 1_000_000
	var recs []recordbatch.Record
	for range n {
		recs = append(recs, recordbatch.Record{Timestamp: time.Now().UnixMilli()})
	}
	dense, err := recordbatch.Build(nil, recs, recordbatch.Zstd)
	if err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint64(dense, 3) // base offset 3, after small
	if len(dense) >= 1<<20 {
		t.Fatalf("the dense batch takes %d bytes, want it under merge_below and a batch", len(dense))
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err = sendKafka(t, stream, 1, 0, small, dense)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatalf("stream ended: %v", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 32<<20 {
		t.Errorf("the writer allocated %d MB for a %d-byte batch", got>>20, len(dense))
	}
	infos, raws := targetRaw(t, w)
	if len(raws) != 2 || infos[1].NumRecords != n || !bytes.Equal(raws[1][recordbatch.HeaderSize:], dense[recordbatch.HeaderSize:]) {
		t.Fatalf("target holds %d batches, want the small one and the dense one as it is", len(raws))
	}
}
