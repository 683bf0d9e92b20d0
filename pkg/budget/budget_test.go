package budget

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-replicator/ferry/pkg/testwait"
)

func TestHoldReleasesOnClose(t *testing.T) {
	var seen atomic.Int64
	b := New(100, func(n int64) { seen.Store(n) })
	h := b.Hold()
	ctx := context.Background()
	if n, err := h.Acquire(ctx, 60); err != nil || n != 60 {
		t.Fatalf("acquire 60: %d, %v", n, err)
	}
	if n, err := h.Acquire(ctx, 30); err != nil || n != 30 {
		t.Fatalf("acquire 30: %d, %v", n, err)
	}
	h.Release(20)
	if got := b.InUse(); got != 70 || seen.Load() != 70 || h.Held() != 70 {
		t.Fatalf("in use %d, observed %d, held %d; want 70", got, seen.Load(), h.Held())
	}
	h.Release(1000) // more than held: gives back only what it holds
	if got := b.InUse(); got != 0 {
		t.Fatalf("in use %d after over-release, want 0", got)
	}
	if _, err := h.Acquire(ctx, 50); err != nil {
		t.Fatal(err)
	}
	h.Close()
	if got := b.InUse(); got != 0 || seen.Load() != 0 {
		t.Fatalf("in use %d after Close, want 0", got)
	}
	if _, err := h.Acquire(ctx, 1); err == nil {
		t.Fatal("Acquire after Close succeeded")
	}
	if got := b.InUse(); got != 0 {
		t.Fatalf("in use %d after a refused Acquire, want 0", got)
	}
}

