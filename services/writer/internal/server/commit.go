package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/services/writer/internal/producer"
)

// How a shard's progress is committed lives here, in one place: a
// committer writes the rounds of a stream (the records of the batches
// waiting, up to max_group_bytes, and the checkpoints they reach) and says
// which batches are committed, with their checkpoints; the session then
// acknowledges exactly those upstream. A batch is never acknowledged before
// its checkpoint is committed, so a crash can at worst send it again.
//
//   - atLeastOnce: a round's checkpoints are produced with the next
//     round's records, after the target acknowledged the round's own, so a
//     checkpoint never precedes its data and costs no round trip of its
//     own under load. A crash duplicates what was produced after the last
//     committed checkpoint; it loses nothing.
//   - exactlyOnce: each round is one target transaction holding its
//     records and the checkpoints they reach, which commit together or not
//     at all; its batches are acknowledged after the commit. The shard's
//     older producers were fenced when the stream opened.
//
// Any error ends the stream: the next open fences (exactly-once), re-reads
// the committed checkpoints and resumes from them.
type committer interface {
	// idle is true when nothing written waits to be committed, so the
	// session may wait for more input.
	idle() bool
	// round writes group (empty: only settle what waits) and returns what
	// is committed now.
	round(ctx context.Context, group []work) (committed, error)
}

// committed are batches whose checkpoints are committed: the session
// acknowledges them upstream. since is when their commit began.
type committed struct {
	batches []work
	cps     checkpoints
	since   time.Time
}

// serve moves the stream's checked batches (in) through c until the
// fetcher closes the stream, the writer drains or the session fails.
func (ss *session) serve(ctx context.Context, acks *acker, c committer, in <-chan work) error {
	closed := false
	for {
		// A link paused or failed over ends its streams as a drain does
		// (linkstate.go), with the refusal the fetcher waits on.
		ss.ctlChanged = ss.s.store.ControlChanged()
		stopped := ss.s.linkRefusal(ss.link.Name)
		group, more := ss.take(ctx, in, !c.idle() || stopped != nil)
		closed = closed || !more
		if ctx.Err() != nil {
			return nil
		}
		draining := ss.draining() || stopped != nil
		if draining {
			group = nil // not produced, not acknowledged: the fetcher resends them
		}
		if len(group) == 0 && c.idle() {
			if stopped != nil {
				return stopped
			}
			if draining {
				return errDraining
			}
			if closed {
				return nil
			}
			continue
		}
		done, err := c.round(ctx, group)
		if err != nil {
			return err
		}
		if len(done.batches) == 0 {
			continue
		}
		ss.progress.committed(done.cps)
		// Released before the ack is sent: a peer slow to read its acks
		// (or reading none) must not keep the writer's budget from the
		// other streams while the send waits for it.
		ss.releaseCommitted(done.batches)
		// Observed before the ack too: the failover meter takes the
		// round's records off what was read and lost whether or not
		// the ack reaches the fetcher (a stream cut at the send).
		ss.obs.committed(ctx, done)
		if err := ss.ack(ctx, acks, done.batches, done.cps); err != nil {
			if ctx.Err() != nil {
				return nil // the session ended meanwhile: run reports why
			}
			return err
		}
	}
}

// releaseCommitted gives back to the writer's budget what batches whose
// checkpoints are committed held: whatever becomes of their ack, the
// fetcher will not send them on this stream again (a stream opened after
// this one resumes from the committed checkpoints, and its batches are
// charged anew), so nothing keeps them. Each batch is in one committed
// only (its round's, or for at-least-once the next round's), so it is
// released once; batches never committed (dropped on drain, or in a
// failed round) are released when the stream ends.
func (ss *session) releaseCommitted(batches []work) {
	var n, res int64
	for _, w := range batches {
		n, res = n+w.held, res+w.resident
	}
	ss.hold.Release(n)
	ss.res.add(-res)
}

// errAckStalled ends a stream whose peer read no ack within the writer's
// ack timeout (Options.AckTimeout).
var errAckStalled = errors.New("acknowledgement not read")

