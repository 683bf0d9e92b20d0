package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/services/writer/internal/checkpoint"
	"github.com/ferry-replicator/ferry/services/writer/internal/offsetindex"
	"github.com/ferry-replicator/ferry/services/writer/internal/producer"
)

// The offset index part of progress: each round computes, beside each of
// its partitions' checkpoints, the index entry of what it copied of the
// partition (package offsetindex). The entries ride in the partition's
// checkpoints (checkpoint.Checkpoint.Unindexed), committed with the data
// as the checkpoints are, until a round flushes them to the index topic:
// the first round after offset_index.flush_interval, or one whose
// entries grew past unindexedRuns. Writing the index partition in every
// round cost the target broker an append and a transaction marker a round
// (5-8 % of its CPU in the exactly-once catch-up benchmark); once a
// second, a shard's index costs a seventh of that at full speed. Readers
// of the index topic add the entries the partition's checkpoint carries
// (Index.Extend).
//
// A flush writes the partition's entries in the same place and order as
// the checkpoints: exactly-once in the round's transaction, whose
// checkpoints then carry none of them; at-least-once with the round's
// checkpoints, which still carry them, since either produce may fail
// alone: the next round drops them, the committers adding a round only
// once the previous one's writes succeeded.

// unindexedRuns bounds the runs a partition's checkpoint carries: a round
// that passes it flushes. A plain topic's round adds one run; a compacted
// one's, one a gap.
const unindexedRuns = 256

// indexBatchBytes bounds one index batch: a round's index records of an
// index partition go in batches of about this, far below any topic's
// max.message.bytes (a record is at most some 120 KB, offsetindex.MaxRuns).
const indexBatchBytes = 256 << 10

func (p *progress) indexKey(tp topicPartition) offsetindex.Key {
	return offsetindex.Key{Link: p.link, Topic: tp.Topic, Partition: tp.Partition}
}

// indexed computes the index entry of each partition of group for produced
// round r (offsets: the target offsets of its batches' first records),
// before reached moves the partitions' target positions.
func (p *progress) indexed(group []work, r *round, offsets []int64) map[topicPartition]*offsetindex.Entry {
	entries := map[topicPartition]*offsetindex.Entry{}
	for _, w := range group {
		tp := topicPartition{Topic: w.b.GetTopic(), Partition: w.b.GetPartition()}
		e := entries[tp]
		if e == nil {
			e = &offsetindex.Entry{From: w.b.GetFirstOffset(), TargetBefore: p.target[tp]}
			entries[tp] = e
		}
		e.Next = w.b.GetLastOffset() + 1
	}
	for b := range r.data {
		w := group[r.from[b].member]
		e := entries[topicPartition{Topic: w.b.GetTopic(), Partition: w.b.GetPartition()}]
		target := offsets[b]
		r.eachRun(group, b, func(source int64, n int) {
			e.Add(source, target, int64(n))
			target += int64(n)
		})
	}
	for _, e := range entries {
		// A target that went back (its topic deleted and created
		// again) does not stand where the checkpoint says any more.
		if len(e.Runs) > 0 && e.Runs[0].Target < e.TargetBefore {
			e.TargetBefore = -1
		}
	}
	return entries
}

// eachRun calls f with each run of contiguous source offsets of data batch
// b's records, in order, without decoding a passing Kafka batch: its
// records are contiguous from its base offset (parts.go passes no other).
func (r *round) eachRun(group []work, b int, f func(source int64, n int)) {
	start := r.from[b]
	tp := topicPartition{Topic: group[start.member].b.GetTopic(), Partition: group[start.member].b.GetPartition()}
	left := r.count[b]
	for j, k, i := start.member, start.part, start.index; j < len(group) && left > 0; j, k = j+1, 0 {
		w := &group[j]
		if (topicPartition{Topic: w.b.GetTopic(), Partition: w.b.GetPartition()}) != tp {
			continue
		}
		for ; k < len(w.parts) && left > 0; k, i = k+1, 0 {
			p := &w.parts[k]
			if p.passes() {
				n := min(p.count()-i, left)
				f(p.kafka.Info.BaseOffset+int64(i), n)
				left -= n
				continue
			}
			for i < len(p.recs) && left > 0 {
				first, n := p.recs[i].Offset, 1
				for i+n < len(p.recs) && n < left && p.recs[i+n].Offset == first+int64(n) {
					n++
				}
				f(first, n)
				i, left = i+n, left-n
			}
		}
	}
}

