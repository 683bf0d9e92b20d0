package control

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/groupsync"
	"github.com/ferry-replicator/ferry/services/writer/internal/offsetindex"
	"github.com/ferry-replicator/ferry/services/writer/internal/server"
)

// Translate for operators (ferryctl offsets translate). Unlike group
// sync's translator (package translation), which only the writer serving
// a shard holds, every writer of the target answers: it reads the
// partition's index records from the index topic itself
// (offsetindex.Reader, to the partition's last stable offset: a forward
// translation from the landmark below the offset its checkpoint carries,
// a reverse one from the log start), so the answer needs neither the
// shard's owner, nor a fetcher, nor the source region, and it is never
// trimmed to what a writer keeps in memory.

// maxTranslations bounds the Translate calls a writer serves at once:
// each reads an index partition with clients of its own, and the writer's
// work is copying.
const maxTranslations = 2

// Translate answers one offset of a link's partition, either way, or a
// group's committed offsets on the target.
func (c *Service) Translate(ctx context.Context, req *ferryv1.TranslateRequest) (*ferryv1.TranslateResponse, error) {
	if _, err := c.admitLink(ctx, req.GetLink()); err != nil {
		return nil, err
	}
	link, _ := c.s.Link(req.GetLink())
	if err := checkQuery(req); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if c.s.IndexTopic() == "" {
		return nil, status.Error(codes.FailedPrecondition, "this writer has no offset index topic")
	}
	select {
	case c.translations <- struct{}{}:
		defer func() { <-c.translations }()
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	r, err := offsetindex.NewReader(c.s.Target(), c.s.IndexTopic())
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "offset index: %v", err)
	}
	defer r.Close()
	resp := &ferryv1.TranslateResponse{Writer: c.s.ID()}
	if q := req.GetOffset(); q != nil {
		resp.Offset, err = c.translateOffset(ctx, r, link, q)
	} else {
		resp.Group, err = c.translateGroup(ctx, r, link, req.GetGroup())
	}
	if err != nil {
		return nil, unavailable(ctx, err)
	}
	return resp, nil
}

// checkQuery says what makes req unanswerable, nil when nothing does.
func checkQuery(req *ferryv1.TranslateRequest) error {
	switch q := req.GetQuery().(type) {
	case *ferryv1.TranslateRequest_Offset:
		o := q.Offset
		switch {
		case o == nil:
			return errors.New("offset: empty query")
		case o.GetTopic() == "" || len(o.GetTopic()) > server.MaxTopicName:
			return fmt.Errorf("offset.topic of %d bytes: want 1 to %d", len(o.GetTopic()), server.MaxTopicName)
		case o.GetPartition() < 0:
			return fmt.Errorf("offset.partition %d is negative", o.GetPartition())
		case o.GetOffset() < 0:
			return fmt.Errorf("offset.offset %d is negative", o.GetOffset())
		}
		return nil
	case *ferryv1.TranslateRequest_Group:
		if err := groupsync.CheckName(q.Group); err != nil {
			return fmt.Errorf("group: %w", err)
		}
		return nil
	}
	return errors.New("no query: want offset or group")
}

// unavailable is the status of a read of the target that failed: the
// caller's deadline, or the target not answering (retry).
func unavailable(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Error(codes.Unavailable, err.Error())
}

// translateOffset answers q from the partition's index records.
func (c *Service) translateOffset(ctx context.Context, r *offsetindex.Reader, link server.Link, q *ferryv1.OffsetQuery) (*ferryv1.OffsetTranslation, error) {
	key := offsetindex.Key{Link: link.Name, Topic: q.GetTopic(), Partition: q.GetPartition()}
	var x *offsetindex.Index
	var err error
	if q.GetReverse() {
		x, err = c.s.LoadIndex(ctx, r, key)
	} else {
		// Forward, from the partition's landmark below the offset (its
		// checkpoint's): a recent offset reads a few records, not the
		// index partition's history.
		x, err = c.s.LoadIndexFor(ctx, r, key, q.GetOffset())
	}
	if err != nil {
		return nil, err
	}
	out := &ferryv1.OffsetTranslation{
		Topic: q.GetTopic(), Partition: q.GetPartition(), TargetTopic: link.Naming.Target(q.GetTopic()),
		Offset: q.GetOffset(), Reverse: q.GetReverse(), RefusedRecords: int64(x.Refused()),
	}
	out.Outcome, out.Translated, out.IndexStart = answer(x, q.GetOffset(), q.GetReverse())
	return out, nil
}

