// Package startup runs the steps of a service's start that need a Kafka
// cluster, each until it succeeds: a fetcher started while its source is
// down, or a writer while its target restarts, waits for the cluster, not
// ready and saying why, instead of exiting at once (and, on Kubernetes,
// into a crash loop's growing back-off). A step's error that waiting
// cannot mend (a refused login, a certificate, a bad setting) still ends
// the start at once, with that error.
package startup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// The waits between tries of a step: from minWait, doubling, to maxWait.
const (
	minWait = 500 * time.Millisecond
	maxWait = 10 * time.Second
)

// Waiter runs start-up steps and reports, for readiness, the one waited on.
// Its methods are safe for concurrent use.
type Waiter struct {
	log *slog.Logger
	min time.Duration

	mu   sync.Mutex
	step string // the step being tried, "" once all have succeeded
	last error  // that step's last error
	done bool
}

// New returns a Waiter logging to log.
func New(log *slog.Logger) *Waiter { return &Waiter{log: log, min: minWait} }

// Do runs step until it returns nil, an error retry refuses (returned as
// it is), or ctx ends (ctx's error). Each failed try is logged with what
// (the step, as readiness names it: "target cluster", say).
func (w *Waiter) Do(ctx context.Context, what string, retry func(error) bool, step func() error) error {
	w.set(what, nil)
	wait := w.min
	for try := 1; ; try++ {
		err := step()
		if err == nil {
			w.set("", nil)
			if try > 1 {
				w.log.Info("start-up step succeeded after waiting", "step", what, "tries", try)
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !retry(err) {
			return err
		}
		w.set(what, err)
		w.log.Warn("start-up step failed; trying again", "step", what, "try", try, "in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, maxWait)
	}
}

// Done records that the start is over: Err is nil from now on.
func (w *Waiter) Done() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done, w.step, w.last = true, "", nil
}

// Err says why the service has not started yet: the step it waits on and
// that step's last error. It is nil once Done.
func (w *Waiter) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.done:
		return nil
	case w.step != "" && w.last != nil:
		return fmt.Errorf("starting: waiting for the %s: %w", w.step, w.last)
	case w.step != "":
		return fmt.Errorf("starting: connecting to the %s", w.step)
	}
	return errors.New("starting")
}

func (w *Waiter) set(step string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.step, w.last = step, err
}

// Group is the errgroup a service's goroutines run in, begun with its
// admin server so that /healthz and /readyz answer while the start waits.
type Group struct {
	*errgroup.Group
	// Ctx ends when the service's context does or a goroutine fails.
	Ctx    context.Context
	parent context.Context
	stop   context.CancelFunc
}

// Begin starts admin (the admin server's Run) in a new Group under ctx.
// The caller defers Stop.
func Begin(ctx context.Context, admin func(context.Context) error) *Group {
	runCtx, stop := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(runCtx)
	g.Go(func() error { return admin(gctx) })
	return &Group{Group: g, Ctx: gctx, parent: ctx, stop: stop}
}

// Stop releases the Group's context.
func (g *Group) Stop() { g.stop() }

// Abort ends a start that failed with err, or was stopped: it stops the
// group's goroutines and waits for them, and returns what the service
// returns: a goroutine's own failure first, nil when the service's context
// ended (a stop signal during the start is a clean exit), else err.
func (g *Group) Abort(err error) error {
	g.stop()
	if werr := g.Wait(); werr != nil {
		return werr
	}
	if g.parent.Err() != nil {
		return nil
	}
	return err
}
