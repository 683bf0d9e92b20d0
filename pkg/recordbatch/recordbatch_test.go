package recordbatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"reflect"
	"strings"
	"testing"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var allCodecs = []Compression{None, Gzip, Snappy, LZ4, Zstd}

const baseTS = 1_760_000_000_000

// mixedRecords covers what must survive a round trip: null and empty keys,
// values and header values, timestamps before the first (negative deltas)
// and a large one.
func mixedRecords() []Record {
	return []Record{
		{Timestamp: baseTS, Key: []byte("k0"), Value: []byte("v0")},
		{Timestamp: baseTS - 1000, Key: nil, Value: []byte("null key")},
		{Timestamp: baseTS + 5, Key: []byte{}, Value: []byte{}},
		{Timestamp: baseTS - 1<<40, Key: []byte("tombstone"), Value: nil},
		{Timestamp: baseTS + 1<<35, Key: nil, Value: nil, Headers: []Header{
			{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")},
			{Key: "null", Value: nil},
			{Key: "empty", Value: []byte{}},
			{Key: "", Value: []byte("empty key")},
		}},
		{Timestamp: -1, Key: bytes.Repeat([]byte{0xff}, 300), Value: bytes.Repeat([]byte("x"), 70_000)},
	}
}

// manyRecords makes n compressible records, enough for several LZ4 and
// snappy blocks, with timestamps that go back and forth.
func manyRecords(n int) []Record {
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = Record{
			Timestamp: baseTS + int64((i%7)-3)*1000 + int64(i),
			Key:       fmt.Appendf(nil, "key-%d", i%100),
			Value:     fmt.Appendf(nil, `{"id":%d,"name":"record number %d","pad":"%s"}`, i, i, strings.Repeat("ab", i%50)),
		}
		if i%10 == 0 {
			recs[i].Headers = []Header{{Key: "i", Value: fmt.Appendf(nil, "%d", i)}, {Key: "n", Value: nil}}
		}
	}
	return recs
}

// numbered returns recs as Records returns them: offset deltas 0..n-1.
func numbered(recs []Record) []Record {
	out := make([]Record, len(recs))
	for i, r := range recs {
		r.OffsetDelta = int32(i)
		out[i] = r
	}
	return out
}

func mustBuild(t testing.TB, recs []Record, c Compression) []byte {
	t.Helper()
	b, err := Build(nil, recs, c)
	if err != nil {
		t.Fatalf("Build %v: %v", c, err)
	}
	return b
}

// reseal recomputes the CRC of a batch a test has edited.
func reseal(b []byte) {
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[crcStart:], castagnoli))
}

// rawBatch wraps an already encoded records payload in a v2 header, for the
// batches Build would never write.
func rawBatch(c Compression, payload []byte, numRecords int32, firstTS int64) []byte {
	rb := kmsg.RecordBatch{
		Length:               int32(HeaderSize - 12 + len(payload)),
		PartitionLeaderEpoch: -1,
		Magic:                2,
		Attributes:           int16(c),
		LastOffsetDelta:      numRecords - 1,
		FirstTimestamp:       firstTS,
		MaxTimestamp:         firstTS,
		ProducerID:           -1,
		ProducerEpoch:        -1,
		FirstSequence:        -1,
		NumRecords:           numRecords,
		Records:              payload,
	}
	b := rb.AppendTo(nil)
	reseal(b)
	return b
}

// recordsBytes is the uncompressed records payload of recs.
func recordsBytes(t testing.TB, recs []Record) []byte {
	return mustBuild(t, recs, None)[HeaderSize:]
}

