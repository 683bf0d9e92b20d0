package recordbatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"slices"
	"strings"
	"testing"

	"github.com/golang/snappy"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// sealLegacy sets the size and the CRC-32 of the one legacy message b
// holds, as a producer does: the size counts what follows it, the CRC what
// follows the CRC.
func sealLegacy(b []byte) []byte {
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[12:], crc32.ChecksumIEEE(b[16:]))
	return b
}

// msg0 is a magic 0 message; attrs carry a wrapper's codec.
func msg0(offset int64, attrs int8, key, value []byte) []byte {
	m := kmsg.MessageV0{Offset: offset, Magic: 0, Attributes: attrs, Key: key, Value: value}
	return sealLegacy(m.AppendTo(nil))
}

// msg1 is a magic 1 message; attrs carry a wrapper's codec and the
// LogAppendTime bit.
func msg1(offset int64, attrs int8, ts int64, key, value []byte) []byte {
	m := kmsg.MessageV1{Offset: offset, Magic: 1, Attributes: attrs, Timestamp: ts, Key: key, Value: value}
	return sealLegacy(m.AppendTo(nil))
}

// rawSnappy stands for snappy without xerial framing in the legacyCodecs
// helpers: codec Snappy, a raw block.
const rawSnappy Compression = -2

// packed compresses a message set as a wrapper's value: the package's own
// codecs (xerial snappy, LZ4 frames, gzip) or a raw snappy block.
func packed(t testing.TB, c Compression, set []byte) []byte {
	t.Helper()
	if c == rawSnappy {
		return snappy.Encode(nil, set)
	}
	out, err := compress(nil, set, c)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func codecOf(c Compression) int8 {
	if c == rawSnappy {
		return int8(Snappy)
	}
	return int8(c)
}

// wrap1 is a magic 1 wrapper at offset holding set compressed with c;
// extra attributes (LogAppendTime) are or-ed in.
func wrap1(t testing.TB, offset int64, c Compression, extra int8, ts int64, set ...[]byte) []byte {
	return msg1(offset, codecOf(c)|extra, ts, nil, packed(t, c, bytes.Join(set, nil)))
}

// wrap0 is a magic 0 wrapper at offset holding set compressed with c.
func wrap0(t testing.TB, offset int64, c Compression, set ...[]byte) []byte {
	return msg0(offset, codecOf(c), nil, packed(t, c, bytes.Join(set, nil)))
}

// kafka3160 makes the LZ4 frame of a magic 0 wrapper as Kafka before 0.10
// wrote it (and later Kafkas write magic 0): the header checksum computed
// over the frame's magic number and descriptor, not the descriptor alone.
func kafka3160(t testing.TB, msg []byte) []byte {
	t.Helper()
	var m kmsg.MessageV0
	if err := m.ReadFrom(msg); err != nil {
		t.Fatal(err)
	}
	const at = 6 // magic, flags, block size: the package writes no content size
	if m.Value[4]&0x08 != 0 {
		t.Fatal("LZ4 frame with a content size: the checksum is elsewhere")
	}
	right, broken := byte(xxh32Short(m.Value[4:at])>>8), byte(xxh32Short(m.Value[:at])>>8)
	if m.Value[at] != right || right == broken {
		t.Fatalf("header checksum %02x, computed %02x, broken %02x: the test proves nothing", m.Value[at], right, broken)
	}
	m.Value = bytes.Clone(m.Value)
	m.Value[at] = broken
	return sealLegacy(m.AppendTo(nil))
}

// flip damages the byte at i of a copy of b.
func flip(b []byte, i int) []byte {
	b = bytes.Clone(b)
	b[i] ^= 0x40
	return b
}

// lrec is a record a legacy message set must become.
type lrec struct {
	off, ts    int64
	key, value []byte
}

func k(s string) []byte { return []byte(s) }

func TestFromLegacy(t *testing.T) {
	inner1 := [][]byte{ // relative offsets, as a 0.10 producer writes them
		msg1(0, 0, baseTS, k("k0"), k("v0")),
		msg1(1, 0, baseTS-7, nil, k("v1")),
		msg1(2, 0, baseTS+3, k("k2"), nil),
	}
	want1 := []lrec{{100, baseTS, k("k0"), k("v0")}, {101, baseTS - 7, nil, k("v1")}, {102, baseTS + 3, k("k2"), nil}}
	inner0 := [][]byte{ // absolute offsets
		msg0(50, 0, k("a"), k("x")),
		msg0(51, 0, nil, k("y")),
		msg0(52, 0, k("c"), k("z")),
	}
	want0 := []lrec{{50, -1, k("a"), k("x")}, {51, -1, nil, k("y")}, {52, -1, k("c"), k("z")}}
	empty := []byte{}
	v2 := mustBuild(t, manyRecords(3), Gzip)
	binary.BigEndian.PutUint64(v2, 300)
	plain := [][]byte{msg1(10, 0, baseTS, k("a"), k("1")), msg1(11, 0, baseTS+1, k("b"), k("2")), msg1(12, 0, baseTS+2, k("c"), k("3"))}
	big := func(off int64) []byte {
		return wrap1(t, off, Gzip, 0, baseTS, msg1(0, 0, baseTS, nil, make([]byte, 100_000)))
	}

	cases := []struct {
		name     string
		in       []byte
		limit    int
		want     []lrec
		lat      bool
		last     int64 // the batch's last offset; 0: the last record's
		consumed int   // 0: all of in
		noKgo    bool  // franz-go cannot read the input (KAFKA-3160)
	}{
		{name: "magic 0", in: bytes.Join(inner0, nil), want: want0},
		{name: "magic 1 CreateTime, timestamps going back", in: bytes.Join([][]byte{
			msg1(10, 0, baseTS, k("a"), k("1")), msg1(11, 0, baseTS-1000, k("b"), k("2"))}, nil),
			want: []lrec{{10, baseTS, k("a"), k("1")}, {11, baseTS - 1000, k("b"), k("2")}}},
		{name: "magic 1 gzip", in: wrap1(t, 102, Gzip, 0, baseTS+99, inner1...), want: want1},
		{name: "magic 1 snappy, xerial framing", in: wrap1(t, 102, Snappy, 0, baseTS+99, inner1...), want: want1},
		{name: "magic 1 snappy, raw block", in: wrap1(t, 102, rawSnappy, 0, baseTS+99, inner1...), want: want1},
		{name: "magic 1 lz4", in: wrap1(t, 102, LZ4, 0, baseTS+99, inner1...), want: want1},
		{name: "magic 0 gzip", in: wrap0(t, 52, Gzip, inner0...), want: want0},
		{name: "magic 0 snappy", in: wrap0(t, 52, Snappy, inner0...), want: want0},
		{name: "magic 0 lz4", in: wrap0(t, 52, LZ4, inner0...), want: want0},
		{name: "magic 0 lz4 with Kafka's broken header checksum (KAFKA-3160)",
			in: kafka3160(t, wrap0(t, 52, LZ4, inner0...)), want: want0, noKgo: true},
		{name: "LogAppendTime wrapper: its stamp for every record",
			in:   wrap1(t, 7, Gzip, legacyLogAppendTime, baseTS+5000, msg1(0, 0, 1, k("a"), k("1")), msg1(1, 0, 2, k("b"), k("2"))),
			want: []lrec{{6, baseTS + 5000, k("a"), k("1")}, {7, baseTS + 5000, k("b"), k("2")}}, lat: true},
		{name: "LogAppendTime messages with one stamp", in: bytes.Join([][]byte{
			msg1(3, legacyLogAppendTime, baseTS, nil, k("1")), msg1(4, legacyLogAppendTime, baseTS, nil, k("2"))}, nil),
			want: []lrec{{3, baseTS, nil, k("1")}, {4, baseTS, nil, k("2")}}, lat: true},
		{name: "offset gaps, a compacted wrapper's too", in: bytes.Join([][]byte{
			msg1(0, 0, baseTS, k("a"), k("1")), msg1(5, 0, baseTS, k("b"), k("2")),
			wrap1(t, 20, Gzip, 0, baseTS, msg1(0, 0, baseTS, k("c"), k("3")), msg1(3, 0, baseTS, k("d"), k("4")))}, nil),
			want: []lrec{{0, baseTS, k("a"), k("1")}, {5, baseTS, k("b"), k("2")}, {17, baseTS, k("c"), k("3")}, {20, baseTS, k("d"), k("4")}}},
		{name: "null and empty keys and values", in: bytes.Join([][]byte{
			msg1(0, 0, baseTS, nil, nil), msg1(1, 0, baseTS, empty, empty), msg1(2, 0, baseTS, nil, empty), msg1(3, 0, baseTS, empty, nil),
			wrap1(t, 7, Gzip, 0, baseTS, msg1(0, 0, baseTS, nil, nil), msg1(1, 0, baseTS, empty, empty), msg1(2, 0, baseTS, nil, empty), msg1(3, 0, baseTS, empty, nil))}, nil),
			want: []lrec{{0, baseTS, nil, nil}, {1, baseTS, empty, empty}, {2, baseTS, nil, empty}, {3, baseTS, empty, nil},
				{4, baseTS, nil, nil}, {5, baseTS, empty, empty}, {6, baseTS, nil, empty}, {7, baseTS, empty, nil}}},
		{name: "magic 0 then magic 1, a format upgrade", in: bytes.Join([][]byte{
			msg0(0, 0, nil, k("old")), msg1(1, 0, baseTS, nil, k("new"))}, nil),
			want: []lrec{{0, -1, nil, k("old")}, {1, baseTS, nil, k("new")}}},
		{name: "magic 0 wrapper past its last inner message: the batch covers it",
			in: wrap0(t, 60, Gzip, inner0...), want: want0, last: 60},
		{name: "magic 1 wrapper at offset 0: inner offsets as they are (Kafka's rule)",
			in:   wrap1(t, 0, Gzip, 0, baseTS, msg1(0, 0, baseTS, nil, k("1")), msg1(1, 0, baseTS, nil, k("2"))),
			want: []lrec{{0, baseTS, nil, k("1")}, {1, baseTS, nil, k("2")}}},

		// The run ends before these.
		{name: "ends at a v2 batch", in: bytes.Join(append(slices.Clone(inner0[:2]), v2), nil),
			want: want0[:2], consumed: len(inner0[0]) + len(inner0[1])},
		{name: "ends before a message cut short", in: bytes.Join(append(slices.Clone(inner0[:2]), inner0[2][:len(inner0[2])-1]), nil),
			want: want0[:2], consumed: len(inner0[0]) + len(inner0[1])},
		{name: "ends before a cut message header", in: bytes.Join(append(slices.Clone(inner0[:2]), inner0[2][:10]), nil),
			want: want0[:2], consumed: len(inner0[0]) + len(inner0[1])},
		{name: "ends before a damaged message", in: bytes.Join(append(slices.Clone(inner0[:2]), flip(inner0[2], len(inner0[2])-1)), nil),
			want: want0[:2], consumed: len(inner0[0]) + len(inner0[1])},
		{name: "ends where LogAppendTime starts", in: bytes.Join([][]byte{plain[0],
			wrap1(t, 12, Gzip, legacyLogAppendTime, baseTS+5, msg1(0, 0, baseTS, nil, nil), msg1(1, 0, baseTS, nil, nil))}, nil),
			want: []lrec{{10, baseTS, k("a"), k("1")}}, consumed: len(plain[0])},
		{name: "ends where the LogAppendTime stamp changes", in: bytes.Join([][]byte{
			msg1(3, legacyLogAppendTime, baseTS, nil, k("1")), msg1(4, legacyLogAppendTime, baseTS+1, nil, k("2"))}, nil),
			want: []lrec{{3, baseTS, nil, k("1")}}, lat: true, consumed: len(msg1(3, legacyLogAppendTime, baseTS, nil, k("1")))},
		{name: "ends where offsets go back", in: bytes.Join([][]byte{plain[1], plain[0]}, nil),
			want: []lrec{{11, baseTS + 1, k("b"), k("2")}}, consumed: len(plain[1])},
		{name: "ends at the bound: a wrapper inflating past what is left", in: bytes.Join([][]byte{big(0), big(1)}, nil), limit: 150_000,
			want: []lrec{{0, baseTS, nil, make([]byte, 100_000)}}, consumed: len(big(0))},
		{name: "ends once the bound is reached", in: bytes.Join(plain, nil), limit: len(plain[0]) + 1,
			want: []lrec{{10, baseTS, k("a"), k("1")}, {11, baseTS + 1, k("b"), k("2")}}, consumed: len(plain[0]) + len(plain[1])},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prefix := []byte("kept")
			out, n, err := FromLegacy(bytes.Clone(prefix), tc.in, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			consumed := tc.consumed
			if consumed == 0 {
				consumed = len(tc.in)
			}
			if n != consumed {
				t.Fatalf("consumed %d bytes of %d, want %d", n, len(tc.in), consumed)
			}
			if !bytes.HasPrefix(out, prefix) {
				t.Fatalf("dst's bytes lost: %q", out[:len(prefix)])
			}
			last := tc.last
			if last == 0 {
				last = tc.want[len(tc.want)-1].off
			}
			checkLegacyBatch(t, out[len(prefix):], tc.want, tc.lat, last)
			if !tc.noKgo {
				sameAsKgo(t, tc.in[:n], tc.want)
			}
		})
	}
}

