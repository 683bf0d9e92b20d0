package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
)

// offsets translate: where an offset of a link's partition stands on the
// other side, from the writers' offset index (ControlService.Translate),
// or where a group stands on the target. Any writer of the target answers
// alike (each reads the index topic itself), so the first that answers
// is taken: it works with the fetchers and the source region gone.

// offsetsListing is offsets' line in ferryctl's usage. A session hands
// the verb to runOffsets, which parses its subcommand: the verb's flags
// are its own (translateQuery), not verbOpts.
var offsetsListing = verb{name: "offsets", args: "translate",
	summary: "translate an offset of a link's partition source->target or back (--reverse), or show a group's target offsets and the source offsets they stand for (--group)"}

// Outcomes of a translation, as printed.
const (
	outcomeExact        = "exact"
	outcomeBeyondCopied = "beyond_copied"
	outcomeBeforeIndex  = "before_index"
	outcomeNoIndex      = "no_index"
)

// errUntranslated is an answer that names no offset: before the index,
// no index, a group without offsets.
var errUntranslated = errors.New("not translated")

// Translation is what offsets translate prints for one offset.
type Translation struct {
	Writer      string `json:"writer"`
	Link        string `json:"link"`
	Topic       string `json:"topic"`
	TargetTopic string `json:"target_topic"`
	Partition   int32  `json:"partition"`
	// Offset is the offset asked: a source offset, or a target offset
	// when Reverse.
	Offset  int64 `json:"offset"`
	Reverse bool  `json:"reverse"`
	// Outcome is exact, beyond_copied (Translated is the copied end),
	// before_index (IndexStart says where the index starts) or no_index.
	Outcome    string `json:"outcome"`
	Translated *int64 `json:"translated,omitempty"`
	IndexStart *int64 `json:"index_start,omitempty"`
	// RefusedRecords counts index records that did not decode.
	RefusedRecords int64 `json:"refused_records,omitempty"`
}

// GroupTranslationReport is what offsets translate --group prints.
type GroupTranslationReport struct {
	Writer     string                      `json:"writer"`
	Link       string                      `json:"link"`
	Group      string                      `json:"group"`
	Partitions []GroupPartitionTranslation `json:"partitions"`
}

// GroupPartitionTranslation is one partition of a group on the target.
type GroupPartitionTranslation struct {
	Topic        string `json:"topic"`
	TargetTopic  string `json:"target_topic"`
	Partition    int32  `json:"partition"`
	TargetOffset int64  `json:"target_offset"`
	// Ferry is set when Ferry's group sync committed the offset: its
	// marker names SourceOffset. Else a consumer committed it on the
	// target, and SourceOffset is its translation back (Outcome).
	Ferry        bool   `json:"ferry"`
	SourceOffset *int64 `json:"source_offset,omitempty"`
	Outcome      string `json:"outcome"`
	Metadata     string `json:"metadata,omitempty"`
}

// translateQuery is offsets translate's flags.
type translateQuery struct {
	link, topic, group string
	partition          int
	offset             int64
	reverse            bool
}

func (q *translateQuery) flags(fs *flag.FlagSet) {
	fs.StringVar(&q.link, "link", "", "the link (required)")
	fs.StringVar(&q.topic, "topic", "", "the source topic, as the link's fetchers read it (also with --reverse)")
	fs.IntVar(&q.partition, "partition", -1, "the partition (with --topic)")
	fs.Int64Var(&q.offset, "offset", -1, "a source offset, or with --reverse a target offset (with --topic)")
	fs.BoolVar(&q.reverse, "reverse", false, "translate a target offset back to the source offset it stands for")
	fs.StringVar(&q.group, "group", "", "instead of an offset: the group's committed offsets on the target and the source offsets they stand for")
}

// runOffsets runs "offsets translate".
func (s session) runOffsets(ctx context.Context, args []string) int {
	if len(args) == 0 || args[0] != "translate" {
		if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprintln(s.stderr, offsetsUsage)
			return exitOK
		}
		if wantsJSON(args) {
			return s.fail("offsets", true, fmt.Errorf("%w: want offsets translate", errUsage))
		}
		fmt.Fprintln(s.stderr, offsetsUsage)
		return exitUsage
	}
	var q translateQuery
	v := verb{name: "offsets translate", args: "--link L (--topic T --partition P --offset O [--reverse] | --group G)",
		summary: "translate a source offset to the target offset of the first copied record at or after it, a target offset back (--reverse), " +
			"or show a group's committed offsets on the target and the source offsets they stand for (--group); exits 1 when no offset can be named, " +
			"4 when a group's can be for some partitions only",
		flags: func(fs *flag.FlagSet, _ *verbOpts) { q.flags(fs) },
		run: func(ctx context.Context, c *client, _ *verbOpts, args []string, stdout io.Writer) error {
			return q.run(ctx, c, args, stdout)
		},
	}
	return s.runVerb(ctx, v, args[1:])
}