func TestRoundTrip(t *testing.T) {
	sets := []struct {
		name string
		recs []Record
	}{
		{"one", []Record{{Timestamp: baseTS, Key: []byte("k"), Value: []byte("v")}}},
		{"mixed", mixedRecords()},
		{"many", manyRecords(5000)},
	}
	for _, c := range allCodecs {
		for _, set := range sets {
			t.Run(c.String()+"/"+set.name, func(t *testing.T) {
				prefix := []byte("already here")
				b, err := Build(bytes.Clone(prefix), set.recs, c)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.HasPrefix(b, prefix) {
					t.Fatal("Build did not append to dst")
				}
				b = b[len(prefix):]

				info, err := Parse(b)
				if err != nil {
					t.Fatal(err)
				}
				maxTS := set.recs[0].Timestamp
				for _, r := range set.recs {
					maxTS = max(maxTS, r.Timestamp)
				}
				n := int32(len(set.recs))
				want := Info{
					BaseOffset: 0, Length: int32(len(b) - 12), PartitionLeaderEpoch: -1, Magic: 2, CRC: info.CRC,
					Attributes: int16(c), LastOffsetDelta: n - 1, FirstTimestamp: set.recs[0].Timestamp, MaxTimestamp: maxTS,
					ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, NumRecords: n,
				}
				if info != want {
					t.Fatalf("Parse:\n got %+v\nwant %+v", info, want)
				}
				if info.Size() != len(b) || info.Compression() != c || info.LogAppendTime() || info.Transactional() || info.Control() {
					t.Fatalf("size %d (len %d), codec %v, flags %v %v %v", info.Size(), len(b), info.Compression(),
						info.LogAppendTime(), info.Transactional(), info.Control())
				}
				if err := CheckCRC(b); err != nil {
					t.Fatal(err)
				}
				got, err := Records(b, 0)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, numbered(set.recs)) {
					t.Fatal("records differ after the round trip")
				}
				// A bound the records fit exactly is not exceeded.
				raw := len(recordsBytes(t, set.recs))
				if _, err := Records(b, raw); err != nil {
					t.Fatalf("Records with the exact bound %d: %v", raw, err)
				}
			})
		}
	}
}

