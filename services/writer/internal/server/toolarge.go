package server

import (
	"errors"
	"slices"

	"github.com/IBM/sarama"

	"github.com/ferry-replicator/ferry/pkg/batch"
	"github.com/ferry-replicator/ferry/pkg/refusal"
)

// recordOverhead is what sarama adds to a record's key, value and headers
// when it checks Producer.MaxMessageBytes (ProducerMessage.ByteSize, record
// format 2): the largest varints of a record's fields.
// recordBatchOverhead is the header of a record batch (format 2), which a
// topic's max.message.bytes counts too.
const (
	recordOverhead      = 5*5 + 10 + 1
	headerOverhead      = 2 * 5
	recordBatchOverhead = 61
)

// recordSize is the size sarama's producer checks against its
// MaxMessageBytes, computed without building the message.
func recordSize(r *batch.Record) int {
	n := recordOverhead + len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value) + headerOverhead
	}
	return n
}

// oversized returns the refusal of the first record of w above what the
// shard's producer sends and its target topics take (session.maxRecord):
// no retry would ever write it, so its partition must stop instead.
func (ss *session) oversized(w work) error {
	for i := range w.recs {
		if size := recordSize(&w.recs[i]); size > ss.maxRecord {
			return refusal.Refusal{
				Reason: refusal.RecordTooLarge, Topic: w.b.GetTopic(), Partition: w.b.GetPartition(),
				Offset: w.recs[i].Offset, Size: int64(size), Limit: int64(ss.maxRecord), Setting: ss.maxRecordBy,
			}
		}
	}
	return nil
}

// refusedBy finds, in a failed produce of group's records (msgs, in
// order, then any checkpoints), a record the target refused as too large
// (the target topic's max.message.bytes, or the broker's
// message.max.bytes): its refusal, counted, or err unchanged.
func (ss *session) refusedBy(err error, group []work, msgs []*sarama.ProducerMessage) error {
	if r, ok := refusedRecord(err, group, msgs); ok {
		ss.s.metrics.Rejected.WithLabelValues(ss.link.Name, "record_too_large").Inc()
		return r
	}
	return err
}

func refusedRecord(err error, group []work, msgs []*sarama.ProducerMessage) (refusal.Refusal, bool) {
	var perrs sarama.ProducerErrors
	if !errors.As(err, &perrs) {
		return refusal.Refusal{}, false
	}
	// The batch the broker refused holds the failed messages of a
	// partition; the largest is the one to name (the producer sends
	// batches no larger than the topic takes, so a refusal means a record
	// alone is too large, as the broker's message.max.bytes below the
	// topic's can make it).
	var largest *sarama.ProducerMessage
	for _, pe := range perrs {
		if errors.Is(pe.Err, sarama.ErrMessageSizeTooLarge) && (largest == nil || pe.Msg.ByteSize(2) > largest.ByteSize(2)) {
			largest = pe.Msg
		}
	}
	if largest == nil {
		return refusal.Refusal{}, false
	}
	// Its source record: msgs follow group's records one for one. Found
	// only on this failure path, so the record path carries nothing extra.
	i := slices.Index(msgs, largest)
	for _, w := range group {
		if i < 0 {
			break
		}
		if i < len(w.recs) {
			return refusal.Refusal{
				Reason: refusal.RecordTooLarge, Topic: w.b.GetTopic(), Partition: w.b.GetPartition(), Offset: w.recs[i].Offset,
				Size:    int64(largest.ByteSize(2)),
				Setting: "what the target accepts (topic " + largest.Topic + " max.message.bytes, or the brokers' message.max.bytes)",
			}, true
		}
		i -= len(w.recs)
	}
	return refusal.Refusal{}, false // a checkpoint record: not the source's
}
