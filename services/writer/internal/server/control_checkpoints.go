package server

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/linkstate"
	"github.com/ferry-replicator/ferry/services/writer/internal/checkpoint"
)

// maxSetCheckpoints bounds the partitions of one SetCheckpoints call.
const maxSetCheckpoints = 1 << 16

// SetCheckpoints moves checkpoints of a failed-over link, signed with this
// writer's key as `ferry-writer checkpoint set` signs them (Store.Move):
// failback's way to start the original direction at the old source's
// end. Only while the link is failed_over: no stream of it writes then,
// so no shard's round moves a checkpoint meanwhile, and the writers that
// read the change take it at their next open's checkpoint sync.
func (c *Control) SetCheckpoints(ctx context.Context, req *ferryv1.SetCheckpointsRequest) (*ferryv1.SetCheckpointsResponse, error) {
	by, err := c.admit(ctx)
	if err != nil {
		return nil, err
	}
	s := c.s
	link := req.GetLink()
	if _, ok := s.links[link]; !ok {
		return nil, status.Errorf(codes.NotFound, "link %q: this writer does not serve it", clip(link))
	}
	if err := checkPositions(req); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := s.store.Sync(ctx); err != nil {
		return nil, unavailable(ctx, fmt.Errorf("checkpoint sync: %w", err))
	}
	if st := s.store.Control(link).State; st != linkstate.FailedOver {
		return nil, status.Errorf(codes.FailedPrecondition, "link %s is %s, not failed_over: its checkpoints are moved only while every stream of it is refused", link, st)
	}
	if err := c.checkForward(link, req.GetCheckpoints()); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	resp := &ferryv1.SetCheckpointsResponse{Writer: s.opts.ID}
	for _, p := range req.GetCheckpoints() {
		k := checkpoint.Key{Link: link, Topic: p.GetTopic(), Partition: p.GetPartition()}
		prev, found, err := s.store.Move(ctx, k, p.GetNextSourceOffset(), s.opts.ID+" (failback by "+by+")")
		if err != nil {
			return nil, unavailable(ctx, fmt.Errorf("checkpoint of %s (%d set before it): %w", k, len(resp.Changes), err))
		}
		ch := &ferryv1.CheckpointChange{Topic: k.Topic, Partition: k.Partition, PreviousNextSourceOffset: -1, NextSourceOffset: p.GetNextSourceOffset()}
		if found {
			ch.PreviousNextSourceOffset = prev.NextSourceOffset
		}
		resp.Changes = append(resp.Changes, ch)
		s.log.Warn("checkpoint set by control", "link", link, "topic", k.Topic, "partition", k.Partition,
			"from", ch.PreviousNextSourceOffset, "to", ch.NextSourceOffset, "by", by, "reason", req.GetReason())
	}
	return resp, nil
}

// checkForward refuses, before anything is written, a checkpoint that
// does not verify or that would move back: every writer ignores a
// checkpoint below the latest as a replay (forget the partition first).
func (c *Control) checkForward(link string, ps []*ferryv1.CheckpointPosition) error {
	for _, p := range ps {
		k := checkpoint.Key{Link: link, Topic: p.GetTopic(), Partition: p.GetPartition()}
		cur, ok, err := c.s.store.Get(k)
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
		case k.Topic == "" || len(k.Topic) > maxTopicName:
			return fmt.Errorf("topic of %d bytes: want 1 to %d", len(k.Topic), maxTopicName)
		case k.Partition < 0 || p.GetNextSourceOffset() < 0:
			return fmt.Errorf("%s/%d: a negative partition or offset (%d)", clip(k.Topic), k.Partition, p.GetNextSourceOffset())
		case seen[k]:
			return fmt.Errorf("%s/%d named twice", clip(k.Topic), k.Partition)
		}
		seen[k] = true
	}
	return nil
}
