// Package groupcommit moves consumer groups on the target cluster to the
// translated positions of their source offsets (group sync), without ever
// moving a group that someone else uses there.
//
// What Kafka's group coordinator does (../shared guide, read from its
// source) decides the method: a plain OffsetCommit with generation -1 and
// no member id is refused with UNKNOWN_MEMBER_ID for a group that has
// members, in the same step that would commit, so the broker itself keeps
// Ferry off active groups; a TxnOffsetCommit has no such check and would
// rewind a live group, so it is never used. Every commit carries
// groupsync.Marker(source offset) as its metadata: a partition whose
// committed offset lacks it was committed by someone else (a consumer that
// moved to the target, or one using assign(), which never shows as a
// member), and the group is then left alone for good. A group only moves
// forward: its marker says which source offset it stands for.
//
// One race remains, as Kafka has no compare-and-set for offsets: a
// consumer using assign() that commits between the read and the commit of
// one Sync can be overwritten once; the next Sync sees its marker gone and
// stops there (docs/disaster-recovery.md).
//
// The same rules move groups back to the old source at failback
// (ferryctl failback --move-groups, Move with Options): the operator then
// takes over offsets the consumers committed there before the failover,
// which group sync would leave alone, and may ask for backwards moves;
// the broker's refusal of an active group and the forward-only rule stay.
package groupcommit

import (
	"errors"
	"fmt"

	"github.com/IBM/sarama"

	"github.com/ferry-replicator/ferry/pkg/groupsync"
)

// TopicPartition names a target partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// Position is where a group resumes on a target partition (the next
// target offset it reads) and the source offset that position stands for.
type Position struct {
	Target, Source int64
}

// Outcome is what a Sync did to a group.
type Outcome string

const (
	// Moved: at least one partition moved forward.
	Moved Outcome = "moved"
	// Unchanged: nothing to move (already there, or only backwards moves).
	Unchanged Outcome = "unchanged"
	// Active: the group has members on the target; the broker refused.
	Active Outcome = "active"
	// Owned: offsets of the group on the target were committed by someone
	// other than Ferry; Ferry leaves it alone.
	Owned Outcome = "owned"
)

// Options change what Move may do; the zero value is group sync's.
type Options struct {
	// TakeOver commits over offsets someone other than Ferry committed
	// (the operator moving consumers back at failback), instead of
	// leaving the group alone (Owned). Such an offset moves forward only
	// too: its target offset is compared.
	TakeOver bool
	// Backwards lets a partition move behind its committed position.
	Backwards bool
	// DryRun decides as Move would and commits nothing: the result says
	// Moved for what would move (the broker's refusal of an active group
	// is not known before a commit).
	DryRun bool
}

// Step is what a Move did, or would do, to one partition.
type Step struct {
	// Action is StepMoved, StepMarked, StepUnchanged (already there) or
	// StepBackwards (left: the position is behind the committed one).
	Action string
	// Committed is the target offset committed before (-1: none) and
	// Metadata its commit metadata.
	Committed int64
	Metadata  string
}

// Step actions. StepMarked is a partition committed again where it stands,
// with Ferry's marker (taken over, or its marker naming another source
// offset): a move that changes no position.
const (
	StepMoved     = "moved"
	StepMarked    = "marked"
	StepUnchanged = "unchanged"
	StepBackwards = "backwards"
)

// Result says what a Sync did and why.
type Result struct {
	Outcome Outcome
	// Moved counts the partitions committed; Backwards those left where
	// they were because the new position is behind the committed one.
	Moved, Backwards int
	// Detail names, for Owned, the partition and offset found.
	Detail string
	// At is, for Moved and Unchanged, where the group stands on each
	// partition of the Sync after it, as Ferry's markers say: the new
	// position of a partition moved, the one found of a partition left
	// (absent when the group has no offset there yet and none was
	// committed). Its Source is the source offset the position stands for.
	At map[TopicPartition]Position
	// Steps is, for Moved and Unchanged, what was done to each partition.
	Steps map[TopicPartition]Step
}

// Committer commits group offsets on one target cluster.
type Committer struct {
	client sarama.Client
	admin  sarama.ClusterAdmin
}

// New returns a Committer using client; closing client is the caller's.
func New(client sarama.Client) (*Committer, error) {
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return nil, fmt.Errorf("group commit admin: %w", err)
	}
	// The admin shares client: closing it would close the client too.
	return &Committer{client: client, admin: admin}, nil
}

