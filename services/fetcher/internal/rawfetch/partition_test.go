package rawfetch

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferry-replicator/ferry/pkg/recordbatch"
)

// spec describes a batch for makeBatch: n records from base, of producer
// pid (-1: none), transactional or a control marker.
type spec struct {
	base    int64
	n       int
	pid     int64
	txn     bool
	control bool
}

func data(base int64, n int) spec { return spec{base: base, n: n, pid: -1} }
func txn(pid, base int64, n int) spec {
	return spec{base: base, n: n, pid: pid, txn: true}
}
func marker(pid, base int64) spec { return spec{base: base, n: 1, pid: pid, txn: true, control: true} }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// makeBatch builds the batch s describes, gzip-compressed unless it is a
// control batch (Kafka never compresses those), as a broker would send it.
func makeBatch(t testing.TB, s spec) []byte {
	t.Helper()
	recs := make([]recordbatch.Record, s.n)
	for i := range recs {
		recs[i] = recordbatch.Record{Timestamp: 1_700_000_000_000, Value: []byte("value")}
	}
	codec := recordbatch.Gzip
	if s.control {
		// An abort marker: key version 0, type 0.
		recs[0].Key, recs[0].Value = []byte{0, 0, 0, 0}, []byte{0, 0, 0, 0, 0, 0}
		codec = recordbatch.None
	}
	b, err := recordbatch.Build(nil, recs, codec)
	if err != nil {
		t.Fatal(err)
	}
	if s.pid >= 0 {
		if err := recordbatch.SetProducer(b, s.pid, 0, 0, s.txn); err != nil {
			t.Fatal(err)
		}
	}
	if s.control {
		attrs := binary.BigEndian.Uint16(b[21:]) | 0x20
		binary.BigEndian.PutUint16(b[21:], attrs)
		binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
	}
	binary.BigEndian.PutUint64(b, uint64(s.base)) // outside the CRC, as the broker sets it
	return b
}

func concat(t testing.TB, specs ...spec) []byte {
	var out []byte
	for _, s := range specs {
		out = append(out, makeBatch(t, s)...)
	}
	return out
}

// legacy1 is a magic 1 message at offset, as a Kafka 0.10 producer writes
// it and an old log segment keeps it: size and CRC-32 set. attrs carry a
// wrapper's codec.
func legacy1(offset int64, attrs int8, value []byte) []byte {
	m := kmsg.MessageV1{Offset: offset, Magic: 1, Attributes: attrs, Timestamp: 1_600_000_000_000, Value: value}
	b := m.AppendTo(nil)
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[12:], crc32.ChecksumIEEE(b[16:]))
	return b
}

// legacy is uncompressed magic 1 messages at offsets.
func legacy(offsets ...int64) []byte {
	var out []byte
	for _, o := range offsets {
		out = append(out, legacy1(o, 0, []byte("old"))...)
	}
	return out
}

// legacyGzip is a magic 1 gzip wrapper of n messages from offset first:
// relative offsets inside, the last one's outside.
func legacyGzip(t testing.TB, first int64, n int) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	for i := range n {
		zw.Write(legacy1(int64(i), 0, []byte("old")))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return legacy1(first+int64(n-1), 1, buf.Bytes())
}

// damaged flips a byte of the value of the legacy message b.
func damaged(b []byte) []byte {
	b = slices.Clone(b)
	b[len(b)-1] ^= 0x40
	return b
}

