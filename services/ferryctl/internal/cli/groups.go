package cli

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
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
	Reread     *int64                 `json:"failover_reread_records,omitempty"`
	Partitions []GroupPartitionReport `json:"partitions"`
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
		g.Reread = nil
		var n int64
		for _, p := range g.Partitions {
			if p.StandsFor < 0 {
				continue
			}
			c, ok := committed[key{p.Topic, p.Partition}]
			if !ok {
				c = -1
			}
			n += groupsync.Reread(p.SourceOffset, p.StandsFor, c)
			g.Reread = &n
		}
	}
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
			if p.StandsFor >= 0 {
				rr = fmt.Sprint(max(0, p.SourceOffset-p.StandsFor))
			}
			fmt.Fprintf(tw, "  %s\t%s/%d\t%d\t%d\t%d\t%s\t%s\n", g.Group, p.Topic, p.Partition, p.TargetOffset, p.StandsFor, p.SourceOffset, rr, g.Outcome)
		}
	}
	tw.Flush()
}