// TestCodecFraming checks the compressed bytes are framed as Kafka's Java
// producer frames them, byte for byte where Kafka fixes the bytes.
func TestCodecFraming(t *testing.T) {
	recs := manyRecords(3000) // well over one 32 KiB snappy block and one 64 KiB LZ4 block
	raw := recordsBytes(t, recs)
	for _, tc := range []struct {
		c     Compression
		check func(t *testing.T, payload []byte)
	}{
		{Snappy, func(t *testing.T, p []byte) {
			hdr := []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1}
			if !bytes.HasPrefix(p, hdr) {
				t.Fatalf("payload starts % x, want the xerial header % x", p[:16], hdr)
			}
			var blocks int
			if _, err := walkXerial(p, func(block []byte, n int) error {
				if n > 32<<10 {
					t.Errorf("block %d inflates to %d bytes, over 32 KiB", blocks, n)
				}
				blocks++
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if want := (len(raw) + 32<<10 - 1) / (32 << 10); blocks != want {
				t.Fatalf("%d blocks, want %d", blocks, want)
			}
		}},
		{LZ4, func(t *testing.T, p []byte) {
			// Magic, FLG 0x60 (version 1, independent blocks, no checksums
			// or content size), BD 0x40 (64 KiB blocks): Lz4BlockOutputStream's.
			if got := p[:6]; !bytes.Equal(got, []byte{0x04, 0x22, 0x4d, 0x18, 0x60, 0x40}) {
				t.Fatalf("frame starts % x", got)
			}
			if !bytes.HasSuffix(p, []byte{0, 0, 0, 0}) {
				t.Fatal("frame does not end with an end mark and no content checksum")
			}
		}},
		{Gzip, func(t *testing.T, p []byte) {
			if !bytes.HasPrefix(p, []byte{0x1f, 0x8b, 8}) {
				t.Fatalf("payload starts % x, want a gzip member", p[:3])
			}
		}},
		{Zstd, func(t *testing.T, p []byte) {
			var h zstd.Header
			if err := h.Decode(p); err != nil {
				t.Fatal(err)
			}
			if h.Skippable || h.DictionaryID != 0 {
				t.Fatalf("frame header %+v, want a plain frame", h)
			}
		}},
	} {
		t.Run(tc.c.String(), func(t *testing.T) {
			tc.check(t, mustBuild(t, recs, tc.c)[HeaderSize:])
		})
	}
}

// TestReadForeignFraming reads what other producers write: raw snappy blocks
// (sarama, librdkafka) and concatenated xerial streams, and codec output
// made by the libraries' own stream writers.
func TestReadForeignFraming(t *testing.T) {
	recs := manyRecords(500)
	raw := recordsBytes(t, recs)
	half := len(raw) / 2
	for _, tc := range []struct {
		name    string
		c       Compression
		payload func() []byte
	}{
		{"raw snappy block", Snappy, func() []byte { return snappy.Encode(nil, raw) }},
		{"concatenated xerial streams", Snappy, func() []byte { return appendXerial(appendXerial(nil, raw[:half]), raw[half:]) }},
		{"two gzip members", Gzip, func() []byte {
			var buf bytes.Buffer
			for _, part := range [][]byte{raw[:half], raw[half:]} {
				w := gzip.NewWriter(&buf)
				w.Write(part)
				w.Close()
			}
			return buf.Bytes()
		}},
		{"lz4 with checksums and 4 MiB blocks", LZ4, func() []byte {
			var buf bytes.Buffer
			w := lz4.NewWriter(&buf)
			w.Apply(lz4.BlockChecksumOption(true), lz4.ChecksumOption(true), lz4.BlockSizeOption(lz4.Block4Mb))
			w.Write(raw)
			w.Close()
			return buf.Bytes()
		}},
		{"two lz4 frames", LZ4, func() []byte {
			first, err := compress(nil, raw[:half], LZ4)
			if err != nil {
				t.Fatal(err)
			}
			second, err := compress(nil, raw[half:], LZ4)
			if err != nil {
				t.Fatal(err)
			}
			return append(first, second...)
		}},
		{"streamed zstd frame", Zstd, func() []byte { return zstdStreamed(t, raw) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := rawBatch(tc.c, tc.payload(), int32(len(recs)), recs[0].Timestamp)
			for _, limit := range []int{0, len(raw)} {
				got, err := Records(b, limit)
				if err != nil {
					t.Fatalf("limit %d: %v", limit, err)
				}
				if !reflect.DeepEqual(got, numbered(recs)) {
					t.Fatalf("limit %d: records differ", limit)
				}
			}
		})
	}
}

// TestLZ4Frames covers the LZ4 frame reader's own cases: a block stored
// uncompressed, and the frames Kafka refuses.
func TestLZ4Frames(t *testing.T) {
	noise := make([]byte, 100_000)
	x := uint32(1)
	for i := range noise {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		noise[i] = byte(x)
	}
	frame, err := compress(nil, noise, LZ4)
	if err != nil {
		t.Fatal(err)
	}
	if binary.LittleEndian.Uint32(frame[7:])&(1<<31) == 0 {
		t.Fatal("the incompressible block was not stored")
	}
	got, err := inflateLZ4(nil, frame, 0)
	if err != nil || !bytes.Equal(got, noise) {
		t.Fatalf("stored blocks: %v, equal %v", err, bytes.Equal(got, noise))
	}
	// A block that decodes to far more than a few times its size (the
	// first guess at its room) still decodes whole.
	zeros := make([]byte, 3<<20)
	var buf bytes.Buffer
	w := lz4.NewWriter(&buf)
	if err := w.Apply(lz4.BlockSizeOption(lz4.Block4Mb)); err != nil {
		t.Fatal(err)
	}
	w.Write(zeros)
	w.Close()
	packed := buf.Bytes()
	if n := binary.LittleEndian.Uint32(packed[7:]); n > 1<<20 {
		t.Fatalf("the zeros' block takes %d bytes: not the case the test is for", n)
	}
	if got, err := inflateLZ4(nil, packed, 0); err != nil || !bytes.Equal(got, zeros) {
		t.Fatalf("highly compressible blocks: %v, %d bytes", err, len(got))
	}
	if _, err := inflateLZ4(nil, frame, 1000); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("limit: %v, want ErrTooLarge", err)
	}
	withHC := func(mutate func(f []byte)) []byte {
		f := bytes.Clone(frame)
		mutate(f)
		f[6] = byte(xxh32Short(f[4:6]) >> 8)
		return f
	}
	for name, bad := range map[string][]byte{
		"dependent blocks":   withHC(func(f []byte) { f[4] &^= 0x20 }),
		"frame version 2":    withHC(func(f []byte) { f[4] ^= 0xc0 }),
		"block size code 3":  withHC(func(f []byte) { f[5] = 3 << 4 }),
		"header checksum":    append(append(bytes.Clone(frame[:6]), frame[6]+1), frame[7:]...),
		"no end mark":        frame[:len(frame)-4],
		"truncated block":    frame[:20],
		"trailing non-frame": append(bytes.Clone(frame), 1, 2, 3, 4, 5, 6, 7, 8),
	} {
		if _, err := inflateLZ4(nil, bad, 0); err == nil {
			t.Errorf("%s: read without error", name)
		}
	}
}

