package server

import (
	"context"
	"errors"
)

// A received batch takes memory only once max_buffered_bytes (Server.budget)
// holds room for it, so what the writer keeps of batches stays within the
// budget whatever the number of streams, but for the one message each
// stream's receiver has taken off the stream and waits with (gRPC hands it
// over whole, before its size is known).
//
// The receiver charges a batch as it takes it off the stream, before
// anything else: its wire payload and, when that is compressed, the
// payload's declared uncompressed size, which the codecs inflate into and
// no more (charge.begin). It waits for that much to be free, in arrival
// order, holding nothing of the batch. The records decoded to rebuild a
// source batch are charged as each is decoded, before it is (decode): its
// records' index, and for a compressed batch room for its records inflated
// (at most max_batch_bytes); what they took less goes back once they are
// decoded (charge.finish).
//
// Taking more while holding part of a batch's charge must not wait
// blindly: receivers each holding part and waiting for what the others
// hold would wait for ever, with their batches in none of the rounds that
// give bytes back. So a receiver takes more only when it is free now
// (budget.Hold.TryAcquire). When it is not, the receiver becomes the one
// that may wait while holding (Server.growing) and waits ahead of all the
// others (budget.Hold.AcquireFirst): the rounds end without their
// receivers, the others give back what they hold, so bytes come back to
// it. When another receiver is that one already, this one gives back all
// its batch holds, drops what it decoded, waits for its turn holding
// nothing and then checks the batch again from the start as that one
// (errRecharge), so each batch starts over at most once.
//
// A batch that needs more than the whole budget as it arrives takes all of
// it (capped), admitted alone once every other byte is back; records
// whose decoding would not fit the whole budget are refused
// (refusal.BatchTooLarge), as decode says.

// errRecharge says a batch needs more of the budget than is free while
// another receiver waits holding part of its own batch: the batch is
// checked again from the start, once its receiver may wait (charge.again).
var errRecharge = errors.New("batch to check again with the budget's growing turn")

// errNoRoom refuses an optional reservation the budget has no room for
// now: the batch is not decoded (tracing's look at a passing batch).
var errNoRoom = errors.New("no room in the budget now")

// charge is what one received batch holds of its stream's share of the
// budget (session.hold) while its receiver checks it.
type charge struct {
	ss *session
	// receipt is what the batch takes as received (begin); used is what
	// it takes so far, and held what it holds: more while a decode has
	// room reserved, less when the batch is above the whole budget.
	receipt, used, held int64
	// growing is whether the receiver holds Server.growing.
	growing bool
}

// limit is the whole budget (0: none).
func (c *charge) limit() int64 { return c.ss.s.budget.Max() }

// begin charges what the batch takes as received, n bytes, waiting until
// they are free (capped at the whole budget).
func (c *charge) begin(ctx context.Context, n int64) error {
	c.receipt, c.used = n, n
	return c.ss.waiting(func() (err error) {
		if c.growing {
			c.held, err = c.ss.hold.AcquireFirst(ctx, n)
		} else {
			c.held, err = c.ss.hold.Acquire(ctx, n)
		}
		return err
	})
}

// reserve charges n more bytes to the batch before they are taken:
// from the room it holds, else from what is free now, else waiting first
// if the receiver may (errRecharge if another does). An optional
// reservation fails with errNoRoom instead of waiting. The caller has
// checked that the batch's bytes stay within the whole budget.
func (c *charge) reserve(ctx context.Context, n int64, optional bool) error {
	short := c.used + n - c.held
	if short <= 0 || c.ss.hold.TryAcquire(short) {
		c.held, c.used = max(c.held, c.used+n), c.used+n
		return nil
	}
	if optional {
		return errNoRoom
	}
	if !c.growing {
		select {
		case c.ss.s.growing <- struct{}{}:
			c.growing = true
		default:
			return errRecharge
		}
	}
	err := c.ss.waiting(func() error {
		got, err := c.ss.hold.AcquireFirst(ctx, short)
		c.held += got
		return err
	})
	if err != nil {
		return err
	}
	c.used += n
	return nil
}

// unreserve gives n bytes reserved and not taken back to the batch's room.
func (c *charge) unreserve(n int64) { c.used -= n }

// again gives back all the batch holds and waits, holding nothing, until
// its receiver may wait while holding; then it charges the batch as
// received anew, waiting first.
func (c *charge) again(ctx context.Context) error {
	c.drop()
	err := c.ss.waiting(func() error {
		select {
		case c.ss.s.growing <- struct{}{}:
			c.growing = true
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	if err != nil {
		return err
	}
	return c.begin(ctx, c.receipt)
}

// finish ends the check of an admitted batch: the room it holds beyond
// what it takes goes back, and the turn to wait while holding to the other
// receivers. It returns what the batch holds until it is committed.
func (c *charge) finish() int64 {
	if spare := c.held - c.used; spare > 0 {
		c.ss.hold.Release(spare)
		c.held = c.used
	}
	c.yield()
	return c.held
}

// drop gives back all the batch holds: it is refused, or checked again.
func (c *charge) drop() {
	c.ss.hold.Release(c.held)
	c.held, c.used = 0, 0
	c.yield()
}

func (c *charge) yield() {
	if c.growing {
		<-c.ss.s.growing
		c.growing = false
	}
}

// waiting runs f, a wait for the budget, counted in
// Server.receiversWaiting.
func (ss *session) waiting(f func() error) error {
	ss.s.receiversWaiting.Add(1)
	defer ss.s.receiversWaiting.Add(-1)
	return f()
}
