package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/groupcommit"
	"github.com/ferry-replicator/ferry/pkg/groupsync"
	"github.com/ferry-replicator/ferry/pkg/kafkaclient"
	"github.com/ferry-replicator/ferry/pkg/linkstate"
	"github.com/ferry-replicator/ferry/services/fetcher/sourceconfig"
)

// Failback, its first step (docs/disaster-recovery.md, "Failback"): once
// the old source is back after an unplanned failover, report what it
// holds that never reached the target (the stranded tail: per partition
// [committed, its end)), where writes on the target began (the copied
// end, where the reverse link starts) and where each group stands on the
// old source, and move the link's checkpoints to the old source's end,
// so that the original direction, once resumed, does not copy the tail
// into the target after what the target's producers wrote. It does not
// resume the link: the runbook orders the steps. With --move-groups
// (runbook step 3) it moves no checkpoint but the groups: their exact
// positions committed on the old source (moveGroupsBack).

// Carry values of a group's partition.
const (
	carryExact       = "exact"
	carryReverseLink = "reverse_link"
)

// errNotFailedOver refuses a failback of a link that is not failed_over.
var errNotFailedOver = errors.New("failback refused")

// FailbackReport is what failback prints (-o json prints it as it is).
type FailbackReport struct {
	Link string `json:"link"`
	// DryRun is set when nothing was changed; CopyStranded when the
	// checkpoints were left where they were, so that the original
	// direction copies the stranded tail once resumed.
	DryRun       bool `json:"dry_run,omitempty"`
	CopyStranded bool `json:"copy_stranded,omitempty"`
	// MoveGroups is set when the groups were moved back (--move-groups)
	// and no checkpoint was.
	MoveGroups bool `json:"move_groups,omitempty"`
	// Writer is the writer that signed the checkpoints moved.
	Writer     string              `json:"writer,omitempty"`
	Partitions []FailbackPartition `json:"partitions"`
	// ReverseLink is the reverse link whose start was set (--reverse-link;
	// for a dry run, would be), and ReverseWriter the writer of the old
	// source that signed its checkpoints.
	ReverseLink   string          `json:"reverse_link,omitempty"`
	ReverseWriter string          `json:"reverse_writer,omitempty"`
	Groups        []FailbackGroup `json:"groups"`
}

// FailbackPartition is one source partition: its stranded tail on the old
// source, where writes on the target began, and its checkpoint.
type FailbackPartition struct {
	Topic       string `json:"topic"`
	TargetTopic string `json:"target_topic,omitempty"`
	Partition   int32  `json:"partition"`
	// Committed is the next source offset committed on the target (-1:
	// nothing copied); SourceLogStart and SourceEnd the old source's log
	// start and end (high watermark) as read now.
	Committed      int64 `json:"committed_next_offset"`
	SourceLogStart int64 `json:"source_log_start_offset"`
	SourceEnd      int64 `json:"source_end_offset"`
	// StrandedFrom and StrandedTo are the stranded tail [from, to): source
	// offsets the old source holds that never reached the target.
	// StrandedOffsets is to - from (transaction markers and aborted
	// records take offsets too, so it bounds the records from above).
	StrandedFrom    int64 `json:"stranded_from"`
	StrandedTo      int64 `json:"stranded_to"`
	StrandedOffsets int64 `json:"stranded_offsets"`
	// TargetStart is the target offset where writes on the target began:
	// the copied end at the failover, where the reverse link starts; -1
	// when nothing was copied (the reverse link starts at the target
	// partition's start).
	TargetStart int64 `json:"target_start"`
	// Checkpoint is the checkpoint as set (absent for a dry run or
	// --copy-stranded); Note says anything unusual.
	Checkpoint *int64 `json:"checkpoint,omitempty"`
	Note       string `json:"note,omitempty"`
	// StrandedRecords counts the records of the stranded tail, read
	// committed (markers and aborted records excluded); absent when not
	// counted, and Uncounted says why.
	StrandedRecords *int64 `json:"stranded_records,omitempty"`
	Uncounted       string `json:"uncounted,omitempty"`
	// ReverseCheckpoint is the reverse link's checkpoint of the target
	// partition as set at TargetStart (absent: none set).
	ReverseCheckpoint *int64 `json:"reverse_checkpoint,omitempty"`
}

