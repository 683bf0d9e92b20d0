package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/status"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/linkstate"
)

// Report is what status prints (-o json prints it as it is).
type Report struct {
	Links []LinkReport `json:"links"`
	// Unreachable are the writers that did not answer, with why.
	Unreachable []WriterError `json:"unreachable,omitempty"`
	Healthy     bool          `json:"healthy"`
}

// WriterError is a writer that did not answer.
type WriterError struct {
	Writer string `json:"writer"`
	Error  string `json:"error"`
}

// LinkReport is one link, merged from every writer's answer.
type LinkReport struct {
	Name       string          `json:"name"`
	State      linkstate.State `json:"state"`
	Reason     string          `json:"reason,omitempty"`
	By         string          `json:"by,omitempty"`
	Time       *time.Time      `json:"time,omitempty"`
	Generation uint64          `json:"generation"`
	// Writers are those that serve the link, with the generation each
	// has read: a change is in force everywhere once all show it.
	Writers    map[string]uint64 `json:"writers"`
	Shards     []ShardReport     `json:"shards"`
	Partitions []PartitionReport `json:"partitions"`
	// Groups are the link's synced consumer groups (groups.go).
	Groups []GroupReport `json:"groups,omitempty"`
	// Stopped are the partitions a writer refused for good: they copy
	// nothing until an operator acts (docs/operations.md).
	Stopped []StoppedReport `json:"stopped,omitempty"`
	// IndexGaps are the link's source topics whose records the source
	// keeps longer than the offset index keeps their index: a group
	// positioned on an older record cannot be translated (before_index),
	// at failover or failback. A warning, not a problem: a topic kept for
	// ever (compacted, retention.ms -1) always has one.
	IndexGaps []IndexGapReport `json:"index_gaps,omitempty"`
	// Problems say why the link is unhealthy; empty when it is not.
	Problems []string `json:"problems,omitempty"`
}

// IndexGapReport is a source topic the offset index cannot cover whole,
// and why (what the source keeps against what the index keeps).
type IndexGapReport struct {
	Topic  string `json:"topic"`
	Reason string `json:"reason"`
}

// ShardReport is a shard: its highest epoch on any writer, and the stream
// serving it, if any.
type ShardReport struct {
	Shard   uint32 `json:"shard"`
	Epoch   uint64 `json:"epoch"`
	Active  bool   `json:"active"`
	Fetcher string `json:"fetcher,omitempty"`
	Writer  string `json:"writer,omitempty"`
}

// StoppedReport is a partition a writer refused for good, and its
// fetcher stopped.
type StoppedReport struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Reason is the refusal's label (record_too_large, batch_too_large,
	// target_refused, checkpoint_unverified); Error says it in words.
	Reason string     `json:"reason"`
	Error  string     `json:"error"`
	Writer string     `json:"writer"`
	Since  *time.Time `json:"since,omitempty"`
}

// PartitionReport is a partition's line of the failover meter: what the
// source held at its last heartbeat, what the target has committed, and
// the difference (what a failover now would lose).
type PartitionReport struct {
	Topic               string   `json:"topic"`
	Partition           int32    `json:"partition"`
	Committed           int64    `json:"committed_next_offset"`
	SourceHighWatermark int64    `json:"source_high_watermark"`
	SourceLogStart      int64    `json:"source_log_start_offset"`
	LagRecords          int64    `json:"lag_records"`
	LagSeconds          *float64 `json:"lag_seconds,omitempty"`
	HeartbeatAge        float64  `json:"heartbeat_age_seconds"`
	// HeartbeatObservedAt is when the fetcher read the source (its clock).
	HeartbeatObservedAt *time.Time `json:"heartbeat_observed_at,omitempty"`
	// SourceAppendRate is the source's append rate at the last heartbeat
	// (offsets a second), and AfterHeartbeat the offsets it estimates the
	// source took since, which LagRecords cannot count: the rate times
	// the heartbeat's age, rounded up (after a region loss the age runs
	// on past the loss, so it overstates rather than understates). Absent
	// while the rate is unknown.
	SourceAppendRate *float64 `json:"source_append_rate,omitempty"`
	AfterHeartbeat   *int64   `json:"after_heartbeat_estimate_offsets,omitempty"`
	// LostRecords are LagRecords' records below what the fetcher had read
	// at the last heartbeat that the target lacks: records, exactly (no
	// transaction marker or aborted record among them); UnreadOffsets,
	// LagRecords' offsets at and above it, which no one read (at most
	// that many records more). Absent while unknown: a fetcher older than
	// the count, or the committed offset from another writer than the
	// last heartbeat's.
	LostRecords   *int64 `json:"lost_records,omitempty"`
	UnreadOffsets *int64 `json:"unread_offsets,omitempty"`
	// CheckpointMoved says failback moved the checkpoint past the copy,
	// and ResumeNext is where the link resumes (-1: no checkpoint).
	CheckpointMoved bool  `json:"checkpoint_moved,omitempty"`
	ResumeNext      int64 `json:"resume_next_offset"`
}

