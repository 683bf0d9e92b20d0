package offsetindex

import (
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
// the key's records only (LoadAll: the records of many keys, in one pass
// over each partition): bounded by what the partition holds (its
// retention) and by the keys' runs in memory (24 bytes each).
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
	xs, err := r.LoadAll(ctx, []Key{key}, 0)
	if err != nil {
		return nil, err
	}
	return xs[key], nil
}

// LoadAll is Load for each of keys, reading each index partition they fall
// in once, in one pass, rather than once per key: a shard's partitions
// share few index partitions (one by default), and a read costs the whole
// partition. With keep > 0 each index is trimmed to its newest keep runs
// as it grows (Index.Trim, at twice keep), so what the pass holds stays
// bounded per key, as a caller keeping only keep runs wants.
func (r *Reader) LoadAll(ctx context.Context, keys []Key, keep int) (map[Key]*Index, error) {
	out := make(map[Key]*Index, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	spans, err := r.bounds(ctx)
	if err != nil {
		return nil, err
	}
	n := int32(len(spans))
	// Per index partition: its keys' indexes by key, and where to read.
	byKey := map[int32]map[string]*Index{}
	from := map[int32]kgo.Offset{}
	left := map[int32]int64{} // partitions still to read, to their end
	for _, k := range keys {
		if out[k] != nil {
			continue
		}
		x := NewIndex()
		out[k] = x
		part := PartitionOf(k, n)
		if byKey[part] == nil {
			byKey[part] = map[string]*Index{}
		}
		byKey[part][k.String()] = x
		if sp := spans[part]; sp.start < sp.end {
			from[part], left[part] = kgo.NewOffset().At(sp.start), sp.end
		}
	}
	if len(left) == 0 {
		return out, nil
	}
	cl, err := kgo.NewClient(append(slices.Clone(r.opts),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{r.topic: from}),
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
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read offset index %s: %d of %d partitions not read to their last stable offset: %w", r.topic, len(left), len(from), err)
		}
		if errs := fs.Errors(); len(errs) > 0 {
			return nil, fmt.Errorf("read offset index %s/%d: %w", r.topic, errs[0].Partition, errs[0].Err)
		}
		for it := fs.RecordIter(); !it.Done(); {
			rec := it.Next()
			end, reading := left[rec.Partition]
			if !reading {
				continue // read to its end already
			}
			if rec.Offset+1 >= end {
				delete(left, rec.Partition)
				cl.PauseFetchPartitions(map[string][]int32{r.topic: {rec.Partition}})
				if rec.Offset >= end {
					continue
				}
			}
			x := byKey[rec.Partition][string(rec.Key)]
			if x == nil || rec.Attrs.IsControl() {
				continue
			}
			e, err := Decode(rec.Value)
			if err != nil {
				x.refused++
				continue
			}
			x.Add(e)
			if keep > 0 && x.Runs() >= 2*keep {
				x.Trim(keep)
			}
		}
	}
	if keep > 0 {
		for _, x := range out {
			x.Trim(keep)
		}
	}
	return out, nil
}

// span is where an index partition's read starts (its log start) and ends
// (its last stable offset).
type span struct{ start, end int64 }

// bounds reads every index partition's span.
func (r *Reader) bounds(ctx context.Context) ([]span, error) {
	ends, err := r.admin.ListCommittedOffsets(ctx, r.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("offset index %s: last stable offsets: %w", r.topic, err)
	}
	n := int32(len(ends[r.topic]))
	if n == 0 {
		return nil, fmt.Errorf("offset index %s: no partitions", r.topic)
	}
	starts, err := r.admin.ListStartOffsets(ctx, r.topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("offset index %s: start offsets: %w", r.topic, err)
	}
	spans := make([]span, n)
	for p := range n {
		s, _ := starts.Lookup(r.topic, p)
		e, _ := ends.Lookup(r.topic, p)
		spans[p] = span{s.Offset, e.Offset}
	}
	return spans, nil
}