// answer translates offset through x, source to target or (reverse) back:
// the translation for exact and beyond_copied, where the index starts for
// before_index.
func answer(x *offsetindex.Index, offset int64, reverse bool) (outcome ferryv1.TranslateOutcome, translated, indexStart int64) {
	translate := x.Translate
	if reverse {
		translate = x.TranslateBack
	}
	pos, err := translate(offset)
	var before *offsetindex.BeforeIndexError
	switch {
	case errors.As(err, &before):
		return ferryv1.TranslateOutcome_TRANSLATE_OUTCOME_BEFORE_INDEX, 0, before.Start
	case err != nil: // ErrNotIndexed, the only other error
		return ferryv1.TranslateOutcome_TRANSLATE_OUTCOME_NO_INDEX, 0, 0
	case pos.End:
		return ferryv1.TranslateOutcome_TRANSLATE_OUTCOME_BEYOND_COPIED, pos.Offset, 0
	}
	return ferryv1.TranslateOutcome_TRANSLATE_OUTCOME_EXACT, pos.Offset, 0
}

// translateGroup reads group's committed offsets on the target, on the
// link's target topics: an offset with Ferry's marker stands for the
// source offset the marker names; any other (a consumer committed it on
// the target, after a failover) is translated back through the index,
// one read of the index for all such partitions.
func (c *Service) translateGroup(ctx context.Context, r *offsetindex.Reader, link server.Link, group string) (*ferryv1.GroupTranslation, error) {
	cl, err := kgo.NewClient(c.s.Target()...)
	if err != nil {
		return nil, fmt.Errorf("target client: %w", err)
	}
	defer cl.Close()
	offsets, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
	switch {
	case errors.Is(err, kerr.GroupIDNotFound):
		offsets = nil // no such group: nothing committed
	case err != nil:
		return nil, fmt.Errorf("offsets of group %q on the target: %w", group, err)
	}
	out := &ferryv1.GroupTranslation{Group: group}
	// Offsets without Ferry's marker are translated back through the
	// index, read once for all of them.
	var back []offsetindex.Key
	for _, o := range offsets.Sorted() {
		if o.Err != nil {
			return nil, fmt.Errorf("offset of group %q on %s/%d: %w", group, o.Topic, o.Partition, o.Err)
		}
		source, ok := link.Naming.Source(o.Topic)
		if !ok || o.At < 0 || link.Topics.Check(source) != nil {
			continue // not a topic of this link, or nothing committed
		}
		p := &ferryv1.GroupPartitionTranslation{Topic: source, TargetTopic: o.Topic, Partition: o.Partition, TargetOffset: o.At}
		if s, ours := groupsync.ParseMarker(o.Metadata); ours {
			p.Ferry, p.SourceOffset, p.Outcome = true, s, ferryv1.TranslateOutcome_TRANSLATE_OUTCOME_EXACT
		} else {
			p.Metadata = server.Clip(o.Metadata)
			back = append(back, offsetindex.Key{Link: link.Name, Topic: source, Partition: o.Partition})
		}
		out.Partitions = append(out.Partitions, p)
	}
	if len(back) == 0 {
		return out, nil
	}
	xs, err := c.s.LoadIndexes(ctx, r, back)
	if err != nil {
		return nil, err
	}
	for _, p := range out.Partitions {
		if !p.Ferry {
			x := xs[offsetindex.Key{Link: link.Name, Topic: p.Topic, Partition: p.Partition}]
			p.Outcome, p.SourceOffset, _ = answer(x, p.TargetOffset, true)
		}
	}
	return out, nil
}