func runStatus(ctx context.Context, c *client, o *verbOpts, args []string, stdout io.Writer) error {
	if len(args) > 1 {
		return fmt.Errorf("%w: at most one LINK", errUsage)
	}
	link := ""
	if len(args) == 1 {
		link = args[0]
	}
	for {
		rep, err := c.report(ctx, link, o.staleAfter, o.groupStaleAfter)
		if err != nil {
			return err
		}
		if o.watch && !c.json {
			fmt.Fprintf(stdout, "--- %s\n", time.Now().Format(time.RFC3339))
		}
		if err := c.print(stdout, rep, printStatus); err != nil {
			return err
		}
		if !o.watch {
			return healthOf(rep)
		}
		select {
		case <-ctx.Done():
			return healthOf(rep)
		case <-time.After(o.interval):
		}
	}
}

func healthOf(rep Report) error {
	if rep.Healthy {
		return nil
	}
	var why []string
	for _, l := range rep.Links {
		for _, p := range l.Problems {
			why = append(why, l.Name+": "+p)
		}
	}
	for _, u := range rep.Unreachable {
		why = append(why, "writer "+u.Writer+" did not answer")
	}
	return fmt.Errorf("%w: %s", errUnhealthy, strings.Join(why, "; "))
}

// report asks every writer and merges their answers; it fails only when
// none answers.
func (c *client) report(ctx context.Context, link string, staleAfter, groupStaleAfter time.Duration) (Report, error) {
	var (
		rep     Report
		answers []*ferryv1.StatusResponse
		addrs   []string
		lastErr error
	)
	for _, w := range c.writers {
		var resp *ferryv1.StatusResponse
		err := c.call(ctx, func(ctx context.Context) (err error) {
			resp, err = w.ctl.Status(ctx, &ferryv1.StatusRequest{Link: link})
			return err
		})
		if err != nil {
			lastErr = fmt.Errorf("writer %s: %s", w.addr, describe(err))
			rep.Unreachable = append(rep.Unreachable, WriterError{Writer: w.addr, Error: describe(err)})
			continue
		}
		answers, addrs = append(answers, resp), append(addrs, w.addr)
	}
	if len(answers) == 0 {
		return Report{}, lastErr
	}
	rep.Links = merge(answers, addrs)
	rep.Healthy = len(rep.Unreachable) == 0
	for i := range rep.Links {
		l := &rep.Links[i]
		l.Problems = problems(*l, staleAfter, groupStaleAfter)
		rep.Healthy = rep.Healthy && len(l.Problems) == 0
	}
	return rep, nil
}

// describe is a call's error without gRPC's "rpc error: code = ..." noise
// where a status says it in its own words.
func describe(err error) string {
	if st, ok := status.FromError(err); ok {
		return st.Code().String() + ": " + st.Message()
	}
	return err.Error()
}

// merge joins the writers' views: a link's state is the one of the
// highest generation; a shard's epoch the highest; a partition's committed
// offset the highest and its heartbeat the freshest.
func merge(answers []*ferryv1.StatusResponse, addrs []string) []LinkReport {
	byName := map[string]*LinkReport{}
	var order []string
	for i, resp := range answers {
		for _, ls := range resp.GetLinks() {
			l := byName[ls.GetName()]
			if l == nil {
				l = &LinkReport{Name: ls.GetName(), State: linkstate.Running, Writers: map[string]uint64{}}
				for s := range ls.GetShards() {
					l.Shards = append(l.Shards, ShardReport{Shard: s})
				}
				byName[ls.GetName()] = l
				order = append(order, ls.GetName())
			}
			mergeLink(l, ls, addrs[i])
		}
	}
	out := make([]LinkReport, 0, len(order))
	slices.Sort(order)
	for _, name := range order {
		l := byName[name]
		l.countRereads()
		out = append(out, *l)
	}
	return out
}

