package offsetindex

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/services/writer/internal/topicscan"
)

// Reader translates offsets of source partitions by reading their index
// records from the index topic, read_committed: an exactly-once round's
// records count only once its transaction committed, and an aborted
// round's never do.
//
// A read goes through the key's index partition to its last stable offset
// as it was when the read began, keeping the key's records only (LoadAll:
// the records of many keys, in one pass over each partition), from its log
// start or, for translations (TranslateAll), from the partition's
// landmark below the offset asked (Landmark): bounded by what the
// partition holds (its retention) and by the keys' runs in memory (24
// bytes each).
type Reader struct {
	opts  []kgo.Opt
	topic string
	// read counts the records of the keys asked for that reads went
	// through.
	read atomic.Int64
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

// RecordsRead is how many index records of the keys asked for the
// reader's reads went through.
func (r *Reader) RecordsRead() int64 { return r.read.Load() }

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
	return r.LoadFrom(ctx, keys, keep, nil)
}

// LoadFrom is LoadAll reading each key from the index-topic offset from
// gives it (a landmark's, Landmark; absent or 0: the log start). An index
// read from past the log start answers offsets from its start on as the
// whole index would, and says older ones may be in the topic as a trimmed
// one does (Index.Trimmed): a caller asks TranslateAll for them.
func (r *Reader) LoadFrom(ctx context.Context, keys []Key, keep int, from map[Key]int64) (map[Key]*Index, error) {
	out, err := r.scan(ctx, keys, from, func(_ Key, x *Index) {
		if keep > 0 && x.Runs() >= 2*keep {
			x.Trim(keep)
		}
	})
	if err != nil {
		return nil, err
	}
	for k, x := range out {
		if keep > 0 {
			x.Trim(keep)
		}
		if from[k] > 0 && !x.empty {
			x.trimmed = true
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
//
// marks are each key's landmarks (its checkpoint's): a key's read starts
// at the landmark below its oldest ask, and an ask the records read from
// there do not reach back to (Landmark) is answered by a second pass from
// the log start, for those keys only.
func (r *Reader) TranslateAll(ctx context.Context, asks map[Key][]int64, marks map[Key][]Landmark) (map[Key]map[int64]Answer, error) {
	sorted := make(map[Key][]int64, len(asks))
	from := make(map[Key]int64, len(asks))
	for k, offsets := range asks {
		sorted[k] = slices.Sorted(slices.Values(offsets))
		if len(sorted[k]) > 0 {
			from[k] = From(marks[k], sorted[k][0])
		}
	}
	out := make(map[Key]map[int64]Answer, len(asks))
	again, err := r.answer(ctx, sorted, from, out)
	if err != nil || len(again) == 0 {
		return out, err
	}
	_, err = r.answer(ctx, again, nil, out)
	return out, err
}

// answer reads asks' keys from from (nil: the log start) and puts in out
// the answers the records read give; it returns the asks they do not
// reach back to, when the read did not start at the log start.
func (r *Reader) answer(ctx context.Context, asks map[Key][]int64, from map[Key]int64, out map[Key]map[int64]Answer) (map[Key][]int64, error) {
	keys := slices.Collect(maps.Keys(asks))
	xs, err := r.scan(ctx, keys, from, func(k Key, x *Index) {
		if x.Runs() >= 2*(len(asks[k])+1) { // amortized: a prune per that many runs
			x.keepAnswers(asks[k])
		}
	})
	if err != nil {
		return nil, err
	}
	again := map[Key][]int64{}
	for k, offsets := range asks {
		x := xs[k]
		if out[k] == nil {
			out[k] = make(map[int64]Answer, len(offsets))
		}
		for _, s := range offsets {
			if from[k] > 0 && (x.empty || s < x.Start()) {
				again[k] = append(again[k], s)
				continue
			}
			pos, err := x.Translate(s)
			out[k][s] = Answer{Position: pos, Err: err}
		}
	}
	return again, nil
}

// scan reads the committed records of keys into an index each, reading
// each index partition they fall in once, from the lowest of its keys'
// from offsets (absent: the log start); added is called after each record
// a key's index takes.
func (r *Reader) scan(ctx context.Context, keys []Key, from map[Key]int64, added func(Key, *Index)) (map[Key]*Index, error) {
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
	pick := func(partitions int32) map[int32]int64 {
		n = partitions
		read := map[int32]int64{}
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
			if at, ok := read[part]; !ok || from[k] < at {
				read[part] = from[k]
			}
		}
		return read
	}
	err := topicscan.Scan(ctx, r.opts, r.topic, pick, func(rec *kgo.Record) {
		kx, ok := byKey[rec.Partition][string(rec.Key)]
		if !ok {
			return
		}
		r.read.Add(1)
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
