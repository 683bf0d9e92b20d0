package offsetindex

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Reader translates offsets of source partitions by reading their index
// records from the index topic, read_committed: an exactly-once round's
// records count only once its transaction committed, and an aborted
// round's never do.
//
// This first step reads the key's index partition linearly, from its log
// start to its last stable offset as it was when the read began, keeping
// the key's records only: bounded by what the partition holds (its
// retention) and by the key's runs in memory (24 bytes each).
// docs/architecture.md, "Offset index", says what the next step improves.
type Reader struct {
	opts  []kgo.Opt
	topic string
	admin *kadm.Client
}

// NewReader returns a reader of topic over a client built from opts (the
// target cluster's seeds, TLS, SASL). Close releases it.
func NewReader(opts []kgo.Opt, topic string) (*Reader, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("offset index client: %w", err)
	}
	return &Reader{opts: slices.Clone(opts), topic: topic, admin: kadm.NewClient(cl)}, nil
}

// Close releases the reader's client.
func (r *Reader) Close() { r.admin.Close() }

// Translate answers source offset s of key's partition (Index.Translate).
func (r *Reader) Translate(ctx context.Context, key Key, s int64) (Position, error) {
	x, err := r.Load(ctx, key)
	if err != nil {
		return Position{}, err
	}
	return x.Translate(s)
}

// TranslateBack answers target offset t of key's partition
// (Index.TranslateBack).
func (r *Reader) TranslateBack(ctx context.Context, key Key, t int64) (Position, error) {
	x, err := r.Load(ctx, key)
	if err != nil {
		return Position{}, err
	}
	return x.TranslateBack(t)
}

// Load reads every committed index record of key into an index, for as
// many translations as the caller needs. Records that do not decode
// (someone else wrote the topic) are left out and counted (Index.Refused).
func (r *Reader) Load(ctx context.Context, key Key) (*Index, error) {
	part, start, end, err := r.bounds(ctx, key)
	if err != nil {
		return nil, err
	}
	x := NewIndex()
	if start >= end {
		return x, nil
	}
	cl, err := kgo.NewClient(append(slices.Clone(r.opts),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{r.topic: {part: kgo.NewOffset().At(start)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Markers are kept so that the read sees the offset before the
		// last stable offset even when a marker holds it.
		kgo.KeepControlRecords(),
		// Retention may remove what the read has not reached yet: go on
		// from what is left.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)...)
	if err != nil {
		return nil, fmt.Errorf("offset index consumer: %w", err)
	}
	defer cl.Close()
	want := []byte(key.String())
	for read := start; read < end; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read offset index %s/%d up to %d (at %d): %w", r.topic, part, end, read, err)
		}
		if errs := fs.Errors(); len(errs) > 0 {
			return nil, fmt.Errorf("read offset index %s/%d: %w", r.topic, part, errs[0].Err)
		}
		for it := fs.RecordIter(); !it.Done(); {
			rec := it.Next()
			if rec.Offset >= end {
				read = end
				break
			}
			read = rec.Offset + 1
			if rec.Attrs.IsControl() || !bytes.Equal(rec.Key, want) {
				continue
			}
			e, err := Decode(rec.Value)
			if err != nil {
				x.refused++
				continue
			}
			x.Add(e)
		}
	}
	return x, nil
}

// bounds finds key's index partition and the offsets to read it between:
// its log start and its last stable offset.
func (r *Reader) bounds(ctx context.Context, key Key) (part int32, start, end int64, err error) {
	ends, err := r.admin.ListCommittedOffsets(ctx, r.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, 0, 0, fmt.Errorf("offset index %s: last stable offsets: %w", r.topic, err)
	}
	n := int32(len(ends[r.topic]))
	if n == 0 {
		return 0, 0, 0, fmt.Errorf("offset index %s: no partitions", r.topic)
	}
	part = PartitionOf(key, n)
	starts, err := r.admin.ListStartOffsets(ctx, r.topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return 0, 0, 0, fmt.Errorf("offset index %s: start offsets: %w", r.topic, err)
	}
	s, _ := starts.Lookup(r.topic, part)
	e, _ := ends.Lookup(r.topic, part)
	return part, s.Offset, e.Offset, nil
}