// flushDue says whether a round that began at now flushes the index: the
// first after flush_interval. The committer asks as the round begins and
// hands the answer to add, so that an exactly-once round's index
// partitions join its transaction with its other partitions.
func (p *progress) flushDue(now time.Time) bool {
	return now.Sub(p.flushed) >= p.index.FlushInterval
}

// addIndex moves the index entries of the partitions whose checkpoints
// cps are (reached computed them with the checkpoints) to their unindexed
// entries and, when the round flushes (flush, or entries past
// unindexedRuns), appends their index records to r, in batches per index
// partition. It returns the entries each partition's checkpoint carries,
// encoded.
func (p *progress) addIndex(r *round, cps checkpoints, flush bool) (map[topicPartition][][]byte, error) {
	// The last round's flush succeeded, or this round would not be.
	for tp, n := range p.flushing {
		p.unindexed[tp] = p.unindexed[tp][n:]
		delete(p.flushing, tp)
	}
	for tp := range cps {
		e, ok := p.pending[tp]
		if !ok {
			continue
		}
		delete(p.pending, tp)
		p.written[tp] = append(p.written[tp], *e)
		un := p.unindexed[tp]
		if n := len(un); n == 0 || !un[n-1].Extend(*e) {
			// Its own runs: Extend grows them, and written shares e's.
			un = append(un, e.Clone())
		}
		p.unindexed[tp] = un
		if runs(un) > unindexedRuns {
			flush = true
		}
	}
	if flush {
		if err := p.flush(r, cps); err != nil {
			return nil, err
		}
		if len(p.flushing) > 0 {
			p.flushed = time.Now()
		}
	}
	carried := map[topicPartition][][]byte{}
	for tp := range cps {
		// A flushed partition's checkpoint carries what the flush
		// writes only where it may commit alone (at-least-once), and
		// only while that stays small: past unindexedRuns (a round of a
		// heavily compacted partition), an index produce refused alone
		// leaves those runs out of the index, as it did a round before
		// flushes were deferred (Index.Add starts again after them).
		un := p.unindexed[tp]
		if f := p.flushing[tp]; f > 0 && (p.atomic || runs(un[:f]) > unindexedRuns) {
			un = un[f:]
		}
		for _, e := range un {
			value, err := e.Append(nil)
			if err != nil {
				return nil, fmt.Errorf("offset index entry of %s: %w", p.indexKey(tp), err)
			}
			carried[tp] = append(carried[tp], value)
		}
	}
	return carried, nil
}

// unflush is told that the round that was to flush the index failed: its
// index records may not have landed, so the next round writes them again
// (the same records twice are one: Index.Add).
func (p *progress) unflush() { clear(p.flushing) }

// indexMark is the first index record of a partition a round flushes:
// its range's first source offset, and where it is in the round's
// batches.
type indexMark struct {
	tp           topicPartition
	source       int64
	batch, index int
}

// marked adds the landmarks of the index records r wrote (offsets: the
// index-topic offsets of its batches' first records), once r is written
// (exactly-once: committed); the partitions' next checkpoints carry them.
func (p *progress) marked(r *round, offsets []int64) {
	for _, m := range r.marks {
		l := offsetindex.Landmark{Source: m.source, Offset: offsets[m.batch] + int64(m.index)}
		p.landmarks[m.tp] = offsetindex.Mark(p.landmarks[m.tp], l)
	}
}

// flush appends to r the index records of the unindexed entries of the
// partitions of cps, in batches per index partition.
func (p *progress) flush(r *round, cps checkpoints) error {
	byPartition := map[int32][]recordbatch.Record{}
	var order []int32
	// firsts is, per index partition, its source partitions' first
	// records: their position among its records.
	type first struct {
		tp     topicPartition
		source int64
		at     int
	}
	firsts := map[int32][]first{}
	for tp, cp := range cps {
		un := p.unindexed[tp]
		if len(un) == 0 {
			continue
		}
		p.flushing[tp] = len(un)
		key := p.indexKey(tp)
		part := p.index.PartitionOf(key)
		firsts[part] = append(firsts[part], first{tp, un[0].From, len(byPartition[part])})
		for _, e := range un {
			for _, sub := range e.Split() {
				value, err := sub.Append(nil)
				if err != nil {
					return fmt.Errorf("offset index record of %s: %w", key, err)
				}
				if _, ok := byPartition[part]; !ok {
					order = append(order, part)
				}
				byPartition[part] = append(byPartition[part], recordbatch.Record{Timestamp: cp.Time.UnixMilli(), Key: []byte(key.String()), Value: value})
			}
		}
	}
	for _, part := range order {
		recs, done, fs := byPartition[part], 0, firsts[part]
		for len(recs) > 0 {
			n, size := 0, 0
			for n < len(recs) && (n == 0 || size+len(recs[n].Value) < indexBatchBytes) {
				size += len(recs[n].Key) + len(recs[n].Value)
				n++
			}
			raw, err := recordbatch.Build(nil, recs[:n], recordbatch.None)
			if err != nil {
				return fmt.Errorf("build offset index batch: %w", err)
			}
			for ; len(fs) > 0 && fs[0].at < done+n; fs = fs[1:] {
				r.marks = append(r.marks, indexMark{tp: fs[0].tp, source: fs[0].source, batch: len(r.batches), index: fs[0].at - done})
			}
			r.batches = append(r.batches, producer.Batch{Topic: p.index.Name, Partition: part, Raw: raw})
			recs, done = recs[n:], done+n
		}
	}
	return nil
}

