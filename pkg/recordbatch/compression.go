package recordbatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Compression is a batch's codec, as Kafka numbers it in the attributes
// (bits 0-2).
type Compression int8

// The codecs Kafka defines.
const (
	None   Compression = 0
	Gzip   Compression = 1
	Snappy Compression = 2
	LZ4    Compression = 3
	Zstd   Compression = 4
)

var compressionNames = [...]string{None: "none", Gzip: "gzip", Snappy: "snappy", LZ4: "lz4", Zstd: "zstd"}

// ParseCompression maps a codec name as Kafka spells it (compression.type)
// to a Compression.
func ParseCompression(name string) (Compression, error) {
	for c, n := range compressionNames {
		if strings.EqualFold(name, n) {
			return Compression(c), nil
		}
	}
	return 0, fmt.Errorf("unknown compression %q (want none, gzip, snappy, lz4 or zstd)", name)
}

func (c Compression) String() string {
	if c.valid() {
		return compressionNames[c]
	}
	return fmt.Sprintf("Compression(%d)", int8(c))
}

func (c Compression) valid() bool { return c >= None && c <= Zstd }

// ErrTooLarge reports records that would decompress past the caller's
// bound: a batch the caller cannot take whole, or a compression bomb.
var ErrTooLarge = errors.New("decompressed size over the limit")

// appendWriter is an io.Writer appending to a slice, so the stream codecs
// compress straight into the batch being built.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// Kafka's own producer settings, so that Build writes what a Java producer
// with the default compression.<codec>.level would: gzip level 6 (Deflater's
// default), LZ4 frames with 64 KiB independent blocks and no block or
// content checksum (Lz4BlockOutputStream; the batch CRC already covers the
// compressed bytes), zstd level 3, snappy in xerial framing with 32 KiB
// blocks (snappy-java's SnappyOutputStream default, which Kafka 4.x uses).
var (
	gzipWriters = sync.Pool{New: func() any {
		w, _ := gzip.NewWriterLevel(nil, gzip.DefaultCompression)
		return w
	}}
	lz4Writers = sync.Pool{New: func() any {
		w := lz4.NewWriter(nil)
		// Apply fails only on invalid values, and these are fixed.
		_ = w.Apply(lz4.BlockSizeOption(lz4.Block64Kb), lz4.ChecksumOption(false),
			lz4.BlockChecksumOption(false), lz4.CompressionLevelOption(lz4.Fast), lz4.ConcurrencyOption(1))
		return w
	}}
	// One encoder serves every goroutine: EncodeAll is safe for concurrent
	// use, and with one inner encoder per core calls do not queue.
	zstdEncoder = sync.OnceValues(func() (*zstd.Encoder, error) {
		return zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault),
			zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)))
	})
)

// compress appends src compressed with c to dst.
func compress(dst, src []byte, c Compression) ([]byte, error) {
	switch c {
	case Gzip:
		zw := gzipWriters.Get().(*gzip.Writer)
		defer gzipWriters.Put(zw)
		return streamCompress(dst, src, zw, c)
	case LZ4:
		zw := lz4Writers.Get().(*lz4.Writer)
		defer lz4Writers.Put(zw)
		return streamCompress(dst, src, zw, c)
	case Zstd:
		enc, err := zstdEncoder()
		if err != nil {
			return dst, fmt.Errorf("zstd encoder: %w", err)
		}
		return enc.EncodeAll(src, dst), nil
	case Snappy:
		return appendXerial(dst, src), nil
	}
	return dst, fmt.Errorf("unknown codec %v", c)
}

type resetWriter interface {
	io.WriteCloser
	Reset(io.Writer)
}

func streamCompress(dst, src []byte, zw resetWriter, c Compression) ([]byte, error) {
	w := appendWriter{b: dst}
	zw.Reset(&w)
	_, err := zw.Write(src)
	if err == nil {
		err = zw.Close()
	}
	zw.Reset(nil) // the pooled writer must not keep the batch alive
	if err != nil {
		return dst, fmt.Errorf("%v: %w", c, err)
	}
	return w.b, nil
}