// checkLegacyBatch checks b is the v2 batch of want: read with the
// package's Parse, CheckCRC and Records, and with franz-go's consumer code.
func checkLegacyBatch(t *testing.T, b []byte, want []lrec, lat bool, last int64) {
	t.Helper()
	info, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckCRC(b); err != nil {
		t.Fatal(err)
	}
	first, maxTS := want[0].ts, want[0].ts
	for _, w := range want {
		maxTS = max(maxTS, w.ts)
	}
	wantInfo := Info{
		BaseOffset: want[0].off, Length: info.Length, PartitionLeaderEpoch: -1, Magic: 2, CRC: info.CRC,
		LastOffsetDelta: int32(last - want[0].off), FirstTimestamp: first, MaxTimestamp: maxTS,
		ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, NumRecords: int32(len(want)),
	}
	if lat {
		wantInfo.Attributes = attrLogAppendTime
	}
	if info != wantInfo || info.Size() != len(b) {
		t.Fatalf("header %+v (%d bytes)\nwant   %+v (%d bytes)", info, info.Size(), wantInfo, len(b))
	}
	recs, err := Records(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d", len(recs), len(want))
	}
	for i, r := range recs {
		w := want[i]
		if got := info.BaseOffset + int64(r.OffsetDelta); got != w.off || r.Timestamp != w.ts ||
			!sameBytes(r.Key, w.key) || !sameBytes(r.Value, w.value) || r.Headers != nil {
			t.Fatalf("record %d: offset %d, %s; want offset %d, %s", i, got, describe(r), w.off,
				describe(Record{Timestamp: w.ts, Key: w.key, Value: w.value}))
		}
	}

	rp := kmsg.NewFetchResponseTopicPartition()
	rp.RecordBatches = b
	fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Topic: "t"}, &rp, kgo.DefaultDecompressor(), nil)
	if fp.Err != nil {
		t.Fatalf("franz-go: %v", fp.Err)
	}
	if len(fp.Records) != len(want) {
		t.Fatalf("franz-go reads %d records, want %d", len(fp.Records), len(want))
	}
	wantType := int8(0)
	if lat {
		wantType = 1
	}
	for i, r := range fp.Records {
		w := want[i]
		if r.Offset != w.off || r.Timestamp.UnixMilli() != w.ts || r.Attrs.TimestampType() != wantType ||
			!sameBytes(r.Key, w.key) || !sameBytes(r.Value, w.value) || r.ProducerID != -1 || len(r.Headers) != 0 {
			t.Fatalf("franz-go record %d: offset %d, ts %d (type %d), key %q, value %q, producer %d; want %+v",
				i, r.Offset, r.Timestamp.UnixMilli(), r.Attrs.TimestampType(), r.Key, r.Value, r.ProducerID, w)
		}
	}
}