func mergeLink(l *LinkReport, ls *ferryv1.LinkStatus, addr string) {
	ctl := ls.GetControl()
	l.Writers[addr] = ctl.GetGeneration()
	if ctl.GetGeneration() >= l.Generation {
		l.Generation, l.Reason, l.By = ctl.GetGeneration(), ctl.GetReason(), ctl.GetBy()
		if st, ok := linkstate.FromProto(ctl.GetState()); ok {
			l.State = st
		}
		l.Time = nil
		if ms := ctl.GetTimeUnixMs(); ms > 0 {
			t := time.UnixMilli(ms).UTC()
			l.Time = &t
		}
	}
	for _, sh := range ls.GetShardStates() {
		i := slices.IndexFunc(l.Shards, func(s ShardReport) bool { return s.Shard == sh.GetShard() })
		if i < 0 {
			l.Shards = append(l.Shards, ShardReport{Shard: sh.GetShard()})
			i = len(l.Shards) - 1
		}
		s := &l.Shards[i]
		s.Epoch = max(s.Epoch, sh.GetEpoch())
		if sh.GetActive() && sh.GetEpoch() >= s.Epoch {
			s.Active, s.Fetcher, s.Writer = true, sh.GetFetcher(), addr
		}
	}
	for _, p := range ls.GetPartitions() {
		mergePartition(l, p)
	}
	for _, g := range ls.GetGroups() {
		mergeGroup(l, g)
	}
	for _, p := range ls.GetStopped() {
		mergeStopped(l, p, addr)
	}
	for _, g := range ls.GetIndexGaps() {
		if !slices.ContainsFunc(l.IndexGaps, func(r IndexGapReport) bool { return r.Topic == g.GetTopic() }) {
			l.IndexGaps = append(l.IndexGaps, IndexGapReport{Topic: g.GetTopic(), Reason: g.GetReason()})
		}
	}
	slices.SortFunc(l.IndexGaps, func(a, b IndexGapReport) int { return strings.Compare(a.Topic, b.Topic) })
	slices.SortFunc(l.Partitions, func(a, b PartitionReport) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
}

func mergePartition(l *LinkReport, p *ferryv1.LinkPartition) {
	i := slices.IndexFunc(l.Partitions, func(r PartitionReport) bool { return r.Topic == p.GetTopic() && r.Partition == p.GetPartition() })
	next := PartitionReport{
		Topic: p.GetTopic(), Partition: p.GetPartition(), Committed: p.GetCommittedNextOffset(),
		SourceHighWatermark: p.GetSourceHighWatermark(), SourceLogStart: p.GetSourceLogStartOffset(),
		LagRecords: p.GetLagRecords(), HeartbeatAge: p.GetHeartbeatAgeSeconds(),
		CheckpointMoved: p.GetCheckpointMoved(), ResumeNext: p.GetResumeNextOffset(),
	}
	if ms := p.GetHeartbeatObservedAtUnixMs(); ms > 0 {
		t := time.UnixMilli(ms).UTC()
		next.HeartbeatObservedAt = &t
	}
	if p.GetHasLagSeconds() {
		v := p.GetLagSeconds()
		next.LagSeconds = &v
	}
	if p.GetHasSourceAppendRate() {
		r, n := p.GetSourceAppendRate(), p.GetAfterHeartbeatOffsets()
		next.SourceAppendRate, next.AfterHeartbeat = &r, &n
	}
	if p.GetHasLostRecords() {
		lost, unread := p.GetLostRecords(), p.GetUnreadOffsets()
		next.LostRecords, next.UnreadOffsets = &lost, &unread
	}
	if i < 0 {
		l.Partitions = append(l.Partitions, next)
		return
	}
	cur := &l.Partitions[i]
	// The checkpoint is the target's, one for every writer: the latest
	// read of it (the furthest) says where the link resumes.
	resume, moved := max(cur.ResumeNext, next.ResumeNext), cur.CheckpointMoved || next.CheckpointMoved
	defer func() { cur.ResumeNext, cur.CheckpointMoved = resume, moved }()
	if next.HeartbeatAge < cur.HeartbeatAge {
		next.Committed = max(next.Committed, cur.Committed)
		if next.Committed != p.GetCommittedNextOffset() {
			// Another writer committed more: this one's count of
			// what its stream read and committed says nothing of it.
			next.LostRecords, next.UnreadOffsets = nil, nil
		}
		*cur = next
	} else if next.Committed > cur.Committed {
		cur.Committed = next.Committed
		cur.LostRecords, cur.UnreadOffsets = nil, nil
	}
	cur.LagRecords = max(0, cur.SourceHighWatermark-max(cur.Committed, cur.SourceLogStart))
}

// mergeStopped adds a partition a writer refused; one that several
// writers refused (its fetcher tried each) is listed once, as the first
// refused it.
func mergeStopped(l *LinkReport, p *ferryv1.LinkStoppedPartition, addr string) {
	next := StoppedReport{Topic: p.GetTopic(), Partition: p.GetPartition(), Reason: p.GetReason(), Error: p.GetError(), Writer: addr}
	if ms := p.GetSinceUnixMs(); ms > 0 {
		t := time.UnixMilli(ms).UTC()
		next.Since = &t
	}
	i := slices.IndexFunc(l.Stopped, func(r StoppedReport) bool { return r.Topic == next.Topic && r.Partition == next.Partition })
	switch {
	case i < 0:
		l.Stopped = append(l.Stopped, next)
		slices.SortFunc(l.Stopped, func(a, b StoppedReport) int {
			if c := strings.Compare(a.Topic, b.Topic); c != 0 {
				return c
			}
			return int(a.Partition - b.Partition)
		})
	case next.Since != nil && (l.Stopped[i].Since == nil || next.Since.Before(*l.Stopped[i].Since)):
		l.Stopped[i] = next
	}
}

// problems says why a running link is unhealthy. A link an operator
// paused or failed over is not: its shards are idle on purpose.
func problems(l LinkReport, staleAfter, groupStaleAfter time.Duration) []string {
	if l.State != linkstate.Running {
		return nil
	}
	var out []string
	for _, s := range l.Shards {
		if !s.Active {
			out = append(out, fmt.Sprintf("shard %d has no active stream on any writer", s.Shard))
		}
	}
	for _, p := range l.Partitions {
		if age := time.Duration(p.HeartbeatAge * float64(time.Second)); age > staleAfter {
			out = append(out, fmt.Sprintf("%s/%d: last heartbeat %s old, above %s", p.Topic, p.Partition, age.Round(time.Second), staleAfter))
		}
	}
	// A stopped partition's shard may stream on and its heartbeats stay
	// fresh, yet the partition copies nothing.
	for _, s := range l.Stopped {
		out = append(out, fmt.Sprintf("%s/%d is stopped (%s) on writer %s: it copies nothing until an operator acts", s.Topic, s.Partition, s.Reason, s.Writer))
	}
	return append(out, groupProblems(l.Groups, groupStaleAfter)...)
}

// groupProblems says which synced groups a failover now would not move
// where their consumers expect: one the sync leaves (owned: committed on
// the target by another client, as consumers that moved there and back
// leave it; active: members on the target), one whose last sync failed or
// found its offsets before the index, one without a position from Ferry
// on a partition it reads, and one whose position follows a source read
// older than groupStaleAfter.
func groupProblems(gs []GroupReport, groupStaleAfter time.Duration) []string {
	var out []string
	for _, g := range gs {
		switch g.Outcome {
		case "owned", "active", "error", "before_index":
			out = append(out, fmt.Sprintf("group %s: last sync %s (%s): a failover now leaves it where it stands on the target", g.Group, g.Outcome, g.Detail))
		}
		if len(g.Uncounted) > 0 {
			var ps []string
			for _, u := range g.Uncounted {
				ps = append(ps, fmt.Sprintf("%s/%d (%s)", u.Topic, u.Partition, u.Reason))
			}
			out = append(out, fmt.Sprintf("group %s has no position from Ferry on %s", g.Group, strings.Join(ps, ", ")))
		}
		if g.SyncAge != nil && groupStaleAfter > 0 {
			if age := time.Duration(*g.SyncAge * float64(time.Second)); age > groupStaleAfter {
				out = append(out, fmt.Sprintf("group %s follows a source read %s old, above %s", g.Group, age.Round(time.Second), groupStaleAfter))
			}
		}
	}
	return out
}

// print writes v as JSON, or as text with text.
func (c *client) print(w io.Writer, v any, text func(io.Writer, any)) error {
	if c.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	text(w, v)
	return nil
}

func printStatus(w io.Writer, v any) {
	rep := v.(Report)
	for _, l := range rep.Links {
		fmt.Fprintf(w, "LINK %s  state %s  generation %d", l.Name, l.State, l.Generation)
		if l.By != "" {
			fmt.Fprintf(w, "  set by %s", l.By)
		}
		if l.Reason != "" {
			fmt.Fprintf(w, "  reason %q", l.Reason)
		}
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  SHARD\tEPOCH\tACTIVE\tFETCHER\tWRITER")
		for _, s := range l.Shards {
			fmt.Fprintf(tw, "  %d\t%d\t%v\t%s\t%s\n", s.Shard, s.Epoch, s.Active, s.Fetcher, s.Writer)
		}
		tw.Flush()
		printMeter(w, l.Partitions)
		if len(l.Groups) > 0 {
			printGroups(w, l.Groups)
		}
		if len(l.Stopped) > 0 {
			printStopped(w, l.Stopped)
		}
		for _, g := range l.IndexGaps {
			fmt.Fprintf(w, "  INDEX GAP: %s: %s\n", g.Topic, g.Reason)
		}
		for _, p := range l.Problems {
			fmt.Fprintf(w, "  UNHEALTHY: %s\n", p)
		}
	}
	for _, u := range rep.Unreachable {
		fmt.Fprintf(w, "UNREACHABLE writer %s: %s\n", u.Writer, u.Error)
	}
}

func printStopped(w io.Writer, ss []StoppedReport) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  STOPPED\tREASON\tWRITER\tSINCE\tERROR")
	for _, s := range ss {
		since := "?"
		if s.Since != nil {
			since = s.Since.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "  %s/%d\t%s\t%s\t%s\t%s\n", s.Topic, s.Partition, s.Reason, s.Writer, since, s.Error)
	}
	tw.Flush()
}

