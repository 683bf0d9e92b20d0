package recordbatch

import (
	"bytes"
	"errors"
	"testing"
)

// TestBuilderMergesBatchesAsBuildWould merges source batches of every codec
// (timestamps going back and forth, null and empty fields, headers) and
// records added one by one: the batch is byte for byte the one Build makes
// of all those records, for each target codec, and the builder serves the
// next batch after Reset.
func TestBuilderMergesBatchesAsBuildWould(t *testing.T) {
	many := manyRecords(3000)
	parts := [][]Record{mixedRecords(), many[:1000], many[1000:1001], many[1001:]}
	for _, target := range allCodecs {
		t.Run(target.String(), func(t *testing.T) {
			var b Builder
			for round := range 2 {
				var all []Record
				for i, part := range parts {
					src := allCodecs[(i+round)%len(allCodecs)]
					ok, err := b.AddBatch(mustBuild(t, part, src), 0, 64<<20)
					if err != nil || !ok {
						t.Fatalf("AddBatch part %d (%v) = %v, %v", i, src, ok, err)
					}
					all = append(all, part...)
				}
				extra := Record{Timestamp: baseTS - 7, Key: []byte("one"), Value: []byte("by one"), Headers: []Header{{Key: "h", Value: nil}}}
				if !b.AddRecord(extra, 64<<20) {
					t.Fatal("AddRecord refused a record within the limit")
				}
				all = append(all, extra)
				if b.Records() != len(all) {
					t.Fatalf("Records() = %d, want %d", b.Records(), len(all))
				}
				got, err := b.Build(target)
				if err != nil {
					t.Fatal(err)
				}
				if want := mustBuild(t, all, target); !bytes.Equal(got, want) {
					t.Fatalf("round %d: merged batch (%d bytes) differs from Build's (%d bytes)", round, len(got), len(want))
				}
				if err := CheckCRC(got); err != nil {
					t.Fatal(err)
				}
				b.Reset()
			}
		})
	}
}

// A batch that would take the builder past its limit adds nothing; an
// empty builder refuses it too (the caller rebuilds it record by record).
func TestBuilderLimit(t *testing.T) {
	one := mustBuild(t, manyRecords(10), LZ4)
	var b Builder
	ok, err := b.AddBatch(one, 0, 1<<20)
	if !ok || err != nil {
		t.Fatalf("first AddBatch = %v, %v", ok, err)
	}
	size, n := b.Len(), b.Records()
	if ok, err := b.AddBatch(one, 0, size+10); ok || err != nil {
		t.Fatalf("AddBatch past the limit = %v, %v; want false, nil", ok, err)
	}
	if b.Len() != size || b.Records() != n {
		t.Fatalf("a refused batch left %d bytes and %d records, want %d and %d", b.Len(), b.Records(), size, n)
	}
	if b.AddRecord(manyRecords(1)[0], size+10) {
		t.Fatal("AddRecord past the limit took the record")
	}
	b.Reset()
	if ok, err := b.AddBatch(one, 0, 100); ok || err != nil || b.Records() != 0 {
		t.Fatalf("AddBatch larger than the limit into an empty builder = %v, %v, %d records", ok, err, b.Records())
	}
	// The decompression bound refuses a bomb before it inflates.
	if _, err := b.AddBatch(one, 100, 1<<20); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("AddBatch over maxDecompressed = %v, want ErrTooLarge", err)
	}
}

// Batches that cannot join others as they are, and malformed records, are
// refused with nothing added.
func TestBuilderRefuses(t *testing.T) {
	lat := mustBuild(t, manyRecords(3), None)
	lat[crcStart+1] |= byte(attrLogAppendTime) // the attributes are the first field under the CRC
	reseal(lat)
	gaps := mustBuild(t, manyRecords(3), None)
	gaps[crcStart+2+3] = 5 // the last offset delta follows the attributes: three records over offsets 0..5
	reseal(gaps)
	good := recordsBytes(t, manyRecords(2))
	trailing := rawBatch(None, append(append([]byte{}, good...), 0), 2, baseTS)
	short := rawBatch(None, good[:len(good)-1], 2, baseTS)
	swapped := mustBuild(t, manyRecords(1), None)
	swapped = rawBatch(None, append(append([]byte{}, swapped[HeaderSize:]...), swapped[HeaderSize:]...), 2, baseTS) // two records, both offset delta 0
	for _, tc := range []struct {
		name     string
		raw      []byte
		sentinel error
	}{
		{"LogAppendTime", lat, ErrCannotMerge},
		{"offset gaps", gaps, ErrCannotMerge},
		{"trailing bytes", trailing, nil},
		{"truncated record", short, nil},
		{"repeated offset delta", swapped, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b Builder
			if ok, err := b.AddBatch(mustBuild(t, manyRecords(4), LZ4), 0, 1<<20); !ok || err != nil {
				t.Fatal(ok, err)
			}
			size := b.Len()
			ok, err := b.AddBatch(tc.raw, 0, 1<<20)
			if ok || err == nil || (tc.sentinel != nil && !errors.Is(err, tc.sentinel)) {
				t.Fatalf("AddBatch = %v, %v; want an error (%v)", ok, err, tc.sentinel)
			}
			if b.Len() != size || b.Records() != 4 {
				t.Fatalf("a refused batch left %d bytes, %d records", b.Len(), b.Records())
			}
		})
	}
}