// zstdStreamed compresses with a streaming encoder, which (like zstd-jni's
// ZstdOutputStream) does not declare the content size.
func zstdStreamed(t testing.TB, src []byte) []byte {
	var buf bytes.Buffer
	w, err := zstd.NewWriter(&buf, zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(src); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestBuildErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		recs []Record
		c    Compression
		want string
	}{
		{"no records", nil, None, "no records"},
		{"unknown codec", []Record{{Value: []byte("v")}}, 5, "unknown codec Compression(5)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := []byte("keep")
			out, err := Build(dst, tc.recs, tc.c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if string(out) != "keep" {
				t.Fatalf("dst changed to %q", out)
			}
		})
	}
}

func TestParseCompression(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Compression
		err  bool
	}{
		{"none", None, false}, {"gzip", Gzip, false}, {"snappy", Snappy, false},
		{"lz4", LZ4, false}, {"zstd", Zstd, false}, {"ZSTD", Zstd, false},
		{"", 0, true}, {"brotli", 0, true}, {"producer", 0, true},
	} {
		got, err := ParseCompression(tc.in)
		if tc.err {
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.in)) || !strings.Contains(err.Error(), "none, gzip, snappy, lz4 or zstd") {
				t.Errorf("ParseCompression(%q): error %v, want one naming the value and the choices", tc.in, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseCompression(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if back, _ := ParseCompression(got.String()); back != got {
			t.Errorf("%v does not parse back from its String", got)
		}
	}
}

func TestRecordSize(t *testing.T) {
	recs := append(mixedRecords(), manyRecords(300)...)
	total := HeaderSize
	for i, r := range recs {
		one := mustBuild(t, []Record{r}, None)
		if got, actual := RecordSize(r), len(one)-HeaderSize; got < actual {
			t.Fatalf("record %d: RecordSize %d, below its encoded %d", i, got, actual)
		}
		total += RecordSize(r)
	}
	if b := mustBuild(t, recs, None); len(b) > total {
		t.Fatalf("batch of %d bytes, over the RecordSize sum %d", len(b), total)
	}
	// The bound is tight: the deltas' worst case is all it adds.
	r := Record{Key: []byte("k"), Value: []byte("v")}
	if got, want := RecordSize(r), 1+1+10+5+2+2+1; got != want {
		t.Fatalf("RecordSize %d, want %d", got, want)
	}
}

func TestParseErrors(t *testing.T) {
	good := mustBuild(t, mixedRecords()[:3], None)
	edit := func(f func(b []byte)) []byte {
		b := bytes.Clone(good)
		f(b)
		return b
	}
	for _, tc := range []struct {
		name      string
		b         []byte
		truncated bool
		want      string
	}{
		{"empty", nil, true, "0 bytes"},
		{"short of the magic", good[:10], true, "10 bytes"},
		{"truncated header", good[:HeaderSize-1], true, "60 bytes, header needs 61"},
		{"truncated body", good[:len(good)-1], true, fmt.Sprintf("needs %d bytes, have %d", len(good), len(good)-1)},
		{"magic 1", edit(func(b []byte) { b[offMagic] = 1 }), false, "magic 1"},
		{"magic 3", edit(func(b []byte) { b[offMagic] = 3 }), false, "magic 3"},
		{"length below the header", edit(func(b []byte) { binary.BigEndian.PutUint32(b[offLength:], 48) }), false, "length 48"},
		{"negative length", edit(func(b []byte) { binary.BigEndian.PutUint32(b[offLength:], 0xffffffff) }), false, "length -1"},
		{"negative count", edit(func(b []byte) { binary.BigEndian.PutUint32(b[offNumRecords:], 0xffffffff) }), false, "record count -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.b)
			if err == nil || errors.Is(err, ErrTruncated) != tc.truncated || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want one containing %q, truncated %v", err, tc.want, tc.truncated)
			}
		})
	}
	// Parse reads the batch at the start and ignores what follows.
	if info, err := Parse(append(bytes.Clone(good), 1, 2, 3)); err != nil || info.Size() != len(good) {
		t.Fatalf("Parse with bytes after: %+v, %v", info, err)
	}
}

