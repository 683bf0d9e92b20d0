package recordbatch

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKfakeBuiltBatches produces Build's batches with raw produce requests
// to franz-go's fake cluster (which checks the CRC and the header) and reads
// them back with an ordinary kgo consumer, which decompresses them.
func TestKfakeBuiltBatches(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(len(allCodecs)), "built"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := newWire(t, c.ListenAddrs()...)

	// Partition p holds the batches of allCodecs[p]: two, so the second
	// shows offsets continue past a compressed batch.
	want := make(map[int32][]Record)
	for p, codec := range allCodecs {
		for i, recs := range [][]Record{mixedRecords(), manyRecords(1500)} {
			off := w.mustProduce(ctx, "built", int32(p), mustBuild(t, recs, codec))
			if wantOff := int64(len(want[int32(p)])); off != wantOff {
				t.Fatalf("%v batch %d: base offset %d, want %d", codec, i, off, wantOff)
			}
			want[int32(p)] = append(want[int32(p)], recs...)
		}
	}
	total := 0
	for _, recs := range want {
		total += len(recs)
	}
	got := make(map[int32][]Record)
	for _, r := range consume(t, ctx, c.ListenAddrs(), "built", total) {
		if r.Offset != int64(len(got[r.Partition])) {
			t.Fatalf("partition %d: offset %d after %d records", r.Partition, r.Offset, len(got[r.Partition]))
		}
		got[r.Partition] = append(got[r.Partition], fromKgo(r))
	}
	for p, codec := range allCodecs {
		sameRecords(t, codec.String(), got[int32(p)], want[int32(p)])
	}
}

// TestKfakeProducedBatches reads what franz-go's idempotent producer writes,
// for each of its codecs, from raw fetch responses, and rewrites it with
// SetProducer as Ferry will before producing it to a target.
func TestKfakeProducedBatches(t *testing.T) {
	codecs := []struct {
		c   Compression
		kgo kgo.CompressionCodec
	}{
		{None, kgo.NoCompression()},
		{Gzip, kgo.GzipCompression()},
		{Snappy, kgo.SnappyCompression()},
		{LZ4, kgo.Lz4Compression()},
		{Zstd, kgo.ZstdCompression()},
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "none", "gzip", "snappy", "lz4", "zstd"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	w := newWire(t, c.ListenAddrs()...)

	for _, codec := range codecs {
		t.Run(codec.c.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			topic := codec.c.String()
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic),
				kgo.ProducerBatchCompression(codec.kgo), kgo.ProducerLinger(50*time.Millisecond),
				kgo.ProducerBatchMaxBytes(100<<10)) // several batches, one of them holding the 70 KB value
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			want := append(mixedRecords(), manyRecords(3000)...)
			var krs []*kgo.Record
			for _, r := range want {
				kr := &kgo.Record{Key: r.Key, Value: r.Value, Timestamp: time.UnixMilli(r.Timestamp)}
				for _, h := range r.Headers {
					kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
				}
				krs = append(krs, kr)
			}
			if err := cl.ProduceSync(ctx, krs...).FirstErr(); err != nil {
				t.Fatal(err)
			}

			batches := w.fetch(ctx, topic, 0, len(want))
			t.Logf("%d records in %d batches", len(want), len(batches))
			var got []Record
			var seq int32
			for i, b := range batches {
				info, err := Parse(b)
				if err != nil {
					t.Fatal(err)
				}
				if err := CheckCRC(b); err != nil {
					t.Fatalf("batch %d: %v", i, err)
				}
				if info.Compression() != codec.c {
					t.Fatalf("batch %d: codec %v, want %v", i, info.Compression(), codec.c)
				}
				// The idempotent producer numbers its batches without gaps.
				if info.ProducerID < 0 || info.BaseSequence != seq {
					t.Fatalf("batch %d: producer %d, base sequence %d, want %d", i, info.ProducerID, info.BaseSequence, seq)
				}
				seq += info.NumRecords
				recs, err := Records(b, 64<<20)
				if err != nil {
					t.Fatalf("batch %d: %v", i, err)
				}
				for j, r := range recs {
					if r.OffsetDelta != int32(j) {
						t.Fatalf("batch %d record %d: offset delta %d", i, j, r.OffsetDelta)
					}
				}
				got = append(got, recs...)

				rewriteLikeFerry(t, fmt.Sprintf("batch %d", i), b, recs)
			}
			if len(batches) < 2 {
				t.Fatalf("%d batches: the test wants several", len(batches))
			}
			sameRecords(t, topic, got, want)

			// A fetch response cut in the last batch, as a broker cuts one
			// at its byte limit, splits into the others and the cut size.
			var data []byte
			for _, b := range batches {
				data = append(data, b...)
			}
			last := len(batches[len(batches)-1])
			split, partial, err := Split(data[:len(data)-last/2])
			if err != nil || len(split) != len(batches)-1 || partial != last-last/2 {
				t.Fatalf("cut response: %d batches, partial %d, %v; want %d, %d", len(split), partial, err, len(batches)-1, last-last/2)
			}
		})
	}
}

// rewriteLikeFerry rewrites a fetched batch for a target producer and checks
// it stays sound: fields set, CRC valid, records unchanged.
func rewriteLikeFerry(t *testing.T, what string, b []byte, recs []Record) {
	t.Helper()
	before, _ := Parse(b)
	for _, txn := range []bool{true, false} {
		if err := SetProducer(b, 4242, 7, 1000, txn); err != nil {
			t.Fatalf("%s: SetProducer: %v", what, err)
		}
		if err := CheckCRC(b); err != nil {
			t.Fatalf("%s: after SetProducer: %v", what, err)
		}
		info, _ := Parse(b)
		if info.BaseOffset != 0 || info.PartitionLeaderEpoch != -1 || info.ProducerID != 4242 ||
			info.ProducerEpoch != 7 || info.BaseSequence != 1000 || info.Transactional() != txn {
			t.Fatalf("%s: after SetProducer: %+v", what, info)
		}
		if info.NumRecords != before.NumRecords || info.FirstTimestamp != before.FirstTimestamp ||
			info.MaxTimestamp != before.MaxTimestamp || info.LastOffsetDelta != before.LastOffsetDelta ||
			info.Compression() != before.Compression() || info.Length != before.Length {
			t.Fatalf("%s: SetProducer changed more than the producer fields:\n%+v\n%+v", what, before, info)
		}
		again, err := Records(b, 0)
		if err != nil {
			t.Fatalf("%s: after SetProducer: %v", what, err)
		}
		if !reflect.DeepEqual(again, recs) {
			t.Fatalf("%s: records changed by SetProducer", what)
		}
	}
}
