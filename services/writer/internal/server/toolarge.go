package server

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ferry-replicator/ferry/pkg/batch"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/pkg/refusal"
	"github.com/ferry-replicator/ferry/services/writer/internal/producer"
)

// oversized returns the refusal of the first record of w above what the
// shard's producer sends and its target topics take (session.maxRecord):
// no retry would ever write it, so its partition must stop instead.
// Batches that pass through are no larger than the target takes.
func (ss *session) oversized(w work) error {
	for k := range w.parts {
		p := &w.parts[k]
		if p.passes() {
			continue
		}
		recs := p.targetRecords()
		for i := range recs {
			if size := recordbatch.RecordSize(recs[i]); size > ss.maxRecord {
				return refusal.Refusal{
					Reason: refusal.RecordTooLarge, Topic: w.b.GetTopic(), Partition: w.b.GetPartition(),
					Offset: p.recs[i].Offset, Size: int64(size), Limit: int64(ss.maxRecord), Setting: ss.maxRecordBy,
				}
			}
		}
	}
	return nil
}

// refusedByTarget is the refusal of a data batch the target refused for
// good for another reason than its size.
func refusedByTarget(err error, group []work, r *round) (refusal.Refusal, bool) {
	var perr *producer.PartitionError
	if !errors.As(err, &perr) || perr.Batch >= r.data || !producer.Permanent(err) {
		return refusal.Refusal{}, false // a checkpoint batch is not the source's
	}
	var (
		named *batch.Record
		i     int
	)
	err = r.eachRecord(group, perr.Batch, func(rec *batch.Record) {
		if i == max(perr.Record, 0) {
			named = rec
		}
		i++
	})
	if err != nil || named == nil {
		return refusal.Refusal{}, false
	}
	w := group[r.from[perr.Batch].member]
	return refusal.Refusal{
		Reason: refusal.TargetRefused, Topic: w.b.GetTopic(), Partition: w.b.GetPartition(), Offset: named.Offset,
		Cause: fmt.Sprintf("target %s/%d refused it: %v", perr.Topic, perr.Partition, perr.Err),
	}, true
}

func refusedRecord(err error, group []work, r *round) (refusal.Refusal, bool) {
	var perr *producer.PartitionError
	if !errors.As(err, &perr) || perr.Batch >= r.data ||
		!(errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)) {
		return refusal.Refusal{}, false // a checkpoint batch is not the source's
	}
	// The shard sends batches no larger than the topic takes, so a
	// refusal means a record alone is too large, as the brokers'
	// message.max.bytes below the topic's can make it: name the batch's
	// largest. Its records are found only on this failure path, so the
	// record path carries nothing extra.
	var (
		largest     *batch.Record
		largestSize int
	)
	err = r.eachRecord(group, perr.Batch, func(rec *batch.Record) {
		if size := recordbatch.RecordSize(toRecord(rec)); largest == nil || size > largestSize {
			largest, largestSize = rec, size
		}
	})
	if err != nil || largest == nil {
		return refusal.Refusal{}, false
	}
	w := group[r.from[perr.Batch].member]
	return refusal.Refusal{
		Reason: refusal.RecordTooLarge, Topic: w.b.GetTopic(), Partition: w.b.GetPartition(), Offset: largest.Offset,
		Size:    int64(largestSize),
		Setting: "what the target accepts (topic " + perr.Topic + " max.message.bytes, or the brokers' message.max.bytes)",
	}, true
}
