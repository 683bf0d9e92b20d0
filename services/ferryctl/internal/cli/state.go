package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/linkstate"
)

// Change is what pause, resume and failover print.
type Change struct {
	Link       string          `json:"link"`
	State      linkstate.State `json:"state"`
	Generation uint64          `json:"generation"`
	// Writers are those that read the change back within the timeout.
	Writers []string `json:"writers"`
	// Pending are those that did not (yet): the change is recorded, and
	// they act on it once their view reads it.
	Pending []string `json:"pending,omitempty"`
	// AtRisk is, for a failover, the failover meter as the change was
	// made: what the source held that the target lacks.
	AtRisk []PartitionReport `json:"at_risk,omitempty"`
	// DryRun is set when nothing was changed.
	DryRun bool `json:"dry_run,omitempty"`
	// Groups are, for a failover, the selected groups: where each stands
	// on the target, what that stands for on the source and what it
	// would read again.
	Groups []GroupReport `json:"groups,omitempty"`
	// Planned is set for a planned failover (failover.go).
	Planned bool `json:"planned,omitempty"`
	// Unreachable are the writers that did not answer the report's read:
	// what only they hold is not in AtRisk and Groups.
	Unreachable []WriterError `json:"unreachable,omitempty"`
	// MeterError is why the failover meter could not be read after a
	// failover (AtRisk and Groups are then empty).
	MeterError string `json:"meter_error,omitempty"`
	// Streaming are, for an unplanned failover, the link's shards whose
	// stream had not ended on its writer when the meter was read: a round
	// they had in flight may still commit, so records it lands can be in
	// AtRisk though the target holds them.
	Streaming []string `json:"streaming,omitempty"`
	// Warning is, for resume --force of a failed_over link, what resuming
	// copies over (strandedWarning).
	Warning string `json:"warning,omitempty"`
}

// stateVerb sets a link's state (pause).
func stateVerb(state linkstate.State) func(context.Context, *client, *verbOpts, []string, io.Writer) error {
	return func(ctx context.Context, c *client, o *verbOpts, args []string, stdout io.Writer) error {
		link, err := oneLink(args)
		if err != nil {
			return err
		}
		ch, err := c.setState(ctx, link, state, o.reason, 0)
		if err != nil {
			return err
		}
		if err := c.print(stdout, ch, printChange); err != nil {
			return err
		}
		return ch.incomplete()
	}
}

// errResumeRefused is resume of a failed_over link without --force.
var errResumeRefused = errors.New("resume refused")

// runResume lets a link's fetchers copy again, from the checkpoints. A
// failed_over link is refused unless --force: its checkpoints are where
// the copy stopped at the failover, so resuming copies the stranded tail
// into the target after what its producers wrote since, out of order
// with it. The change is conditional on the generation read, so that
// the link the operator was warned of is the one resumed.
func runResume(ctx context.Context, c *client, o *verbOpts, args []string, stdout io.Writer) error {
	link, err := oneLink(args)
	if err != nil {
		return err
	}
	v, err := c.view(ctx, link)
	if err != nil {
		return err
	}
	var warning string
	if v.link.State == linkstate.FailedOver && !failedBack(v.link) {
		warning = strandedWarning(v.link)
		if !o.force {
			return fmt.Errorf("%w: %s; --force resumes it anyway", errResumeRefused, warning)
		}
	}
	ch, err := c.setState(ctx, link, linkstate.Running, o.reason, v.link.Generation)
	if err != nil {
		return err
	}
	ch.Warning = warning
	if err := c.print(stdout, ch, printChange); err != nil {
		return err
	}
	return ch.incomplete()
}

// failedBack says failback moved every metered partition's checkpoint of
// l past the copy (to the old source's end, where its producers stopped):
// resuming copies only what the source takes from now on, no stranded
// tail over the target's writes, so it needs no --force.
func failedBack(l LinkReport) bool {
	for _, p := range l.Partitions {
		if !p.CheckpointMoved {
			return false
		}
	}
	return len(l.Partitions) > 0
}

// strandedWarning says what resuming failed_over link l copies over:
// the partitions whose source held records the target lacks, as the meter
// reports the copy at the failover (a failed-over link's writers take no
// stream, hence no heartbeat, and remember where the copy stood when
// failback moves the checkpoints), and whatever the source accepted
// after its last heartbeat, which nobody on the target side can see.
// Once failback moved every partition's checkpoint past both (to the old
// source's end), the writers' Status says so and resume needs no --force
// (failedBack).
func strandedWarning(l LinkReport) string {
	var tail []string
	for _, p := range l.Partitions {
		if p.LagRecords > 0 {
			counted := ""
			if p.LostRecords != nil {
				counted = fmt.Sprintf(": %d records read, %d offsets unread", *p.LostRecords, *p.UnreadOffsets)
			}
			tail = append(tail, fmt.Sprintf("%s/%d (%d offsets%s, source offsets [%d, %d))",
				p.Topic, p.Partition, p.LagRecords, counted, max(p.Committed, p.SourceLogStart), p.SourceHighWatermark))
		}
	}
	known := "nothing the meter names (no partition whose source held records the target lacks at its last heartbeat)"
	if len(tail) > 0 {
		known = "what the source held that the target lacks: " + strings.Join(tail, ", ")
	}
	return fmt.Sprintf("link %s is failed_over: unless `ferryctl failback` has moved its checkpoints since, resuming copies into the target, "+
		"after what its producers wrote since the failover, %s, and whatever the source accepted after its last heartbeat. "+
		"The safe path is `ferryctl failback %s --source-config FETCHER.yaml`: it reports that stranded tail and moves the checkpoints past it",
		l.Name, known, l.Name)
}