// FailbackGroup is a synced group's position on the target and, where
// that is within what was copied from the old source, its exact position
// there.
type FailbackGroup struct {
	Group      string                   `json:"group"`
	Partitions []FailbackGroupPartition `json:"partitions"`
	// Error is why the group's positions could not be read.
	Error string `json:"error,omitempty"`
	// HandedBack is set when --move-groups moved the group and returned
	// it to the link's group sync on the target (HandBackGroups): its
	// consumers committed there during the failover, and once the link
	// runs again its sync takes those offsets over rather than leave the
	// group alone (owned). HandBackError says why it was not.
	HandedBack    bool   `json:"handed_back,omitempty"`
	HandBackError string `json:"hand_back_error,omitempty"`
}

// FailbackGroupPartition is one partition of a group.
type FailbackGroupPartition struct {
	Topic        string `json:"topic"`
	TargetTopic  string `json:"target_topic"`
	Partition    int32  `json:"partition"`
	TargetOffset int64  `json:"target_offset"`
	// SourceOffset is the group's exact position on the old source, when
	// its target position is below the copied end (Carry "exact"); else
	// Carry is "reverse_link": the position is past what was copied, and
	// the reverse link's group sync carries it.
	SourceOffset *int64 `json:"source_offset,omitempty"`
	Carry        string `json:"carry"`
	// Action is what --move-groups did on the old source (a dry run: would
	// do): moved, unchanged, backwards (left: further on the old source),
	// refused (Why says why) or reverse_link (not ferryctl's to move).
	// OnSource is the group's committed offset there before (-1: none).
	Action   string `json:"action,omitempty"`
	OnSource *int64 `json:"committed_on_source,omitempty"`
	Why      string `json:"why,omitempty"`
}

func runFailback(ctx context.Context, c *client, o *verbOpts, args []string, stdout io.Writer) error {
	link, err := oneLink(args)
	if err != nil {
		return err
	}
	re, err := groupFilter(o.groups)
	if err != nil {
		return err
	}
	if err := checkReverseFlags(o); err != nil {
		return err
	}
	src, err := loadSource(o.sourceConfig, o.env, link)
	if err != nil {
		return err
	}
	v, err := c.view(ctx, link)
	if err != nil {
		return err
	}
	if v.link.State != linkstate.FailedOver {
		return fmt.Errorf("%w: link %s is %s, not failed_over: failback follows a failover", errNotFailedOver, link, v.link.State)
	}
	ends, err := c.sourceOffsets(ctx, src, topicsOf(v.link.Partitions))
	if err != nil {
		return fmt.Errorf("old source of link %s: %w", link, err)
	}
	rep := FailbackReport{Link: link, DryRun: o.dryRun, CopyStranded: o.copyStranded, MoveGroups: o.moveGroups, Groups: []FailbackGroup{}}
	if rep.Partitions, err = c.strandedTails(ctx, link, v.link.Partitions, ends); err != nil {
		return err
	}
	if err := c.countTails(ctx, src, rep.Partitions, o.countLimit); err != nil {
		return fmt.Errorf("count the stranded tails: %w", err)
	}
	rep.Groups = c.groupsBack(ctx, link, selectGroups(v.link.Groups, re), rep.Partitions)
	if o.moveGroups {
		if err := c.moveGroupsBack(ctx, src, link, rep.Groups, groupcommit.Options{TakeOver: true, Backwards: o.allowBackwards, DryRun: o.dryRun}); err != nil {
			return err
		}
		if !o.dryRun {
			c.handBack(ctx, link, rep.Groups)
		}
		if err := c.print(stdout, rep, printFailback); err != nil {
			return err
		}
		return movedGroups(rep.Groups)
	}
	if !o.dryRun && !o.copyStranded {
		if err := c.moveCheckpoints(ctx, &rep, o.reason); err != nil {
			return err
		}
	}
	var reverseErr error
	if o.reverseLink != "" {
		reverseErr = setReverseStart(ctx, o, &rep)
	}
	// The report records the tail and what was moved, whatever follows.
	if err := c.print(stdout, rep, printFailback); err != nil {
		return err
	}
	switch {
	case reverseErr != nil && rep.Writer != "":
		return fmt.Errorf("%w: the checkpoints of link %s moved, but the start of reverse link %s was not set: %v", errPartial, link, o.reverseLink, reverseErr)
	case reverseErr != nil:
		return reverseErr
	}
	return incompleteReport(rep)
}

