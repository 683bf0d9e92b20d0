package server

import (
	"sync"
	"sync/atomic"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
)

// resident counts the bytes of received batches the writer keeps in
// memory, whether max_buffered_bytes was charged for them or not: a
// batch's wire payload from the moment its message is received, its
// payload decompressed and the records decoded from it, until the batch is
// committed or dropped. It is what the budget exists to bound, counted
// apart from the budget's own accounting so that tests can hold the one
// to the other (its peak, Peak).
type resident struct {
	n, peak atomic.Int64
}

func (r *resident) add(d int64) {
	n := r.n.Add(d)
	for p := r.peak.Load(); n > p && !r.peak.CompareAndSwap(p, n); p = r.peak.Load() {
	}
}

// Peak is the most the writer kept at once.
func (r *resident) Peak() int64 { return r.peak.Load() }

// residentShare is one stream's part of resident. Like its budget.Hold,
// what is left of it is taken off at once when the stream ends (close);
// what the stream's receiver adds after that is not counted, since the
// batch it adds for is dropped.
type residentShare struct {
	r      *resident
	mu     sync.Mutex
	n      int64
	closed bool
}

func (s *residentShare) add(d int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.n += d
	s.r.add(d)
}

func (s *residentShare) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.r.add(-s.n)
	s.n, s.closed = 0, true
}

// inflated is the bytes b's payload takes decompressed beside the wire
// payload: its declared uncompressed size when it is compressed (the codecs
// inflate into exactly that, refusing a payload declared above
// max_batch_bytes before inflating it), none when it is not (the records
// then alias the wire payload).
func (ss *session) inflated(b *ferryv1.Batch) int64 {
	if b.GetCodec() == ferryv1.Codec_CODEC_NONE || int(b.GetUncompressedSize()) > ss.s.opts.MaxBatchBytes {
		return 0
	}
	return int64(b.GetUncompressedSize())
}
