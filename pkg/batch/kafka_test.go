package batch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"testing"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
)

// kafkaBatch is a Kafka batch of n records at base, compressed with c.
func kafkaBatch(t testing.TB, base int64, n int, c recordbatch.Compression) KafkaBatch {
	t.Helper()
	recs := make([]recordbatch.Record, n)
	for i := range recs {
		recs[i] = recordbatch.Record{Timestamp: 1, Value: fmt.Appendf(nil, "value %d of many similar values", base+int64(i))}
	}
	raw, err := recordbatch.Build(nil, recs, c)
	if err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint64(raw, uint64(base)) // the base offset is outside the CRC
	info, err := recordbatch.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return KafkaBatch{Raw: raw, Info: info}
}

func concat(ks ...KafkaBatch) []byte {
	var out []byte
	for _, k := range ks {
		out = append(out, k.Raw...)
	}
	return out
}

func TestSealKafkaCompressesOnlyUncompressedBatches(t *testing.T) {
	c, err := NewCodecs(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	plain := []KafkaBatch{kafkaBatch(t, 10, 50, recordbatch.None), kafkaBatch(t, 60, 50, recordbatch.None)}
	b := c.SealKafka(concat(plain...), plain, 12, ferryv1.Codec_CODEC_LZ4)
	if b.GetCodec() != ferryv1.Codec_CODEC_LZ4 || len(b.GetPayload()) >= len(concat(plain...)) {
		t.Errorf("uncompressed Kafka batches travel %v in %d bytes of %d, want lz4 and smaller", b.GetCodec(), len(b.GetPayload()), len(concat(plain...)))
	}
	if b.GetFirstOffset() != 12 || b.GetLastOffset() != 109 || b.GetRecordCount() != 100 {
		t.Errorf("offsets %d..%d, %d records; want 12..109, 100", b.GetFirstOffset(), b.GetLastOffset(), b.GetRecordCount())
	}
	got, err := c.OpenKafka(b, 1<<20)
	if err != nil || len(got) != 2 || string(got[1].Raw) != string(plain[1].Raw) {
		t.Fatalf("OpenKafka = %d batches, %v; want the 2 sealed", len(got), err)
	}

	compressed := []KafkaBatch{kafkaBatch(t, 0, 50, recordbatch.Zstd)}
	b = c.SealKafka(concat(compressed...), compressed, 0, ferryv1.Codec_CODEC_LZ4)
	if b.GetCodec() != ferryv1.Codec_CODEC_NONE {
		t.Errorf("a compressed Kafka batch travels %v, want none: compressed once is enough", b.GetCodec())
	}
}

func TestOpenKafkaRefuses(t *testing.T) {
	c, err := NewCodecs(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, b := kafkaBatch(t, 100, 10, recordbatch.None), kafkaBatch(t, 110, 5, recordbatch.LZ4)
	seal := func(first int64, ks ...KafkaBatch) *ferryv1.Batch {
		return c.SealKafka(concat(ks...), ks, first, ferryv1.Codec_CODEC_NONE)
	}
	damaged := kafkaBatch(t, 110, 5, recordbatch.None)
	damaged.Raw[len(damaged.Raw)-1] ^= 1
	control := kafkaBatch(t, 110, 1, recordbatch.None)
	binary.BigEndian.PutUint16(control.Raw[21:], 1<<5)
	binary.BigEndian.PutUint32(control.Raw[17:], crc32.Checksum(control.Raw[21:], castagnoli))
	overlap := kafkaBatch(t, 105, 10, recordbatch.None)
	tests := []struct {
		name string
		b    *ferryv1.Batch
		want error
	}{
		{"first offset before the first Kafka batch", seal(99, a, b), ErrMalformed},
		{"first offset after the first Kafka batch", seal(110, a, b), ErrMalformed},
		{"overlapping Kafka batches", seal(100, a, overlap), ErrMalformed},
		{"a control batch", seal(100, a, control), ErrMalformed},
		{"a damaged Kafka batch", seal(100, a, damaged), ErrChecksum},
		{"a record count that does not add up", func() *ferryv1.Batch { x := seal(100, a, b); x.RecordCount++; return x }(), ErrMalformed},
		{"a last offset that does not match", func() *ferryv1.Batch { x := seal(100, a, b); x.LastOffset++; return x }(), ErrMalformed},
		{"a partial Kafka batch", func() *ferryv1.Batch {
			x := seal(100, a, b)
			x.Payload = x.Payload[:len(x.Payload)-3]
			x.UncompressedSize, x.Crc32C = uint32(len(x.Payload)), Checksum(x.Payload)
			return x
		}(), ErrMalformed},
		{"Ferry's own format", func() *ferryv1.Batch {
			x := seal(100, a)
			x.Format = ferryv1.PayloadFormat_PAYLOAD_FORMAT_FERRY_V1
			return x
		}(), ErrMalformed},
		{"above the size limit", func() *ferryv1.Batch { x := seal(100, a); x.UncompressedSize = 2 << 20; return x }(), ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := c.OpenKafka(tt.b, 1<<20); !errors.Is(err, tt.want) {
				t.Fatalf("OpenKafka = %v, want %v", err, tt.want)
			}
		})
	}
	if _, err := c.OpenKafka(seal(104, a, b), 1<<20); err != nil {
		t.Fatalf("OpenKafka of a sound batch copying from mid-batch: %v", err)
	}
}
