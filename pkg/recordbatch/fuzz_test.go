package recordbatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/pierrec/lz4/v4"
)

// The fuzz targets below feed this package the bytes it takes from outside
// Ferry: a source cluster's record batches and legacy message sets, and the
// compressed records inside them. Each checks properties, not only that
// nothing panics: what is accepted is consistent with every other reading
// of it, bounds hold, and what is built parses back equal. `make fuzz` runs
// them; `go test` runs their seeds and testdata/fuzz corpora.

// fuzzBound is the decompressed bound the targets pass: far above what a
// fuzz input inflates to honestly, far below what a bomb would.
const fuzzBound = 1 << 20

// fuzzSeeds are real batches for the targets to start from: every codec,
// null and empty fields, headers, negative timestamp deltas.
func fuzzSeeds(t testing.TB) [][]byte {
	recs := mixedRecords()[:5] // the sixth is 70 KB, too much for a seed
	var out [][]byte
	for _, c := range allCodecs {
		out = append(out, mustBuild(t, recs, c))
	}
	out = append(out, mustBuild(t, manyRecords(40), LZ4))
	lat := mustBuild(t, recs[:2], None)
	binary.BigEndian.PutUint16(lat[crcStart:], attrLogAppendTime)
	reseal(lat)
	return append(out, lat)
}

func FuzzParse(f *testing.F) {
	seeds := fuzzSeeds(f)
	for _, s := range seeds {
		f.Add(s)
	}
	f.Add(slices.Concat(seeds[0], seeds[3], seeds[1][:70])) // two batches and a cut one
	f.Add(legacyMessage(7, 1, []byte("legacy")))
	f.Fuzz(func(t *testing.T, data []byte) {
		info, perr := Parse(data)
		if perr == nil && (info.Magic != 2 || info.Length < lengthMin || info.Size() > len(data) || info.NumRecords < 0) {
			t.Fatalf("Parse accepted %+v from %d bytes", info, len(data))
		}
		checkSplit(t, data)
		if err := CheckCRC(data); err == nil && (perr != nil || info.Size() != len(data)) {
			t.Fatalf("CheckCRC accepted %d bytes that Parse reads as %d (%v)", len(data), info.Size(), perr)
		}
		checkSetProducer(t, data)
		recs, err := Records(data, fuzzBound)
		if err != nil {
			return
		}
		if perr != nil || len(recs) != int(info.NumRecords) || info.Size() != len(data) {
			t.Fatalf("Records read %d records from a batch of %d (%v)", len(recs), info.NumRecords, perr)
		}
		checkRecordsBound(t, data, info)
	})
}

// checkSplit: Split accounts for every byte, and each batch it returns is
// one Parse reads whole, capped at its end, aliasing data.
func checkSplit(t *testing.T, data []byte) {
	batches, partial, err := Split(data)
	if err != nil {
		return
	}
	at := 0
	for i, b := range batches {
		info, err := Parse(b)
		if err != nil || info.Size() != len(b) || cap(b) != len(b) || &b[0] != &data[at] {
			t.Fatalf("Split batch %d: %d bytes (cap %d) at %d, Parse %+v, %v", i, len(b), cap(b), at, info, err)
		}
		at += len(b)
	}
	if at+partial != len(data) {
		t.Fatalf("Split: %d bytes of batches and %d partial of %d", at, partial, len(data))
	}
}

// checkSetProducer: a batch CheckCRC accepts is rewritten with its records
// untouched and a CRC that checks; any other is refused and left alone.
func checkSetProducer(t *testing.T, data []byte) {
	b := bytes.Clone(data)
	err := SetProducer(b, 42, 3, 17, true)
	if crcErr := CheckCRC(data); (err == nil) != (crcErr == nil) {
		t.Fatalf("SetProducer = %v, CheckCRC = %v", err, crcErr)
	}
	if err != nil {
		if !bytes.Equal(b, data) {
			t.Fatal("SetProducer changed a batch it refused")
		}
		return
	}
	info, perr := Parse(b)
	if CheckCRC(b) != nil || perr != nil || !bytes.Equal(b[HeaderSize:], data[HeaderSize:]) ||
		info.ProducerID != 42 || info.ProducerEpoch != 3 || info.BaseSequence != 17 || !info.Transactional() {
		t.Fatalf("SetProducer wrote %+v (%v)", info, perr)
	}
}