const offsetsUsage = "Usage: ferryctl offsets translate --link L (--topic T --partition P --offset O [--reverse] | --group G) [flags]\n\n" +
	"'ferryctl offsets translate --help' lists the flags."

// check says what makes the flags unusable.
func (q *translateQuery) check(args []string) error {
	offsetSet := q.topic != "" || q.partition >= 0 || q.offset >= 0 || q.reverse
	switch {
	case len(args) > 0:
		return fmt.Errorf("%w: no arguments, got %q", errUsage, args)
	case q.link == "":
		return fmt.Errorf("%w: --link required", errUsage)
	case q.group != "" && offsetSet:
		return fmt.Errorf("%w: --group or --topic/--partition/--offset/--reverse, not both", errUsage)
	case q.group != "":
		return nil
	case q.topic == "" || q.partition < 0 || q.offset < 0:
		return fmt.Errorf("%w: --topic, --partition and --offset required (at least 0), or --group", errUsage)
	}
	return nil
}

func (q *translateQuery) run(ctx context.Context, c *client, args []string, stdout io.Writer) error {
	if err := q.check(args); err != nil {
		return err
	}
	req := &ferryv1.TranslateRequest{Link: q.link}
	if q.group != "" {
		req.Query = &ferryv1.TranslateRequest_Group{Group: q.group}
	} else {
		req.Query = &ferryv1.TranslateRequest_Offset{Offset: &ferryv1.OffsetQuery{
			Topic: q.topic, Partition: int32(q.partition), Offset: q.offset, Reverse: q.reverse}}
	}
	resp, err := c.translate(ctx, req)
	if err != nil {
		return err
	}
	if q.group != "" {
		rep := groupTranslationReport(q.link, resp)
		if err := c.print(stdout, rep, printGroup); err != nil {
			return err
		}
		return rep.failure()
	}
	tr := translation(q.link, resp)
	if err := c.print(stdout, tr, printTranslation); err != nil {
		return err
	}
	return tr.failure()
}

// translate asks the writers in turn until one answers: they all read
// the same index topic.
func (c *client) translate(ctx context.Context, req *ferryv1.TranslateRequest) (*ferryv1.TranslateResponse, error) {
	var errs []string
	for _, w := range c.writers {
		var resp *ferryv1.TranslateResponse
		err := c.call(ctx, func(ctx context.Context) (err error) {
			resp, err = w.ctl.Translate(ctx, req)
			return err
		})
		if err == nil {
			return resp, nil
		}
		errs = append(errs, fmt.Sprintf("writer %s: %s", w.addr, describe(err)))
	}
	return nil, errors.New(strings.Join(errs, "; "))
}

// outcomeName is a TranslateOutcome as printed: exact, beyond_copied,
// before_index, no_index (unspecified: a writer ferryctl does not know).
func outcomeName(o ferryv1.TranslateOutcome) string {
	return strings.ToLower(strings.TrimPrefix(o.String(), "TRANSLATE_OUTCOME_"))
}

func translation(link string, resp *ferryv1.TranslateResponse) Translation {
	o := resp.GetOffset()
	tr := Translation{Writer: resp.GetWriter(), Link: link, Topic: o.GetTopic(), TargetTopic: o.GetTargetTopic(), Partition: o.GetPartition(),
		Offset: o.GetOffset(), Reverse: o.GetReverse(), Outcome: outcomeName(o.GetOutcome()), RefusedRecords: o.GetRefusedRecords()}
	switch tr.Outcome {
	case outcomeExact, outcomeBeyondCopied:
		v := o.GetTranslated()
		tr.Translated = &v
	case outcomeBeforeIndex:
		v := o.GetIndexStart()
		tr.IndexStart = &v
	}
	return tr
}

// sides names the offset asked and the answer: "source orders/0" and
// "target east.orders/0", or the other way round.
func (tr Translation) sides() (from, to string) {
	src, tgt := fmt.Sprintf("source %s/%d", tr.Topic, tr.Partition), fmt.Sprintf("target %s/%d", tr.TargetTopic, tr.Partition)
	if tr.Reverse {
		return tgt, src
	}
	return src, tgt
}