// Sync moves group forward to want where Ferry may move it. An error
// means the outcome is unknown (coordinator moving, cluster unreachable):
// the caller tries again at its next interval.
func (c *Committer) Sync(group string, want map[TopicPartition]Position) (Result, error) {
	return c.Move(group, want, Options{})
}

// Move moves group to want as o allows: Sync's rules, loosened by o.
func (c *Committer) Move(group string, want map[TopicPartition]Position, o Options) (Result, error) {
	if len(want) == 0 {
		return Result{Outcome: Unchanged}, nil
	}
	byTopic := map[string][]int32{}
	for tp := range want {
		byTopic[tp.Topic] = append(byTopic[tp.Topic], tp.Partition)
	}
	cur, err := c.admin.ListConsumerGroupOffsets(group, byTopic)
	switch {
	case errors.Is(err, sarama.ErrGroupIDNotFound):
		// No such group on the target yet (some brokers say so, others
		// answer offsets of -1): nothing committed.
		cur = &sarama.OffsetFetchResponse{}
	case err != nil:
		return Result{}, fmt.Errorf("target offsets of group %q: %w", group, err)
	}
	res := Result{At: map[TopicPartition]Position{}, Steps: map[TopicPartition]Step{}}
	req := sarama.NewOffsetCommitRequest(c.client.Config(), group)
	req.ConsumerGroupGeneration, req.ConsumerID = -1, ""
	for tp, pos := range want {
		b := cur.GetBlock(tp.Topic, tp.Partition)
		if b != nil && !errors.Is(b.Err, sarama.ErrNoError) {
			return Result{}, fmt.Errorf("target offset of group %q on %s/%d: %w", group, tp.Topic, tp.Partition, b.Err)
		}
		step := Step{Action: StepMoved, Committed: -1}
		if b != nil && b.Offset >= 0 {
			step.Committed, step.Metadata = b.Offset, b.Metadata
			src, ours := groupsync.ParseMarker(b.Metadata)
			switch {
			case !ours && !o.TakeOver:
				return Result{Outcome: Owned, Detail: fmt.Sprintf("%s/%d at %d committed by another client (metadata %q)",
					tp.Topic, tp.Partition, b.Offset, truncate(b.Metadata))}, nil
			case !ours:
				src = -1 // no source offset to compare: the target offset decides
			}
			if !o.Backwards && (pos.Source < src || pos.Target < b.Offset) {
				res.Backwards++
				res.At[tp] = Position{Target: b.Offset, Source: src}
				step.Action = StepBackwards
				res.Steps[tp] = step
				continue
			}
			if pos.Source == src && pos.Target == b.Offset {
				res.At[tp] = pos
				step.Action = StepUnchanged
				res.Steps[tp] = step
				continue
			}
		}
		if step.Committed == pos.Target {
			// Taken over where it stands: only the marker changes.
			step.Action = StepMarked
		}
		// Committed leader epoch -1: a source epoch means nothing here.
		req.AddBlockWithLeaderEpoch(tp.Topic, tp.Partition, pos.Target, -1, 0, groupsync.Marker(pos.Source))
		res.Moved++
		res.At[tp] = pos
		res.Steps[tp] = step
	}
	if res.Moved == 0 {
		res.Outcome = Unchanged
		return res, nil
	}
	if o.DryRun {
		res.Outcome = Moved
		return res, nil
	}
	coord, err := c.client.Coordinator(group)
	if err != nil {
		return Result{}, fmt.Errorf("coordinator of group %q: %w", group, err)
	}
	resp, err := coord.CommitOffset(req)
	if err != nil {
		return Result{}, fmt.Errorf("commit group %q: %w", group, err)
	}
	for topic, parts := range resp.Errors {
		for p, kerr := range parts {
			switch {
			case errors.Is(kerr, sarama.ErrNoError):
			case errors.Is(kerr, sarama.ErrUnknownMemberId), errors.Is(kerr, sarama.ErrIllegalGeneration):
				// The whole request is refused for an active group.
				return Result{Outcome: Active}, nil
			default:
				if errors.Is(kerr, sarama.ErrNotCoordinatorForConsumer) || errors.Is(kerr, sarama.ErrConsumerCoordinatorNotAvailable) {
					_ = c.client.RefreshCoordinator(group)
				}
				return Result{}, fmt.Errorf("commit group %q on %s/%d: %w", group, topic, p, kerr)
			}
		}
	}
	res.Outcome = Moved
	return res, nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