// defaultAckTimeout is Options.AckTimeout's default: a fetcher reads its
// acks as they come, so a minute is a peer that stopped reading, not a
// slow one.
const defaultAckTimeout = time.Minute

// acker sends a stream's acks from a goroutine of its own, so that an ack
// its peer does not read within timeout ends the stream instead of
// blocking it: gRPC's Send waits for the peer's flow-control window with
// no deadline, and a peer that stops reading would keep the stream (its
// queued batches, its producer, its shard) until its connection's maximum
// age and grace, an hour.
type acker struct {
	stream  ferryv1.ReplicationService_ReplicateServer
	timeout time.Duration
	out     chan *ferryv1.ReplicateResponse
	// sent has room for the one Send in flight, so run never blocks on
	// it once send stopped waiting.
	sent chan error
}

func newAcker(stream ferryv1.ReplicationService_ReplicateServer, timeout time.Duration) *acker {
	return &acker{stream: stream, timeout: timeout, out: make(chan *ferryv1.ReplicateResponse), sent: make(chan error, 1)}
}

// run sends what send hands it until stop. A Send the peer blocks returns
// when gRPC ends the stream, once the handler returned: like the receiver,
// run outlives the session by at most that.
func (a *acker) run() {
	for m := range a.out {
		a.sent <- a.stream.Send(m)
	}
}

// stop ends run once its Send in flight, if any, returns.
func (a *acker) stop() { close(a.out) }

// send hands m to run and waits until it is sent, at most timeout, or ctx
// ends. Only serve calls it, so at most one Send is in flight.
func (a *acker) send(ctx context.Context, m *ferryv1.ReplicateResponse) error {
	timer := time.NewTimer(a.timeout)
	defer timer.Stop()
	select {
	case a.out <- m:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-a.sent:
		return err
	case <-timer.C:
		return errAckStalled
	case <-ctx.Done():
		return ctx.Err()
	}
}

// newCommitter builds the committer of a shard's mode from its producer,
// what its rounds commit (progress) and what it reports to (obs); build
// turns a group into a round's target batches (build.go).
func newCommitter(exactly bool, prod *producer.Producer, prog *progress, obs *observer, build func([]work) (*round, error)) committer {
	// Exactly-once, a round's index records commit with its checkpoints
	// (index.go).
	prog.atomic = exactly
	if exactly {
		return &exactlyOnce{prod: prod, prog: prog, obs: obs, build: build}
	}
	return &atLeastOnce{prod: prod, prog: prog, obs: obs, build: build, cps: checkpoints{}}
}

// atLeastOnce is the idempotent committer (see committer).
type atLeastOnce struct {
	prod  *producer.Producer
	prog  *progress
	obs   *observer
	build func([]work) (*round, error)
	// pending are batches the target acknowledged whose checkpoints are
	// not produced yet; cps, those checkpoints.
	pending []work
	cps     checkpoints
}

func (c *atLeastOnce) idle() bool { return len(c.pending) == 0 }

func (c *atLeastOnce) round(ctx context.Context, group []work) (committed, error) {
	r, err := c.assemble(group)
	if err != nil {
		return committed{}, err
	}
	start := time.Now()
	// A stream cut while its records are on the way does not abandon
	// them: the target may write them either way, and only its answer
	// says so. The produce gets cutGrace to answer; then the round is
	// pending like any other and settle writes its checkpoints.
	pctx, stop := outliveCut(ctx, cutGrace)
	offsets, err := c.prod.Produce(pctx, r.batches)
	stop()
	if err != nil {
		return committed{}, c.failed(ctx, group, r, start, err)
	}
	return c.landed(ctx, group, r, offsets, start), nil
}

// assemble builds the round of group: its records, and the checkpoints
// (and index records) of the round before.
func (c *atLeastOnce) assemble(group []work) (*round, error) {
	r, err := c.build(group)
	if err == nil {
		err = c.prog.add(r, c.cps, c.prog.flushDue(time.Now()))
	}
	return r, err
}

