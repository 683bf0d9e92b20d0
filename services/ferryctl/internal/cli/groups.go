package cli

import (
	"cmp"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/groupcommit"
	"github.com/ferry-replicator/ferry/pkg/groupsync"
)

// GroupReport is one consumer group of a link, merged from every writer's
// answer: where group sync put it on the target.
type GroupReport struct {
	Group string `json:"group"`
	// Outcome and Detail are what its latest sync did (moved, unchanged,
	// active, owned, before_index, error).
	Outcome string `json:"outcome"`
	Detail  string `json:"detail,omitempty"`
	// SyncAge is the age of the source read its position last followed.
	SyncAge *float64 `json:"sync_age_seconds,omitempty"`
	// Reread is what it would read again after a failover now: per
	// partition, its source offset (at most the partition's committed
	// end) minus what its target position stands for (countRereads).
	// Absent when no partition's position is Ferry's.
	Reread *int64 `json:"failover_reread_records,omitempty"`
	// Uncounted names the partitions whose re-reads Reread cannot count:
	// the group read there on the source, the target holds copied data,
	// and Ferry has given the group no position there (its index still
	// loading, nothing synced since a writer started, or the position
	// before the index). A consumer there starts where the target
	// group's own commit or its auto.offset.reset puts it. Empty for a
	// group that is not Ferry's to move (active, owned).
	Uncounted  []UncountedPartition   `json:"reread_uncounted,omitempty"`
	Partitions []GroupPartitionReport `json:"partitions"`
	// HandedBack: failback --move-groups returned the group to the sync,
	// whose next sync takes over what its consumers committed on the
	// target (any writer says so).
	HandedBack bool `json:"handed_back,omitempty"`
}

// UncountedPartition is a partition of a group's Uncounted.
type UncountedPartition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Reason is the partition's note (index_loading, before_index, ...),
	// or not_synced when it has none.
	Reason string `json:"reason"`
}

// reasonNotSynced is an uncounted partition without a note: no sync has
// given it a position since a writer started.
const reasonNotSynced = "not_synced"

func (u UncountedPartition) String() string {
	return fmt.Sprintf("%s/%d (%s)", u.Topic, u.Partition, u.Reason)
}

// GroupPartitionReport is one partition of a group.
type GroupPartitionReport struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// SourceOffset is the group's committed offset on the source as last
	// read; TargetOffset its position on the target and StandsFor the
	// source offset that position stands for (-1: not known, or not
	// Ferry's to move).
	SourceOffset int64  `json:"source_offset"`
	TargetOffset int64  `json:"target_offset"`
	StandsFor    int64  `json:"target_stands_for_source_offset"`
	Note         string `json:"note,omitempty"`
	// SyncedReadAt is when the fetcher read the source offsets the target
	// position follows (its clock).
	SyncedReadAt *time.Time `json:"synced_read_at,omitempty"`
	// Reread is this partition's share of the group's Reread; absent when
	// its position is not Ferry's.
	Reread *int64 `json:"failover_reread_records,omitempty"`
}

