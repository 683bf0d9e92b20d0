package server

import (
	"fmt"
	"slices"
	"time"

	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/services/writer/internal/checkpoint"
	"github.com/ferry-replicator/ferry/services/writer/internal/offsetindex"
	"github.com/ferry-replicator/ferry/services/writer/internal/producer"
	"github.com/ferry-replicator/ferry/services/writer/internal/translation"
)

// progress owns what a shard's rounds commit beside their records: today
// the checkpoints, each partition's next source offset and the target
// offset after its last copied record. What joins each commit (the offset
// index, group offsets) belongs here too, so the committers (commit.go)
// only order writes and never compute what is written.
type progress struct {
	link   string
	writer string
	epoch  uint64
	store  *checkpoint.Store
	// topicIDs are the source topic IDs the Open reported.
	topicIDs map[string][]byte
	// target is each partition's target offset after its last copied
	// record, as its checkpoints record it: kept for rounds that copy none
	// of its records; -1 while unknown (nothing copied yet).
	target map[topicPartition]int64
	// index is the offset index topic; pending, the index entries of the
	// partitions of the last round reached computed, which add moves to
	// unindexed (index.go).
	index   offsetindex.Topic
	pending map[topicPartition]*offsetindex.Entry
	// unindexed are each partition's index entries not known to be in
	// the index topic, oldest first, which its checkpoints carry until
	// they are; flushing, how many of them the last round wrote there,
	// and flushed, when a round last did (index.go).
	unindexed map[topicPartition][]offsetindex.Entry
	flushing  map[topicPartition]int
	flushed   time.Time
	// atomic is set when a round's index records and checkpoints commit
	// together (exactly-once): a checkpoint then carries no entry its
	// round writes to the index topic.
	atomic bool
	// written are the index entries added to rounds whose checkpoints
	// are not committed yet; committed hands them to tr, the in-memory
	// index group sync translates with (translate.go).
	written map[topicPartition][]offsetindex.Entry
	tr      *translation.Translator
	// landmarks are each partition's landmarks in the index topic, which
	// its checkpoints carry (offsetindex.Landmark, index.go).
	landmarks map[topicPartition][]offsetindex.Landmark
}

// checkpoints are the checkpoints a round's partitions reach.
type checkpoints = map[topicPartition]checkpoint.Checkpoint

func newProgress(link, writer string, epoch uint64, store *checkpoint.Store, topicIDs map[string][]byte) *progress {
	return &progress{link: link, writer: writer, epoch: epoch, store: store, topicIDs: topicIDs, target: map[topicPartition]int64{},
		written: map[topicPartition][]offsetindex.Entry{}, tr: translation.New(),
		unindexed: map[topicPartition][]offsetindex.Entry{}, flushing: map[topicPartition]int{},
		landmarks: map[topicPartition][]offsetindex.Landmark{}}
}

func (p *progress) key(tp topicPartition) checkpoint.Key {
	return checkpoint.Key{Link: p.link, Topic: tp.Topic, Partition: tp.Partition}
}

// resume starts tp at its committed checkpoint, or with nothing copied
// yet when it has none; the index entries the checkpoint carries go on
// riding in tp's checkpoints until a flush writes them. A checkpoint that
// does not verify is an error (checkpoint.UnverifiedError): tp must stop,
// not start afresh.
func (p *progress) resume(tp topicPartition) (checkpoint.Checkpoint, bool, error) {
	cp, ok, err := p.store.Get(p.key(tp))
	p.target[tp] = -1
	p.tr.Resumed(tp, -1, -1, nil)
	delete(p.unindexed, tp)
	delete(p.landmarks, tp)
	if !ok || err != nil {
		return cp, ok, err
	}
	if offsetindex.CheckLandmarks(cp.Landmarks) {
		p.landmarks[tp] = cp.Landmarks // else left out: reads start at the log start
	}
	entries, err := decodeUnindexed(cp.Unindexed)
	if err != nil {
		return cp, ok, fmt.Errorf("checkpoint of %s: %w", p.key(tp), err)
	}
	p.target[tp] = cp.TargetOffset
	p.unindexed[tp] = entries
	p.tr.Resumed(tp, cp.NextSourceOffset, cp.TargetOffset, entries)
	return cp, ok, nil
}