// xerialMagic opens a snappy-java stream. A raw snappy block cannot start
// with it: its first element would be a copy with nothing yet to copy from.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

// xerialHeader is the magic, then the stream version and the oldest
// version able to read it, both 1 (snappy-java's SnappyCodec).
var xerialHeader = append(slices.Clip(xerialMagic), 0, 0, 0, 1, 0, 0, 0, 1)

const (
	xerialHeaderSize = 16
	xerialBlockSize  = 32 << 10
)

// appendXerial appends src in snappy-java's stream framing: the header,
// then per block of at most 32 KiB a big-endian length and a raw snappy
// block. Kafka's producer writes this (SnappyOutputStream); brokers and
// consumers read it and raw blocks alike (SnappyInputStream falls back to a
// raw block when the magic is missing).
func appendXerial(dst, src []byte) []byte {
	dst = append(dst, xerialHeader...)
	for len(src) > 0 {
		n := min(len(src), xerialBlockSize)
		bound := snappy.MaxEncodedLen(n)
		dst = slices.Grow(dst, 4+bound)
		at := len(dst)
		// Encode writes into its dst when it is long enough, so the
		// block lands in place, after room for its length.
		block := snappy.Encode(dst[at+4:at+4+bound], src[:n])
		dst = dst[:at+4+len(block)]
		binary.BigEndian.PutUint32(dst[at:], uint32(len(block)))
		src = src[n:]
	}
	return dst
}

// decompress inflates src, compressed with c, into dst's memory (reused
// when it is large enough; nil allocates). A positive limit bounds the
// result: sizes the codec declares up front are checked before decoding,
// and streams are read one byte past the limit at most.
func decompress(dst, src []byte, c Compression, limit int) ([]byte, error) {
	switch c {
	case Gzip:
		return inflateGzip(dst, src, limit)
	case LZ4:
		return inflateLZ4(dst, src, limit)
	case Zstd:
		return inflateZstd(dst, src, limit)
	case Snappy:
		return inflateSnappy(dst, src, limit)
	}
	return nil, fmt.Errorf("unknown codec %v", c)
}

type gzipReader struct {
	zr  gzip.Reader
	src bytes.Reader
}

// zstdStream decodes one stream at a time: with concurrency 1 the decoder
// runs on the caller's goroutine, so a pooled one owns no goroutines.
type zstdStream struct {
	zr  *zstd.Decoder
	src bytes.Reader
}

// zstdMaxWindow is the largest window a bounded zstd decode accepts. The
// decoder allocates a frame's whole window (and two blocks) before its
// first block, whatever follows: a frame of a few hundred bytes declaring
// the default maximum of 512 MiB would cost that much. Kafka's Java
// producer streams with the window of its level (2 MiB at the default 3,
// 8 MiB at 19; 32 to 128 MiB only at levels 20 to 22), other clients
// declare the content's size; a larger window is refused as ErrTooLarge.
const zstdMaxWindow = 8 << 20

var (
	gzipReaders = sync.Pool{New: func() any { return new(gzipReader) }}
	zstdStreams = sync.Pool{New: func() any {
		zr, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(zstdMaxWindow))
		if err != nil {
			return err
		}
		return &zstdStream{zr: zr}
	}}
	// zstdDecoder serves unbounded decodes from every goroutine at once.
	zstdDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
		return zstd.NewReader(nil, zstd.WithDecoderConcurrency(0))
	})
)

func inflateGzip(dst, src []byte, limit int) ([]byte, error) {
	r := gzipReaders.Get().(*gzipReader)
	defer gzipReaders.Put(r)
	defer r.src.Reset(nil)
	r.src.Reset(src)
	if err := r.zr.Reset(&r.src); err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	out, err := readBounded(dst, &r.zr, len(src), limit)
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	return out, nil
}

