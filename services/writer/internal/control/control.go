// Package control serves the writer's ferry.v1.ControlService, the
// operators' verbs (ferryctl): a link's status and failover report, its
// state (pause, resume, failover), offset translation, failback's
// checkpoints and the hand-back of consumer groups. It reads the
// replication stream's server (package server), which never calls it.
// The verbs that stop, resume or move a link's copy write to the
// checkpoint topic (a link's signed state record, checkpoints), which
// every writer of the target reads: the streams of every writer act on
// the change, and any writer answers for a link. Only
// control.allowed_ids may call it.
package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/groupsync"
	"github.com/ferry-replicator/ferry/pkg/linkstate"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
	"github.com/ferry-replicator/ferry/services/writer/internal/checkpoint"
	"github.com/ferry-replicator/ferry/services/writer/internal/groupsyncer"
	"github.com/ferry-replicator/ferry/services/writer/internal/heartbeat"
	"github.com/ferry-replicator/ferry/services/writer/internal/server"
)

// maxReason bounds an operator's reason, which every writer keeps.
const maxReason = 1024

// Service serves ferry.v1.ControlService for a server.Server.
type Service struct {
	ferryv1.UnimplementedControlServiceServer
	s   *server.Server
	log *slog.Logger
	// ids are control.allowed_ids: the only callers admitted. Empty
	// refuses every call.
	ids tlsconfig.IDs
	// translations holds a slot per Translate call served
	// (maxTranslations).
	translations chan struct{}
}

// New serves s's control plane to the callers ids names; log takes what
// the verbs change.
func New(s *server.Server, ids tlsconfig.IDs, log *slog.Logger) *Service {
	return &Service{s: s, log: log, ids: ids, translations: make(chan struct{}, maxTranslations)}
}

// admit returns the caller's identity if control.allowed_ids names it.
// The writer's TLS interceptors admit tls.allowed_ids too (fetchers),
// which must not change a link's state.
func (c *Service) admit(ctx context.Context) (string, error) {
	if c.ids.Empty() {
		return "", status.Error(codes.PermissionDenied, "control refused: control.allowed_ids is empty on this writer, so it admits no operator")
	}
	if err := c.ids.AdmitPeer(ctx); err != nil {
		return "", status.Errorf(codes.PermissionDenied, "control refused: %v (control.allowed_ids)", err)
	}
	return tlsconfig.PeerIdentity(ctx), nil
}

// admitLink admits the caller (admit) to act on link, which this writer
// must serve; it returns the caller's identity.
func (c *Service) admitLink(ctx context.Context, link string) (string, error) {
	by, err := c.admit(ctx)
	if err != nil {
		return "", err
	}
	if _, ok := c.s.Link(link); !ok {
		return "", status.Errorf(codes.NotFound, "link %q: this writer does not serve it", server.Clip(link))
	}
	return by, nil
}

// Status answers the writer's view of its links (or of the one named).
func (c *Service) Status(ctx context.Context, req *ferryv1.StatusRequest) (*ferryv1.StatusResponse, error) {
	var err error
	if req.GetLink() != "" {
		_, err = c.admitLink(ctx, req.GetLink())
	} else {
		_, err = c.admit(ctx)
	}
	if err != nil {
		return nil, err
	}
	s := c.s
	var states []server.LinkState
	for _, ls := range s.LinkStates() {
		if req.GetLink() == "" || ls.Link == req.GetLink() {
			states = append(states, ls)
		}
	}
	// A stopped link's report (failover, failback) is what an operator
	// acts on: its groups are on the target cluster before it is given.
	if slices.ContainsFunc(states, func(ls server.LinkState) bool { return ls.State != linkstate.Running }) {
		if err := s.Durable(ctx); err != nil {
			return nil, status.Errorf(codes.Unavailable, "a stopped link's report would not survive this writer: not written to the target cluster: %v", err)
		}
	}
	resp := &ferryv1.StatusResponse{Writer: s.ID(), TimeUnixMs: time.Now().UnixMilli()}
	shards, meter, groups, stopped := s.Status(), s.Failover(), s.Groups(), s.Stopped()
	for _, ls := range states {
		out := c.linkStatus(ls, shards, meter)
		out.Groups = groupsProto(ls.Link, groups)
		out.Stopped = stoppedProto(ls.Link, stopped)
		resp.Links = append(resp.Links, out)
	}
	return resp, nil
}

func (c *Service) linkStatus(ls server.LinkState, shards []server.ShardStatus, meter []heartbeat.Exposure) *ferryv1.LinkStatus {
	link, _ := c.s.Link(ls.Link)
	out := &ferryv1.LinkStatus{Name: ls.Link, Control: controlProto(c.s.Store().Control(ls.Link)), Shards: link.Shards,
		IndexGaps: c.s.IndexGaps(ls.Link)}
	for _, sh := range shards {
		if sh.Link == ls.Link {
			out.ShardStates = append(out.ShardStates, &ferryv1.LinkShard{Shard: sh.Shard, Epoch: sh.Epoch, Active: sh.Active, Fetcher: sh.Fetcher})
		}
	}
	slices.SortFunc(out.ShardStates, func(a, b *ferryv1.LinkShard) int { return int(a.Shard) - int(b.Shard) })
	for _, e := range meter {
		if e.Link != ls.Link {
			continue
		}
		p := &ferryv1.LinkPartition{
			Topic: e.Topic, Partition: e.Partition, CommittedNextOffset: e.Committed,
			SourceHighWatermark: e.SourceHighWatermark, SourceLogStartOffset: e.SourceLogStart,
			LagRecords: e.Records, HeartbeatAgeSeconds: e.HeartbeatAge, HeartbeatObservedAtUnixMs: e.ObservedAt.UnixMilli(),
			CheckpointMoved: e.Moved, ResumeNextOffset: e.Resume,
		}
		if e.Seconds != nil {
			p.LagSeconds, p.HasLagSeconds = *e.Seconds, true
		}
		if e.AppendRate != nil {
			p.SourceAppendRate, p.AfterHeartbeatOffsets, p.HasSourceAppendRate = *e.AppendRate, *e.AfterHeartbeat, true
		}
		if e.LostRecords != nil {
			p.LostRecords, p.UnreadOffsets, p.HasLostRecords = *e.LostRecords, *e.UnreadOffsets, true
		}
		out.Partitions = append(out.Partitions, p)
	}
	return out
}

