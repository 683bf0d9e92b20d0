package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/linkstate"
)

// Failover, planned and unplanned (docs/disaster-recovery.md).
//
// The planned form reads only: it changes nothing until the link is
// drained and its groups synced, then sets the link failed_over in one
// conditional change. A timeout or a refusal leaves the link as it was.
// Read times compared are the fetchers' (heartbeats, group reads) against
// the writers' clock at the answer, never ferryctl's: the operator's
// machine is the clock least likely to be synchronised.

// plannedTimeout bounds a planned failover's whole wait when no --timeout
// is configured: a drain and a group sync, which runs every
// link.groups.interval (10 s by default).
const plannedTimeout = 5 * time.Minute

// plannedPoll is how often a planned failover reads the writers again.
const plannedPoll = 200 * time.Millisecond

// progressEvery is how often a wait says again what it waits for.
const progressEvery = 5 * time.Second

// errRefused is a planned failover that would not start: the source side
// is not reporting (use the unplanned form) or the link is not running.
var errRefused = errors.New("planned failover refused")

// failoverForms is what a failover without its form is told.
const failoverForms = "say which failover: --planned (the source reachable, its producers and consumers stopped: " +
	"drain the link and sync the groups, then fail over; RPO 0) or --unplanned (the source region lost: fail over now; " +
	"what the target lacks is lost; it shows that and asks to confirm unless --yes)"

// runFailover fails a link over, in the form named: --planned drains
// first (plannedFailover), --unplanned does not (unplannedFailover).
// Neither is the default: the two lose different things, and a failover
// cannot be undone but by failback.
func runFailover(ctx context.Context, c *client, o *verbOpts, args []string, stdout io.Writer) error {
	link, err := oneLink(args)
	if err != nil {
		return err
	}
	if o.planned == o.unplanned {
		return fmt.Errorf("%w: %s", errUsage, failoverForms)
	}
	re, err := groupFilter(o.groups)
	if err != nil {
		return err
	}
	if o.planned {
		return plannedFailover(ctx, c, o, link, re, stdout)
	}
	return unplannedFailover(ctx, c, o, link, re, stdout)
}

// unplannedFailover has the writers refuse every stream of the link, then
// prints the meter and the selected groups as the loss and re-read
// report. Without --yes it first shows that report and asks the person at
// the terminal to confirm; the change is then conditional on the
// generation shown. --dry-run prints the report and changes nothing.
func unplannedFailover(ctx context.Context, c *client, o *verbOpts, link string, re *regexp.Regexp, stdout io.Writer) error {
	if o.dryRun {
		v, err := c.view(ctx, link)
		if err != nil {
			return err
		}
		ch := v.change(link, re, true)
		if err := c.print(stdout, ch, printChange); err != nil {
			return err
		}
		return ch.incomplete()
	}
	var shown uint64
	if !o.yes {
		v, err := c.confirmFailover(ctx, o, link, re)
		if err != nil {
			return err
		}
		shown = v.link.Generation
	}
	ch, err := c.setState(ctx, link, linkstate.FailedOver, o.reason, shown)
	if err != nil {
		return err
	}
	// Read once the link's streams have ended: a writer that read the
	// change ends each stream of the link after the round it has in
	// flight commits or aborts, so the meter is then what the target
	// lacks of what the source held at its last heartbeat, and no record
	// that lands is counted lost.
	v, streaming, err := c.streamsEnded(ctx, link)
	if err != nil {
		ch.MeterError = err.Error()
	} else {
		ch.AtRisk, ch.Groups, ch.Unreachable, ch.Streaming = v.link.Partitions, selectGroups(v.link.Groups, re), v.unanswered, streaming
	}
	if err := c.print(stdout, ch, printChange); err != nil {
		return err
	}
	return ch.incomplete()
}

// streamEndPoll is how often streamsEnded reads the writers again.
const streamEndPoll = 100 * time.Millisecond