// checkReverseFlags says what is wrong with failback's reverse link flags.
func checkReverseFlags(o *verbOpts) error {
	switch {
	case o.reverseLink == "" && (len(o.reverseWriters) > 0 || len(o.reverseIDs) > 0):
		return fmt.Errorf("%w: --reverse-writer and --reverse-writer-id need --reverse-link", errUsage)
	case o.reverseLink != "" && len(o.reverseWriters) == 0:
		return fmt.Errorf("%w: --reverse-link needs --reverse-writer: the old source's writers serving it", errUsage)
	case o.reverseLink != "" && o.moveGroups:
		return fmt.Errorf("%w: --reverse-link is runbook step 2, --move-groups step 3: run them apart", errUsage)
	case o.countLimit < 0:
		return fmt.Errorf("%w: --count-limit %d: want 0 or more", errUsage, o.countLimit)
	}
	return nil
}

// setReverseStart connects to the old source's writers and sets the
// reverse link's start there (reverseStart).
func setReverseStart(ctx context.Context, o *verbOpts, rep *FailbackReport) error {
	rc, err := o.dial(o.reverseWriters, o.reverseIDs)
	if err != nil {
		return fmt.Errorf("%w: reverse writers: %v", errBadConfig, err)
	}
	defer rc.close()
	return reverseStart(ctx, rc, rep, o.reverseLink, o.reason, o.dryRun)
}

// loadSource reads the fetcher configuration at path with the fetcher's
// own loader; it must be link's.
func loadSource(path string, env []string, link string) (sourceconfig.Source, error) {
	if path == "" {
		return sourceconfig.Source{}, fmt.Errorf("%w: --source-config required: the link's fetcher configuration, whose source section reaches the old source", errUsage)
	}
	src, err := sourceconfig.Load(path, env)
	if err != nil {
		return sourceconfig.Source{}, fmt.Errorf("%w: --source-config %s: %v", errBadConfig, path, err)
	}
	if src.Link != link {
		return sourceconfig.Source{}, fmt.Errorf("%w: --source-config %s is the configuration of link %q, not %q", errBadConfig, path, src.Link, link)
	}
	return src, nil
}

func topicsOf(ps []PartitionReport) []string {
	var out []string
	for _, p := range ps {
		if !slices.Contains(out, p.Topic) {
			out = append(out, p.Topic)
		}
	}
	return out
}

// sourceRange is a partition's log start and end on the old source.
type sourceRange struct{ start, end int64 }

type topicPartition struct {
	topic     string
	partition int32
}

// sourceOffsets reads the log start and end (high watermark: what a
// resumed fetcher would read up to, uncommitted and aborted records and
// markers included) of every partition of topics on the old source, with
// a client built from the fetcher's source section (TLS, SASL).
func (c *client) sourceOffsets(ctx context.Context, src sourceconfig.Source, topics []string) (map[topicPartition]sourceRange, error) {
	out := map[topicPartition]sourceRange{}
	if len(topics) == 0 {
		return out, nil
	}
	cl, err := sourceClient(src.Kafka)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("log start offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("end offsets: %w", err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		start, _ := starts.Lookup(o.Topic, o.Partition)
		out[topicPartition{o.Topic, o.Partition}] = sourceRange{start: start.Offset, end: o.Offset}
	})
	return out, nil
}