// checkRecordsBound: the bound Records takes is exact. A compressed batch
// whose records decompress to n bytes is read with a bound of n and
// refused with ErrTooLarge below it.
func checkRecordsBound(t *testing.T, data []byte, info Info) {
	c := info.Compression()
	if c == None || len(data) == HeaderSize {
		return
	}
	raw, err := decompress(nil, data[HeaderSize:], c, fuzzBound)
	if err != nil {
		t.Fatalf("Records read a %v batch that does not decompress: %v", c, err)
	}
	// zstd refuses any window above 8 MiB under a bound, whatever the size.
	if _, err := Records(data, len(raw)); err != nil && !(c == Zstd && strings.Contains(err.Error(), "window")) {
		t.Fatalf("Records with a bound of the %d bytes it decompresses to: %v", len(raw), err)
	}
	if len(raw) > 1 {
		if _, err := Records(data, len(raw)-1); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("Records with a bound of %d, one below its size: %v, want ErrTooLarge", len(raw)-1, err)
		}
	}
}

func FuzzRoundTrip(f *testing.F) {
	for i, s := range fuzzSeeds(f) {
		f.Add(s, uint8(i))
	}
	f.Fuzz(func(t *testing.T, data []byte, codec uint8) {
		recs, err := Records(data, fuzzBound)
		if err != nil || len(recs) == 0 {
			return
		}
		c := Compression(codec % 5)
		built, err := Build(nil, recs, c)
		if err != nil {
			t.Fatalf("Build %v of %d records Records read: %v", c, len(recs), err)
		}
		want := numbered(recs)
		sameAsBuilt(t, "Build", built, want)
		var b Builder
		for i, r := range recs {
			if !b.AddRecord(r, math.MaxInt) {
				t.Fatalf("AddRecord %d refused under no limit", i)
			}
		}
		built, err = b.Build(c)
		if err != nil {
			t.Fatalf("Builder.Build %v: %v", c, err)
		}
		sameAsBuilt(t, "AddRecord", built, want)
		checkAddBatch(t, data, c, recs)
	})
}

// checkAddBatch: AddBatch, which copies records without decoding them,
// takes every batch Records reads that can be merged (CreateTime, not
// control, offset deltas 0..n-1), and builds the same records from it.
func checkAddBatch(t *testing.T, data []byte, c Compression, recs []Record) {
	info, _ := Parse(data)
	mergeable := !info.LogAppendTime() && !info.Control() && info.LastOffsetDelta == info.NumRecords-1
	for i, r := range recs {
		mergeable = mergeable && r.OffsetDelta == int32(i)
	}
	var b Builder
	ok, err := b.AddBatch(data, fuzzBound, math.MaxInt)
	if ok != mergeable {
		t.Fatalf("AddBatch = %v, %v; Records read the batch and it is mergeable: %v", ok, err, mergeable)
	}
	if !ok {
		return
	}
	built, err := b.Build(c)
	if err != nil {
		t.Fatalf("Builder.Build %v: %v", c, err)
	}
	sameAsBuilt(t, "AddBatch", built, numbered(recs))
}

// sameAsBuilt checks that built is one sound batch of want, numbered 0..n-1.
func sameAsBuilt(t *testing.T, how string, built []byte, want []Record) {
	t.Helper()
	if err := CheckCRC(built); err != nil {
		t.Fatalf("%s: %v", how, err)
	}
	got, err := Records(built, 0)
	if err != nil {
		t.Fatalf("%s: the built batch does not read back: %v", how, err)
	}
	sameRecords(t, how, got, want)
	for i, r := range got {
		if r.OffsetDelta != int32(i) {
			t.Fatalf("%s: record %d back with offset delta %d", how, i, r.OffsetDelta)
		}
	}
}