// streamsEnded reads link until no writer reports a stream of it open, or
// the call timeout passes; it returns the last read and the shards still
// streaming then ("N on writer W").
func (c *client) streamsEnded(ctx context.Context, link string) (view, []string, error) {
	deadline := time.Now().Add(c.timeout)
	for {
		v, err := c.view(ctx, link)
		if err != nil {
			return view{}, nil, err
		}
		var open []string
		for _, sh := range v.link.Shards {
			if sh.Active {
				open = append(open, fmt.Sprintf("%d on writer %s", sh.Shard, sh.Writer))
			}
		}
		if len(open) == 0 || !time.Now().Before(deadline) {
			return v, open, nil
		}
		select {
		case <-ctx.Done():
			return v, open, nil
		case <-time.After(streamEndPoll):
		}
	}
}

// confirmFailover shows what an unplanned failover of link now loses,
// the report a dry run prints, and asks to confirm it. It returns the
// view shown.
func (c *client) confirmFailover(ctx context.Context, o *verbOpts, link string, re *regexp.Regexp) (view, error) {
	switch {
	case c.json:
		return view{}, fmt.Errorf("%w: -o json does not ask: pass --yes to fail link %s over, unplanned (--dry-run shows what it loses)", errUnconfirmed, link)
	case !interactive(o.stdin):
		return view{}, fmt.Errorf("%w: stdin is not a terminal, nobody can confirm: pass --yes to fail link %s over, unplanned (--dry-run shows what it loses)", errUnconfirmed, link)
	}
	v, err := c.view(ctx, link)
	if err != nil {
		return view{}, err
	}
	ch := v.change(link, re, true)
	fmt.Fprintf(o.prompt, "link %s is %s (generation %d); an unplanned failover now loses:\n", link, ch.State, ch.Generation)
	printReport(o.prompt, ch)
	if err := ch.incomplete(); err != nil {
		fmt.Fprintf(o.prompt, "  (this report is not whole: %v)\n", err)
	}
	q := fmt.Sprintf("\nFail link %s over, unplanned? Every writer refuses its streams from then on; only failback undoes it.", link)
	if err := ask(ctx, o.stdin, o.prompt, q); err != nil {
		return view{}, fmt.Errorf("link %s not failed over: %w", link, err)
	}
	return v, nil
}

// view is one merged read of a link, with the writers' clock.
type view struct {
	link LinkReport
	// now is the latest writer clock of the answers.
	now time.Time
	// unanswered are the writers that did not answer: what only they
	// hold (a fresher heartbeat, a group they synced) is not in link.
	unanswered []WriterError
}

// view reads link from every writer that answers.
func (c *client) view(ctx context.Context, link string) (view, error) {
	var (
		answers    []*ferryv1.StatusResponse
		addrs      []string
		unanswered []WriterError
		lastErr    error
		now        time.Time
	)
	for _, w := range c.writers {
		var resp *ferryv1.StatusResponse
		err := c.call(ctx, func(ctx context.Context) (err error) {
			resp, err = w.ctl.Status(ctx, &ferryv1.StatusRequest{Link: link})
			return err
		})
		if err != nil {
			lastErr = fmt.Errorf("writer %s: %s", w.addr, describe(err))
			unanswered = append(unanswered, WriterError{Writer: w.addr, Error: describe(err)})
			continue
		}
		answers, addrs = append(answers, resp), append(addrs, w.addr)
		if t := time.UnixMilli(resp.GetTimeUnixMs()); t.After(now) {
			now = t
		}
	}
	if len(answers) == 0 {
		return view{}, lastErr
	}
	links := merge(answers, addrs)
	if len(links) != 1 {
		return view{}, fmt.Errorf("link %s: no writer reported it", link)
	}
	return view{link: links[0], now: now, unanswered: unanswered}, nil
}

func (v view) change(link string, re *regexp.Regexp, dryRun bool) Change {
	return Change{Link: link, State: v.link.State, Generation: v.link.Generation, DryRun: dryRun,
		AtRisk: v.link.Partitions, Groups: selectGroups(v.link.Groups, re), Unreachable: v.unanswered}
}