// inflateLZ4 decodes LZ4 frames as Kafka writes them (KafkaLZ4BlockOutputStream
// and every client's LZ4 codec): independent blocks, each measured from
// its sequences (lz4BlockLen), checked against the limit and decoded
// straight into dst, so no block buffer of the frame's declared size
// (pierrec/lz4's Reader takes one from a pool per frame: 4 MiB for
// producers that declare 4 MiB blocks, however small the batch) is held,
// and a bomb costs nothing past the limit. The header checksum is
// checked, as Kafka checks it; block and content checksums are skipped:
// the batch's CRC-32C covers every byte. Frames may follow each other.
func inflateLZ4(dst, src []byte, limit int) ([]byte, error) {
	out := dst[:0]
	for len(src) > 0 {
		var err error
		if out, src, err = inflateLZ4Frame(out, src, limit); err != nil {
			return nil, fmt.Errorf("lz4: %w", err)
		}
	}
	return out, nil
}

// lz4BlockSizes are the block maximum sizes a frame descriptor's BD byte
// names (bits 6-4, values 4 to 7).
var lz4BlockSizes = [8]int{4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}

var errLZ4Block = errors.New("malformed LZ4 block")

// lz4BlockLen is the size the LZ4 block decodes to, read from its
// sequences without decoding them: each token's literal and match lengths,
// and the length bytes that extend them, are summed and the literals
// skipped. A block does not declare its size, and frames often declare 4
// MiB blocks however small they are, so without this a reader guesses its
// room and has to try the frame's maximum to find out a block is a bomb.
// Offsets are left to the decoder to check.
func lz4BlockLen(block []byte) (int, error) {
	n := 0
	for at := 0; at < len(block); {
		token := block[at]
		at++
		lit, used, err := lz4Length(block[at:], int(token>>4))
		if err != nil {
			return 0, err
		}
		at += used
		if lit > len(block)-at {
			return 0, fmt.Errorf("%w: %d literals, %d bytes left", errLZ4Block, lit, len(block)-at)
		}
		at += lit
		n += lit
		if at == len(block) {
			return n, nil // the last sequence is literals only
		}
		if len(block)-at < 2 {
			return 0, fmt.Errorf("%w: match offset truncated", errLZ4Block)
		}
		at += 2
		match, used, err := lz4Length(block[at:], int(token&15))
		if err != nil {
			return 0, err
		}
		at += used
		n += match + 4 // a match copies at least 4 bytes
	}
	return 0, fmt.Errorf("%w: ends with a match, not literals", errLZ4Block)
}

// lz4Length reads the bytes extending a token's 4-bit length (15 means
// more follow, each adding up to 255) and returns the length and the bytes
// read.
func lz4Length(b []byte, n int) (int, int, error) {
	if n != 15 {
		return n, 0, nil
	}
	for i, c := range b {
		n += int(c)
		if c != 255 {
			return n, i + 1, nil
		}
	}
	return 0, 0, fmt.Errorf("%w: length truncated", errLZ4Block)
}

// appendLZ4Block appends the decoded block to out, refusing it before a
// byte is allocated if it would take out past a positive limit.
func appendLZ4Block(out, block []byte, blockMax, limit int) ([]byte, error) {
	n, err := lz4BlockLen(block)
	if err != nil {
		return nil, err
	}
	if n > blockMax {
		return nil, fmt.Errorf("%w: decodes to %d bytes, frame's blocks at most %d", errLZ4Block, n, blockMax)
	}
	if limit > 0 && len(out)+n > limit {
		return nil, fmt.Errorf("%w (%d)", ErrTooLarge, limit)
	}
	out = slices.Grow(out, n)
	got, err := lz4.UncompressBlock(block, out[len(out):len(out)+n])
	if err != nil {
		return nil, err
	}
	if got != n {
		return nil, fmt.Errorf("%w: decoded %d bytes of the %d its sequences give", errLZ4Block, got, n)
	}
	return out[:len(out)+n], nil
}