// failed ends round r of group whose produce failed with err: the index
// records it was to flush are flushed again by the next round (they may
// not have landed), and err is traced and returned.
func (c *atLeastOnce) failed(ctx context.Context, group []work, r *round, start time.Time, err error) error {
	c.prog.unflush()
	err = fmt.Errorf("produce to target: %w", c.obs.refusedBy(err, group, r))
	c.obs.traceFailed(ctx, group, "ferry.produce", start, err)
	c.obs.traceFailed(ctx, c.pending, "ferry.commit", start, err) // their checkpoints were in this round
	return err
}

// landed takes round r of group as written (offsets: its batches' first
// target offsets): the batches pending before it are committed (their
// checkpoints were in it), and group's wait for the next round.
func (c *atLeastOnce) landed(ctx context.Context, group []work, r *round, offsets []int64, start time.Time) committed {
	now := time.Now()
	c.prog.marked(r, offsets)
	done := committed{batches: c.pending, cps: c.cps, since: start}
	c.pending, c.cps = group, checkpoints{}
	c.prog.reached(group, r, offsets, now, c.cps)
	c.obs.written(ctx, group, start, now, now)
	return done
}

// cutGrace is how long an at-least-once round's produce may run on after
// its stream is cut (producer.timeout is 20 s by default;
// a healthy target answers within a round trip). A replacing stream of
// the shard waits for it (settle).
const cutGrace = 10 * time.Second

// outliveCut is a context that ctx's end does not end at once: grace
// after it. stop releases it.
func outliveCut(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	out, cancel := context.WithCancel(context.WithoutCancel(ctx))
	unhook := context.AfterFunc(ctx, func() { time.AfterFunc(grace, cancel) })
	return out, func() { unhook(); cancel() }
}

// exactlyOnce is the transactional committer (see committer).
type exactlyOnce struct {
	prod  *producer.Producer
	prog  *progress
	obs   *observer
	build func([]work) (*round, error)
}

func (c *exactlyOnce) idle() bool { return true }

func (c *exactlyOnce) round(ctx context.Context, group []work) (committed, error) {
	start := time.Now()
	r, err := c.build(group)
	if err != nil {
		return committed{}, err
	}
	// The round's checkpoints need its target offsets, so they follow its
	// records in the same transaction; its data and checkpoint partitions
	// join the transaction in one request, and so do its index partitions
	// when the round is due to flush the index (about once a
	// flush_interval: joining them in every round would add them to every
	// transaction, a marker each).
	flush := c.prog.flushDue(start)
	if err := c.prod.AddPartitions(ctx, c.prog.partitions(group, r, flush)); err != nil {
		return committed{}, fmt.Errorf("begin target transaction: %w", err)
	}
	offsets, err := c.prod.Produce(ctx, r.batches)
	if err != nil {
		err = fmt.Errorf("produce in target transaction: %w", c.obs.refusedBy(err, group, r))
		c.obs.traceFailed(ctx, group, "ferry.produce", start, err)
		return committed{}, err
	}
	produced := time.Now()
	cps := checkpoints{}
	c.prog.reached(group, r, offsets, start, cps)
	cpRound := &round{}
	if err := c.prog.add(cpRound, cps, flush); err != nil {
		return committed{}, err
	}
	// A round whose unindexed runs grew past their bound flushes though
	// not due: its index partitions join now, in a request of their own.
	if err := c.prod.AddPartitions(ctx, c.prog.partitions(nil, cpRound, false)); err != nil {
		return committed{}, fmt.Errorf("offset index in target transaction: %w", err)
	}
	cpOffsets, err := c.prod.Produce(ctx, cpRound.batches)
	if err != nil {
		err = fmt.Errorf("checkpoint in target transaction: %w", err)
		c.obs.traceFailed(ctx, group, "ferry.commit", produced, err)
		return committed{}, err
	}
	if err := c.prod.Commit(ctx); err != nil {
		err = fmt.Errorf("commit target transaction (outcome unknown): %w", err)
		c.obs.traceFailed(ctx, group, "ferry.commit", produced, err)
		return committed{}, err
	}
	c.prog.marked(cpRound, cpOffsets)
	c.obs.written(ctx, group, start, produced, time.Now())
	return committed{batches: group, cps: cps, since: produced}, nil
}