// plannedFailover: (a) every partition's heartbeat is fresh, else it
// refuses; (b) it waits until every partition's committed offset reaches
// the high watermark of a heartbeat read after the wait began; (c) it
// waits for a sync of every selected group from a source read after the
// drain; (d) it sets the link failed_over, conditional on the generation
// it began with; (e) it prints the meter (0 lost) and the groups (0
// re-read). --dry-run does (a) and prints the numbers as they are.
func plannedFailover(ctx context.Context, c *client, o *verbOpts, link string, re *regexp.Regexp, stdout io.Writer) error {
	bound := plannedTimeout
	if c.timeoutSet {
		bound = c.timeout
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	// Each read is bounded too, so that a writer that hangs is seen as
	// one that does not answer rather than eating the whole wait.
	calls := *c
	calls.timeout = min(c.timeout, defaultTimeout)

	start, err := calls.view(ctx, link)
	if err != nil {
		return err
	}
	if err := ready(start.link, o.staleAfter); err != nil {
		return err
	}
	if o.dryRun {
		ch := start.change(link, re, true)
		ch.Planned = true
		if err := c.print(stdout, ch, printChange); err != nil {
			return err
		}
		return ch.incomplete()
	}
	drained, err := calls.waitFor(ctx, o.progress, link, bound, "drain", func(v view) []string { return undrained(v, start.now) })
	if err != nil {
		return err
	}
	synced, err := calls.waitFor(ctx, o.progress, link, bound, "group sync", func(v view) []string { return unsynced(v, drained.now, re) })
	if err != nil {
		return err
	}
	ch, err := calls.setState(ctx, link, linkstate.FailedOver, o.reason, start.link.Generation)
	if err != nil {
		return fmt.Errorf("set link %s failed_over (it was not changed by this command): %w", link, err)
	}
	ch.Planned = true
	ch.AtRisk, ch.Groups = synced.link.Partitions, selectGroups(synced.link.Groups, re)
	// Read again after the change: nothing was copied since the wait, so
	// the numbers are the same unless a writer's view moved.
	if v, err := calls.view(ctx, link); err == nil {
		ch.AtRisk, ch.Groups = v.link.Partitions, selectGroups(v.link.Groups, re)
	}
	if err := c.print(stdout, ch, printChange); err != nil {
		return err
	}
	return ch.incomplete()
}

// ready refuses a planned failover of a link that is not running, or
// whose source side is not reporting: no heartbeat at all, or one older
// than staleAfter (the unplanned form is the way then).
func ready(l LinkReport, staleAfter time.Duration) error {
	if l.State != linkstate.Running {
		return fmt.Errorf("%w: link %s is %s, not running: a drain needs it copying (resume it first, or use the unplanned form)", errRefused, l.Name, l.State)
	}
	if len(l.Partitions) == 0 {
		return fmt.Errorf("%w: link %s has no heartbeat from the source side: nothing says what the source holds (use the unplanned form if the source is gone)", errRefused, l.Name)
	}
	var stale []string
	for _, p := range l.Partitions {
		if age := time.Duration(p.HeartbeatAge * float64(time.Second)); age > staleAfter {
			stale = append(stale, fmt.Sprintf("%s/%d (%s)", p.Topic, p.Partition, age.Round(100*time.Millisecond)))
		}
	}
	if len(stale) > 0 {
		return fmt.Errorf("%w: the source side is not reporting: heartbeats older than %s on %s (use the unplanned form if the source is gone)",
			errRefused, staleAfter, strings.Join(stale, ", "))
	}
	return nil
}

// undrained names the partitions whose committed offset is short of the
// high watermark of a heartbeat read after start (writer clock).
func undrained(v view, start time.Time) []string {
	var out []string
	for _, p := range v.link.Partitions {
		switch {
		case p.HeartbeatObservedAt == nil || !p.HeartbeatObservedAt.After(start):
			out = append(out, fmt.Sprintf("%s/%d: a heartbeat read after the wait began", p.Topic, p.Partition))
		case p.LagRecords > 0:
			out = append(out, fmt.Sprintf("%s/%d: %d records to copy (committed %d, source high watermark %d)",
				p.Topic, p.Partition, p.LagRecords, p.Committed, p.SourceHighWatermark))
		}
	}
	return out
}

// unsynced names the selected groups with a partition whose target
// position does not follow a source read after drained (writer clock). A
// partition nothing was ever copied of (after the drain: the source
// holds nothing of it) has no target position to give, and is not waited
// for: a consumer there starts by its auto.offset.reset, with nothing to
// miss or read again. Nor is a partition whose group position is before
// the offset index (noted before_index: the link started after it, as a
// reverse link started at failback's TARGET_START does): no sync of this
// link can move it, so the report shows it as it is.
func unsynced(v view, drained time.Time, re *regexp.Regexp) []string {
	empty := map[string]bool{}
	for _, p := range v.link.Partitions {
		if p.Committed < 0 {
			empty[fmt.Sprintf("%s/%d", p.Topic, p.Partition)] = true
		}
	}
	var out []string
	for _, g := range selectGroups(v.link.Groups, re) {
		for _, p := range g.Partitions {
			if empty[fmt.Sprintf("%s/%d", p.Topic, p.Partition)] || p.Note == outcomeBeforeIndex {
				continue
			}
			if p.StandsFor < 0 || p.SyncedReadAt == nil || !p.SyncedReadAt.After(drained) {
				out = append(out, fmt.Sprintf("group %s %s/%d: a sync from a source read after the drain (last outcome %s%s)",
					g.Group, p.Topic, p.Partition, g.Outcome, detail(g.Detail)))
				break
			}
		}
	}
	return out
}

func detail(d string) string {
	if d == "" {
		return ""
	}
	return ": " + d
}

// waitFor reads the link until pending finds nothing left, and returns
// that read; at ctx's end it fails naming what it still waited for. It
// tells progress what it waits for whenever that count changes, and every
// progressEvery besides, so an operator sees a drain move.
func (c *client) waitFor(ctx context.Context, progress io.Writer, link string, bound time.Duration, phase string, pending func(view) []string) (view, error) {
	var (
		left []string
		told = -1
		last time.Time
	)
	for {
		v, err := c.view(ctx, link)
		switch {
		case err == nil && v.link.State != linkstate.Running:
			return view{}, fmt.Errorf("link %s became %s while a planned failover waited (generation %d): nothing else changed", link, v.link.State, v.link.Generation)
		case err == nil:
			// A writer that does not answer may hold a shard's stream,
			// heartbeats and group syncs: a planned failover proves
			// nothing is lost only with every writer's answer.
			left = pending(v)
			for _, u := range v.unanswered {
				left = append(left, fmt.Sprintf("writer %s to answer (%s)", u.Writer, u.Error))
			}
			if len(left) == 0 {
				fmt.Fprintf(progress, "planned failover of %s: %s done\n", link, phase)
				return v, nil
			}
		case left != nil && ended(ctx):
			// The deadline ended this read: what the wait still waited
			// for is the last read's answer, not the cut-off call.
		default:
			left = []string{err.Error()}
		}
		if len(left) != told || time.Since(last) >= progressEvery {
			told, last = len(left), time.Now()
			fmt.Fprintf(progress, "planned failover of %s: %s: waiting for %d: %s\n", link, phase, len(left), strings.Join(left, "; "))
		}
		select {
		case <-ctx.Done():
			slices.Sort(left)
			return view{}, fmt.Errorf("timed out after %s waiting for %s; link %s is still running, unchanged", bound, strings.Join(left, "; "), link)
		case <-time.After(plannedPoll):
		}
	}
}

// ended says whether ctx is done or its deadline has passed. A call cut
// off by the deadline can fail before ctx's own timer has marked it done:
// the writer ends the call at the same deadline (gRPC sends it along) and
// its answer may arrive first.
func ended(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ctx.Err() != nil || ok && !time.Now().Before(d)
}
