package batch

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"testing"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
)

var allCodecs = []ferryv1.Codec{
	ferryv1.Codec_CODEC_NONE, ferryv1.Codec_CODEC_ZSTD,
	ferryv1.Codec_CODEC_LZ4, ferryv1.Codec_CODEC_SNAPPY,
}

func sampleRecords() []Record {
	var recs []Record
	for i := range 50 {
		r := Record{
			Offset:    int64(100 + i*2), // gaps, as transaction markers leave
			Timestamp: 1_700_000_000_000 + int64(i),
			Key:       []byte(fmt.Sprintf("key-%d", i)),
			Value:     bytes.Repeat([]byte(fmt.Sprintf(`{"n":%d,"pad":"abc"}`, i)), 10),
		}
		switch i % 5 {
		case 0:
			r.Key = nil // null key
		case 1:
			r.Value = nil // tombstone
		case 2:
			r.Key, r.Value = []byte{}, []byte{} // empty, not null
		case 3:
			r.Headers = []Header{{Key: []byte("traceparent"), Value: []byte("00-abc-def-01")}, {Key: []byte("n"), Value: nil}}
		}
		recs = append(recs, r)
	}
	return recs
}

func encode(recs []Record) *Encoder {
	var e Encoder
	for _, r := range recs {
		e.Append(r.Offset, r.Timestamp, r.Key, r.Value, r.Headers)
	}
	return &e
}