func TestAcquireWaitsForAnotherStream(t *testing.T) {
	b := New(100, nil)
	a, c := b.Hold(), b.Hold()
	ctx := context.Background()
	if _, err := a.Acquire(ctx, 80); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { _, err := c.Acquire(ctx, 50); got <- err }()
	select {
	case err := <-got:
		t.Fatalf("second stream got 50 of 100 with 80 held: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	a.Close() // the first stream ends: its bytes serve the other
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("second stream still waiting after the first closed")
	}
	if b.InUse() != 50 {
		t.Fatalf("in use %d, want 50", b.InUse())
	}
}

func TestAcquireIsCappedAndCancellable(t *testing.T) {
	b := New(100, nil)
	h := b.Hold()
	n, err := h.Acquire(context.Background(), 1<<40)
	if err != nil || n != 100 {
		t.Fatalf("acquire above the limit: %d, %v; want the limit", n, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := b.Hold().Acquire(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire on a full budget: %v, want the context's end", err)
	}
	if n, err := h.Acquire(context.Background(), 0); err != nil || n != 0 {
		t.Fatalf("acquire 0: %d, %v", n, err)
	}
}

func TestNilBudgetIsNoLimit(t *testing.T) {
	var b *Budget
	h := b.Hold()
	if n, err := h.Acquire(context.Background(), 1<<40); err != nil || n != 1<<40 {
		t.Fatalf("acquire on no limit: %d, %v", n, err)
	}
	h.Release(5)
	h.Close()
	if b.InUse() != 0 {
		t.Fatal("a nil budget has bytes in use")
	}
}

func TestAcquireUpToTakesWhatIsFree(t *testing.T) {
	b := New(100, nil)
	a, c := b.Hold(), b.Hold()
	ctx := context.Background()
	if _, err := a.Acquire(ctx, 70); err != nil {
		t.Fatal(err)
	}
	n, err := c.AcquireUpTo(ctx, 10, 50)
	if err != nil || n != 30 {
		t.Fatalf("up to 50 with 30 free: %d, %v; want 30", n, err)
	}
	// Nothing free: the next waits for its lower bound, in order.
	first, second := make(chan int64, 1), make(chan int64, 1)
	go func() { n, _ := c.AcquireUpTo(ctx, 20, 100); first <- n }()
	waitWaiters(t, b, 1)
	go func() { n, _ := b.Hold().AcquireUpTo(ctx, 1, 1); second <- n }()
	waitWaiters(t, b, 2)
	a.Release(10) // 10 free: below the first waiter's 20, and the second waits behind it
	select {
	case <-second:
		t.Fatal("a later waiter was served before an earlier one")
	case <-time.After(30 * time.Millisecond):
	}
	a.Release(60)
	if n := <-first; n != 70 {
		t.Fatalf("first waiter got %d, want the 70 free", n)
	}
	a.Close()
	c.Close()
	if n := <-second; n != 1 {
		t.Fatalf("second waiter got %d, want 1", n)
	}
}

func TestCancelledWaiterLetsOthersThrough(t *testing.T) {
	b := New(100, nil)
	a := b.Hold()
	if _, err := a.Acquire(context.Background(), 60); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	big := make(chan error, 1)
	go func() { _, err := b.Hold().Acquire(ctx, 80); big <- err }()
	waitWaiters(t, b, 1)
	small := make(chan int64, 1)
	go func() { n, _ := b.Hold().Acquire(context.Background(), 30); small <- n }()
	waitWaiters(t, b, 2)
	cancel()
	if err := <-big; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	select {
	case n := <-small:
		if n != 30 {
			t.Fatalf("got %d, want 30", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter behind a cancelled one was not served")
	}
	if b.InUse() != 90 {
		t.Fatalf("in use %d, want 90", b.InUse())
	}
}

func waitWaiters(t *testing.T, b *Budget, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for b.Waiting() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters, want %d", b.Waiting(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestTryAcquireNeitherWaitsNorPasses(t *testing.T) {
	b := New(100, nil)
	a, c := b.Hold(), b.Hold()
	if _, err := a.Acquire(context.Background(), 60); err != nil {
		t.Fatal(err)
	}
	if c.TryAcquire(50) {
		t.Fatal("took 50 with 40 free")
	}
	if c.TryAcquire(101) {
		t.Fatal("took more than the limit")
	}
	if !c.TryAcquire(40) || c.Held() != 40 || b.InUse() != 100 {
		t.Fatalf("40 of 40 free: held %d, in use %d", c.Held(), b.InUse())
	}
	c.Release(40)
	waiting := make(chan int64, 1)
	go func() { n, _ := b.Hold().Acquire(context.Background(), 50); waiting <- n }()
	testwait.For(t, 5*time.Second, "a waiter for 50", func() bool { return b.Waiting() == 1 })
	if c.TryAcquire(10) {
		t.Fatal("took 10 of the 40 free ahead of a waiter")
	}
	a.Close()
	if n := <-waiting; n != 50 {
		t.Fatalf("waiter got %d, want 50", n)
	}
	c.Close()
	if c.TryAcquire(1) || b.InUse() != 50 {
		t.Fatalf("a closed Hold took bytes (in use %d, want 50)", b.InUse())
	}
}

// TestAcquireFirstGoesAhead: a holder waiting with AcquireFirst is served
// before the waiters already there, from what others give back, and its
// end lets them through.
func TestAcquireFirstGoesAhead(t *testing.T) {
	b := New(100, nil)
	a := b.Hold()
	if _, err := a.Acquire(context.Background(), 100); err != nil {
		t.Fatal(err)
	}
	small := make(chan int64, 1)
	go func() { n, _ := b.Hold().Acquire(context.Background(), 10); small <- n }()
	testwait.For(t, 5*time.Second, "a waiter for 10", func() bool { return b.Waiting() == 1 })
	first := b.Hold()
	if _, err := first.Acquire(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	ahead := make(chan error, 1)
	go func() { _, err := first.AcquireFirst(context.Background(), 30); ahead <- err }()
	testwait.For(t, 5*time.Second, "AcquireFirst waiting", func() bool { return b.Waiting() == 2 })
	a.Release(10) // enough for the first waiter, not for the one ahead of it
	a.Release(20)
	if err := <-ahead; err != nil || first.Held() != 30 {
		t.Fatalf("AcquireFirst: %v, held %d; want 30", err, first.Held())
	}
	select {
	case n := <-small:
		t.Fatalf("the waiter behind got %d with nothing free", n)
	default:
	}
	first.Close()
	if n := <-small; n != 10 {
		t.Fatalf("the waiter behind got %d, want 10", n)
	}

	// Cancelled, AcquireFirst lets the waiters behind it through.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _, err := b.Hold().AcquireFirst(ctx, 100); ahead <- err }()
	testwait.For(t, 5*time.Second, "AcquireFirst waiting", func() bool { return b.Waiting() == 1 })
	go func() { n, _ := b.Hold().Acquire(context.Background(), 5); small <- n }()
	testwait.For(t, 5*time.Second, "a waiter behind it", func() bool { return b.Waiting() == 2 })
	cancel()
	if err := <-ahead; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled AcquireFirst: %v", err)
	}
	if n := <-small; n != 5 {
		t.Fatalf("the waiter behind a cancelled AcquireFirst got %d, want 5", n)
	}
}