func FuzzLZ4Frame(f *testing.F) {
	for _, src := range [][]byte{[]byte("a few bytes, a few bytes, a few bytes"), recordsBytes(f, manyRecords(200)), make([]byte, 70_000)} {
		frame, err := compress(nil, src, LZ4)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(frame, uint32(len(src)))
		f.Add(frame, uint32(len(src)/2))
	}
	var buf bytes.Buffer
	w := lz4.NewWriter(&buf) // block checksums, a content checksum and size
	if err := w.Apply(lz4.ChecksumOption(true), lz4.BlockChecksumOption(true), lz4.SizeOption(5000)); err != nil {
		f.Fatal(err)
	}
	w.Write(bytes.Repeat([]byte("abcde"), 1000))
	w.Close()
	f.Add(buf.Bytes(), uint32(0))
	f.Fuzz(func(t *testing.T, src []byte, limit uint32) {
		lim := int(limit % (fuzzBound + 1))
		full, fullErr := inflateLZ4(nil, src, 0)
		out, err := inflateLZ4(nil, src, lim)
		switch {
		case lim == 0:
		case err == nil && (len(out) > lim || cap(out) > 2*lim+64):
			t.Fatalf("limit %d: %d bytes in room for %d", lim, len(out), cap(out))
		case err == nil && (fullErr != nil || !bytes.Equal(out, full)):
			t.Fatalf("limit %d: read %d bytes, unbounded %d bytes, %v", lim, len(out), len(full), fullErr)
		case fullErr == nil && len(full) <= lim && err != nil:
			t.Fatalf("limit %d: %v, yet the %d bytes it holds fit", lim, err, len(full))
		case fullErr == nil && len(full) > lim && !errors.Is(err, ErrTooLarge):
			t.Fatalf("limit %d: %v for %d bytes, want ErrTooLarge", lim, err, len(full))
		}
		if fullErr != nil {
			return
		}
		// pierrec/lz4 reads what Kafka's frames hold the same way (it
		// checks checksums this reader skips, and refuses what it may).
		if ref, err := io.ReadAll(lz4.NewReader(bytes.NewReader(src))); err == nil && !bytes.Equal(ref, full) {
			t.Fatalf("read %d bytes, pierrec/lz4 reads %d", len(full), len(ref))
		}
	})
}

func FuzzFromLegacy(f *testing.F) {
	set0 := slices.Concat(msg0(10, 0, k("a"), k("1")), msg0(11, 0, nil, []byte{}))
	set1 := slices.Concat(msg1(0, 0, 5, k("b"), k("2")), msg1(1, 0, 6, []byte{}, nil))
	f.Add(set0, uint32(0))
	f.Add(slices.Concat(set1, msg1(30, 0, 7, nil, k("x"))), uint32(0))
	for _, c := range []Compression{Gzip, Snappy, rawSnappy, LZ4} {
		f.Add(wrap0(f, 20, c, set0), uint32(1000))
		f.Add(slices.Concat(wrap1(f, 40, c, legacyLogAppendTime, 99, set1), wrap1(f, 42, c, legacyLogAppendTime, 99, set1)), uint32(0))
	}
	f.Add(kafka3160(f, wrap0(f, 20, LZ4, set0)), uint32(10))
	f.Fuzz(func(t *testing.T, data []byte, maxDecompressed uint32) {
		bound := int(maxDecompressed % (fuzzBound + 1))
		dst := []byte("dst")
		out, n, err := FromLegacy(dst, data, bound)
		if err != nil {
			if n != 0 || len(out) != len(dst) || string(out) != "dst" {
				t.Fatalf("FromLegacy failed (%v) with n %d and %d bytes out", err, n, len(out))
			}
			return
		}
		if n < 1 || n > len(data) || !bytes.HasPrefix(out, dst) {
			t.Fatalf("FromLegacy took %d bytes of %d, out %q...", n, len(data), out[:min(len(out), 3)])
		}
		b := out[len(dst):]
		info, err := Parse(b)
		if err != nil || CheckCRC(b) != nil || info.Compression() != None || info.Control() || info.ProducerID != -1 {
			t.Fatalf("FromLegacy built %+v (%v, CRC %v)", info, err, CheckCRC(b))
		}
		recs, err := Records(b, 0)
		if err != nil || len(recs) == 0 {
			t.Fatalf("the batch FromLegacy built holds %d records: %v", len(recs), err)
		}
		size := 0
		for i, r := range recs {
			if i > 0 && r.OffsetDelta <= recs[i-1].OffsetDelta || r.OffsetDelta > info.LastOffsetDelta || len(r.Headers) > 0 {
				t.Fatalf("record %d: offset delta %d after %d, batch's last %d, %d headers",
					i, r.OffsetDelta, recs[max(i-1, 0)].OffsetDelta, info.LastOffsetDelta, len(r.Headers))
			}
			size += len(r.Key) + len(r.Value)
		}
		// Uncompressed messages count as their size, so the bound is soft
		// by what b itself holds, never by what a wrapper inflates to.
		if bound > 0 && size > bound+n {
			t.Fatalf("%d bytes of keys and values from %d bytes under a bound of %d", size, n, bound)
		}
		// The run is exactly what FromLegacy took: read alone, it builds
		// the same batch.
		again, m, err := FromLegacy(nil, data[:n], bound)
		if err != nil || m != n || !bytes.Equal(again, b) {
			t.Fatalf("the run's %d bytes alone: %d taken, same batch %v, %v", n, m, bytes.Equal(again, b), err)
		}
	})
}