// failure is nil when the answer names an offset.
func (tr Translation) failure() error {
	from, _ := tr.sides()
	switch tr.Outcome {
	case outcomeExact, outcomeBeyondCopied:
		return nil
	case outcomeBeforeIndex:
		side := "source"
		if tr.Reverse {
			side = "target"
		}
		return fmt.Errorf("%w: %s offset %d is before the offset index, which starts at %s offset %d "+
			"(pruned with offset_index.retention, or copied before the index existed)", errUntranslated, from, tr.Offset, side, *tr.IndexStart)
	case outcomeNoIndex:
		return fmt.Errorf("%w: %s of link %s has no offset index record (never copied, or every record pruned)", errUntranslated, from, tr.Link)
	}
	return fmt.Errorf("%w: writer %s answered %q, which this ferryctl does not know", errUntranslated, tr.Writer, tr.Outcome)
}

func printTranslation(w io.Writer, v any) {
	tr := v.(Translation)
	from, to := tr.sides()
	switch tr.Outcome {
	case outcomeExact:
		fmt.Fprintf(w, "%s offset %d -> %s offset %d (exact: the first copied record at or after it)\n", from, tr.Offset, to, *tr.Translated)
	case outcomeBeyondCopied:
		fmt.Fprintf(w, "%s offset %d -> %s offset %d (beyond_copied: nothing at or after it is copied yet; this is the copied end, where the next record copied lands)\n",
			from, tr.Offset, to, *tr.Translated)
	default:
		fmt.Fprintf(w, "%s offset %d: %s\n", from, tr.Offset, tr.Outcome)
	}
	if tr.RefusedRecords > 0 {
		fmt.Fprintf(w, "warning: %d index record(s) of the partition did not decode and were left out (someone other than the writers wrote the index topic)\n", tr.RefusedRecords)
	}
}

func groupTranslationReport(link string, resp *ferryv1.TranslateResponse) GroupTranslationReport {
	g := resp.GetGroup()
	rep := GroupTranslationReport{Writer: resp.GetWriter(), Link: link, Group: g.GetGroup(), Partitions: []GroupPartitionTranslation{}}
	for _, p := range g.GetPartitions() {
		gp := GroupPartitionTranslation{Topic: p.GetTopic(), TargetTopic: p.GetTargetTopic(), Partition: p.GetPartition(), TargetOffset: p.GetTargetOffset(),
			Ferry: p.GetFerry(), Outcome: outcomeName(p.GetOutcome()), Metadata: p.GetMetadata()}
		if gp.Outcome == outcomeExact || gp.Outcome == outcomeBeyondCopied {
			v := p.GetSourceOffset()
			gp.SourceOffset = &v
		}
		rep.Partitions = append(rep.Partitions, gp)
	}
	return rep
}

// failure is nil when the group has offsets on the link's target topics
// and each names its source offset; partial when some do.
func (rep GroupTranslationReport) failure() error {
	if len(rep.Partitions) == 0 {
		return fmt.Errorf("%w: group %s has no committed offset on the target topics of link %s", errUntranslated, rep.Group, rep.Link)
	}
	var bad []string
	for _, p := range rep.Partitions {
		if p.SourceOffset == nil {
			bad = append(bad, fmt.Sprintf("%s/%d (%s)", p.TargetTopic, p.Partition, p.Outcome))
		}
	}
	switch {
	case len(bad) == len(rep.Partitions):
		return fmt.Errorf("%w: group %s: no source offset for %s", errUntranslated, rep.Group, strings.Join(bad, ", "))
	case len(bad) > 0:
		return fmt.Errorf("%w: group %s: no source offset for %s (the others are translated)", errPartial, rep.Group, strings.Join(bad, ", "))
	}
	return nil
}

func printGroup(w io.Writer, v any) {
	rep := v.(GroupTranslationReport)
	fmt.Fprintf(w, "group %s on the target of link %s (writer %s)\n", rep.Group, rep.Link, rep.Writer)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET TOPIC\tPARTITION\tTARGET OFFSET\tSOURCE OFFSET\tFROM")
	for _, p := range rep.Partitions {
		src, from := "-", p.Outcome
		if p.SourceOffset != nil {
			src = fmt.Sprint(*p.SourceOffset)
		}
		switch {
		case p.Ferry:
			from = "ferry's marker"
		case p.SourceOffset != nil:
			from = "translated back (" + p.Outcome + "), committed on the target by another client"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", p.TargetTopic, p.Partition, p.TargetOffset, src, from)
	}
	tw.Flush()
}