// committed is told the checkpoints of a round that committed: the index
// entries written with them join the in-memory index.
func (p *progress) committed(cps checkpoints) {
	for tp, cp := range cps {
		p.tr.Confirm(tp, cp.NextSourceOffset, cp.TargetOffset, p.written[tp])
		delete(p.written, tp)
	}
}

// reached computes the checkpoint each partition of group reaches with
// produced round r (offsets: the target offsets of its batches' first
// records) and adds it to cps; a partition's last copied record moves its
// target offset.
func (p *progress) reached(group []work, r *round, offsets []int64, now time.Time, cps checkpoints) {
	p.pending = p.indexed(group, r, offsets)
	for j, w := range group {
		tp := topicPartition{Topic: w.b.GetTopic(), Partition: w.b.GetPartition()}
		if last := r.last[j]; last.batch >= 0 {
			p.target[tp] = offsets[last.batch] + int64(last.index) + 1
		}
		cps[tp] = checkpoint.Checkpoint{
			NextSourceOffset: w.b.GetLastOffset() + 1,
			TargetOffset:     p.target[tp],
			SourceTopicID:    p.topicIDs[w.b.GetTopic()],
			Epoch:            p.epoch,
			Writer:           p.writer,
			Time:             now,
			Landmarks:        slices.Clone(p.landmarks[tp]), // Mark reuses its array
		}
	}
}

// add appends to r one batch per checkpoint partition holding cps, each
// carrying its partition's unindexed entries, and the index records the
// round flushes (index.go).
func (p *progress) add(r *round, cps checkpoints, flush bool) error {
	carried, err := p.addIndex(r, cps, flush)
	if err != nil {
		return err
	}
	byPartition := map[int32][]recordbatch.Record{}
	var order []int32
	for tp, cp := range cps {
		cp.Unindexed = carried[tp]
		rec, err := p.store.Record(p.key(tp), cp)
		if err != nil {
			return err
		}
		if _, ok := byPartition[rec.Partition]; !ok {
			order = append(order, rec.Partition)
		}
		headers := make([]recordbatch.Header, len(rec.Headers))
		for i, h := range rec.Headers {
			headers[i] = recordbatch.Header(h)
		}
		byPartition[rec.Partition] = append(byPartition[rec.Partition], recordbatch.Record{Timestamp: rec.Time.UnixMilli(), Key: rec.Key, Value: rec.Value, Headers: headers})
	}
	for _, part := range order {
		raw, err := recordbatch.Build(nil, byPartition[part], recordbatch.None)
		if err != nil {
			return fmt.Errorf("build checkpoint batch: %w", err)
		}
		r.batches = append(r.batches, producer.Batch{Topic: p.store.Topic(), Partition: part, Raw: raw})
	}
	return nil
}

// partitions are the target partitions a round of group writes, which
// join its transaction as it begins: those of its batches (r), the
// checkpoint partitions of its source partitions and, if the round is to
// flush the index (flushDue), their index partitions.
func (p *progress) partitions(group []work, r *round, flush bool) []producer.TopicPartition {
	seen := map[producer.TopicPartition]bool{}
	var out []producer.TopicPartition
	add := func(tp producer.TopicPartition) {
		if !seen[tp] {
			seen[tp] = true
			out = append(out, tp)
		}
	}
	for _, b := range r.batches {
		add(producer.TopicPartition{Topic: b.Topic, Partition: b.Partition})
	}
	for _, w := range group {
		tp := topicPartition{Topic: w.b.GetTopic(), Partition: w.b.GetPartition()}
		add(producer.TopicPartition{Topic: p.store.Topic(), Partition: p.store.PartitionOf(p.key(tp))})
		if flush {
			add(producer.TopicPartition{Topic: p.index.Name, Partition: p.index.PartitionOf(p.indexKey(tp))})
		}
	}
	return out
}