// sameAsKgo checks franz-go's consumer reads the legacy input as the same
// offsets, keys and values. Not timestamps: it times a LogAppendTime
// wrapper's records with their own, where Kafka takes the wrapper's.
func sameAsKgo(t *testing.T, legacy []byte, want []lrec) {
	t.Helper()
	rp := kmsg.NewFetchResponseTopicPartition()
	rp.RecordBatches = legacy
	fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Topic: "t"}, &rp, kgo.DefaultDecompressor(), nil)
	if fp.Err != nil {
		t.Fatalf("franz-go reading the legacy messages: %v", fp.Err)
	}
	if len(fp.Records) != len(want) {
		t.Fatalf("franz-go reads %d legacy records, want %d", len(fp.Records), len(want))
	}
	for i, r := range fp.Records {
		if w := want[i]; r.Offset != w.off || !sameBytes(r.Key, w.key) || !sameBytes(r.Value, w.value) {
			t.Fatalf("franz-go legacy record %d: offset %d key %q value %q, want %+v", i, r.Offset, r.Key, r.Value, w)
		}
	}
}

// sameBytes is bytes.Equal with null apart from empty.
func sameBytes(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

// TestFromLegacyRuns converts a partition's worth of legacy messages run
// by run, as the fetcher does, up to the v2 batches after them.
func TestFromLegacyRuns(t *testing.T) {
	in := bytes.Join([][]byte{
		msg0(0, 0, nil, k("a")),
		wrap0(t, 2, Snappy, msg0(1, 0, nil, k("b")), msg0(2, 0, nil, k("c"))),
		msg1(3, 0, baseTS, nil, k("d")),
		wrap1(t, 5, LZ4, legacyLogAppendTime, baseTS+9, msg1(0, 0, baseTS, nil, k("e")), msg1(1, 0, baseTS, nil, k("f"))),
		msg1(6, 0, baseTS+1, nil, k("g")),
	}, nil)
	v2 := mustBuild(t, manyRecords(2), None)
	binary.BigEndian.PutUint64(v2, 7)
	in = append(in, v2...)
	type run struct {
		base, last int64
		lat        bool
	}
	var got []run
	rest := in
	for len(rest) > offMagic && rest[offMagic] < 2 {
		b, n, err := FromLegacy(nil, rest, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		info, err := Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, run{info.BaseOffset, info.BaseOffset + int64(info.LastOffsetDelta), info.LogAppendTime()})
		rest = rest[n:]
	}
	want := []run{{0, 3, false}, {4, 5, true}, {6, 6, false}}
	if len(got) != len(want) || !bytes.Equal(rest, v2) {
		t.Fatalf("runs %+v, then %d bytes; want %+v, then the v2 batch's %d", got, len(rest), want, len(v2))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("runs %+v, want %+v", got, want)
		}
	}
}