func sourceClient(cfg kafkaclient.Config) (*kgo.Client, error) {
	opts, err := cfg.Franz()
	if err != nil {
		return nil, fmt.Errorf("source client: %w", err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("source client: %w", err)
	}
	return cl, nil
}

// strandedTails is each partition's stranded tail and where writes on
// the target began. Partitions the old source holds that no heartbeat
// named (added after the failover) have nothing committed: all they hold
// is stranded.
func (c *client) strandedTails(ctx context.Context, link string, meter []PartitionReport, ends map[topicPartition]sourceRange) ([]FailbackPartition, error) {
	committed := map[topicPartition]int64{}
	for _, p := range meter {
		committed[topicPartition{p.Topic, p.Partition}] = p.Committed
	}
	var out []FailbackPartition
	for tp, r := range ends {
		next, ok := committed[tp]
		if !ok {
			next = -1
		}
		fp := stranded(tp, next, r)
		if next >= 0 {
			if err := c.targetStart(ctx, link, &fp); err != nil {
				return nil, err
			}
		}
		out = append(out, fp)
	}
	for tp, next := range committed {
		if _, ok := ends[tp]; !ok {
			out = append(out, FailbackPartition{Topic: tp.topic, Partition: tp.partition, Committed: next, SourceLogStart: -1, SourceEnd: -1,
				StrandedFrom: -1, StrandedTo: -1, TargetStart: -1, Note: "not on the old source (topic deleted?): nothing to report or move"})
		}
	}
	slices.SortFunc(out, func(a, b FailbackPartition) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
	return out, nil
}

// stranded is tp's tail [max(committed, log start), end): what the old
// source holds above what the target committed. An end below what was
// committed means the old source lost records the target holds.
func stranded(tp topicPartition, committed int64, r sourceRange) FailbackPartition {
	fp := FailbackPartition{Topic: tp.topic, Partition: tp.partition, Committed: committed, SourceLogStart: r.start, SourceEnd: r.end, TargetStart: -1}
	fp.StrandedFrom = max(committed, r.start)
	fp.StrandedTo = max(fp.StrandedFrom, r.end)
	fp.StrandedOffsets = fp.StrandedTo - fp.StrandedFrom
	if r.end < committed {
		fp.StrandedFrom, fp.StrandedTo = r.end, r.end
		fp.Note = fmt.Sprintf("the old source's end is %d below what the target committed: it lost records the target holds; its checkpoint is left (a resumed link stops there, on_data_loss)", committed-r.end)
	}
	return fp
}

// targetStart asks the offset index where fp's committed offset stands on
// the target: the copied end, where writes on the target began.
func (c *client) targetStart(ctx context.Context, link string, fp *FailbackPartition) error {
	resp, err := c.translate(ctx, &ferryv1.TranslateRequest{Link: link, Query: &ferryv1.TranslateRequest_Offset{Offset: &ferryv1.OffsetQuery{
		Topic: fp.Topic, Partition: fp.Partition, Offset: fp.Committed}}})
	if err != nil {
		return fmt.Errorf("translate %s/%d offset %d: %w", fp.Topic, fp.Partition, fp.Committed, err)
	}
	tr := translation(link, resp)
	fp.TargetTopic = tr.TargetTopic
	if tr.Translated == nil {
		fp.Note = fmt.Sprintf("where writes on the target began is unknown (%s): start the reverse link on this partition by hand", tr.Outcome)
		return nil
	}
	fp.TargetStart = *tr.Translated
	return nil
}

// groupsBack is each group's position on the target and, below the copied
// end, its exact position on the old source (Ferry's marker, or the
// reverse translation of a consumer's commit); past the copied end the
// reverse link's group sync carries it.
func (c *client) groupsBack(ctx context.Context, link string, groups []GroupReport, parts []FailbackPartition) []FailbackGroup {
	copied := map[topicPartition]int64{}
	for _, p := range parts {
		copied[topicPartition{p.Topic, p.Partition}] = p.TargetStart
	}
	out := []FailbackGroup{}
	for _, g := range groups {
		fg := FailbackGroup{Group: g.Group, Partitions: []FailbackGroupPartition{}}
		resp, err := c.translate(ctx, &ferryv1.TranslateRequest{Link: link, Query: &ferryv1.TranslateRequest_Group{Group: g.Group}})
		if err != nil {
			fg.Error = err.Error()
			out = append(out, fg)
			continue
		}
		for _, p := range groupTranslationReport(link, resp).Partitions {
			gp := FailbackGroupPartition{Topic: p.Topic, TargetTopic: p.TargetTopic, Partition: p.Partition, TargetOffset: p.TargetOffset, Carry: carryReverseLink}
			if end, ok := copied[topicPartition{p.Topic, p.Partition}]; ok && end >= 0 && p.TargetOffset < end && p.Outcome == outcomeExact {
				gp.SourceOffset, gp.Carry = p.SourceOffset, carryExact
			}
			fg.Partitions = append(fg.Partitions, gp)
		}
		out = append(out, fg)
	}
	return out
}

// moveCheckpoints sets each partition's checkpoint to the old source's
// end, through the first writer that takes it (each signs with its own
// key; every writer reads the result from the checkpoint topic). A
// partition with nothing stranded is set too, where it stands: the
// writers then say failback saw every partition (checkpoint_moved), and
// resume needs no --force.
func (c *client) moveCheckpoints(ctx context.Context, rep *FailbackReport, reason string) error {
	req := &ferryv1.SetCheckpointsRequest{Link: rep.Link, Reason: reason}
	for _, p := range rep.Partitions {
		if p.SourceEnd >= p.Committed && p.Note == "" {
			req.Checkpoints = append(req.Checkpoints, &ferryv1.CheckpointPosition{Topic: p.Topic, Partition: p.Partition, NextSourceOffset: p.SourceEnd})
		}
	}
	if len(req.Checkpoints) == 0 {
		return nil
	}
	var errs []string
	for _, w := range c.writers {
		var resp *ferryv1.SetCheckpointsResponse
		err := c.call(ctx, func(ctx context.Context) (err error) {
			resp, err = w.ctl.SetCheckpoints(ctx, req)
			return err
		})
		if err != nil {
			errs = append(errs, fmt.Sprintf("writer %s: %s", w.addr, describe(err)))
			continue
		}
		rep.Writer = resp.GetWriter()
		for _, ch := range resp.GetChanges() {
			i := slices.IndexFunc(rep.Partitions, func(p FailbackPartition) bool { return p.Topic == ch.GetTopic() && p.Partition == ch.GetPartition() })
			if i >= 0 {
				next := ch.GetNextSourceOffset()
				rep.Partitions[i].Checkpoint = &next
			}
		}
		return nil
	}
	return fmt.Errorf("move the checkpoints of link %s to the old source's end: %s", rep.Link, strings.Join(errs, "; "))
}

// moveGroupsBack commits, on the old source, each group's partitions
// carried exact at their source offset, with group sync's rules
// (groupcommit): the broker refuses a group with members, a partition
// further on the old source stays (unless o.Backwards), and the marker
// names the target offset the position stands for, as the reverse link's
// own group sync would. It takes over offsets the consumers committed
// there before the failover: that is the point of moving them back.
func (c *client) moveGroupsBack(ctx context.Context, src sourceconfig.Source, link string, groups []FailbackGroup, o groupcommit.Options) error {
	fcl, err := sourceClient(src.Kafka)
	if err != nil {
		return err
	}
	defer fcl.Close()
	cfg, err := src.Kafka.Sarama()
	if err != nil {
		return fmt.Errorf("old source client: %w", err)
	}
	cl, err := sarama.NewClient(src.Kafka.BootstrapServers, cfg)
	if err != nil {
		return fmt.Errorf("old source client: %w", err)
	}
	defer cl.Close()
	gc, err := groupcommit.New(cl)
	if err != nil {
		return err
	}
	adm := kadm.NewClient(fcl)
	for i := range groups {
		adopt, err := c.adoptions(ctx, adm, link, groups[i])
		if err != nil {
			return err
		}
		moveGroupBack(gc, &groups[i], adopt, o)
	}
	return nil
}

// adoptions are the group's partitions carried by the reverse link whose
// offset on the old source someone else committed (its consumers, before
// the failover), at that offset with the target offset it stands for
// (the link's translation): the reverse link's group sync leaves a group
// holding such an offset alone (groupcommit's Owned), so --move-groups
// commits it again where it stands, with Ferry's marker.
func (c *client) adoptions(ctx context.Context, adm *kadm.Client, link string, g FailbackGroup) (map[groupcommit.TopicPartition]groupcommit.Position, error) {
	out := map[groupcommit.TopicPartition]groupcommit.Position{}
	if g.Error != "" {
		return out, nil
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	os, err := adm.FetchOffsets(cctx, g.Group)
	if err == nil {
		err = os.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("offsets of group %s on the old source: %w", g.Group, err)
	}
	for _, p := range g.Partitions {
		cur, ok := os.Lookup(p.Topic, p.Partition)
		if p.Carry != carryReverseLink || !ok || cur.At < 0 || groupsync.IsFerry(cur.Metadata) {
			continue
		}
		resp, err := c.translate(ctx, &ferryv1.TranslateRequest{Link: link, Query: &ferryv1.TranslateRequest_Offset{Offset: &ferryv1.OffsetQuery{
			Topic: p.Topic, Partition: p.Partition, Offset: cur.At}}})
		if err != nil {
			return nil, fmt.Errorf("translate %s/%d offset %d: %w", p.Topic, p.Partition, cur.At, err)
		}
		if tr := translation(link, resp); tr.Translated != nil {
			out[groupcommit.TopicPartition{Topic: p.Topic, Partition: p.Partition}] = groupcommit.Position{Target: cur.At, Source: *tr.Translated}
		}
	}
	return out, nil
}

// moveGroupBack moves one group and records per partition what was done.
func moveGroupBack(gc *groupcommit.Committer, g *FailbackGroup, want map[groupcommit.TopicPartition]groupcommit.Position, o groupcommit.Options) {
	for _, p := range g.Partitions {
		if p.Carry == carryExact {
			want[groupcommit.TopicPartition{Topic: p.Topic, Partition: p.Partition}] = groupcommit.Position{Target: *p.SourceOffset, Source: p.TargetOffset}
		}
	}
	res, err := gc.Move(g.Group, want, o)
	for i := range g.Partitions {
		p := &g.Partitions[i]
		step, ok := res.Steps[groupcommit.TopicPartition{Topic: p.Topic, Partition: p.Partition}]
		switch {
		case p.Carry != carryExact:
			p.Action = carryReverseLink
			if ok && step.Action == groupcommit.StepMarked {
				p.Why = fmt.Sprintf("its offset %d on the old source, committed by its consumers, marked as Ferry's: the reverse link's group sync may move it", step.Committed)
			}
		case err != nil:
			p.Action, p.Why = actionRefused, err.Error()
		case res.Outcome == groupcommit.Active:
			p.Action, p.Why = actionRefused, "the group has members on the old source: stop its consumers there (the broker refused the commit, nothing changed)"
		case ok:
			p.Action = step.Action
			committed := step.Committed
			p.OnSource = &committed
			if step.Action == groupcommit.StepBackwards {
				p.Why = fmt.Sprintf("further on the old source (%d): --allow-backwards moves it back", committed)
			}
		}
	}
}

// handBack returns the groups --move-groups moved whole (none refused,
// their positions read) to the link's group sync on the target, through
// every writer: each writer whose sync followed a group takes it back. A
// group is handed back when one writer took it and every writer
// answered; else HandBackError says which did not.
func (c *client) handBack(ctx context.Context, link string, groups []FailbackGroup) {
	var names []string
	for _, g := range groups {
		if g.Error == "" && !slices.ContainsFunc(g.Partitions, func(p FailbackGroupPartition) bool { return p.Action == actionRefused }) {
			names = append(names, g.Group)
		}
	}
	if len(names) == 0 {
		return
	}
	took := map[string]bool{}
	var errs []string
	for _, w := range c.writers {
		var resp *ferryv1.HandBackGroupsResponse
		err := c.call(ctx, func(ctx context.Context) (err error) {
			resp, err = w.ctl.HandBackGroups(ctx, &ferryv1.HandBackGroupsRequest{Link: link, Groups: names})
			return err
		})
		if err != nil {
			errs = append(errs, fmt.Sprintf("writer %s: %s", w.addr, describe(err)))
			continue
		}
		for _, g := range resp.GetHandedBack() {
			took[g] = true
		}
	}
	for i := range groups {
		g := &groups[i]
		if !slices.Contains(names, g.Group) {
			continue
		}
		switch {
		case len(errs) > 0:
			g.HandBackError = strings.Join(errs, "; ")
		case !took[g.Group]:
			g.HandBackError = "no writer of the link follows it any more"
		default:
			g.HandedBack = true
		}
	}
}

// actionRefused is a partition --move-groups could not move.
const actionRefused = "refused"

// errGroupsRefused is a --move-groups that moved no group it was asked
// to: every one was refused or unread.
var errGroupsRefused = errors.New("groups not moved")

// movedGroups is nil when --move-groups moved every group it was asked
// to. Some refused or unread: partial (the others moved), or, when none
// moved, errGroupsRefused; no group selected: partial too, since the
// runbook step moved nothing.
func movedGroups(gs []FailbackGroup) error {
	if len(gs) == 0 {
		return fmt.Errorf("%w: --move-groups moved no group: no synced group selected (--groups)", errPartial)
	}
	var bad, handBack []string
	for _, g := range gs {
		if g.Error != "" {
			bad = append(bad, fmt.Sprintf("%s (positions unread: %s)", g.Group, g.Error))
			continue
		}
		if i := slices.IndexFunc(g.Partitions, func(p FailbackGroupPartition) bool { return p.Action == actionRefused }); i >= 0 {
			bad = append(bad, fmt.Sprintf("%s (%s)", g.Group, g.Partitions[i].Why))
			continue
		}
		if g.HandBackError != "" {
			handBack = append(handBack, fmt.Sprintf("%s (%s)", g.Group, g.HandBackError))
		}
	}
	var notHanded string
	if len(handBack) > 0 {
		notHanded = fmt.Sprintf("; groups moved but not handed back to the link's group sync on the target, which leaves them alone (owned) once the link runs: %s (run failback --move-groups --groups again for them)",
			strings.Join(handBack, "; "))
	}
	switch {
	case len(bad) == 0 && len(handBack) == 0:
		return nil
	case len(bad) == 0:
		return fmt.Errorf("%w: %s", errPartial, strings.TrimPrefix(notHanded, "; "))
	case len(bad) == len(gs):
		return fmt.Errorf("%w: %s", errGroupsRefused, strings.Join(bad, "; "))
	}
	return fmt.Errorf("%w: groups not moved: %s (the others moved)%s", errPartial, strings.Join(bad, "; "), notHanded)
}

// incompleteReport is partial when the failback report lacks what the
// runbook's next step needs: a group's positions (step 3), or a stranded
// tail's record count (the loss, in records); nil when it is whole. A
// second run prints the same report (the tail is remembered), so run it
// again once the cause is gone.
func incompleteReport(rep FailbackReport) error {
	var missing []string
	if g := unreadGroups(rep.Groups); g != "" {
		missing = append(missing, "positions of groups not read: "+g)
	}
	var tails []string
	for _, p := range rep.Partitions {
		if p.Uncounted != "" {
			tails = append(tails, fmt.Sprintf("%s/%d (%s)", p.Topic, p.Partition, p.Uncounted))
		}
	}
	if len(tails) > 0 {
		missing = append(missing, "stranded tails not counted in records: "+strings.Join(tails, ", ")+
			" (the offsets stand; run it again, with a larger --count-limit, --timeout, or once the transaction ends)")
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", errPartial, strings.Join(missing, "; "))
}

// unreadGroups names the groups whose positions failback could not read,
// "" when it read them all.
func unreadGroups(gs []FailbackGroup) string {
	var bad []string
	for _, g := range gs {
		if g.Error != "" {
			bad = append(bad, fmt.Sprintf("%s (%s)", g.Group, g.Error))
		}
	}
	return strings.Join(bad, "; ")
}

func printFailback(w io.Writer, v any) {
	rep := v.(FailbackReport)
	switch {
	case rep.DryRun:
		fmt.Fprintf(w, "DRY RUN: link %s: nothing changed\n", rep.Link)
	case rep.MoveGroups:
		fmt.Fprintf(w, "link %s: groups moved back to the old source (--move-groups); no checkpoint moved\n", rep.Link)
	case rep.CopyStranded:
		fmt.Fprintf(w, "link %s: checkpoints left as they were (--copy-stranded): once resumed, the link copies the stranded tail into the target, after what was written there since\n", rep.Link)
	default:
		fmt.Fprintf(w, "link %s: checkpoints moved to the old source's end (signed by writer %s); the link stays failed_over until `ferryctl resume`\n", rep.Link, rep.Writer)
	}
	if rep.ReverseLink != "" {
		printReverse(w, rep)
	}
	fmt.Fprintln(w, "stranded tail: source offsets the old source holds that never reached the target, [from, to) (transaction markers and aborted records take offsets too);")
	fmt.Fprintln(w, "RECORDS: those of the tail, read_committed (-: not counted, the note says why);")
	fmt.Fprintln(w, "TARGET_START: where writes on the target began (the copied end), where the reverse link starts (start: the partition's start)")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  PARTITION\tCOMMITTED\tSOURCE_END\tSTRANDED\tOFFSETS\tRECORDS\tTARGET_START\tCHECKPOINT\tNOTE")
	for _, p := range rep.Partitions {
		start, cp, records := "start", "-", "-"
		if p.TargetStart >= 0 {
			start = fmt.Sprintf("%s/%d@%d", p.TargetTopic, p.Partition, p.TargetStart)
		}
		if p.Checkpoint != nil {
			cp = fmt.Sprint(*p.Checkpoint)
		}
		if p.StrandedRecords != nil {
			records = fmt.Sprint(*p.StrandedRecords)
		}
		note := strings.Join(slices.DeleteFunc([]string{p.Note, p.Uncounted}, func(s string) bool { return s == "" }), "; ")
		fmt.Fprintf(tw, "  %s/%d\t%d\t%d\t[%d, %d)\t%d\t%s\t%s\t%s\t%s\n", p.Topic, p.Partition, p.Committed, p.SourceEnd,
			p.StrandedFrom, p.StrandedTo, p.StrandedOffsets, records, start, cp, note)
	}
	tw.Flush()
	printGroupsBack(w, rep.Groups)
}

// printReverse says where the reverse link starts.
func printReverse(w io.Writer, rep FailbackReport) {
	starts := slices.ContainsFunc(rep.Partitions, func(p FailbackPartition) bool { return p.TargetStart >= 0 && p.TargetTopic != "" })
	switch {
	case !starts:
		fmt.Fprintf(w, "reverse link %s: no partition has a TARGET_START, no checkpoint to set: its link.start_from applies (earliest)\n", rep.ReverseLink)
	case rep.DryRun:
		fmt.Fprintf(w, "reverse link %s: would start at TARGET_START (nothing set)\n", rep.ReverseLink)
	case rep.ReverseWriter == "":
		fmt.Fprintf(w, "reverse link %s: its start NOT set (see the error)\n", rep.ReverseLink)
	default:
		fmt.Fprintf(w, "reverse link %s: checkpoints set at TARGET_START (signed by writer %s); a partition printed start has none: its link.start_from applies (earliest)\n", rep.ReverseLink, rep.ReverseWriter)
	}
}

func printGroupsBack(w io.Writer, gs []FailbackGroup) {
	if len(gs) == 0 {
		fmt.Fprintln(w, "  (no synced consumer group selected)")
		return
	}
	fmt.Fprintln(w, "groups: position on the target and, within what was copied, the exact position on the old source")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  GROUP\tPARTITION\tTARGET_OFFSET\tSOURCE_OFFSET\tCARRIED_BY")
	for _, g := range gs {
		if g.Error != "" {
			fmt.Fprintf(tw, "  %s\t-\t-\t-\tunread: %s\n", g.Group, g.Error)
		}
		for _, p := range g.Partitions {
			if p.Action != "" {
				fmt.Fprintf(tw, "  %s\t%s/%d\t%d\t%s\t%s\n", g.Group, p.Topic, p.Partition, p.TargetOffset, sourceOffset(p), moveAction(p))
				continue
			}
			if p.SourceOffset != nil {
				fmt.Fprintf(tw, "  %s\t%s/%d\t%d\t%d\texact: commit it on the old source when consumers move back\n", g.Group, p.Topic, p.Partition, p.TargetOffset, *p.SourceOffset)
				continue
			}
			fmt.Fprintf(tw, "  %s\t%s/%d\t%d\t-\tthe reverse link (past the copied end: its group sync carries it)\n", g.Group, p.Topic, p.Partition, p.TargetOffset)
		}
	}
	tw.Flush()
	for _, g := range gs {
		switch {
		case g.HandedBack:
			fmt.Fprintf(w, "group %s: handed back to the link's group sync on the target, which takes its offsets there over once the link runs\n", g.Group)
		case g.HandBackError != "":
			fmt.Fprintf(w, "group %s: NOT handed back to the link's group sync on the target (%s): the sync leaves it alone there (owned)\n", g.Group, g.HandBackError)
		}
	}
}

func sourceOffset(p FailbackGroupPartition) string {
	if p.SourceOffset == nil {
		return "-"
	}
	return fmt.Sprint(*p.SourceOffset)
}

// moveAction is what --move-groups did to p, as printed.
func moveAction(p FailbackGroupPartition) string {
	was := ""
	if p.OnSource != nil {
		was = fmt.Sprintf(" (was %d on the old source)", *p.OnSource)
	}
	switch p.Action {
	case groupcommit.StepMoved:
		return "exact: moved on the old source" + was
	case groupcommit.StepMarked:
		return "exact: already there on the old source; Ferry's marker added"
	case groupcommit.StepUnchanged:
		return "exact: already there on the old source"
	case carryReverseLink:
		if p.Why != "" {
			return "the reverse link: " + p.Why
		}
		return "the reverse link (past the copied end: its group sync carries it)"
	}
	return p.Action + ": " + p.Why
}
