package server

import (
	"fmt"

	"github.com/ferry-replicator/ferry/pkg/batch"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/services/writer/internal/producer"
)

// round is one produce round's target batches: the records of a group of
// checked batches, as the source's Kafka batches that pass through and as
// batches rebuilt from records (as few per partition as the size limit
// allows), then the checkpoints produced with them.
type round struct {
	batches []producer.Batch
	// from[i] is where target batch i's records start in the group; its
	// count[i] records follow on through the parts of the group's members
	// of the same partition.
	from  []recordAt
	count []int
	// last[j] is, for group member j, the target batch holding its last
	// record and that record's index in the batch; batch is -1 for a
	// member with no record to copy (a Skip, or a batch whose records
	// compaction removed).
	last []batchRecord
	// data counts the batches of records; checkpoint batches follow them.
	data int
	// maxDecoded bounds what a passing batch decompresses to when its
	// records must be named (eachRecord): max_batch_bytes.
	maxDecoded int
	// marks are the first index record of each partition the round
	// flushes, which become landmarks once it is written (index.go).
	marks []indexMark
}

// recordAt is record index of part part of group member member;
// batchRecord, record index of target batch batch.
type (
	recordAt    struct{ member, part, index int }
	batchRecord struct{ batch, index int }
)

// build turns group's parts into target batches: a passing Kafka batch as
// it is, unless it is smaller than producer.merge_below and shares the
// round with other batches of its partition; records and merged batches
// rebuilt (recordbatch.Builder) into batches under the shard's batch limit
// (ss.maxBatch) uncompressed. A rebuilt batch that compression made larger
// than the limit (incompressible records) is built again uncompressed.
func (ss *session) build(group []work) (*round, error) {
	// The builder's buffers (a batch's records, uncompressed and
	// compressed, and a source batch decompressed) serve whichever
	// session builds next: kept per session, 64 shards held some 3 MiB
	// each between rounds. What Build returns is its own memory.
	ss.builder = ss.s.builders.Get().(*recordbatch.Builder)
	defer func() {
		ss.s.builders.Put(ss.builder)
		ss.builder = nil
	}()
	r := &round{last: make([]batchRecord, len(group)), maxDecoded: ss.s.opts.MaxBatchBytes}
	for j := range r.last {
		r.last[j].batch = -1
	}
	byPartition := map[topicPartition][]int{}
	var order []topicPartition
	for j, w := range group {
		tp := topicPartition{Topic: w.b.GetTopic(), Partition: w.b.GetPartition()}
		if _, ok := byPartition[tp]; !ok {
			order = append(order, tp)
		}
		byPartition[tp] = append(byPartition[tp], j)
	}
	b := ss.builder
	b.Reset() // nothing of a round that failed to build (the stream ends then anyway)
	for _, tp := range order {
		target := ss.link.Naming.Target(tp.Topic)
		var start recordAt // where the builder's first record comes from
		add := func(raw []byte, from recordAt, n int) {
			r.batches = append(r.batches, producer.Batch{Topic: target, Partition: tp.Partition, Raw: raw})
			r.from, r.count = append(r.from, from), append(r.count, n)
		}
		flush := func() error {
			if b.Records() == 0 {
				return nil
			}
			raw, err := ss.seal()
			if err != nil {
				return fmt.Errorf("build batch for %s/%d: %w", target, tp.Partition, err)
			}
			add(raw, start, b.Records())
			b.Reset()
			return nil
		}
		parts := 0
		for _, j := range byPartition[tp] {
			parts += len(group[j].parts)
		}
		for _, j := range byPartition[tp] {
			for k := range group[j].parts {
				p := &group[j].parts[k]
				if p.passes() && parts > 1 && len(p.kafka.Raw) < ss.s.opts.Producer.MergeBelow {
					// A small one is merged with its neighbours.
					ok, err := ss.merge(p, recordAt{j, k, 0}, &start, flush)
					if err != nil {
						return nil, err
					}
					if ok {
						r.last[j] = batchRecord{len(r.batches), b.Records() - 1}
						continue
					}
					// Larger than a batch once decompressed: it passes as
					// it is, never inflated further (a bomb costs the
					// builder a batch's bytes, not what it inflates to).
				}
				if p.passes() {
					if err := flush(); err != nil {
						return nil, err
					}
					r.last[j] = batchRecord{len(r.batches), p.count() - 1}
					add(p.kafka.Raw, recordAt{j, k, 0}, p.count())
					continue
				}
				out := p.targetRecords()
				for i, rec := range out {
					if !b.AddRecord(rec, ss.maxBatch) {
						if err := flush(); err != nil {
							return nil, err
						}
						// oversized refused every record above ss.maxRecord,
						// so one fits an empty batch.
						if !b.AddRecord(rec, ss.maxBatch) {
							return nil, fmt.Errorf("record %d of %s/%d does not fit a batch of %d bytes", i, tp.Topic, tp.Partition, ss.maxBatch)
						}
					}
					if b.Records() == 1 {
						start = recordAt{j, k, i}
					}
					r.last[j] = batchRecord{len(r.batches), b.Records() - 1}
				}
			}
		}
		if err := flush(); err != nil {
			return nil, err
		}
	}
	r.data = len(r.batches)
	return r, nil
}

