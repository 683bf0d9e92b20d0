package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferry-replicator/ferry/pkg/recordbatch"
)

// cleanedBatch is a batch as a compacted source's log cleaner leaves it
// (KIP-534): records "v<offset>" at base, the last a tombstone (null
// value), each with its own timestamp ts[i], the attributes' delete-horizon
// bit set, and the horizon as base timestamp, against which Kafka writes
// the records' timestamp deltas.
func cleanedBatch(t *testing.T, base int64, ts []int64, horizon int64) []byte {
	t.Helper()
	var recs []byte
	maxTS := ts[0]
	for i, at := range ts {
		r := kmsg.Record{OffsetDelta: int32(i), TimestampDelta64: at - horizon, Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", base+int64(i))}
		if i == len(ts)-1 {
			r.Value = nil
		}
		recs = appendRecord(recs, &r)
		maxTS = max(maxTS, at)
	}
	rb := kmsg.RecordBatch{
		FirstOffset: base, PartitionLeaderEpoch: 3, Magic: 2, Attributes: 0x40,
		LastOffsetDelta: int32(len(ts) - 1), FirstTimestamp: horizon, MaxTimestamp: maxTS,
		ProducerID: 77, ProducerEpoch: 1, FirstSequence: 500, NumRecords: int32(len(ts)), Records: recs,
	}
	rb.Length = int32(recordbatch.HeaderSize - 12 + len(recs))
	raw := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}

// TestDeleteHorizonBatchIsRebuilt: a source batch holding a tombstone that
// the source's cleaner stamped with its delete horizon reaches the target
// rebuilt, without the horizon (the target's cleaner would otherwise drop
// the tombstone by the source's horizon), with the records' own timestamps
// and the tombstone still null.
func TestDeleteHorizonBatchIsRebuilt(t *testing.T) {
	for _, exactlyOnce := range []bool{false, true} {
		t.Run(fmt.Sprintf("exactly-once %v", exactlyOnce), func(t *testing.T) {
			w := startWriter(t, passthroughLinks(t, exactlyOnce))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			stream := w.openOrders(ctx, t, "east")
			now := time.Now().UnixMilli()
			ts := []int64{now - 5000, now - 7000, now - 1000}
			horizon := now - 3_600_000 // already past: the tombstone would go at the target's next cleaning
			if err := sendKafka(t, stream, 1, 100, cleanedBatch(t, 100, ts, horizon)); err != nil {
				t.Fatalf("stream ended: %v", err)
			}
			infos, raws := targetRaw(t, w)
			if len(raws) != 1 {
				t.Fatalf("target holds %d batches, want 1", len(raws))
			}
			if h, ok := infos[0].DeleteHorizon(); ok {
				t.Fatalf("target batch keeps the source's delete horizon %d (attributes %#x)", h, infos[0].Attributes)
			}
			if infos[0].FirstTimestamp != ts[0] {
				t.Errorf("target batch's base timestamp %d, want the first record's %d", infos[0].FirstTimestamp, ts[0])
			}
			recs, err := recordbatch.Records(raws[0], 0)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range recs {
				if r.Timestamp != ts[i] {
					t.Errorf("record %d: timestamp %d, want %d", i, r.Timestamp, ts[i])
				}
			}
			if last := recs[len(recs)-1]; len(recs) != 3 || last.Value != nil {
				t.Errorf("%d records, last value %q: want 3, the tombstone null", len(recs), last.Value)
			}
		})
	}
}
