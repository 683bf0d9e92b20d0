package shard

import (
	"context"
	"fmt"
	"slices"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/groupsync"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/discovery"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/groups"
)

// GroupSource is where a shard takes the source's consumer-group offsets
// from (groups.Poller, one per fetcher process).
type GroupSource interface {
	Latest() (snap groups.Snapshot, ok bool, next <-chan struct{})
}

// groupOffsets sends, after each read of the source's groups, the offsets
// of the shard's partitions on the stream, until ctx ends: the writer
// translates them and commits them to the same groups on the target. The
// session starts it only for a writer whose Opened says it takes them.
func (s *session) groupOffsets(ctx context.Context, src GroupSource, opened map[discovery.Partition]bool) error {
	for {
		snap, ok, next := src.Latest()
		if ok {
			for _, m := range s.r.groupMessages(snap, opened) {
				req := &ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_GroupOffsets{GroupOffsets: m}}
				if err := s.report(req); err != nil {
					return fmt.Errorf("send group offsets: %w", err)
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-next:
		}
	}
}

// groupMessages are a snapshot's offsets of the partitions the stream
// opened, in messages of at most groupsync.MaxEntries offsets (a group
// with more is split across messages, which the writer merges). A group
// whose id the writer would refuse is left out: one group must not end
// the shard's stream.
func (r *Runner) groupMessages(snap groups.Snapshot, opened map[discovery.Partition]bool) []*ferryv1.GroupOffsets {
	names := make([]string, 0, len(snap.Offsets))
	for name := range snap.Offsets {
		if groupsync.CheckName(name) == nil {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var out []*ferryv1.GroupOffsets
	var cur *ferryv1.GroupOffsets
	entries := 0
	for _, name := range names {
		var g *ferryv1.GroupOffset
		for _, p := range r.parts { // the shard's order: messages are stable
			off, ok := snap.Offsets[name][groups.Partition{Topic: p.Topic, Partition: p.Partition}]
			if !ok || !opened[p] {
				continue
			}
			if cur == nil || entries == groupsync.MaxEntries {
				cur = &ferryv1.GroupOffsets{Epoch: r.epoch, ReadAt: snap.At.UnixMilli()}
				out, entries, g = append(out, cur), 0, nil
			}
			if g == nil {
				g = &ferryv1.GroupOffset{Group: name}
				cur.Groups = append(cur.Groups, g)
			}
			g.Partitions = append(g.Partitions, &ferryv1.GroupPartitionOffset{Topic: p.Topic, Partition: p.Partition, Offset: off})
			entries++
		}
	}
	return out
}