// incomplete says what of a change, or of its report, is not whole
// (errPartial); nil when nothing is missing.
func (ch Change) incomplete() error {
	var why []string
	if len(ch.Pending) > 0 {
		why = append(why, fmt.Sprintf("writer(s) %s have not read the change back (they act on it once they do)", strings.Join(ch.Pending, ", ")))
	}
	for _, u := range ch.Unreachable {
		why = append(why, fmt.Sprintf("writer %s did not answer (%s): what only it holds is not in the report", u.Writer, u.Error))
	}
	if len(ch.Streaming) > 0 {
		why = append(why, fmt.Sprintf("the streams of shard(s) %s had not ended when the meter was read: records their last rounds commit may be counted at risk though copied (`ferryctl status %s` reads the meter again)",
			strings.Join(ch.Streaming, ", "), ch.Link))
	}
	if len(ch.Streaming) > 0 {
		why = append(why, fmt.Sprintf("the streams of shard(s) %s had not ended when the meter was read: records their last rounds commit may be counted at risk though copied (`ferryctl status %s` reads the meter again)",
			strings.Join(ch.Streaming, ", "), ch.Link))
	}
	if ch.MeterError != "" {
		why = append(why, fmt.Sprintf("the failover meter could not be read after the change (%s): `ferryctl status %s` reads it again", ch.MeterError, ch.Link))
	}
	if ch.State == linkstate.FailedOver && !ch.DryRun {
		why = append(why, unplaced(ch.Groups)...)
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", errPartial, strings.Join(why, "; "))
}

// setState records the change through the first writer that takes it,
// then waits (up to the call timeout) until every writer reads it back.
// A non-zero expected generation makes the change conditional on it.
func (c *client) setState(ctx context.Context, link string, state linkstate.State, reason string, expected uint64) (Change, error) {
	var (
		got     *ferryv1.LinkControl
		lastErr error
	)
	for _, w := range c.writers {
		err := c.call(ctx, func(ctx context.Context) error {
			resp, err := w.ctl.SetLinkState(ctx, &ferryv1.SetLinkStateRequest{Link: link, State: state.Proto(), Reason: reason, ExpectedGeneration: expected})
			got = resp.GetControl()
			return err
		})
		if err == nil {
			lastErr = nil
			break
		}
		lastErr = fmt.Errorf("writer %s: %s", w.addr, describe(err))
	}
	if lastErr != nil {
		return Change{}, lastErr
	}
	ch := Change{Link: link, State: state, Generation: got.GetGeneration()}
	ch.Writers, ch.Pending = c.await(ctx, link, got.GetGeneration())
	return ch, nil
}

// await polls every writer until it reports generation gen of link, up
// to the call timeout, and returns those that do and those that do not.
func (c *client) await(ctx context.Context, link string, gen uint64) (done, pending []string) {
	deadline := time.Now().Add(c.timeout)
	seen := map[string]bool{}
	for {
		pending = pending[:0]
		for _, w := range c.writers {
			if seen[w.addr] {
				continue
			}
			var resp *ferryv1.StatusResponse
			err := c.call(ctx, func(ctx context.Context) (err error) {
				resp, err = w.ctl.Status(ctx, &ferryv1.StatusRequest{Link: link})
				return err
			})
			if err == nil && len(resp.GetLinks()) == 1 && resp.GetLinks()[0].GetControl().GetGeneration() >= gen {
				seen[w.addr] = true
				done = append(done, w.addr)
				continue
			}
			pending = append(pending, w.addr)
		}
		if len(pending) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return done, pending
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func printChange(w io.Writer, v any) {
	ch := v.(Change)
	if ch.Warning != "" {
		fmt.Fprintf(w, "WARNING: %s\n", ch.Warning)
	}
	if ch.DryRun {
		fmt.Fprintf(w, "DRY RUN: link %s stays %s (generation %d); a failover now would lose:\n", ch.Link, ch.State, ch.Generation)
	} else {
		fmt.Fprintf(w, "link %s is %s (generation %d); read back by %d writer(s)\n", ch.Link, ch.State, ch.Generation, len(ch.Writers))
		for _, p := range ch.Pending {
			fmt.Fprintf(w, "  writer %s has not read it yet (it acts on it once it does)\n", p)
		}
		if ch.State == linkstate.FailedOver {
			fmt.Fprintln(w, "records the target lacks of what the source held at its last heartbeat:")
		}
	}
	if ch.DryRun || ch.State == linkstate.FailedOver {
		printReport(w, ch)
	}
}

// printReport prints a failover's report: the meter and the groups.
func printReport(w io.Writer, ch Change) {
	if ch.MeterError != "" {
		fmt.Fprintf(w, "  (the failover meter could not be read: %s)\n", ch.MeterError)
		return
	}
	printMeter(w, ch.AtRisk)
	printGroups(w, ch.Groups)
	for _, u := range ch.Unreachable {
		fmt.Fprintf(w, "  UNREACHABLE writer %s: %s (what only it holds is not above)\n", u.Writer, u.Error)
	}
}
