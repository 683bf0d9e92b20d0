package server

import (
	"fmt"

	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/services/writer/internal/offsetindex"
	"github.com/ferry-replicator/ferry/services/writer/internal/producer"
)

// The offset index part of progress: each round adds, beside each of its
// partitions' checkpoints, the index record of what it copied of the
// partition (package offsetindex), in the same place and order: exactly-
// once in the round's transaction, at-least-once with the round's
// checkpoints, after the target acknowledged the data they describe.

// indexBatchBytes bounds one index batch: a round's index records of an
// index partition go in batches of about this, far below any topic's
// max.message.bytes (a record is at most some 120 KB, offsetindex.MaxRuns).
const indexBatchBytes = 256 << 10

func (p *progress) indexKey(tp topicPartition) offsetindex.Key {
	return offsetindex.Key{Link: p.link, Topic: tp.topic, Partition: tp.partition}
}

// indexed computes the index entry of each partition of group for produced
// round r (offsets: the target offsets of its batches' first records),
// before reached moves the partitions' target positions.
func (p *progress) indexed(group []work, r *round, offsets []int64) map[topicPartition]*offsetindex.Entry {
	entries := map[topicPartition]*offsetindex.Entry{}
	for _, w := range group {
		tp := topicPartition{w.b.GetTopic(), w.b.GetPartition()}
		e := entries[tp]
		if e == nil {
			e = &offsetindex.Entry{From: w.b.GetFirstOffset(), TargetBefore: p.target[tp]}
			entries[tp] = e
		}
		e.Next = w.b.GetLastOffset() + 1
	}
	for b := range r.data {
		w := group[r.from[b].member]
		e := entries[topicPartition{w.b.GetTopic(), w.b.GetPartition()}]
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
	tp := topicPartition{group[start.member].b.GetTopic(), group[start.member].b.GetPartition()}
	left := r.count[b]
	for j, k, i := start.member, start.part, start.index; j < len(group) && left > 0; j, k = j+1, 0 {
		w := &group[j]
		if (topicPartition{w.b.GetTopic(), w.b.GetPartition()}) != tp {
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

// addIndex appends to r the index records of the partitions whose
// checkpoints cps are (reached computed them with the checkpoints), in
// batches per index partition.
func (p *progress) addIndex(r *round, cps checkpoints) error {
	byPartition := map[int32][]recordbatch.Record{}
	var order []int32
	for tp, cp := range cps {
		e, ok := p.pending[tp]
		if !ok {
			continue
		}
		delete(p.pending, tp)
		p.written[tp] = append(p.written[tp], *e)
		key := p.indexKey(tp)
		part := p.index.PartitionOf(key)
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
	for _, part := range order {
		recs := byPartition[part]
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
			r.batches = append(r.batches, producer.Batch{Topic: p.index.Name, Partition: part, Raw: raw})
			recs = recs[n:]
		}
	}
	return nil
}

// indexPartition is the index partition of tp's records, which joins the
// transaction of each round that writes tp.
func (p *progress) indexPartition(tp topicPartition) producer.TopicPartition {
	return producer.TopicPartition{Topic: p.index.Name, Partition: p.index.PartitionOf(p.indexKey(tp))}
}