// stoppedProto is link's part of the stopped partitions.
func stoppedProto(link string, all []server.StoppedPartition) []*ferryv1.LinkStoppedPartition {
	var out []*ferryv1.LinkStoppedPartition
	for _, p := range all {
		if p.Link == link {
			out = append(out, &ferryv1.LinkStoppedPartition{
				Topic: p.Topic, Partition: p.Partition, Reason: p.Reason, Error: p.Error, SinceUnixMs: p.Since.UnixMilli(),
			})
		}
	}
	return out
}

// groupsProto is link's part of the group sync's state.
func groupsProto(link string, all []groupsyncer.Status) []*ferryv1.LinkGroup {
	var out []*ferryv1.LinkGroup
	for _, g := range all {
		if g.Link != link {
			continue
		}
		lg := &ferryv1.LinkGroup{Group: g.Group, Outcome: g.Outcome, Detail: g.Detail, HandedBack: g.HandedBack}
		if g.SyncAge != nil {
			lg.SyncAgeSeconds, lg.HasSyncAge = *g.SyncAge, true
		}
		if g.RereadRecords != nil {
			lg.RereadRecords, lg.HasRereadRecords = *g.RereadRecords, true
		}
		for _, p := range g.Partitions {
			lp := &ferryv1.LinkGroupPartition{Topic: p.Topic, Partition: p.Partition, SourceOffset: p.SourceOffset,
				TargetOffset: p.TargetOffset, StandsForSourceOffset: p.StandsFor, Note: p.Note}
			if p.SyncedReadAt != nil {
				lp.SyncedReadAtUnixMs = p.SyncedReadAt.UnixMilli()
			}
			lg.Partitions = append(lg.Partitions, lp)
		}
		out = append(out, lg)
	}
	return out
}

func controlProto(c checkpoint.Control) *ferryv1.LinkControl {
	out := &ferryv1.LinkControl{State: c.State.Proto(), Reason: c.Reason, By: c.By, Generation: c.Generation}
	if !c.Time.IsZero() {
		out.TimeUnixMs = c.Time.UnixMilli()
	}
	return out
}

// SetLinkState records a link's new state for every writer of the target.
func (c *Service) SetLinkState(ctx context.Context, req *ferryv1.SetLinkStateRequest) (*ferryv1.SetLinkStateResponse, error) {
	link := req.GetLink()
	by, err := c.admitLink(ctx, link)
	if err != nil {
		return nil, err
	}
	s := c.s
	state, ok := linkstate.FromProto(req.GetState())
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "state %v: want running, paused or failed_over", req.GetState())
	}
	if len(req.GetReason()) > maxReason {
		return nil, status.Errorf(codes.InvalidArgument, "reason of %d bytes, above %d", len(req.GetReason()), maxReason)
	}
	got, err := s.Store().SetControl(ctx, link, checkpoint.Control{
		State: state, Reason: req.GetReason(), By: by, Time: time.Now().UTC(),
	}, req.GetExpectedGeneration())
	switch {
	case errors.Is(err, checkpoint.ErrGeneration):
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "record the state of link %s: %v", link, err)
	}
	c.log.Warn("link state set", "link", link, "state", state, "reason", req.GetReason(), "by", by, "generation", got.Generation)
	return &ferryv1.SetLinkStateResponse{Control: controlProto(got)}, nil
}

// HandBackGroups returns consumer groups to a link's group sync after a
// round trip (failback --move-groups moved them back to the old source).
func (c *Service) HandBackGroups(ctx context.Context, req *ferryv1.HandBackGroupsRequest) (*ferryv1.HandBackGroupsResponse, error) {
	link := req.GetLink()
	by, err := c.admitLink(ctx, link)
	if err != nil {
		return nil, err
	}
	s := c.s
	if err := checkGroupNames(req.GetGroups()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	known, unknown, err := s.HandBackGroups(ctx, link, req.GetGroups())
	if err != nil {
		return nil, unavailable(ctx, fmt.Errorf("hand back %d groups of link %s: %w", len(known), link, err))
	}
	if len(known) > 0 {
		c.log.Warn("groups handed back to the sync", "link", link, "groups", known, "by", by)
	}
	return &ferryv1.HandBackGroupsResponse{Writer: s.ID(), HandedBack: known, Unknown: unknown}, nil
}

// checkGroupNames says what is wrong with a HandBackGroups list.
func checkGroupNames(groups []string) error {
	if len(groups) == 0 {
		return errors.New("no group named")
	}
	if len(groups) > groupsync.MaxGroups {
		return fmt.Errorf("%d groups, above %d", len(groups), groupsync.MaxGroups)
	}
	seen := make(map[string]bool, len(groups))
	for i, g := range groups {
		if err := groupsync.CheckName(g); err != nil {
			return fmt.Errorf("groups[%d]: %w", i, err)
		}
		if seen[g] {
			return fmt.Errorf("groups[%d]: group %q named twice", i, g)
		}
		seen[g] = true
	}
	return nil
}