func TestSplit(t *testing.T) {
	var batches [][]byte
	var data []byte
	for i, c := range allCodecs {
		b := mustBuild(t, manyRecords(20+i), c)
		binary.BigEndian.PutUint64(b, uint64(100*i)) // as a broker numbers them
		batches = append(batches, b)
		data = append(data, b...)
	}
	last := batches[len(batches)-1]
	whole := data[:len(data)-len(last)]

	for _, tc := range []struct {
		name    string
		data    []byte
		batches int
		partial int
	}{
		{"nothing", nil, 0, 0},
		{"whole batches", data, len(batches), 0},
		{"cut in the base offset", data[:len(whole)+5], len(batches) - 1, 5},
		{"cut before the magic", data[:len(whole)+offMagic], len(batches) - 1, offMagic},
		{"cut in the header", data[:len(whole)+30], len(batches) - 1, 30},
		{"cut after the header", data[:len(whole)+HeaderSize], len(batches) - 1, HeaderSize},
		{"one byte short", data[:len(data)-1], len(batches) - 1, len(last) - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, partial, err := Split(tc.data)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.batches || partial != tc.partial {
				t.Fatalf("%d batches, partial %d; want %d, %d", len(got), partial, tc.batches, tc.partial)
			}
			for i, b := range got {
				if !bytes.Equal(b, batches[i]) {
					t.Fatalf("batch %d differs", i)
				}
				if cap(b) != len(b) {
					t.Fatalf("batch %d has room past its end (cap %d, len %d): appending would overwrite the next", i, cap(b), len(b))
				}
				if &b[0] != &tc.data[offsetOf(batches, i)] {
					t.Fatalf("batch %d does not alias data", i)
				}
			}
		})
	}
}

func offsetOf(batches [][]byte, i int) int {
	n := 0
	for _, b := range batches[:i] {
		n += len(b)
	}
	return n
}

// legacyMessage is a magic 0 or 1 message set entry, as a pre-0.11 producer
// or an old log segment holds it.
func legacyMessage(offset int64, magic int8, value []byte) []byte {
	var msg []byte
	msg = append(msg, byte(magic), 0) // magic, attributes
	if magic == 1 {
		msg = binary.BigEndian.AppendUint64(msg, baseTS)
	}
	msg = binary.BigEndian.AppendUint32(msg, 0xffffffff) // null key
	msg = binary.BigEndian.AppendUint32(msg, uint32(len(value)))
	msg = append(msg, value...)
	crc := crc32.ChecksumIEEE(msg)
	b := binary.BigEndian.AppendUint64(nil, uint64(offset))
	b = binary.BigEndian.AppendUint32(b, uint32(4+len(msg)))
	b = binary.BigEndian.AppendUint32(b, crc)
	return append(b, msg...)
}

func TestSplitErrors(t *testing.T) {
	good := mustBuild(t, manyRecords(3), None)
	binary.BigEndian.PutUint64(good, 7)
	short := bytes.Clone(good)
	binary.BigEndian.PutUint32(short[offLength:], 20)
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"magic 1 after a batch", append(bytes.Clone(good), legacyMessage(10, 1, []byte("old"))...), "batch at offset 10: magic 1"},
		{"magic 0 first", legacyMessage(42, 0, []byte("older")), "batch at offset 42: magic 0"},
		{"length below the header", append(bytes.Clone(good), short...), "batch at offset 7: length 20"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, partial, err := Split(tc.data)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if got != nil || partial != 0 {
				t.Fatalf("%d batches and partial %d returned with the error", len(got), partial)
			}
		})
	}
}

