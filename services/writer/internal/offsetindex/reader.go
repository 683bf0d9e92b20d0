package offsetindex

import (
	"context"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/services/writer/internal/topicscan"
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
}

// NewReader returns a reader of topic over clients built from opts (the
// target cluster's seeds, TLS, SASL), one per read; opts that make no
// client are refused here.
func NewReader(opts []kgo.Opt, topic string) (*Reader, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("offset index client: %w", err)
	}
	cl.Close()
	return &Reader{opts: slices.Clone(opts), topic: topic}, nil
}

// Close releases the reader: each read closes its own client.
func (r *Reader) Close() {}

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
	out, err := r.scan(ctx, keys, func(_ Key, x *Index) {
		if keep > 0 && x.Runs() >= 2*keep {
			x.Trim(keep)
		}
	})
	if err != nil {
		return nil, err
	}
	if keep > 0 {
		for _, x := range out {
			x.Trim(keep)
		}
	}
	return out, nil
}

// Answer is one offset's translation (Index.Translate).
type Answer struct {
	Position Position
	Err      error
}

// TranslateAll answers asks, source offsets of keys, as Load's indexes
// would (Index.Translate), in one pass over their index partitions,
// holding of each key's index only the runs that answer them: a few,
// however many the topic holds. It serves a caller that keeps only the
// newest runs in memory (the writer's group sync) for the offsets older
// than those, however old, within the topic's retention.
func (r *Reader) TranslateAll(ctx context.Context, asks map[Key][]int64) (map[Key]map[int64]Answer, error) {
	keys := make([]Key, 0, len(asks))
	sorted := make(map[Key][]int64, len(asks))
	for k, offsets := range asks {
		keys = append(keys, k)
		sorted[k] = slices.Sorted(slices.Values(offsets))
	}
	xs, err := r.scan(ctx, keys, func(k Key, x *Index) {
		if x.Runs() >= 2*(len(sorted[k])+1) { // amortized: a prune per that many runs
			x.keepAnswers(sorted[k])
		}
	})
	if err != nil {
		return nil, err
	}
	out := make(map[Key]map[int64]Answer, len(asks))
	for k, offsets := range sorted {
		out[k] = make(map[int64]Answer, len(offsets))
		for _, s := range offsets {
			pos, err := xs[k].Translate(s)
			out[k][s] = Answer{Position: pos, Err: err}
		}
	}
	return out, nil
}

// scan reads the committed records of keys into an index each, reading
// each index partition they fall in once; added is called after each
// record a key's index takes.
func (r *Reader) scan(ctx context.Context, keys []Key, added func(Key, *Index)) (map[Key]*Index, error) {
	out := make(map[Key]*Index, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	// Per index partition: its keys by their record key, placed once the
	// topic's partition count is known.
	type keyed struct {
		key Key
		x   *Index
	}
	byKey := map[int32]map[string]keyed{}
	n := int32(-1)
	pick := func(partitions int32) map[int32]bool {
		n = partitions
		read := map[int32]bool{}
		for _, k := range keys {
			if out[k] != nil || partitions == 0 {
				continue
			}
			x := NewIndex()
			out[k] = x
			part := PartitionOf(k, partitions)
			if byKey[part] == nil {
				byKey[part] = map[string]keyed{}
			}
			byKey[part][k.String()] = keyed{k, x}
			read[part] = true
		}
		return read
	}
	err := topicscan.Scan(ctx, r.opts, r.topic, pick, func(rec *kgo.Record) {
		kx, ok := byKey[rec.Partition][string(rec.Key)]
		if !ok {
			return
		}
		e, err := Decode(rec.Value)
		if err != nil {
			kx.x.refused++
			return
		}
		kx.x.Add(e)
		added(kx.key, kx.x)
	})
	switch {
	case err != nil:
		return nil, fmt.Errorf("offset index: %w", err)
	case n == 0:
		return nil, fmt.Errorf("offset index %s: no partitions", r.topic)
	}
	return out, nil
}
