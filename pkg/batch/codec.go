package batch

import (
	"errors"
	"fmt"
	"hash/crc32"
	"runtime"
	"strings"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
)

// ErrChecksum reports a payload whose CRC32C does not match: it was damaged
// on the way and must not be written.
var ErrChecksum = errors.New("batch checksum mismatch")

// ErrTooLarge reports a batch whose decompressed size is above the limit.
var ErrTooLarge = errors.New("batch too large")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC-32C of a payload as it travels.
func Checksum(payload []byte) uint32 { return crc32.Checksum(payload, castagnoli) }

// ParseCodec maps a configuration word (zstd, lz4, snappy, none) to a Codec.
func ParseCodec(s string) (ferryv1.Codec, error) {
	switch strings.ToLower(s) {
	case "zstd":
		return ferryv1.Codec_CODEC_ZSTD, nil
	case "lz4":
		return ferryv1.Codec_CODEC_LZ4, nil
	case "snappy":
		return ferryv1.Codec_CODEC_SNAPPY, nil
	case "none":
		return ferryv1.Codec_CODEC_NONE, nil
	}
	return 0, fmt.Errorf("unknown codec %q (want zstd, lz4, snappy or none)", s)
}

// Codecs compresses and decompresses payloads. One serves a whole process:
// its zstd coders are safe for concurrent use and costly to build.
type Codecs struct {
	zenc *zstd.Encoder
	zdec *zstd.Decoder
}

// NewCodecs builds the coders. maxSize bounds what one payload may inflate
// to; the zstd decoder refuses windows above it too.
func NewCodecs(maxSize int) (*Codecs, error) {
	// One encoder per core: EncodeAll calls wait for a free encoder, and a
	// single one serialised every partition's compression (seen in the
	// fetcher's goroutine profile: 7 of 8 readers waiting in EncodeAll).
	zenc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)))
	if err != nil {
		return nil, fmt.Errorf("zstd encoder: %w", err)
	}
	zdec, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(0),
		zstd.WithDecoderMaxMemory(uint64(maxSize)),
		zstd.WithDecodeAllCapLimit(true))
	if err != nil {
		return nil, fmt.Errorf("zstd decoder: %w", err)
	}
	return &Codecs{zenc: zenc, zdec: zdec}, nil
}

// Close releases the coders' goroutines.
func (c *Codecs) Close() {
	c.zenc.Close()
	c.zdec.Close()
}

// Seal compresses the encoder's records into a wire batch. When a codec
// does not shrink the data, the batch travels uncompressed (codec NONE), as
// Kafka producers do, so the receiver never inflates a block that grew.
func (c *Codecs) Seal(e *Encoder, codec ferryv1.Codec) *ferryv1.Batch {
	src := e.Bytes()
	payload, used := c.compress(codec, src)
	return &ferryv1.Batch{
		FirstOffset:      e.FirstOffset(),
		LastOffset:       e.LastOffset(),
		RecordCount:      uint32(e.Count()),
		Codec:            used,
		Format:           ferryv1.PayloadFormat_PAYLOAD_FORMAT_FERRY_V1,
		Payload:          payload,
		Crc32C:           Checksum(payload),
		UncompressedSize: uint32(len(src)),
	}
}

func (c *Codecs) compress(codec ferryv1.Codec, src []byte) ([]byte, ferryv1.Codec) {
	var out []byte
	switch codec {
	case ferryv1.Codec_CODEC_ZSTD:
		out = c.zenc.EncodeAll(src, make([]byte, 0, len(src)/2+64))
	case ferryv1.Codec_CODEC_LZ4:
		out = make([]byte, lz4.CompressBlockBound(len(src)))
		n, err := lz4.CompressBlock(src, out, nil)
		if err != nil || n == 0 { // n == 0: incompressible
			out = nil
		} else {
			out = out[:n]
		}
	case ferryv1.Codec_CODEC_SNAPPY:
		out = snappy.Encode(nil, src)
	}
	if out == nil || len(out) >= len(src) {
		return append([]byte(nil), src...), ferryv1.Codec_CODEC_NONE
	}
	return out, codec
}

// Open checks a wire batch and returns its records. Nothing is returned
// unless the whole batch is sound; the records alias a fresh buffer.
func (c *Codecs) Open(b *ferryv1.Batch, maxSize int) ([]Record, error) {
	if b.GetFormat() != ferryv1.PayloadFormat_PAYLOAD_FORMAT_FERRY_V1 {
		return nil, fmt.Errorf("%w: unsupported payload format %v", ErrMalformed, b.GetFormat())
	}
	if b.GetRecordCount() == 0 {
		return nil, fmt.Errorf("%w: empty batch", ErrMalformed)
	}
	data, err := c.payload(b, maxSize)
	if err != nil {
		return nil, err
	}
	recs, err := Decode(data, b.GetFirstOffset(), int(b.GetRecordCount()))
	if err != nil {
		return nil, err
	}
	if last := recs[len(recs)-1].Offset; last != b.GetLastOffset() {
		return nil, fmt.Errorf("%w: last record offset %d, batch says %d", ErrMalformed, last, b.GetLastOffset())
	}
	return recs, nil
}

// payload checks what every wire batch declares (offsets, size, checksum)
// and returns its payload decompressed.
func (c *Codecs) payload(b *ferryv1.Batch, maxSize int) ([]byte, error) {
	if b.GetFirstOffset() < 0 || b.GetLastOffset() < b.GetFirstOffset() {
		return nil, fmt.Errorf("%w: offsets %d..%d", ErrMalformed, b.GetFirstOffset(), b.GetLastOffset())
	}
	size := int(b.GetUncompressedSize())
	if size > maxSize {
		return nil, fmt.Errorf("%w: %d bytes uncompressed, limit %d", ErrTooLarge, size, maxSize)
	}
	if got := Checksum(b.GetPayload()); got != b.GetCrc32C() {
		return nil, fmt.Errorf("%w: computed %08x, batch says %08x", ErrChecksum, got, b.GetCrc32C())
	}
	return c.decompress(b.GetCodec(), b.GetPayload(), size)
}

// decompress inflates src into exactly size bytes, never more: each codec
// writes into a buffer of the declared size and the result must fill it.
func (c *Codecs) decompress(codec ferryv1.Codec, src []byte, size int) ([]byte, error) {
	var (
		out []byte
		err error
	)
	switch codec {
	case ferryv1.Codec_CODEC_NONE:
		out = src
	case ferryv1.Codec_CODEC_ZSTD:
		out, err = c.zdec.DecodeAll(src, make([]byte, 0, size))
	case ferryv1.Codec_CODEC_LZ4:
		out = make([]byte, size)
		var n int
		n, err = lz4.UncompressBlock(src, out)
		out = out[:max(n, 0)]
	case ferryv1.Codec_CODEC_SNAPPY:
		var n int
		if n, err = snappy.DecodedLen(src); err == nil && n != size {
			err = fmt.Errorf("snappy block declares %d bytes", n)
		}
		if err == nil {
			out, err = snappy.Decode(make([]byte, size), src)
		}
	default:
		return nil, fmt.Errorf("%w: unknown codec %v", ErrMalformed, codec)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v decompress: %v", ErrMalformed, codec, err)
	}
	if len(out) != size {
		return nil, fmt.Errorf("%w: decompressed to %d bytes, batch says %d", ErrMalformed, len(out), size)
	}
	return out, nil
}