// runs counts the runs of entries.
func runs(entries []offsetindex.Entry) int {
	n := 0
	for _, e := range entries {
		n += len(e.Runs)
	}
	return n
}

// decodeUnindexed reads the index entries a checkpoint carries.
func decodeUnindexed(values [][]byte) ([]offsetindex.Entry, error) {
	var out []offsetindex.Entry
	for i, v := range values {
		e, err := offsetindex.Decode(v)
		if err != nil {
			return nil, fmt.Errorf("unindexed entry %d: %w", i, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// loadIndex reads key's index records with r, then adds the entries the
// partition's checkpoint in store carries that the topic does not hold
// yet (loadIndexes).
func loadIndex(ctx context.Context, r *offsetindex.Reader, store *checkpoint.Store, key offsetindex.Key) (*offsetindex.Index, error) {
	xs, err := loadIndexes(ctx, r, store, []offsetindex.Key{key}, nil)
	if err != nil {
		return nil, err
	}
	return xs[key], nil
}

// loadIndexes is loadIndex for several keys, reading the index topic once
// for all of them (Reader.LoadAll). The checkpoints are taken first: a
// flush between the two reads makes them overlap, which Index.Extend
// trims, and never leaves a gap. A checkpoint that does not verify adds
// nothing.
//
// from gives a key's read its start in the index topic (a landmark's; nil
// or absent: the log start), Reader.LoadFrom.
func loadIndexes(ctx context.Context, r *offsetindex.Reader, store *checkpoint.Store, keys []offsetindex.Key, from map[offsetindex.Key]int64) (map[offsetindex.Key]*offsetindex.Index, error) {
	carried := make(map[offsetindex.Key][][]byte, len(keys))
	for _, k := range keys {
		if cp, ok, err := store.Get(k); ok && err == nil {
			carried[k] = cp.Unindexed
		}
	}
	xs, err := r.LoadFrom(ctx, keys, 0, from)
	if err != nil {
		return nil, err
	}
	for k, values := range carried {
		entries, err := decodeUnindexed(values)
		if err != nil {
			return nil, fmt.Errorf("checkpoint of %s: %w", k, err)
		}
		for _, e := range entries {
			xs[k].Extend(e)
		}
	}
	return xs, nil
}

// landmarks are k's landmarks in the index topic, as its checkpoint in
// the writer's view carries them (none for a checkpoint that does not
// verify).
func (s *Server) landmarks(k offsetindex.Key) []offsetindex.Landmark {
	if cp, ok, err := s.store.Get(k); ok && err == nil {
		return cp.Landmarks
	}
	return nil
}

// loadIndexFor is loadIndex for translating source offset s of key
// forward: read from key's landmark below s, and again from the log
// start only when the records from there do not reach back to s (the
// index read whole answers offsets before that, or says where it starts).
func (s *Server) loadIndexFor(ctx context.Context, r *offsetindex.Reader, key offsetindex.Key, offset int64) (*offsetindex.Index, error) {
	if from := offsetindex.From(s.landmarks(key), offset); from > 0 {
		xs, err := loadIndexes(ctx, r, s.store, []offsetindex.Key{key}, map[offsetindex.Key]int64{key: from})
		if err != nil {
			return nil, err
		}
		x := xs[key]
		if _, err := x.Translate(offset); !errors.Is(err, offsetindex.ErrNotIndexed) && offset >= x.Start() {
			return x, nil
		}
	}
	return loadIndex(ctx, r, s.store, key)
}