// mergeGroup adds a writer's view of a group. Per partition the writer
// that synced it from the latest source read wins: a shard that moved
// between writers leaves an older view behind on the first.
func mergeGroup(l *LinkReport, g *ferryv1.LinkGroup) {
	i := slices.IndexFunc(l.Groups, func(r GroupReport) bool { return r.Group == g.GetGroup() })
	if i < 0 {
		l.Groups = append(l.Groups, GroupReport{Group: g.GetGroup()})
		i = len(l.Groups) - 1
	}
	cur := &l.Groups[i]
	cur.HandedBack = cur.HandedBack || g.GetHandedBack()
	if g.GetHasSyncAge() && (cur.SyncAge == nil || g.GetSyncAgeSeconds() < *cur.SyncAge) || cur.Outcome == "" {
		cur.Outcome, cur.Detail = g.GetOutcome(), g.GetDetail()
		if g.GetHasSyncAge() {
			v := g.GetSyncAgeSeconds()
			cur.SyncAge = &v
		}
	}
	for _, p := range g.GetPartitions() {
		next := GroupPartitionReport{Topic: p.GetTopic(), Partition: p.GetPartition(), SourceOffset: p.GetSourceOffset(),
			TargetOffset: p.GetTargetOffset(), StandsFor: p.GetStandsForSourceOffset(), Note: p.GetNote()}
		if ms := p.GetSyncedReadAtUnixMs(); ms > 0 {
			t := time.UnixMilli(ms).UTC()
			next.SyncedReadAt = &t
		}
		j := slices.IndexFunc(cur.Partitions, func(r GroupPartitionReport) bool {
			return r.Topic == next.Topic && r.Partition == next.Partition
		})
		switch {
		case j < 0:
			cur.Partitions = append(cur.Partitions, next)
		case readAfter(next.SyncedReadAt, cur.Partitions[j].SyncedReadAt):
			cur.Partitions[j] = next
		}
	}
	slices.SortFunc(cur.Partitions, func(a, b GroupPartitionReport) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
	slices.SortFunc(l.Groups, func(a, b GroupReport) int { return strings.Compare(a.Group, b.Group) })
}

// readAfter reports whether read time a is after b (nil: never).
func readAfter(a, b *time.Time) bool {
	return a != nil && (b == nil || a.After(*b))
}

// countRereads sets each group's Reread once every writer's answer is
// merged, with the writers' own formula (groupsync.Reread): the writer
// that answered for a group partition may not be the one holding the
// partition's committed end. Absent when no partition's position is
// Ferry's.
func (l *LinkReport) countRereads() {
	type key struct {
		topic     string
		partition int32
	}
	committed := map[key]int64{}
	for _, p := range l.Partitions {
		committed[key{p.Topic, p.Partition}] = p.Committed
	}
	for i := range l.Groups {
		g := &l.Groups[i]
		g.Reread, g.Uncounted = nil, nil
		var n int64
		for j := range g.Partitions {
			p := &g.Partitions[j]
			c, ok := committed[key{p.Topic, p.Partition}]
			if !ok {
				c = -1
			}
			p.Reread = nil
			if p.StandsFor < 0 {
				if ferrys(g.Outcome) && p.SourceOffset > 0 && c != 0 {
					g.Uncounted = append(g.Uncounted, UncountedPartition{Topic: p.Topic, Partition: p.Partition, Reason: cmp.Or(p.Note, reasonNotSynced)})
				}
				continue
			}
			r := groupsync.Reread(p.SourceOffset, p.StandsFor, c)
			p.Reread, n = &r, n+r
			g.Reread = &n
		}
	}
}

// ferrys reports whether a group's positions are Ferry's to give: not
// when its latest sync found it active or owned on the target.
func ferrys(outcome string) bool {
	return outcome != string(groupcommit.Active) && outcome != string(groupcommit.Owned)
}

// unplaced names the groups a failover leaves without a target position
// from Ferry on some partition: their consumers start there at their own
// commit on the target or at auto.offset.reset.
func unplaced(gs []GroupReport) []string {
	var out []string
	for _, g := range gs {
		switch {
		case !ferrys(g.Outcome):
			out = append(out, fmt.Sprintf("group %s is %s on the target: Ferry gave it no position%s", g.Group, g.Outcome, detail(g.Detail)))
		case len(g.Uncounted) > 0:
			out = append(out, fmt.Sprintf("group %s has no target position from Ferry on %s", g.Group, joinUncounted(g.Uncounted)))
		}
	}
	return out
}

func joinUncounted(us []UncountedPartition) string {
	s := make([]string, len(us))
	for i, u := range us {
		s[i] = u.String()
	}
	return strings.Join(s, ", ")
}

// groupFilter is --groups: an anchored regular expression, as
// link.groups.include is; empty selects every group.
func groupFilter(expr string) (*regexp.Regexp, error) {
	if expr == "" {
		return nil, nil
	}
	re, err := regexp.Compile(`^(?:` + expr + `)$`)
	if err != nil {
		return nil, fmt.Errorf("%w: --groups %q: %v", errUsage, expr, err)
	}
	return re, nil
}

// selectGroups is the groups re matches (all with a nil re).
func selectGroups(gs []GroupReport, re *regexp.Regexp) []GroupReport {
	if re == nil {
		return gs
	}
	var out []GroupReport
	for _, g := range gs {
		if re.MatchString(g.Group) {
			out = append(out, g)
		}
	}
	return out
}

func printGroups(w io.Writer, gs []GroupReport) {
	if len(gs) == 0 {
		fmt.Fprintln(w, "  (no synced consumer group selected)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  GROUP\tPARTITION\tTARGET_OFFSET\tSTANDS_FOR_SOURCE\tSOURCE_OFFSET\tREREAD\tOUTCOME")
	for _, g := range gs {
		for _, p := range g.Partitions {
			rr := "?"
			if p.Reread != nil {
				rr = fmt.Sprint(*p.Reread)
			}
			fmt.Fprintf(tw, "  %s\t%s/%d\t%d\t%d\t%d\t%s\t%s\n", g.Group, p.Topic, p.Partition, p.TargetOffset, p.StandsFor, p.SourceOffset, rr, g.Outcome)
		}
	}
	tw.Flush()
	for _, g := range gs {
		if len(g.Uncounted) > 0 {
			fmt.Fprintf(w, "  group %s: REREAD cannot count %s: no target position from Ferry; a consumer there starts at the target group's own commit or its auto.offset.reset\n",
				g.Group, joinUncounted(g.Uncounted))
		}
	}
}