func printMeter(w io.Writer, ps []PartitionReport) {
	if len(ps) == 0 {
		fmt.Fprintln(w, "  (no heartbeats yet: no partition to meter)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  PARTITION\tCOMMITTED\tSOURCE_HW\tLAG_RECORDS\tLOST_RECORDS\tUNREAD\tLAG_SECONDS\tHEARTBEAT_AGE\tAFTER_HEARTBEAT")
	for _, p := range ps {
		secs, after, lost, unread := "?", "?", "?", "?"
		if p.LagSeconds != nil {
			secs = fmt.Sprintf("%.1f", *p.LagSeconds)
		}
		if p.AfterHeartbeat != nil {
			after = fmt.Sprintf("~%d (%.1f/s)", *p.AfterHeartbeat, *p.SourceAppendRate)
		}
		if p.LostRecords != nil {
			lost, unread = strconv.FormatInt(*p.LostRecords, 10), strconv.FormatInt(*p.UnreadOffsets, 10)
		}
		fmt.Fprintf(tw, "  %s/%d\t%d\t%d\t%d\t%s\t%s\t%s\t%.1fs\t%s\n", p.Topic, p.Partition, p.Committed, p.SourceHighWatermark, p.LagRecords, lost, unread, secs, p.HeartbeatAge, after)
	}
	tw.Flush()
	fmt.Fprintln(w, "  LAG_RECORDS counts offsets; LOST_RECORDS, of those the fetcher had read at the last heartbeat, the records the target lacks (transaction markers and aborted records left out); UNREAD, the offsets no one read (at most that many records more); ? while unknown")
	fmt.Fprintln(w, "  AFTER_HEARTBEAT: offsets the source may have taken since its last heartbeat, which LAG_RECORDS cannot count: its append rate then times the heartbeat's age (? while unknown)")
}