func TestFromLegacyErrors(t *testing.T) {
	good := msg1(7, 0, baseTS, k("key"), k("value"))
	zeros := make([]byte, 1<<20)
	bomb := wrap1(t, 3, Gzip, 0, baseTS, msg1(0, 0, baseTS, nil, zeros))
	inner := [][]byte{msg1(0, 0, baseTS, nil, k("a")), msg1(1, 0, baseTS, nil, k("b"))}
	resealed := func(b []byte, edit func([]byte) []byte) []byte { return sealLegacy(edit(bytes.Clone(b))) }
	v2 := mustBuild(t, manyRecords(1), None)
	binary.BigEndian.PutUint64(v2, 9)

	cases := []struct {
		name  string
		in    []byte
		limit int
		is    error  // errors.Is target, or nil
		has   string // the error names
	}{
		{name: "flipped value byte", in: flip(good, len(good)-2), is: ErrCRC, has: "message at offset 7: "},
		{name: "flipped attributes byte", in: flip(good, 17), is: ErrCRC, has: "message at offset 7: "},
		{name: "flipped byte in an inner message",
			in: wrap1(t, 3, Gzip, 0, baseTS, inner[0], flip(inner[1], len(inner[1])-1)),
			is: ErrCRC, has: "message at offset 3 (gzip): inner message at offset 1: "},
		{name: "cut short", in: good[:len(good)-1], is: ErrTruncated, has: "message at offset 7 needs"},
		{name: "nothing", in: nil, is: ErrTruncated},
		{name: "a v2 batch", in: v2, has: "message at offset 9: magic 2, not a legacy message"},
		{name: "nested compressed wrapper",
			in:  wrap1(t, 5, Gzip, 0, baseTS, inner[0], wrap1(t, 1, Gzip, 0, baseTS, inner...)),
			has: "message at offset 5 (gzip): inner message at offset 1: compressed too (codec 1), nested compression"},
		{name: "decompression bound exceeded", in: bomb, limit: 64 << 10, is: ErrTooLarge, has: "message at offset 3 (gzip): gzip: "},
		{name: "lz4 in magic 1 with the broken header checksum",
			in: resealed(wrap1(t, 3, LZ4, 0, baseTS, inner...), func(b []byte) []byte {
				b[legacyHeader1+4+4+6] = byte(xxh32Short(b[legacyHeader1+8:legacyHeader1+8+6]) >> 8) // over magic and descriptor
				return b
			}), has: "message at offset 3 (lz4): lz4: "},
		{name: "zstd is not a legacy codec", in: msg1(3, 4, baseTS, nil, packed(t, Zstd, inner[0])), has: "codec 4"},
		{name: "unknown codec", in: msg1(3, 5, baseTS, nil, k("x")), has: "codec 5"},
		{name: "compressed null value", in: msg1(3, int8(Gzip), baseTS, nil, nil), has: "message at offset 3 (gzip): compressed with a null value"},
		{name: "no inner messages", in: wrap1(t, 3, Gzip, 0, baseTS), has: "no inner messages"},
		{name: "inner set ends inside a message", in: wrap1(t, 3, Gzip, 0, baseTS, inner[0], inner[1][:20]),
			has: "inner message set ends inside its message 1"},
		{name: "magic 0 inside magic 1", in: wrap1(t, 3, Gzip, 0, baseTS, msg0(0, 0, nil, k("a"))),
			has: "inner message at offset 0: magic 0 in a magic 1 wrapper"},
		{name: "inner offsets not ascending", in: wrap1(t, 3, Gzip, 0, baseTS, inner[1], inner[0]),
			has: "inner message at offset 0 after offset 1"},
		{name: "wrapper offset below its last inner message's", in: wrap1(t, 2, Gzip, 0, baseTS, msg1(0, 0, baseTS, nil, nil), msg1(5, 0, baseTS, nil, nil)),
			has: "message at offset 2 (gzip): below its last inner message's relative offset 5"},
		{name: "size below a message's", in: func() []byte {
			b := bytes.Clone(good)
			binary.BigEndian.PutUint32(b[8:], 15)
			return b
		}(), has: "message at offset 7: size 15, below a magic 1 message's 22"},
		{name: "trailing bytes", in: resealed(good, func(b []byte) []byte { return append(b, 0) }),
			has: "message at offset 7: key and value end at byte"},
		{name: "key overruns the message", in: resealed(good, func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[legacyHeader1:], 1000)
			return b
		}), has: "message at offset 7: key or value overruns"},
		{name: "negative offset", in: msg1(-2, 0, baseTS, nil, nil), has: "negative offset"},
		{name: "unknown magic", in: func() []byte { b := bytes.Clone(good); b[offMagic] = 3; return b }(), has: "magic 3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dst := []byte("kept")
			out, n, err := FromLegacy(dst, tc.in, tc.limit)
			if err == nil {
				t.Fatalf("no error; %d bytes consumed", n)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("error %v, want one wrapping %v", err, tc.is)
			}
			if tc.is != ErrTruncated && errors.Is(err, ErrTruncated) {
				t.Fatalf("error %v wraps ErrTruncated: a caller would fetch again forever", err)
			}
			if !strings.Contains(err.Error(), tc.has) {
				t.Fatalf("error %q, want it to say %q", err, tc.has)
			}
			if n != 0 || !bytes.Equal(out, dst) || len(out) != len(dst) {
				t.Fatalf("error with %d bytes consumed and dst %q: a batch passed", n, out)
			}
		})
	}
}

