// Package budget bounds the bytes a process holds for all its streams at
// once: one limit per process, shared by every shard or stream it serves,
// so memory follows the configured bytes and not the number of partitions.
//
// Waiters are served in arrival order, so a large request is not starved
// by small ones behind it (AcquireFirst alone goes ahead of them). A Hold
// is one stream's share of a Budget: what the stream holds is released
// piece by piece as its bytes leave (acknowledged, committed), and
// whatever is left is released at once when the stream ends, on every
// path, so a stream that fails cannot leak the process's bytes. A nil
// *Budget is no limit: its Holds hold and wait for nothing.
package budget

import (
	"context"
	"sync"
)

// Budget is a process-wide byte limit.
type Budget struct {
	max     int64
	observe func(int64)

	mu      sync.Mutex
	used    int64
	waiters []*waiter // in arrival order
}

type waiter struct {
	lo, hi  int64
	granted int64
	ready   chan struct{} // closed once granted
}

// New returns a budget of limit bytes (at least 1). observe, when not nil,
// is called with the bytes in use after every change (a gauge's Set).
func New(limit int64, observe func(int64)) *Budget {
	return &Budget{max: max(limit, 1), observe: observe}
}

// Max is the budget's limit (0 for no limit).
func (b *Budget) Max() int64 {
	if b == nil {
		return 0
	}
	return b.max
}

// InUse is the bytes held now.
func (b *Budget) InUse() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// Waiting is how many acquires wait for bytes now: a budget that keeps
// waiters is the bottleneck.
func (b *Budget) Waiting() int {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.waiters)
}

// acquire waits until at least lo bytes are free, in arrival order (or
// ahead of every waiter, first), and takes up to hi of them
// (lo <= hi <= max).
func (b *Budget) acquire(ctx context.Context, lo, hi int64, first bool) (int64, error) {
	b.mu.Lock()
	if (first || len(b.waiters) == 0) && b.max-b.used >= lo {
		n := min(hi, b.max-b.used)
		b.used += n
		b.notifyLocked()
		b.mu.Unlock()
		return n, nil
	}
	w := &waiter{lo: lo, hi: hi, ready: make(chan struct{})}
	if first {
		b.waiters = append([]*waiter{w}, b.waiters...)
	} else {
		b.waiters = append(b.waiters, w)
	}
	b.mu.Unlock()
	select {
	case <-w.ready:
		return w.granted, nil
	case <-ctx.Done():
		b.mu.Lock()
		select {
		case <-w.ready: // granted meanwhile: give it back
			b.mu.Unlock()
			b.release(w.granted)
		default:
			for i, x := range b.waiters {
				if x == w {
					b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
					break
				}
			}
			b.grantLocked() // those behind it may fit now
			b.mu.Unlock()
		}
		return 0, ctx.Err()
	}
}

// tryAcquire takes n bytes if they are free and nobody waits for bytes.
func (b *Budget) tryAcquire(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.waiters) > 0 || b.max-b.used < n {
		return false
	}
	b.used += n
	b.notifyLocked()
	return true
}

func (b *Budget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	b.grantLocked()
	b.mu.Unlock()
}

// grantLocked serves the waiters at the front that fit now and reports the
// bytes in use.
func (b *Budget) grantLocked() {
	for len(b.waiters) > 0 {
		w := b.waiters[0]
		free := b.max - b.used
		if free < w.lo {
			break
		}
		w.granted = min(w.hi, free)
		b.used += w.granted
		close(w.ready)
		b.waiters = b.waiters[1:]
	}
	b.notifyLocked()
}

// notifyLocked reports the bytes in use under the lock, so the reports
// come in the order of the changes (observe is a gauge's Set: quick, and
// never calls back).
func (b *Budget) notifyLocked() {
	if b.observe != nil {
		b.observe(b.used)
	}
}

// Hold is one stream's share of a Budget. Its methods are safe for
// concurrent use (a stream's reader takes, its acknowledger releases).
type Hold struct {
	b    *Budget
	mu   sync.Mutex
	held int64
	done bool
}

// Hold starts a stream's share.
func (b *Budget) Hold() *Hold { return &Hold{b: b} }

// Acquire waits until n bytes (capped at the budget's limit, so any request
// can be met) are free and holds them; it returns the bytes held, which is
// what Release must be given back. It fails only when ctx ends, or the Hold
// was closed (then holding nothing).
func (h *Hold) Acquire(ctx context.Context, n int64) (int64, error) {
	return h.AcquireUpTo(ctx, n, n)
}

// AcquireUpTo waits until at least lo bytes are free and holds as many as
// are, up to hi (both capped at the budget's limit): for a reader that can
// size what it reads to what it may hold.
func (h *Hold) AcquireUpTo(ctx context.Context, lo, hi int64) (int64, error) {
	return h.acquire(ctx, lo, hi, false)
}

// AcquireFirst is Acquire served ahead of every waiter. It is for a holder
// that must wait for more while it holds bytes it cannot give back yet:
// two such holders, each waiting for what the other holds, would wait for
// ever, so the caller lets only one of them wait at a time, and it waits
// first, where every byte given back reaches it before any waiter that
// holds nothing yet.
func (h *Hold) AcquireFirst(ctx context.Context, n int64) (int64, error) {
	return h.acquire(ctx, n, n, true)
}

func (h *Hold) acquire(ctx context.Context, lo, hi int64, first bool) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	hi = max(hi, 0)
	if h.b == nil {
		return hi, nil
	}
	hi = min(hi, h.b.max)
	lo = min(max(lo, 0), hi)
	if hi == 0 {
		return 0, nil
	}
	n, err := h.b.acquire(ctx, lo, hi, first)
	if err == nil {
		err = h.keep(n)
	}
	if err != nil {
		return 0, err
	}
	return n, nil
}

// TryAcquire holds n bytes if they are free now and nobody waits for bytes
// (it never passes a waiter), and reports whether it holds them: for a
// holder that must not wait while it holds bytes (see AcquireFirst). n
// above the limit is never free.
func (h *Hold) TryAcquire(n int64) bool {
	if n <= 0 || h.b == nil {
		return true
	}
	if !h.b.tryAcquire(n) {
		return false
	}
	return h.keep(n) == nil
}

// keep adds n bytes taken from the budget to what h holds, or gives them
// back when h was closed meanwhile.
func (h *Hold) keep(n int64) error {
	h.mu.Lock()
	if h.done {
		h.mu.Unlock()
		h.b.release(n)
		return context.Canceled
	}
	h.held += n
	h.mu.Unlock()
	return nil
}

// Release gives back n of the bytes held (no more than are held).
func (h *Hold) Release(n int64) {
	h.mu.Lock()
	n = min(max(n, 0), h.held)
	h.held -= n
	h.mu.Unlock()
	h.give(n)
}

// Held is what the Hold holds now.
func (h *Hold) Held() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held
}

// Close releases everything the Hold still holds, and makes any later
// Acquire fail: the stream is over.
func (h *Hold) Close() {
	h.mu.Lock()
	n := h.held
	h.held, h.done = 0, true
	h.mu.Unlock()
	h.give(n)
}

func (h *Hold) give(n int64) {
	if h.b != nil {
		h.b.release(n)
	}
}
