package recordbatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// zeroRecords is n minimal records (7 bytes each: length, attributes,
// timestamp and offset deltas 0, null key and value, no headers), what a
// decompression bomb inflates to at best: every one the same, so a few
// KB of zstd hold millions.
func zeroRecords(n int) []byte {
	one := []byte{0x0c, 0, 0, 0, 0x01, 0x01, 0}
	out := make([]byte, 0, n*len(one))
	for range n {
		out = append(out, one...)
	}
	return out
}

// bomb is a zstd batch of n zero records, sized in its frame's header only
// when declared is true.
func bomb(t testing.TB, n int, declared bool) []byte {
	t.Helper()
	raw := zeroRecords(n)
	var payload []byte
	if declared {
		enc, _ := zstd.NewWriter(nil)
		defer enc.Close()
		payload = enc.EncodeAll(raw, nil)
	} else {
		payload = zstdStreamed(t, raw)
	}
	return rawBatch(Zstd, payload, int32(n), baseTS)
}

// claim has batch b's header count n records, and reseals it.
func claim(b []byte, n int32) []byte {
	binary.BigEndian.PutUint32(b[23:], uint32(n-1)) // the last offset delta
	binary.BigEndian.PutUint32(b[offNumRecords:], uint32(n))
	reseal(b)
	return b
}

// allocated is the bytes f allocates (all goroutines', so a bound with
// room).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestBombsAreRefusedBeforeInflating: a batch whose header counts more
// records than its bound can hold is refused before a byte is inflated,
// and a batch that does not say how large it inflates is cut at the bound:
// Records and AddBatch allocate about the bound, not the 28 MB the bomb
// holds (nor the 88 bytes a record Records would index).
func TestBombsAreRefusedBeforeInflating(t *testing.T) {
	const limit = 1 << 20
	counted := bomb(t, 4<<20, true)               // 4 Mi records: 28 MiB
	oneClaimed := claim(bomb(t, 4<<20, false), 1) // streamed: only inflating shows the size
	// A frame declaring a 256 MiB window: the decoder would allocate it
	// whole before the first block, however little follows.
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(&buf, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(256<<20))
	if err != nil {
		t.Fatal(err)
	}
	enc.Write(zeroRecords(50_000)) // more than a block, so the size is not declared
	enc.Close()
	var h zstd.Header
	if err := h.Decode(buf.Bytes()); err != nil || h.HasFCS || h.WindowSize != 256<<20 {
		t.Fatalf("frame header %+v, %v: want a 256 MiB window and no size", h, err)
	}
	wide := rawBatch(Zstd, buf.Bytes(), 50_000, baseTS)
	// The codecs' pools hold a decoder, with its buffers for a Kafka
	// producer's 2 MiB window, before anything is measured.
	if _, err := Records(rawBatch(Zstd, zstdStreamed(t, zeroRecords(1000)), 1000, baseTS), limit); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		raw  []byte
	}{{"record count above the bound", counted}, {"streamed, one record claimed", oneClaimed}, {"256 MiB window", wide}} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if n := allocated(func() { _, err = Records(tc.raw, limit) }); n > 16*limit {
				t.Errorf("Records allocated %d bytes for a bound of %d", n, limit)
			}
			if !errors.Is(err, ErrTooLarge) {
				t.Errorf("Records = %v, want ErrTooLarge", err)
			}
			var b Builder
			var ok bool
			if n := allocated(func() { ok, err = b.AddBatch(tc.raw, 0, limit) }); n > 16*limit {
				t.Errorf("AddBatch allocated %d bytes for a limit of %d", n, limit)
			}
			if ok || err != nil || b.Records() != 0 {
				t.Errorf("AddBatch = %v, %v, %d records; want false, nil: records larger than its limit do not fit", ok, err, b.Records())
			}
			if ok, err := b.AddBatch(tc.raw, limit/2, limit); ok || !errors.Is(err, ErrTooLarge) {
				t.Errorf("AddBatch over maxDecompressed = %v, %v; want ErrTooLarge", ok, err)
			}
		})
	}
}

// TestLZ4BlocksCostTheirLimit: an LZ4 block does not say how large it
// decodes, so a reader that sizes its room by guessing allocates the
// frame's 4 MiB block maximum to find out a 16 KB block is a bomb. Each
// block is measured from its sequences before it is decoded: a block past
// the limit is refused having allocated nothing like it, and a block that
// fits is decoded into room of its own size.
func TestLZ4BlocksCostTheirLimit(t *testing.T) {
	var buf bytes.Buffer
	w := lz4.NewWriter(&buf)
	if err := w.Apply(lz4.BlockSizeOption(lz4.Block4Mb)); err != nil {
		t.Fatal(err)
	}
	w.Write(make([]byte, 4<<20))
	w.Close()
	frame := buf.Bytes()
	const limit = 64 << 10
	// The pools and the allocator settle before anything is measured.
	if _, err := inflateLZ4(nil, frame, 0); err != nil {
		t.Fatal(err)
	}
	var err error
	if n := allocated(func() { _, err = inflateLZ4(nil, frame, limit) }); n > 4*limit {
		t.Errorf("a %d-byte frame of a 4 MiB block under a limit of %d allocated %d bytes", len(frame), limit, n)
	}
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("inflate = %v, want ErrTooLarge", err)
	}
	small, err := compress(nil, []byte("a few bytes, a few bytes, a few bytes"), LZ4)
	if err != nil {
		t.Fatal(err)
	}
	out, err := inflateLZ4(nil, small, 1000)
	if err != nil || cap(out) > 2*len(out)+64 {
		t.Errorf("a small frame decodes to %d bytes in room for %d (%v), want room of about its size", len(out), cap(out), err)
	}
}