// merge adds a small passing Kafka batch's records to the builder, after
// sealing what it holds if they do not fit with it (at, the part, becomes
// start then). It reports false, having added nothing and inflated no
// more than a batch's bytes, for a batch whose records alone are larger
// than a batch once decompressed.
func (ss *session) merge(p *part, at recordAt, start *recordAt, flush func() error) (bool, error) {
	b := ss.builder
	for {
		empty := b.Records() == 0
		// The target batch's limit bounds what AddBatch inflates: no
		// more than one batch's bytes whatever the source batch holds.
		ok, err := b.AddBatch(p.kafka.Raw, 0, ss.maxBatch)
		if err != nil {
			return false, fmt.Errorf("%w: Kafka batch at %d: %v", batch.ErrMalformed, p.kafka.Info.BaseOffset, err)
		}
		if ok {
			if empty {
				*start = at
			}
			return true, nil
		}
		if empty {
			return false, nil
		}
		if err := flush(); err != nil {
			return false, err
		}
	}
}

// seal builds the builder's records into one batch with the producer's
// compression, or uncompressed if compression made it larger than the
// limit (the builder kept them within it uncompressed).
func (ss *session) seal() ([]byte, error) {
	c := ss.s.opts.Producer.Compression
	raw, err := ss.builder.Build(c)
	if err != nil || len(raw) <= ss.maxBatch || c == recordbatch.None {
		return raw, err
	}
	return ss.builder.Build(recordbatch.None)
}

func toRecord(r *batch.Record) recordbatch.Record {
	rec := recordbatch.Record{Timestamp: r.Timestamp, Key: r.Key, Value: r.Value}
	if len(r.Headers) > 0 {
		rec.Headers = make([]recordbatch.Header, len(r.Headers))
		for i, h := range r.Headers {
			rec.Headers[i] = recordbatch.Header{Key: string(h.Key), Value: h.Value}
		}
	}
	return rec
}

// eachRecord calls f with each source record of data batch b, in order,
// decoding a passing Kafka batch (on the failure path only).
func (r *round) eachRecord(group []work, b int, f func(*batch.Record)) error {
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
			recs := p.recs
			if p.passes() && recs == nil {
				var err error
				if recs, err = kafkaRecords(p.kafka, w.b.GetFirstOffset(), r.maxDecoded); err != nil {
					return err
				}
			}
			for ; i < len(recs) && left > 0; i++ {
				f(&recs[i])
				left--
			}
		}
	}
	return nil
}