// inflateLZ4Frame appends the frame at the start of src to out and returns
// what follows it.
func inflateLZ4Frame(out, src []byte, limit int) ([]byte, []byte, error) {
	if len(src) < 7 || !bytes.HasPrefix(src, lz4FrameMagic) {
		return nil, nil, errors.New("no LZ4 frame magic")
	}
	flg, bd := src[4], src[5]
	if flg>>6 != 1 {
		return nil, nil, fmt.Errorf("frame version %d", flg>>6)
	}
	if flg&0x20 == 0 {
		return nil, nil, errors.New("dependent blocks (Kafka reads only independent ones)")
	}
	if flg&0x02 != 0 || bd&0x8f != 0 {
		return nil, nil, errors.New("reserved frame descriptor bits set")
	}
	blockMax := lz4BlockSizes[bd>>4&7]
	if blockMax == 0 {
		return nil, nil, fmt.Errorf("block size code %d", bd>>4&7)
	}
	at := 6
	if flg&0x08 != 0 {
		at += 8 // content size
	}
	if flg&0x01 != 0 {
		at += 4 // dictionary id
	}
	if len(src) <= at {
		return nil, nil, errors.New("frame descriptor truncated")
	}
	if want := byte(xxh32Short(src[4:at]) >> 8); src[at] != want {
		return nil, nil, fmt.Errorf("frame descriptor checksum %#x, want %#x", src[at], want)
	}
	src = src[at+1:]
	blockSum, contentSum := flg&0x10 != 0, flg&0x04 != 0
	for {
		if len(src) < 4 {
			return nil, nil, errors.New("frame truncated before its end mark")
		}
		word := binary.LittleEndian.Uint32(src)
		src = src[4:]
		if word == 0 { // the end mark
			break
		}
		n := int(word &^ (1 << 31))
		if n > blockMax || n > len(src) {
			return nil, nil, fmt.Errorf("block of %d bytes (frame's blocks at most %d, %d bytes left)", n, blockMax, len(src))
		}
		block := src[:n]
		src = src[n:]
		if blockSum {
			if len(src) < 4 {
				return nil, nil, errors.New("block checksum truncated")
			}
			src = src[4:]
		}
		if word&(1<<31) == 0 {
			var err error
			if out, err = appendLZ4Block(out, block, blockMax, limit); err != nil {
				return nil, nil, err
			}
			continue
		}
		// Stored uncompressed.
		if limit > 0 && len(out)+len(block) > limit {
			return nil, nil, fmt.Errorf("%w (%d)", ErrTooLarge, limit)
		}
		out = append(out, block...)
	}
	if contentSum {
		if len(src) < 4 {
			return nil, nil, errors.New("content checksum truncated")
		}
		src = src[4:]
	}
	return out, src, nil
}

func inflateZstd(dst, src []byte, limit int) ([]byte, error) {
	if limit <= 0 {
		dec, err := zstdDecoder()
		if err != nil {
			return nil, fmt.Errorf("zstd decoder: %w", err)
		}
		out, err := dec.DecodeAll(src, dst[:0])
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		return out, nil
	}
	// A frame declaring its size is refused before a byte is decoded.
	var h zstd.Header
	if h.Decode(src) == nil && h.HasFCS && h.FrameContentSize > uint64(limit) {
		return nil, fmt.Errorf("zstd: frame declares %d bytes: %w (%d)", h.FrameContentSize, ErrTooLarge, limit)
	}
	// The rest is streamed rather than decoded with DecodeAll: a decoder's
	// memory bound also caps the window it accepts, and Kafka's Java
	// producer streams frames with a 2 MiB window (level 3, size unknown)
	// whatever the batch's size, so a bound below that would refuse them.
	got := zstdStreams.Get()
	zs, ok := got.(*zstdStream)
	if !ok {
		return nil, fmt.Errorf("zstd decoder: %w", got.(error))
	}
	defer zstdStreams.Put(zs)
	defer zs.src.Reset(nil)
	// A bytes.Reader, not a bytes.Buffer: the decoder would decode a small
	// Buffer whole at once, without the limit.
	zs.src.Reset(src)
	if err := zs.zr.Reset(&zs.src); err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
	}
	defer zs.zr.Reset(nil)
	out, err := readBounded(dst, zs.zr, len(src), limit)
	if errors.Is(err, zstd.ErrWindowSizeExceeded) {
		return nil, fmt.Errorf("zstd: window above %d bytes: %w (%d)", zstdMaxWindow, ErrTooLarge, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
	}
	return out, nil
}