func join(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func aborted(pairs ...int64) []kmsg.FetchResponseTopicPartitionAbortedTransaction {
	var out []kmsg.FetchResponseTopicPartitionAbortedTransaction
	for i := 0; i < len(pairs); i += 2 {
		at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
		at.ProducerID, at.FirstOffset = pairs[i], pairs[i+1]
		out = append(out, at)
	}
	return out
}

// TestReadPartition checks what a partition's answer becomes, on records
// bytes built as a broker sends them: which batches pass, where Next goes,
// and what stops the read.
func TestReadPartition(t *testing.T) {
	three := concat(t, data(0, 3), data(3, 3), data(6, 3))
	lastSize := len(makeBatch(t, data(6, 3)))
	corrupt := concat(t, data(0, 3), data(3, 3))
	corrupt[len(corrupt)-2] ^= 0xff

	cases := []struct {
		name    string
		asked   int64
		records []byte
		aborts  []kmsg.FetchResponseTopicPartitionAbortedTransaction
		want    []int64 // base offsets of the batches returned
		next    int64
		err     error   // errors.Is target; nil: none
		offsets []int64 // the returned records' offsets; nil: not checked
	}{
		{name: "empty", asked: 7, next: 7},
		{name: "whole batches", records: three, want: []int64{0, 3, 6}, next: 9},
		{name: "asked mid-batch: the batch holding it comes first", asked: 4,
			records: concat(t, data(3, 3), data(6, 3)), want: []int64{3, 6}, next: 9},
		{name: "a batch ending before asked is left out", asked: 6,
			records: concat(t, data(3, 3), data(6, 3)), want: []int64{6}, next: 9},
		{name: "trailing partial batch is left out", records: three[:len(three)-lastSize/2],
			want: []int64{0, 3}, next: 6},
		{name: "partial batch header", records: three[:len(three)-lastSize+20], want: []int64{0, 3}, next: 6},
		{name: "only a partial batch", asked: 6, records: three[len(three)-lastSize : len(three)-1], next: 6},
		{name: "control batch dropped, Next past it",
			records: concat(t, txn(5, 0, 2), marker(5, 2), data(3, 1)), want: []int64{0, 3}, next: 4},
		{name: "trailing control batch moves Next",
			records: concat(t, txn(5, 0, 2), marker(5, 2)), want: []int64{0}, next: 3},
		{name: "aborted transaction dropped, committed kept",
			records: concat(t, txn(7, 0, 2), txn(7, 2, 2), marker(7, 4), txn(8, 5, 2), marker(8, 7)),
			aborts:  aborted(7, 0), want: []int64{5}, next: 8},
		{name: "interleaved producers: aborted one's batches dropped around the committed one's",
			records: concat(t, txn(7, 0, 2), txn(8, 2, 2), txn(7, 4, 2), marker(8, 6), marker(7, 7), data(8, 2)),
			aborts:  aborted(7, 0), want: []int64{2, 8}, next: 10},
		{name: "aborts listed out of order; a commit marker closes none",
			records: concat(t, txn(7, 0, 2), marker(7, 2), txn(7, 3, 1), marker(7, 4), txn(7, 10, 2), marker(7, 12), txn(7, 13, 1)),
			aborts:  aborted(7, 10, 7, 0), want: []int64{3, 13}, next: 14},
		{name: "fetched from inside an aborted transaction", asked: 2,
			records: concat(t, txn(7, 2, 2), marker(7, 4), txn(7, 5, 1)),
			aborts:  aborted(7, 0), want: []int64{5}, next: 6},
		{name: "aborted transaction of another producer leaves this one's alone",
			records: concat(t, txn(8, 0, 2), marker(8, 2)), aborts: aborted(7, 0), want: []int64{0}, next: 3},
		{name: "aborted transaction not yet closed in this response",
			records: concat(t, data(0, 1), txn(7, 1, 2)), aborts: aborted(7, 1), want: []int64{0}, next: 3},
		{name: "legacy message set: one batch", records: legacy(0, 1, 2), want: []int64{0}, next: 3, offsets: []int64{0, 1, 2}},
		{name: "legacy messages after v2 batches",
			records: join(concat(t, data(0, 3)), legacy(3, 4)), want: []int64{0, 3}, next: 5, offsets: []int64{0, 1, 2, 3, 4}},
		{name: "legacy messages, then v2 batches (format upgraded)",
			records: join(legacy(0, 1), concat(t, data(2, 3))), want: []int64{0, 2}, next: 5, offsets: []int64{0, 1, 2, 3, 4}},
		{name: "legacy, v2, legacy", records: join(legacyGzip(t, 0, 2), concat(t, data(2, 1)), legacy(3)),
			want: []int64{0, 2, 3}, next: 4, offsets: []int64{0, 1, 2, 3}},
		{name: "compressed legacy message holding asked: kept whole", asked: 2,
			records: legacyGzip(t, 0, 5), want: []int64{0}, next: 5, offsets: []int64{0, 1, 2, 3, 4}},
		{name: "legacy messages ending before asked are left out", asked: 5,
			records: join(legacyGzip(t, 3, 2), concat(t, data(5, 2))), want: []int64{5}, next: 7},
		{name: "legacy offset gaps (compacted)", records: legacy(0, 5, 9), want: []int64{0}, next: 10, offsets: []int64{0, 5, 9}},
		{name: "trailing partial legacy message is left out",
			records: join(legacy(0, 1), legacy(2)[:20]), want: []int64{0}, next: 2, offsets: []int64{0, 1}},
		{name: "only a partial legacy message", asked: 4, records: legacyGzip(t, 4, 3)[:30], next: 4},
		{name: "damaged legacy message: the ones before pass",
			records: join(legacy(0, 1), damaged(legacy(2))), want: []int64{0}, next: 2, offsets: []int64{0, 1}, err: recordbatch.ErrCRC},
		{name: "damaged legacy message after v2 batches",
			records: join(concat(t, data(0, 3)), damaged(legacy(3))), want: []int64{0}, next: 3, err: recordbatch.ErrCRC},
		{name: "legacy message overlapping a v2 batch",
			records: join(concat(t, data(0, 3)), legacy(2)), want: []int64{0}, next: 3, err: errAny},
		{name: "legacy message of a codec legacy sets lack (zstd)", records: legacy1(0, 4, []byte("x")), err: errAny},
		{name: "damaged batch: the ones before pass", records: corrupt, want: []int64{0}, next: 3, err: recordbatch.ErrCRC},
		{name: "overlapping batches", records: concat(t, data(0, 3), data(2, 3)), want: []int64{0}, next: 3, err: errAny},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = 100, 90, 0
			rp.RecordBatches, rp.AbortedTransactions = c.records, c.aborts
			next := c.next
			if next == 0 {
				next = c.asked
			}
			r := readPartition(c.asked, &rp)
			switch {
			case c.err == errAny && r.Err == nil, c.err != errAny && !errors.Is(r.Err, c.err):
				t.Fatalf("Err %v, want %v", r.Err, c.err)
			}
			var got, offsets []int64
			for _, b := range r.Batches {
				info, err := recordbatch.Parse(b)
				if err != nil {
					t.Fatal(err)
				}
				if len(b) != info.Size() || cap(b) != len(b) {
					t.Fatalf("batch at %d: %d bytes (cap %d), its size is %d", info.BaseOffset, len(b), cap(b), info.Size())
				}
				if err := recordbatch.CheckCRC(b); err != nil {
					t.Fatal(err)
				}
				got = append(got, info.BaseOffset)
				recs, err := recordbatch.Records(b, 0)
				if err != nil {
					t.Fatal(err)
				}
				for _, rec := range recs {
					offsets = append(offsets, info.BaseOffset+int64(rec.OffsetDelta))
				}
			}
			if !slices.Equal(got, c.want) || r.Next != next {
				t.Fatalf("batches at %v, Next %d; want %v, %d", got, r.Next, c.want, next)
			}
			if c.offsets != nil && !slices.Equal(offsets, c.offsets) {
				t.Fatalf("records at %v, want %v", offsets, c.offsets)
			}
			if r.HighWatermark != 100 || r.LastStableOffset != 90 || r.LogStartOffset != 0 || r.Retry != nil {
				t.Fatalf("offsets %d/%d/%d, retry %v: not the response's", r.HighWatermark, r.LastStableOffset, r.LogStartOffset, r.Retry)
			}
		})
	}
}

// errAny stands for any error in TestReadPartition's cases.
var errAny = errors.New("any error")

// TestReadPartitionLegacyBound checks the legacy messages of one answer
// stop being converted past maxLegacy: the Result ends, with Next after
// what was converted, and the next round goes on from there.
func TestReadPartitionLegacyBound(t *testing.T) {
	defer func(m int) { maxLegacy = m }(maxLegacy)
	maxLegacy = 1 // each run ends after its first message, and the Result after its first run
	records := legacy(0, 1, 2)
	for asked, want := range []int64{0, 1, 2} {
		rp := kmsg.NewFetchResponseTopicPartition()
		rp.RecordBatches = records
		r := readPartition(int64(asked), &rp)
		if r.Err != nil || len(r.Batches) != 1 || r.Next != want+1 {
			t.Fatalf("round %d: %d batches, Next %d, Err %v; want 1, %d, none", asked, len(r.Batches), r.Next, r.Err, want+1)
		}
		if info, err := recordbatch.Parse(r.Batches[0]); err != nil || info.BaseOffset != want || info.NumRecords != 1 {
			t.Fatalf("round %d: batch %+v, %v; want one record at %d", asked, info, err, want)
		}
		records = records[len(legacy(want)):] // the broker answers from Next
	}
}