func TestCheckCRC(t *testing.T) {
	for _, c := range allCodecs {
		good := mustBuild(t, manyRecords(50), c)
		binary.BigEndian.PutUint64(good, 1234)
		for _, at := range []int{crcStart, crcStart + 1, offProducerID, offNumRecords, HeaderSize, len(good) / 2, len(good) - 1} {
			t.Run(fmt.Sprintf("%v/byte %d", c, at), func(t *testing.T) {
				b := bytes.Clone(good)
				b[at] ^= 0x10
				err := CheckCRC(b)
				if !errors.Is(err, ErrCRC) {
					t.Fatalf("error %v, want ErrCRC", err)
				}
				want := fmt.Sprintf("batch at offset 1234: %v: want %08x, got %08x", ErrCRC,
					binary.BigEndian.Uint32(good[offCRC:]), crc32.Checksum(b[crcStart:], castagnoli))
				if err.Error() != want {
					t.Fatalf("error %q, want %q", err, want)
				}
			})
		}
	}
	// The CRC starts at the attributes: what the broker assigns is outside it.
	b := mustBuild(t, manyRecords(5), None)
	binary.BigEndian.PutUint64(b, 99)
	binary.BigEndian.PutUint32(b[offLeaderEpoch:], 3)
	if err := CheckCRC(b); err != nil {
		t.Fatalf("base offset and leader epoch changed: %v", err)
	}
	if err := CheckCRC(append(b, 0)); err == nil || errors.Is(err, ErrCRC) || !strings.Contains(err.Error(), "1 bytes follow it") {
		t.Fatalf("CheckCRC of a batch and a byte: %v", err)
	}
}

func TestSetProducer(t *testing.T) {
	for _, c := range allCodecs {
		t.Run(c.String(), func(t *testing.T) {
			recs := manyRecords(200)
			orig := mustBuild(t, recs, c)
			// As fetched: a broker's offset and leader epoch.
			binary.BigEndian.PutUint64(orig, 5000)
			binary.BigEndian.PutUint32(orig[offLeaderEpoch:], 7)
			b := bytes.Clone(orig)
			for _, tc := range []struct {
				pid   int64
				epoch int16
				seq   int32
				txn   bool
			}{
				{123456789, 3, 0, false},
				{1<<62 + 5, 32767, 1<<31 - 1, true},
				{-1, -1, -1, false},
			} {
				if err := SetProducer(b, tc.pid, tc.epoch, tc.seq, tc.txn); err != nil {
					t.Fatal(err)
				}
				if err := CheckCRC(b); err != nil {
					t.Fatal(err)
				}
				info, _ := Parse(b)
				before, _ := Parse(orig)
				want := before
				want.BaseOffset, want.PartitionLeaderEpoch = 0, -1
				want.ProducerID, want.ProducerEpoch, want.BaseSequence = tc.pid, tc.epoch, tc.seq
				want.CRC = info.CRC
				if tc.txn {
					want.Attributes |= attrTransactional
				}
				if info != want {
					t.Fatalf("after SetProducer(%d, %d, %d, %v):\n got %+v\nwant %+v", tc.pid, tc.epoch, tc.seq, tc.txn, info, want)
				}
				if info.Transactional() != tc.txn || info.Compression() != c {
					t.Fatalf("transactional %v, codec %v", info.Transactional(), info.Compression())
				}
				if !bytes.Equal(b[offNumRecords:], orig[offNumRecords:]) {
					t.Fatal("records bytes changed")
				}
				got, err := Records(b, 0)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, numbered(recs)) {
					t.Fatal("records differ after SetProducer")
				}
			}
		})
	}
}

