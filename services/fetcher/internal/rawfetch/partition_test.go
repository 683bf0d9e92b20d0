package rawfetch

import (
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
func makeBatch(t *testing.T, s spec) []byte {
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

func concat(t *testing.T, specs ...spec) []byte {
	var out []byte
	for _, s := range specs {
		out = append(out, makeBatch(t, s)...)
	}
	return out
}

// legacyMessage is a magic 1 message set entry: offset, size, CRC, magic,
// attributes, timestamp, null key, value.
func legacyMessage(offset int64) []byte {
	body := []byte{1, 0}                                // magic 1, attributes
	body = binary.BigEndian.AppendUint64(body, 1234)    // timestamp
	body = binary.BigEndian.AppendUint32(body, 1<<32-1) // null key
	body = binary.BigEndian.AppendUint32(body, 3)
	body = append(body, "old"...)
	m := binary.BigEndian.AppendUint64(nil, uint64(offset))
	m = binary.BigEndian.AppendUint32(m, uint32(4+len(body)))
	m = binary.BigEndian.AppendUint32(m, crc32.ChecksumIEEE(body))
	return append(m, body...)
}

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
		err     error // errors.Is target; nil: none
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
		{name: "legacy message set", records: legacyMessage(0), err: ErrLegacyMessageSet},
		{name: "legacy message set after v2 batches",
			records: append(concat(t, data(0, 3)), legacyMessage(3)...), want: []int64{0}, next: 3, err: ErrLegacyMessageSet},
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
			var got []int64
			for _, b := range r.Batches {
				info, err := recordbatch.Parse(b)
				if err != nil {
					t.Fatal(err)
				}
				if len(b) != info.Size() || cap(b) != len(b) {
					t.Fatalf("batch at %d: %d bytes (cap %d), its size is %d", info.BaseOffset, len(b), cap(b), info.Size())
				}
				got = append(got, info.BaseOffset)
			}
			if !slices.Equal(got, c.want) || r.Next != next {
				t.Fatalf("batches at %v, Next %d; want %v, %d", got, r.Next, c.want, next)
			}
			if r.HighWatermark != 100 || r.LastStableOffset != 90 || r.LogStartOffset != 0 || r.Retry != nil {
				t.Fatalf("offsets %d/%d/%d, retry %v: not the response's", r.HighWatermark, r.LastStableOffset, r.LogStartOffset, r.Retry)
			}
		})
	}
}

// errAny stands for any error in TestReadPartition's cases.
var errAny = errors.New("any error")
