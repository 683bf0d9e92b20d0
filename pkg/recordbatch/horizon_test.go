package recordbatch

import (
	"encoding/binary"
	"fmt"
	"testing"
)

// horizonBatch is recs as a compacted log's cleaner rewrites a batch holding
// tombstones (Kafka's MemoryRecordsBuilder with a delete horizon):
// attributes bit 6 set, the horizon as base timestamp, and each record's
// timestamp delta written against it.
func horizonBatch(t testing.TB, recs []Record, horizon int64, c Compression) []byte {
	t.Helper()
	payload := appendRecords(nil, recs, horizon, false)
	if c != None {
		var err error
		if payload, err = compress(nil, payload, c); err != nil {
			t.Fatal(err)
		}
	}
	b := rawBatch(c, payload, int32(len(recs)), horizon)
	maxTS := recs[0].Timestamp
	for _, r := range recs {
		maxTS = max(maxTS, r.Timestamp)
	}
	binary.BigEndian.PutUint16(b[crcStart:], uint16(c)|attrDeleteHorizon)
	binary.BigEndian.PutUint64(b[35:], uint64(maxTS)) // MaxTimestamp: the records' own
	reseal(b)
	return b
}

// TestDeleteHorizon: a cleaned batch's horizon is read from its header, its
// records keep their own timestamps, and a batch rebuilt from it (record by
// record, or merged whole) carries no horizon and the first record's
// timestamp as its base.
func TestDeleteHorizon(t *testing.T) {
	recs := mixedRecords() // a tombstone among them
	const horizon = baseTS + 86_400_000
	for _, c := range allCodecs {
		t.Run(c.String(), func(t *testing.T) {
			src := horizonBatch(t, recs, horizon, c)
			info, err := Parse(src)
			if err != nil {
				t.Fatal(err)
			}
			if h, ok := info.DeleteHorizon(); !ok || h != horizon {
				t.Fatalf("DeleteHorizon() = %d, %v; want %d, true", h, ok, horizon)
			}
			got, err := Records(src, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			sameRecords(t, "records of the cleaned batch", got, numbered(recs))

			var byRecord, merged Builder
			for _, r := range got {
				if !byRecord.AddRecord(r, 1<<20) {
					t.Fatal("AddRecord refused a record")
				}
			}
			if ok, err := merged.AddBatch(src, 1<<20, 1<<20); !ok || err != nil {
				t.Fatalf("AddBatch = %v, %v", ok, err)
			}
			for name, b := range map[string]*Builder{"record by record": &byRecord, "merged": &merged} {
				out, err := b.Build(LZ4)
				if err != nil {
					t.Fatal(err)
				}
				oi, _ := Parse(out)
				if h, ok := oi.DeleteHorizon(); ok || oi.Attributes&attrDeleteHorizon != 0 {
					t.Errorf("%s: rebuilt batch keeps the delete horizon %d (attributes %#x)", name, h, oi.Attributes)
				}
				if oi.FirstTimestamp != recs[0].Timestamp {
					t.Errorf("%s: base timestamp %d, want the first record's %d", name, oi.FirstTimestamp, recs[0].Timestamp)
				}
				back, err := Records(out, 0)
				if err != nil {
					t.Fatal(err)
				}
				sameRecords(t, fmt.Sprintf("%s: rebuilt records", name), back, numbered(recs))
			}
		})
	}
}