func TestSetProducerRefuses(t *testing.T) {
	good := mustBuild(t, manyRecords(30), LZ4)
	for _, tc := range []struct {
		name  string
		b     []byte
		isCRC bool
		want  string
	}{
		{"damaged records", func() []byte { b := bytes.Clone(good); b[len(b)-3] ^= 1; return b }(), true, "want"},
		{"damaged header", func() []byte { b := bytes.Clone(good); b[offProducerID] ^= 1; return b }(), true, "want"},
		{"two batches", append(bytes.Clone(good), good...), false, fmt.Sprintf("%d bytes follow it", len(good))},
		{"truncated", good[:len(good)-1], false, "truncated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := bytes.Clone(tc.b)
			err := SetProducer(tc.b, 1, 1, 0, false)
			if err == nil || errors.Is(err, ErrCRC) != tc.isCRC || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want one containing %q, ErrCRC %v", err, tc.want, tc.isCRC)
			}
			if !bytes.Equal(tc.b, before) {
				t.Fatal("a refused batch was changed")
			}
		})
	}
}

func TestLogAppendTime(t *testing.T) {
	recs := mixedRecords()
	b := mustBuild(t, recs, Zstd)
	const stamp = baseTS + 99
	binary.BigEndian.PutUint16(b[crcStart:], binary.BigEndian.Uint16(b[crcStart:])|attrLogAppendTime)
	binary.BigEndian.PutUint64(b[35:], stamp) // MaxTimestamp, as the broker sets it
	reseal(b)
	info, _ := Parse(b)
	if !info.LogAppendTime() || info.Compression() != Zstd {
		t.Fatalf("attributes %#x", info.Attributes)
	}
	got, err := Records(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range got {
		if r.Timestamp != stamp {
			t.Fatalf("record %d has timestamp %d, want the append time %d", i, r.Timestamp, stamp)
		}
	}
}

// TestRecordsBound checks a compression bomb is refused, whether the codec
// declares its size up front or not.
func TestRecordsBound(t *testing.T) {
	const limit = 1 << 20
	zeros := make([]byte, 16<<20)
	gz := func() []byte {
		var buf bytes.Buffer
		w, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		w.Write(zeros)
		w.Close()
		return buf.Bytes()
	}
	lz := func() []byte {
		var buf bytes.Buffer
		w := lz4.NewWriter(&buf)
		w.Write(zeros)
		w.Close()
		return buf.Bytes()
	}
	zstdAll := func() []byte {
		enc, _ := zstd.NewWriter(nil)
		defer enc.Close()
		return enc.EncodeAll(zeros, nil)
	}
	declared, streamed := zstdAll(), zstdStreamed(t, zeros)
	for _, f := range []struct {
		frame   []byte
		wantFCS bool
	}{{declared, true}, {streamed, false}} {
		var h zstd.Header
		if err := h.Decode(f.frame); err != nil || h.HasFCS != f.wantFCS {
			t.Fatalf("zstd frame header %+v, %v: want HasFCS %v, or the test misses a path", h, err, f.wantFCS)
		}
	}
	for _, tc := range []struct {
		name    string
		c       Compression
		payload []byte
	}{
		{"zstd frame declaring its size", Zstd, declared},
		{"streamed zstd frame", Zstd, streamed},
		{"gzip", Gzip, gz()},
		{"lz4", LZ4, lz()},
		{"snappy xerial", Snappy, appendXerial(nil, zeros)},
		{"snappy raw", Snappy, snappy.Encode(nil, zeros)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := rawBatch(tc.c, tc.payload, 1, baseTS)
			_, err := Records(b, limit)
			if !errors.Is(err, ErrTooLarge) {
				t.Fatalf("%d compressed bytes inflating to %d: error %v, want the limit's", len(tc.payload), len(zeros), err)
			}
			if !strings.Contains(err.Error(), "batch at offset 0: "+tc.c.String()) {
				t.Fatalf("error %q does not name the batch and codec", err)
			}
		})
	}
}

