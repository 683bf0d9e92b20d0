package server

import (
	"testing"
	"time"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/services/writer/internal/offsetindex"
)

// A partition's checkpoint records the target offset after its last copied
// record, and keeps it through rounds that copy none of its records (a
// Skip, or a batch compaction emptied); a partition nothing was copied of
// yet records -1. progress alone keeps that position: committers only
// order the writes.
func TestProgressKeepsTargetPosition(t *testing.T) {
	a, b := topicPartition{Topic: "t", Partition: 0}, topicPartition{Topic: "t", Partition: 1}
	p := newProgress("east", "w1", 7, nil, map[string][]byte{"t": []byte("id")})
	p.target[a], p.target[b] = -1, -1
	batchOf := func(tp topicPartition, first, last int64) work {
		return work{b: &ferryv1.Batch{Topic: tp.Topic, Partition: tp.Partition, FirstOffset: first, LastOffset: last}}
	}
	now := time.Unix(1000, 0)

	// Round 1: a's batch 10..12 lands as target batch 0 (first record at
	// target offset 100); b's skip copies nothing.
	cps := checkpoints{}
	r := &round{last: []batchRecord{{batch: 0, index: 2}, {batch: -1}}}
	p.reached([]work{batchOf(a, 10, 12), batchOf(b, 0, 4)}, r, []int64{100}, now, cps)
	if got := cps[a]; got.NextSourceOffset != 13 || got.TargetOffset != 103 || got.Epoch != 7 || got.Writer != "w1" || string(got.SourceTopicID) != "id" || !got.Time.Equal(now) {
		t.Errorf("round 1: checkpoint of a = %+v, want next 13, target 103, epoch 7, writer w1, topic id, time", got)
	}
	if got := cps[b]; got.NextSourceOffset != 5 || got.TargetOffset != -1 {
		t.Errorf("round 1: checkpoint of b = %+v, want next 5, target -1", got)
	}

	// Round 2: a's skip 13..20 keeps the target offset round 1 reached.
	cps = checkpoints{}
	r = &round{last: []batchRecord{{batch: -1}}}
	p.reached([]work{batchOf(a, 13, 20)}, r, nil, now, cps)
	if got := cps[a]; got.NextSourceOffset != 21 || got.TargetOffset != 103 {
		t.Errorf("round 2: checkpoint of a = %+v, want next 21, target 103 kept", got)
	}
}

// A round that was to flush a partition's index entries and failed may
// have written none of them: the next round (settle's, after a cut) must
// still carry or flush them, not take them as in the index topic.
func TestFailedFlushIsNotTakenAsWritten(t *testing.T) {
	a := topicPartition{Topic: "t", Partition: 0}
	p := newProgress("east", "w1", 7, nil, nil)
	p.index = offsetindex.Topic{Name: "idx", Partitions: 1}
	p.target[a] = -1
	r := &round{last: []batchRecord{{batch: 0, index: 4}}}
	p.reached([]work{{b: &ferryv1.Batch{Topic: "t", Partition: 0, FirstOffset: 0, LastOffset: 4}}}, r, []int64{0}, time.Unix(1000, 0), checkpoints{})
	flushing := &round{}
	if _, err := p.addIndex(flushing, checkpoints{a: {}}, true); err != nil {
		t.Fatal(err)
	}
	if len(flushing.batches) != 1 {
		t.Fatalf("the flushing round holds %d index batches, want 1", len(flushing.batches))
	}
	p.unflush() // its produce failed
	carried, err := p.addIndex(&round{}, checkpoints{a: {}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(carried[a]) != 1 {
		t.Fatalf("after the failed flush the checkpoint carries %d entries, want the one not known to be in the index topic", len(carried[a]))
	}
}
