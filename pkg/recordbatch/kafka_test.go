package recordbatch

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferry-replicator/ferry/loadtest/kafkabroker"
)

// kafkaNames are the topic compression.type values, which spell none
// "uncompressed".
var kafkaNames = map[Compression]string{None: "uncompressed", Gzip: "gzip", Snappy: "snappy", LZ4: "lz4", Zstd: "zstd"}

// realRecords are mixedRecords and manyRecords dated around now: a broker
// refuses timestamps more than message.timestamp.after.max.ms (1 h) ahead.
func realRecords(now int64, many int) []Record {
	recs := mixedRecords()
	for i, d := range []int64{0, -1000, 5, -1 << 30, -3_600_000, -7} {
		recs[i].Timestamp = now + d
	}
	for _, r := range manyRecords(many) {
		r.Timestamp += now - baseTS - 10_000
		recs = append(recs, r)
	}
	return recs
}

// TestApacheKafka checks the batches against a real Apache Kafka 4.3.1
// broker, which (unlike kfake) decompresses every compressed batch it is
// sent with the Java codecs, validates each record, and enforces producer
// sequences. It fails, never skips, when the broker cannot start.
func TestApacheKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skips starting a real Apache Kafka 4.3.1 broker (a JVM, tens of seconds); CI runs without -short")
	}
	broker := kafkabroker.StartT(t, kafkabroker.Options{Name: "recordbatch-test"})
	addrs := []string{broker.Addr()}
	w := newWire(t, addrs...)
	adm := kadm.NewClient(w.cl)
	createTopic := func(t *testing.T, ctx context.Context, topic string, partitions int32, configs map[string]*string) {
		t.Helper()
		resp, err := adm.CreateTopic(ctx, partitions, 1, configs, topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			t.Fatalf("create topic %s: %v", topic, err)
		}
	}
	subtest := func(name string, f func(t *testing.T, ctx context.Context)) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			f(t, ctx)
		})
	}
	now := time.Now().UnixMilli()

	// Build's batch of each codec is taken, stored byte for byte (the broker
	// only sets the offset and leader epoch, outside the CRC) and read back.
	subtest("built batches", func(t *testing.T, ctx context.Context) {
		createTopic(t, ctx, "built", int32(len(allCodecs)), nil)
		sent := make(map[int32][][]byte)
		want := make(map[int32][]Record)
		total := 0
		for p, c := range allCodecs {
			for _, recs := range [][]Record{realRecords(now, 0), realRecords(now, 2000)} {
				b := mustBuild(t, recs, c)
				off := w.mustProduce(ctx, "built", int32(p), b)
				if off != int64(len(want[int32(p)])) {
					t.Fatalf("%v: base offset %d after %d records", c, off, len(want[int32(p)]))
				}
				sent[int32(p)] = append(sent[int32(p)], b)
				want[int32(p)] = append(want[int32(p)], recs...)
				total += len(recs)
			}
		}
		for p, c := range allCodecs {
			stored := w.fetch(ctx, "built", int32(p), len(want[int32(p)]))
			if len(stored) != len(sent[int32(p)]) {
				t.Fatalf("%v: %d batches stored, %d sent", c, len(stored), len(sent[int32(p)]))
			}
			for i, b := range stored {
				if err := CheckCRC(b); err != nil {
					t.Fatalf("%v batch %d: %v", c, i, err)
				}
				if !bytes.Equal(b[crcStart:], sent[int32(p)][i][crcStart:]) {
					t.Fatalf("%v batch %d: the broker changed the bytes under the CRC", c, i)
				}
			}
		}
		got := make(map[int32][]Record)
		for _, r := range consume(t, ctx, addrs, "built", total) {
			got[r.Partition] = append(got[r.Partition], fromKgo(r))
		}
		for p, c := range allCodecs {
			sameRecords(t, c.String(), got[int32(p)], want[int32(p)])
		}
	})

	// The broker decompresses each Build codec with the Java library and
	// compresses with another; Records reads what Java wrote, which for
	// snappy and lz4 is the framing Build copies.
	subtest("broker recompression", func(t *testing.T, ctx context.Context) {
		for i, target := range allCodecs {
			source := allCodecs[(i+1)%len(allCodecs)]
			topic := "to-" + target.String()
			createTopic(t, ctx, topic, 1, map[string]*string{"compression.type": kmsg.StringPtr(kafkaNames[target])})
			recs := realRecords(now, 3000)
			w.mustProduce(ctx, topic, 0, mustBuild(t, recs, source))
			stored := w.fetch(ctx, topic, 0, len(recs))
			var got []Record
			for _, b := range stored {
				info, err := Parse(b)
				if err != nil {
					t.Fatal(err)
				}
				if info.Compression() != target {
					t.Fatalf("%s: the broker stored %v", topic, info.Compression())
				}
				if err := CheckCRC(b); err != nil {
					t.Fatalf("%s: %v", topic, err)
				}
				payload := b[HeaderSize:]
				switch target {
				case Snappy:
					if !bytes.HasPrefix(payload, xerialHeader) {
						t.Fatalf("Kafka's snappy starts % x, not the xerial header", payload[:16])
					}
				case LZ4:
					if !bytes.Equal(payload[4:6], []byte{0x60, 0x40}) {
						t.Fatalf("Kafka's lz4 frame descriptor is % x", payload[4:6])
					}
				case Zstd:
					var h zstd.Header
					if err := h.Decode(payload); err != nil {
						t.Fatal(err)
					}
					t.Logf("Kafka's zstd frame for %d bytes of records: window %d, content size declared: %v", len(recordsBytes(t, recs)), h.WindowSize, h.HasFCS)
				}
				// The tightest bound: Java's zstd frame has a 2 MiB window
				// and no declared size, and must be read all the same.
				decoded, err := Records(b, len(recordsBytes(t, recs)))
				if err != nil {
					t.Fatalf("%s: %v", topic, err)
				}
				got = append(got, decoded...)
			}
			sameRecords(t, fmt.Sprintf("%v through %s", source, topic), got, recs)
		}
	})

	// Other clients send raw snappy blocks, without xerial framing, and
	// Kafka takes them: Records must read them too.
	subtest("raw snappy block", func(t *testing.T, ctx context.Context) {
		createTopic(t, ctx, "raw-snappy", 1, nil)
		recs := realRecords(now, 500)
		b := mustBuild(t, recs, None)
		raw := append(bytes.Clone(b[:HeaderSize]), snappy.Encode(nil, b[HeaderSize:])...)
		binary.BigEndian.PutUint16(raw[crcStart:], uint16(Snappy))
		binary.BigEndian.PutUint32(raw[offLength:], uint32(len(raw)-12))
		reseal(raw)
		w.mustProduce(ctx, "raw-snappy", 0, raw)
		stored := w.fetch(ctx, "raw-snappy", 0, len(recs))
		if len(stored) != 1 || !bytes.Equal(stored[0][crcStart:], raw[crcStart:]) {
			t.Fatal("the raw snappy batch was not stored as sent")
		}
		got, err := Records(stored[0], 0)
		if err != nil {
			t.Fatal(err)
		}
		sameRecords(t, "raw snappy", got, recs)
	})

	// A batch with a flipped byte is refused: the broker checks the CRC, so
	// SetProducer resealing damage would let it through.
	subtest("corrupt batch", func(t *testing.T, ctx context.Context) {
		createTopic(t, ctx, "corrupt", 1, nil)
		b := mustBuild(t, realRecords(now, 100), LZ4)
		b[len(b)-10] ^= 0x01
		if p := w.produce(ctx, "corrupt", 0, b); p.ErrorCode != kerr.CorruptMessage.Code {
			t.Fatalf("corrupt batch: %v, want %v", kerr.ErrorForCode(p.ErrorCode), kerr.CorruptMessage)
		}
		if err := SetProducer(b, 1, 0, 0, false); err == nil {
			t.Fatal("SetProducer resealed a corrupt batch")
		}
	})

	// Ferry's producer path: batches built or fetched elsewhere, rewritten
	// for an idempotent producer id the target issued, sequence after
	// sequence. The broker enforces the sequences, so duplicates and gaps
	// show.
	subtest("idempotent rewrite", func(t *testing.T, ctx context.Context) {
		createTopic(t, ctx, "idempotent", 1, nil)
		req := kmsg.NewPtrInitProducerIDRequest() // no transactional id: an idempotent producer
		resp, err := req.RequestWith(ctx, w.cl)
		if err != nil {
			t.Fatal(err)
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			t.Fatalf("init producer id: %v", err)
		}
		pid, epoch := resp.ProducerID, resp.ProducerEpoch

		var (
			sent [][]byte
			want []Record
			seq  int32
		)
		for i, c := range []Compression{LZ4, Zstd, Snappy, Gzip, None} {
			recs := realRecords(now, 3*i)[:5+3*i]
			b := mustBuild(t, recs, c)
			if err := SetProducer(b, pid, epoch, seq, false); err != nil {
				t.Fatal(err)
			}
			if off := w.mustProduce(ctx, "idempotent", 0, b); off != int64(seq) {
				t.Fatalf("batch %d (%v) at offset %d, want %d", i, c, off, seq)
			}
			sent = append(sent, b)
			want = append(want, recs...)
			seq += int32(len(recs))
		}

		// A retry of an acknowledged batch is recognised, not appended.
		if p := w.produce(ctx, "idempotent", 0, sent[1]); p.ErrorCode != 0 || p.BaseOffset != 5 {
			t.Fatalf("resent batch 1: %v at offset %d, want success at its first offset 5", kerr.ErrorForCode(p.ErrorCode), p.BaseOffset)
		}
		// A gap in the sequence is refused.
		gap := mustBuild(t, realRecords(now, 0)[:2], Zstd)
		if err := SetProducer(gap, pid, epoch, seq+10, false); err != nil {
			t.Fatal(err)
		}
		if p := w.produce(ctx, "idempotent", 0, gap); p.ErrorCode != kerr.OutOfOrderSequenceNumber.Code {
			t.Fatalf("batch after a gap: %v, want %v", kerr.ErrorForCode(p.ErrorCode), kerr.OutOfOrderSequenceNumber)
		}

		stored := w.fetch(ctx, "idempotent", 0, len(want))
		if len(stored) != len(sent) {
			t.Fatalf("%d batches stored, %d sent", len(stored), len(sent))
		}
		for i, b := range stored {
			info, _ := Parse(b)
			if info.ProducerID != pid || info.ProducerEpoch != epoch || info.BaseSequence != int32(info.BaseOffset) {
				t.Fatalf("batch %d: producer %d/%d sequence %d at offset %d", i, info.ProducerID, info.ProducerEpoch, info.BaseSequence, info.BaseOffset)
			}
			if !bytes.Equal(b[crcStart:], sent[i][crcStart:]) {
				t.Fatalf("batch %d: the broker changed the bytes under the CRC", i)
			}
		}
		krs := consume(t, ctx, addrs, "idempotent", len(want))
		var got []Record
		for _, r := range krs {
			if r.ProducerID != pid || r.ProducerEpoch != epoch {
				t.Fatalf("offset %d: producer %d/%d, want %d/%d", r.Offset, r.ProducerID, r.ProducerEpoch, pid, epoch)
			}
			got = append(got, fromKgo(r))
		}
		sameRecords(t, "idempotent", got, want)
	})
}