func TestRecordsErrors(t *testing.T) {
	recs := mixedRecords()[:3]
	raw := recordsBytes(t, recs)
	// The second record's length varint starts where the first ends.
	firstLen := len(mustBuild(t, recs[:1], None)) - HeaderSize
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"count above the records", rawBatch(None, raw, 4, baseTS), "record 3 of 4: no bytes left"},
		{"count below the records", rawBatch(None, raw, 2, baseTS), "trailing bytes after the 2 records"},
		{"count that cannot fit", rawBatch(None, raw, 1000, baseTS), "header says 1000 records"},
		{"compressed count above", rawBatch(Zstd, zstdStreamed(t, raw), 4, baseTS), "record 3 of 4: no bytes left"},
		{"bad length varint", rawBatch(None, append(bytes.Clone(raw[:firstLen]), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), 2, baseTS), "record 1 of 2: bad length varint"},
		{"length past the end", rawBatch(None, append(bytes.Clone(raw[:firstLen]), 0x7e, 1, 2), 2, baseTS), "record 1 of 2: length 63, 2 bytes left"},
		{"trailing bytes in a record", rawBatch(None, trailingInRecord(raw[:firstLen]), 1, baseTS), "trailing bytes"},
		{"fields past the length", rawBatch(None, shortRecord(raw[:firstLen]), 1, baseTS), "overrun"},
		{"negative header count", rawBatch(None, negativeHeaders(), 1, baseTS), "header count -2"},
		{"corrupt zstd", rawBatch(Zstd, []byte{0x28, 0xb5, 0x2f, 0xfd, 0, 0, 1, 2, 3}, 1, baseTS), "zstd"},
		{"corrupt xerial", rawBatch(Snappy, append(bytes.Clone(xerialHeader), 0, 0, 1, 0, 1), 1, baseTS), "malformed xerial framing"},
		{"unknown codec", rawBatch(6, raw, 3, baseTS), "unknown codec Compression(6)"},
		{"two batches", append(rawBatch(None, raw, 3, baseTS), rawBatch(None, raw, 3, baseTS)...), "bytes follow it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Records(tc.b, 0)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestEmptyBatch reads a batch compaction emptied and kept for its producer
// state: no records bytes, whatever codec it names.
func TestEmptyBatch(t *testing.T) {
	for _, c := range allCodecs {
		b := rawBatch(c, nil, 0, baseTS)
		if err := CheckCRC(b); err != nil {
			t.Fatal(err)
		}
		got, err := Records(b, 1)
		if err != nil || len(got) != 0 {
			t.Fatalf("%v: %d records, %v", c, len(got), err)
		}
	}
}

// TestConcurrent builds and reads batches of every codec from several
// goroutines at once: the pooled and shared coders must not mix them up.
func TestConcurrent(t *testing.T) {
	const workers = 8
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			errs <- func() error {
				for i := range 20 {
					c := allCodecs[(w+i)%len(allCodecs)]
					recs := manyRecords(50 + w*10 + i)
					b, err := Build(nil, recs, c)
					if err != nil {
						return err
					}
					if err := SetProducer(b, int64(w), 0, int32(i), false); err != nil {
						return err
					}
					for _, limit := range []int{0, 1 << 20} {
						got, err := Records(b, limit)
						if err != nil {
							return err
						}
						if !reflect.DeepEqual(got, numbered(recs)) {
							return fmt.Errorf("worker %d batch %d (%v): records differ", w, i, c)
						}
					}
				}
				return nil
			}()
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// trailingInRecord returns rec with one byte added inside its length.
func trailingInRecord(rec []byte) []byte {
	l, n := binary.Varint(rec)
	out := binary.AppendVarint(nil, l+1)
	out = append(out, rec[n:]...)
	return append(out, 0)
}

// shortRecord returns rec with its length one byte short of its fields.
func shortRecord(rec []byte) []byte {
	l, n := binary.Varint(rec)
	out := binary.AppendVarint(nil, l-1)
	return append(out, rec[n:len(rec)-1]...)
}

// negativeHeaders is a record declaring -2 headers.
func negativeHeaders() []byte {
	body := []byte{0, 0, 0, 1, 1} // attributes, deltas, null key and value
	body = binary.AppendVarint(body, -2)
	return append(binary.AppendVarint(nil, int64(len(body))), body...)
}
