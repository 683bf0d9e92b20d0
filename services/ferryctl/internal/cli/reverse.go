package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/services/fetcher/sourceconfig"
)

// Failback runbook step 2 (docs/disaster-recovery.md): the reverse link
// (target to old source) starts where the target's own writes began, and
// the stranded tail is counted in records.

// errReverseRunning refuses --reverse-link for a link a writer serves a
// stream of: its checkpoints are its own.
var errReverseRunning = errors.New("reverse link running")

// reverseStart sets, through the old source's writers (rc), the reverse
// link's checkpoint of each target partition at its TargetStart: the
// reverse link's source is the target, so its checkpoint keys are the
// target topics. A partition of which nothing was copied (TargetStart -1)
// gets none: the reverse link's start_from applies, which must be
// earliest to carry what the target's producers wrote there. The writers
// take it only while none of these partitions has a checkpoint (a link
// not started); ferryctl first refuses a reverse link any of them serves
// a stream of. A dry run reports the positions and changes nothing.
func reverseStart(ctx context.Context, rc *client, rep *FailbackReport, link, reason string, dryRun bool) error {
	req := &ferryv1.SetCheckpointsRequest{Link: link, Reason: reason}
	for i := range rep.Partitions {
		p := &rep.Partitions[i]
		if p.TargetStart >= 0 && p.TargetTopic != "" {
			start := p.TargetStart
			p.ReverseCheckpoint = &start
			req.Checkpoints = append(req.Checkpoints, &ferryv1.CheckpointPosition{Topic: p.TargetTopic, Partition: p.Partition, NextSourceOffset: start})
		}
	}
	rep.ReverseLink = link
	if dryRun || len(req.Checkpoints) == 0 {
		return nil
	}
	if err := rc.refuseRunning(ctx, link); err != nil {
		unsetReverse(rep)
		return err
	}
	var errs []string
	for _, w := range rc.writers {
		var resp *ferryv1.SetCheckpointsResponse
		err := rc.call(ctx, func(ctx context.Context) (err error) {
			resp, err = w.ctl.SetCheckpoints(ctx, req)
			return err
		})
		if err == nil {
			rep.ReverseWriter = resp.GetWriter()
			return nil
		}
		errs = append(errs, fmt.Sprintf("writer %s: %s", w.addr, describe(err)))
	}
	unsetReverse(rep)
	return fmt.Errorf("set the start of reverse link %s: %s", link, strings.Join(errs, "; "))
}

// unsetReverse takes the reverse checkpoints out of a report whose
// reverse start was not set: it must not say they were.
func unsetReverse(rep *FailbackReport) {
	for i := range rep.Partitions {
		rep.Partitions[i].ReverseCheckpoint = nil
	}
}

// refuseRunning refuses a link of which a writer asked serves a stream.
func (c *client) refuseRunning(ctx context.Context, link string) error {
	v, err := c.view(ctx, link)
	if err != nil {
		return fmt.Errorf("reverse link %s: %w", link, err)
	}
	if i := slices.IndexFunc(v.link.Shards, func(s ShardReport) bool { return s.Active }); i >= 0 {
		s := v.link.Shards[i]
		return fmt.Errorf("%w: link %s: shard %d is served by fetcher %s on writer %s: its checkpoints are its own (set them before its fetchers start)",
			errReverseRunning, link, s.Shard, s.Fetcher, s.Writer)
	}
	return nil
}

// countTails counts the records of each stranded tail on the old source,
// read_committed: a transaction's records count once committed, aborted
// ones and the markers not. Bounded: a tail of more than limit offsets is
// not read (a tail of millions of records would take minutes), nor one a
// transaction still open on the old source holds back (read_committed
// reads nothing past it until it ends), and the whole count stops at the
// call timeout; each partition not counted says why.
func (c *client) countTails(ctx context.Context, src sourceconfig.Source, parts []FailbackPartition, limit int64) error {
	want := map[string]map[int32]kgo.Offset{}
	todo := map[topicPartition]*FailbackPartition{}
	for i := range parts {
		p := &parts[i]
		switch {
		case p.SourceEnd < 0: // not on the old source: nothing to count
		case p.StrandedOffsets == 0:
			zero := int64(0)
			p.StrandedRecords = &zero
		case p.StrandedOffsets > limit:
			p.Uncounted = fmt.Sprintf("%d offsets, above --count-limit %d", p.StrandedOffsets, limit)
		default:
			if want[p.Topic] == nil {
				want[p.Topic] = map[int32]kgo.Offset{}
			}
			want[p.Topic][p.Partition] = kgo.NewOffset().At(p.StrandedFrom)
			todo[topicPartition{p.Topic, p.Partition}] = p
		}
	}
	if len(todo) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := heldBack(ctx, src, todo); err != nil {
		return err
	}
	for tp, p := range todo {
		if p.Uncounted != "" {
			delete(todo, tp)
			delete(want[tp.topic], tp.partition)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	return readTails(ctx, src, want, todo)
}

// heldBack marks the tails that a transaction still open on the old
// source holds back: its last stable offset is below the tail's end.
func heldBack(ctx context.Context, src sourceconfig.Source, todo map[topicPartition]*FailbackPartition) error {
	cl, err := sourceClient(src.Kafka)
	if err != nil {
		return err
	}
	defer cl.Close()
	var topics []string
	for tp := range todo {
		if !slices.Contains(topics, tp.topic) {
			topics = append(topics, tp.topic)
		}
	}
	stable, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topics...)
	if err == nil {
		err = stable.Error()
	}
	if err != nil {
		return fmt.Errorf("last stable offsets on the old source: %w", err)
	}
	for tp, p := range todo {
		if o, ok := stable.Lookup(tp.topic, tp.partition); ok && o.Offset < p.StrandedTo {
			p.Uncounted = fmt.Sprintf("a transaction open on the old source from offset %d holds read_committed back: count after it ends (transaction.timeout.ms)", o.Offset)
		}
	}
	return nil
}

// readTails reads each tail of todo from its start (want) and counts its
// records until it has seen the tail's last offset: with control records
// kept, something at or past it always comes once no transaction is open
// (the record there, or the marker ending an aborted one).
func readTails(ctx context.Context, src sourceconfig.Source, want map[string]map[int32]kgo.Offset, todo map[topicPartition]*FailbackPartition) error {
	opts, err := src.Kafka.Franz()
	if err != nil {
		return fmt.Errorf("source client: %w", err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.ConsumePartitions(want), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())...)
	if err != nil {
		return fmt.Errorf("source client: %w", err)
	}
	defer cl.Close()
	counts := map[topicPartition]int64{}
	for len(todo) > 0 && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			tp := topicPartition{r.Topic, r.Partition}
			p, ok := todo[tp]
			if !ok {
				return
			}
			if r.Offset < p.StrandedTo && !r.Attrs.IsControl() {
				counts[tp]++
			}
			if r.Offset >= p.StrandedTo-1 {
				n := counts[tp]
				p.StrandedRecords = &n
				delete(todo, tp)
			}
		})
	}
	for _, p := range todo {
		p.Uncounted = fmt.Sprintf("not read to its end within --timeout (%d records before it stopped)", counts[topicPartition{p.Topic, p.Partition}])
	}
	return nil
}