// TestXXH32Short checks the header checksum against the LZ4 frames
// pierrec/lz4 writes, with and without a content size, and against the
// frame of Kafka's own KAFKA-3160 test (MessageCompressionTest): 04 22 4d
// 18 60 40 then 1a, the broken byte, where the right one is 82.
func TestXXH32Short(t *testing.T) {
	for _, opts := range [][]lz4.Option{nil, {lz4.SizeOption(5)}} {
		var buf bytes.Buffer
		w := lz4.NewWriter(&buf)
		if err := w.Apply(opts...); err != nil {
			t.Fatal(err)
		}
		w.Write([]byte("hello"))
		w.Close()
		frame := buf.Bytes()
		at := 6
		if frame[4]&0x08 != 0 {
			at += 8
		}
		if len(opts) > 0 && at != 14 {
			t.Fatalf("flags %02x: no content size", frame[4])
		}
		if got := byte(xxh32Short(frame[4:at]) >> 8); got != frame[at] {
			t.Fatalf("descriptor % x: checksum %02x, pierrec wrote %02x", frame[4:at], got, frame[at])
		}
		if fixed := fixKafka3160(frame); &fixed[0] != &frame[0] {
			t.Fatal("a right frame was copied")
		}
	}
	kafka := []byte{0x04, 0x22, 0x4d, 0x18, 0x60, 0x40, 0x1a}
	if broken, right := byte(xxh32Short(kafka[:6])>>8), byte(xxh32Short(kafka[4:6])>>8); broken != 0x1a || right != 0x82 {
		t.Fatalf("broken %02x, right %02x; want 1a, 82", broken, right)
	}
	if fixed := fixKafka3160(kafka); fixed[6] != 0x82 || kafka[6] != 0x1a {
		t.Fatalf("mended to %02x, source now %02x", fixed[6], kafka[6])
	}
	if got := xxh32Short(nil); got != 0x02cc5d05 {
		t.Fatalf("XXH32 of nothing %08x, want 02cc5d05", got)
	}
}