// readBounded reads r to its end into dst's memory (grown as needed); with
// a positive limit it stops one byte past the limit and fails.
func readBounded(dst []byte, r io.Reader, srcLen, limit int) ([]byte, error) {
	guess := 4*srcLen + 512
	if limit > 0 {
		guess = min(guess, limit+1)
		r = &io.LimitedReader{R: r, N: int64(limit) + 1}
	}
	buf := bytes.NewBuffer(slices.Grow(dst[:0], guess))
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, err
	}
	if limit > 0 && buf.Len() > limit {
		return nil, fmt.Errorf("%w (%d)", ErrTooLarge, limit)
	}
	return buf.Bytes(), nil
}

var errXerial = errors.New("malformed xerial framing")

// inflateSnappy reads both what Kafka's producer writes (xerial framing)
// and raw snappy blocks, which other clients send and Kafka accepts.
func inflateSnappy(dst, src []byte, limit int) ([]byte, error) {
	if len(src) < xerialHeaderSize || !bytes.HasPrefix(src, xerialMagic) {
		n, err := snappy.DecodedLen(src)
		if err != nil {
			return nil, fmt.Errorf("snappy: %w", err)
		}
		if limit > 0 && n > limit {
			return nil, fmt.Errorf("snappy: block declares %d bytes: %w (%d)", n, ErrTooLarge, limit)
		}
		out, err := snappy.Decode(slices.Grow(dst[:0], n)[:n], src)
		if err != nil {
			return nil, fmt.Errorf("snappy: %w", err)
		}
		return out, nil
	}
	// Every block declares its decoded length: add them up and check the
	// total before decoding any, then decode each in place.
	total, err := walkXerial(src, func([]byte, int) error { return nil })
	if err != nil {
		return nil, fmt.Errorf("snappy: %w", err)
	}
	if limit > 0 && total > limit {
		return nil, fmt.Errorf("snappy: blocks declare %d bytes: %w (%d)", total, ErrTooLarge, limit)
	}
	out := slices.Grow(dst[:0], total)[:total]
	at := 0
	if _, err := walkXerial(src, func(block []byte, n int) error {
		if _, err := snappy.Decode(out[at:at+n], block); err != nil {
			return err
		}
		at += n
		return nil
	}); err != nil {
		return nil, fmt.Errorf("snappy: %w", err)
	}
	return out, nil
}

// walkXerial calls fn for each block of a xerial stream with its declared
// decoded length and returns the sum of those lengths. A header in the
// middle starts a concatenated stream, which snappy-java reads on.
func walkXerial(src []byte, fn func(block []byte, n int) error) (int, error) {
	total := 0
	for rest := src; len(rest) > 0; {
		if len(rest) >= xerialHeaderSize && bytes.HasPrefix(rest, xerialMagic) {
			rest = rest[xerialHeaderSize:]
			continue
		}
		if len(rest) < 4 {
			return 0, fmt.Errorf("%w: %d bytes after the last block", errXerial, len(rest))
		}
		size := binary.BigEndian.Uint32(rest)
		rest = rest[4:]
		if uint64(size) > uint64(len(rest)) {
			return 0, fmt.Errorf("%w: block of %d bytes, %d left", errXerial, size, len(rest))
		}
		block := rest[:size]
		rest = rest[size:]
		n, err := snappy.DecodedLen(block)
		if err != nil {
			return 0, err
		}
		if err := fn(block, n); err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}
