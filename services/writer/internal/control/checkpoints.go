package control

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/linkstate"
	"github.com/ferry-replicator/ferry/services/writer/internal/checkpoint"
	"github.com/ferry-replicator/ferry/services/writer/internal/server"
)

// maxSetCheckpoints bounds the partitions of one SetCheckpoints call.
const maxSetCheckpoints = 1 << 16

// SetCheckpoints sets checkpoints of a link, signed with this writer's
// key as `ferry-writer checkpoint set` signs them (Store.Move). Two cases
// only, both where no stream of the link can race the write:
//
//   - A failed-over link: failback's way to start the original direction
//     at the old source's end. Every stream of it is refused, so no
//     shard's round moves a checkpoint meanwhile, and the writers that
//     read the change take it at their next open's checkpoint sync.
//   - A link not started: NONE of the named partitions has a checkpoint,
//     and no stream of the link opened on this writer: failback's way to
//     start the reverse link where the target's own writes began.
//
// Why the second cannot move a running link's checkpoint: a shard's round
// commits checkpoints with (exactly-once) or right after (at-least-once)
// every record it copies, and never deletes one, so a link that has
// copied anything of a partition holds a checkpoint of it, which the
// Sync below makes visible (the barrier is read only after every
// checkpoint written before it, transactions resolved): refused. What is
// left is a stream that opened on these partitions and has not committed
// its first round yet: refused when it opened here; on another writer,
// its round either commits above the checkpoint set (and its progress
// stands) or below it (every writer ignores a lower checkpoint as a
// replay, and a restart resumes at the one set). ferryctl also refuses
// when any writer it asks serves a stream of the link, and the runbook
// sets the checkpoints before the reverse link's fetchers start, so only
// fetchers started during the command meet that window.
func (c *Service) SetCheckpoints(ctx context.Context, req *ferryv1.SetCheckpointsRequest) (*ferryv1.SetCheckpointsResponse, error) {
	link := req.GetLink()
	by, err := c.admitLink(ctx, link)
	if err != nil {
		return nil, err
	}
	s := c.s
	if err := checkPositions(req); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := s.Store().Sync(ctx); err != nil {
		return nil, unavailable(ctx, fmt.Errorf("checkpoint sync: %w", err))
	}
	failedOver := s.Store().Control(link).State == linkstate.FailedOver
	if st := s.Store().Control(link).State; !failedOver {
		if err := c.checkNotStarted(link, req.GetCheckpoints()); err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "link %s is %s, not failed_over, and %v: nothing set (checkpoints are set only on a failed-over link, or on one not started)", link, st, err)
		}
	}
	if err := c.checkForward(link, req.GetCheckpoints()); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	moves := make([]checkpoint.Move, 0, len(req.GetCheckpoints()))
	for _, p := range req.GetCheckpoints() {
		moves = append(moves, checkpoint.Move{Key: checkpoint.Key{Link: link, Topic: p.GetTopic(), Partition: p.GetPartition()}, Next: p.GetNextSourceOffset()})
	}
	// One pass for every partition; a failed-over link's checkpoints
	// remember where the copy stood, so a failback run again reports the
	// same stranded tail.
	moved, err := s.Store().MoveAll(ctx, moves, s.ID()+" (failback by "+by+")", failedOver)
	if err != nil {
		return nil, unavailable(ctx, fmt.Errorf("checkpoints of %d partitions of link %s (none set, or all): %w", len(moves), link, err))
	}
	resp := &ferryv1.SetCheckpointsResponse{Writer: s.ID()}
	for i, m := range moves {
		ch := &ferryv1.CheckpointChange{Topic: m.Key.Topic, Partition: m.Key.Partition, PreviousNextSourceOffset: -1, NextSourceOffset: m.Next}
		if moved[i].Found {
			ch.PreviousNextSourceOffset = moved[i].Prev.NextSourceOffset
		}
		resp.Changes = append(resp.Changes, ch)
		c.log.Warn("checkpoint set by control", "link", link, "topic", m.Key.Topic, "partition", m.Key.Partition,
			"from", ch.PreviousNextSourceOffset, "to", ch.NextSourceOffset, "by", by, "reason", req.GetReason())
	}
	return resp, nil
}

// checkNotStarted refuses a link that has started: a named partition has
// a checkpoint (even one that does not verify), or a stream of the link
// opened on this writer.
func (c *Service) checkNotStarted(link string, ps []*ferryv1.CheckpointPosition) error {
	if c.s.StreamOpened(link) {
		return errors.New("a stream of it opened on this writer")
	}
	for _, p := range ps {
		k := checkpoint.Key{Link: link, Topic: p.GetTopic(), Partition: p.GetPartition()}
		cur, ok, err := c.s.Store().Get(k)
		switch {
		case ok && err != nil:
			return fmt.Errorf("%s/%d has a checkpoint (that does not verify: %v)", server.Clip(k.Topic), k.Partition, err)
		case ok:
			return fmt.Errorf("%s/%d has a checkpoint (next source offset %d)", server.Clip(k.Topic), k.Partition, cur.NextSourceOffset)
		}
	}
	return nil
}

// checkForward refuses, before anything is written, a checkpoint that
// does not verify or that would move back: every writer ignores a
// checkpoint below the latest as a replay (forget the partition first).
func (c *Service) checkForward(link string, ps []*ferryv1.CheckpointPosition) error {
	for _, p := range ps {
		k := checkpoint.Key{Link: link, Topic: p.GetTopic(), Partition: p.GetPartition()}
		cur, ok, err := c.s.Store().Get(k)
		switch {
		case err != nil:
			return fmt.Errorf("checkpoint of %s: %w: nothing set (forget it first with ferry-writer checkpoint forget)", k, err)
		case ok && p.GetNextSourceOffset() < cur.NextSourceOffset:
			return fmt.Errorf("checkpoint of %s: next source offset %d is below the committed %d: nothing set (checkpoints move forward only)",
				k, p.GetNextSourceOffset(), cur.NextSourceOffset)
		}
	}
	return nil
}

// checkPositions says what makes req's checkpoints unusable.
func checkPositions(req *ferryv1.SetCheckpointsRequest) error {
	ps := req.GetCheckpoints()
	if len(ps) == 0 || len(ps) > maxSetCheckpoints {
		return fmt.Errorf("%d checkpoints: want 1 to %d", len(ps), maxSetCheckpoints)
	}
	if len(req.GetReason()) > maxReason {
		return fmt.Errorf("reason of %d bytes, above %d", len(req.GetReason()), maxReason)
	}
	seen := make(map[checkpoint.Key]bool, len(ps))
	for _, p := range ps {
		k := checkpoint.Key{Topic: p.GetTopic(), Partition: p.GetPartition()}
		switch {
		case k.Topic == "" || len(k.Topic) > server.MaxTopicName:
			return fmt.Errorf("topic of %d bytes: want 1 to %d", len(k.Topic), server.MaxTopicName)
		case k.Partition < 0 || p.GetNextSourceOffset() < 0:
			return fmt.Errorf("%s/%d: a negative partition or offset (%d)", server.Clip(k.Topic), k.Partition, p.GetNextSourceOffset())
		case seen[k]:
			return fmt.Errorf("%s/%d named twice", server.Clip(k.Topic), k.Partition)
		}
		seen[k] = true
	}
	return nil
}