func newCodecs(t *testing.T) *Codecs {
	t.Helper()
	c, err := NewCodecs(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func sameRecords(t *testing.T, got, want []Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Offset != w.Offset || g.Timestamp != w.Timestamp ||
			!sameNullable(g.Key, w.Key) || !sameNullable(g.Value, w.Value) || len(g.Headers) != len(w.Headers) {
			t.Fatalf("record %d: got %+v, want %+v", i, g, w)
		}
		for j := range w.Headers {
			if !bytes.Equal(g.Headers[j].Key, w.Headers[j].Key) || !sameNullable(g.Headers[j].Value, w.Headers[j].Value) {
				t.Fatalf("record %d header %d: got %+v, want %+v", i, j, g.Headers[j], w.Headers[j])
			}
		}
	}
}

func sameNullable(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

func TestRoundTripEveryCodec(t *testing.T) {
	c := newCodecs(t)
	want := sampleRecords()
	for _, codec := range allCodecs {
		t.Run(codec.String(), func(t *testing.T) {
			b := c.Seal(encode(want), codec)
			if b.Codec != codec {
				t.Fatalf("compressible data sent as %v, want %v", b.Codec, codec)
			}
			if codec != ferryv1.Codec_CODEC_NONE && len(b.Payload) >= int(b.UncompressedSize) {
				t.Fatalf("payload %d bytes not smaller than %d", len(b.Payload), b.UncompressedSize)
			}
			if b.FirstOffset != 100 || b.LastOffset != 198 || b.RecordCount != 50 {
				t.Fatalf("batch bounds %d..%d count %d", b.FirstOffset, b.LastOffset, b.RecordCount)
			}
			got, err := c.Open(b, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			sameRecords(t, got, want)
		})
	}
}

func TestIncompressibleTravelsUncompressed(t *testing.T) {
	c := newCodecs(t)
	noise := make([]byte, 4096)
	rand.New(rand.NewSource(1)).Read(noise)
	want := []Record{{Offset: 7, Timestamp: 1, Value: noise}}
	for _, codec := range allCodecs {
		b := c.Seal(encode(want), codec)
		if b.Codec != ferryv1.Codec_CODEC_NONE {
			t.Fatalf("%v: random data sent as %v", codec, b.Codec)
		}
		got, err := c.Open(b, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		sameRecords(t, got, want)
	}
}

func TestOpenRefusesBadBatches(t *testing.T) {
	c := newCodecs(t)
	good := func(codec ferryv1.Codec) *ferryv1.Batch { return c.Seal(encode(sampleRecords()), codec) }
	tests := []struct {
		name    string
		batch   func() *ferryv1.Batch
		maxSize int
		want    error
	}{
		{"flipped payload bit", func() *ferryv1.Batch {
			b := good(ferryv1.Codec_CODEC_ZSTD)
			b.Payload[len(b.Payload)/2] ^= 1
			return b
		}, 1 << 20, ErrChecksum},
		{"above size limit", func() *ferryv1.Batch { return good(ferryv1.Codec_CODEC_ZSTD) }, 100, ErrTooLarge},
		{"understated size (bomb)", func() *ferryv1.Batch {
			b := good(ferryv1.Codec_CODEC_ZSTD)
			b.UncompressedSize /= 4
			return b
		}, 1 << 20, ErrMalformed},
		{"understated lz4 size", func() *ferryv1.Batch {
			b := good(ferryv1.Codec_CODEC_LZ4)
			b.UncompressedSize /= 4
			return b
		}, 1 << 20, ErrMalformed},
		{"overstated snappy size", func() *ferryv1.Batch {
			b := good(ferryv1.Codec_CODEC_SNAPPY)
			b.UncompressedSize++
			return b
		}, 1 << 20, ErrMalformed},
		{"unknown codec", func() *ferryv1.Batch {
			b := good(ferryv1.Codec_CODEC_NONE)
			b.Codec = 42
			return b
		}, 1 << 20, ErrMalformed},
		{"raw kafka format not accepted yet", func() *ferryv1.Batch {
			b := good(ferryv1.Codec_CODEC_NONE)
			b.Format = ferryv1.PayloadFormat_PAYLOAD_FORMAT_KAFKA_RECORD_BATCH_V2
			return b
		}, 1 << 20, ErrMalformed},
		{"count above the data", func() *ferryv1.Batch {
			b := good(ferryv1.Codec_CODEC_NONE)
			b.RecordCount = 1 << 30
			return b
		}, 1 << 20, ErrMalformed},
		{"count below the data", func() *ferryv1.Batch {
			b := good(ferryv1.Codec_CODEC_NONE)
			b.RecordCount--
			return b
		}, 1 << 20, ErrMalformed},
		{"last offset lies", func() *ferryv1.Batch {
			b := good(ferryv1.Codec_CODEC_NONE)
			b.LastOffset++
			return b
		}, 1 << 20, ErrMalformed},
		{"truncated payload", func() *ferryv1.Batch {
			b := good(ferryv1.Codec_CODEC_NONE)
			b.Payload = b.Payload[:len(b.Payload)-3]
			b.UncompressedSize -= 3
			b.Crc32C = Checksum(b.Payload)
			return b
		}, 1 << 20, ErrMalformed},
		{"empty", func() *ferryv1.Batch { return &ferryv1.Batch{Format: ferryv1.PayloadFormat_PAYLOAD_FORMAT_FERRY_V1} }, 1 << 20, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, err := c.Open(tt.batch(), tt.maxSize)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Open error = %v, want %v", err, tt.want)
			}
			if recs != nil {
				t.Fatalf("Open returned %d records with an error", len(recs))
			}
		})
	}
}

func TestParseCodec(t *testing.T) {
	for in, want := range map[string]ferryv1.Codec{"zstd": ferryv1.Codec_CODEC_ZSTD, "LZ4": ferryv1.Codec_CODEC_LZ4, "snappy": ferryv1.Codec_CODEC_SNAPPY, "none": ferryv1.Codec_CODEC_NONE} {
		if got, err := ParseCodec(in); err != nil || got != want {
			t.Errorf("ParseCodec(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseCodec("gzip"); err == nil {
		t.Error("ParseCodec(gzip) succeeded")
	}
}

func FuzzOpen(f *testing.F) {
	c, err := NewCodecs(1 << 20)
	if err != nil {
		f.Fatal(err)
	}
	defer c.Close()
	for _, codec := range allCodecs {
		b := c.Seal(encode(sampleRecords()[:5]), codec)
		f.Add(b.Payload, uint32(codec), b.RecordCount, b.UncompressedSize, b.LastOffset)
	}
	f.Fuzz(func(t *testing.T, payload []byte, codec, count, size uint32, last int64) {
		b := &ferryv1.Batch{
			FirstOffset: 100, LastOffset: last, RecordCount: count,
			Codec: ferryv1.Codec(codec), Format: ferryv1.PayloadFormat_PAYLOAD_FORMAT_FERRY_V1,
			Payload: payload, Crc32C: Checksum(payload), UncompressedSize: size,
		}
		recs, err := c.Open(b, 1<<20)
		if err == nil && len(recs) != int(count) {
			t.Fatalf("opened %d records, batch says %d", len(recs), count)
		}
	})
}
