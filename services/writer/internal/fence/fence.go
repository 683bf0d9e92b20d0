// Package fence ends, at the open of a shard, every target transaction the
// shard's earlier producers may have left open, and proves none is left on
// the shard's data partitions.
//
// Why this is needed (docs/exactly-once.md, "Transactions left open by the
// target"): Apache Kafka 4.x completes a transaction without writing its
// markers to a partition whose leader is unknown at that moment (its
// marker sender takes such partitions for deleted). A broker in controlled
// shutdown that is the only in-sync replica of its partitions sets their
// leader to none, so a commit that arrives then is acknowledged, recorded
// as CompleteCommit, and leaves its records open on the data partitions and
// its checkpoint open on the checkpoint partition. If the same producer
// commits again, its next marker ends them as committed and nothing is
// wrong. If instead the writer dies, the shard resumes from the checkpoint
// before the lost one and copies those records again; the new epoch's first
// commit marker on the data partition would then end the leftover records
// as committed too: duplicates.
//
// Abort ends every such leftover as aborted: it fences (InitProducerID with
// the shard's transactional id), adds every partition the shard may write
// to a new transaction and aborts it. The coordinator writes an abort
// marker of the new epoch to each partition, with no records, which ends as
// aborted whatever an older epoch of that producer left open there. The
// shard then resumes from the checkpoint before the leftover, with nothing
// of it visible. Open then checks, once the abort has completed, that the
// data partitions hold no open transaction of the shard's producer: the
// same Kafka behaviour can skip an abort marker too, and then the open must
// fail and be retried rather than commit the leftover. (Other producers'
// transactions on the same partitions are theirs: a target topic that
// applications write too, as in active-active with identity naming. The
// first check counted them, and held such a shard's open back for as long
// as they kept a transaction open: the active-active soak found it.)
package fence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/services/writer/internal/producer"
)

// Partitions are topic partitions by topic.
type Partitions map[string][]int32

// Abort fences the producers of transactionalID and ends, as aborted, any
// transaction of theirs left open on parts. It returns once the abort is
// recorded; its markers are written after that, before the coordinator lets
// the next producer of the id initialise or begin (it answers
// CONCURRENT_TRANSACTIONS until then). cl must cap its requests at
// producer.MaxVersions (producer.NewClient).
func Abort(ctx context.Context, cl *producer.Client, transactionalID string, timeout time.Duration, parts Partitions) error {
	p, err := producer.New(ctx, cl, producer.Options{TransactionalID: transactionalID, TransactionTimeout: timeout})
	if err != nil {
		return err
	}
	var tps []producer.TopicPartition
	for topic, ps := range parts {
		for _, part := range ps {
			tps = append(tps, producer.TopicPartition{Topic: topic, Partition: part})
		}
	}
	if err := p.AddPartitions(ctx, tps); err != nil {
		return err
	}
	return p.Abort(ctx)
}

// ErrStillOpen reports a transaction open on a data partition after Abort.
var ErrStillOpen = errors.New("transaction still open on target partition")

// CheckClosed returns ErrStillOpen, naming the partitions, if the shard's
// producer (producerID, its transactional id's) has a transaction open on
// any of parts. Call it after Abort has completed, that is once the shard's
// next producer has initialised: anything of producerID still open then is
// a leftover the abort's marker missed. A partition whose last stable
// offset (read_committed end) is its high watermark has none; one below is
// asked for its producers (DescribeProducers), since other producers may
// write the same target partitions (identity naming into a topic the
// target's own applications write, active-active) and their transactions
// are theirs.
func CheckClosed(ctx context.Context, cl *kgo.Client, parts Partitions, producerID int64) error {
	adm := kadm.NewClient(cl)
	topics := make([]string, 0, len(parts))
	for t := range parts {
		topics = append(topics, t)
	}
	stable, err := adm.ListCommittedOffsets(ctx, topics...)
	if err == nil {
		err = stable.Error()
	}
	if err != nil {
		return fmt.Errorf("last stable offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("end offsets: %w", err)
	}
	held := kadm.TopicsSet{} // partitions whose stable offset is held back
	lag := map[producer.TopicPartition]string{}
	for topic, ps := range parts {
		for _, p := range ps {
			s, okS := stable.Lookup(topic, p)
			e, okE := ends.Lookup(topic, p)
			if !okS || !okE {
				return fmt.Errorf("offsets of %s/%d: not in the answer", topic, p)
			}
			if s.Offset < e.Offset {
				held.Add(topic, p)
				lag[producer.TopicPartition{Topic: topic, Partition: p}] = fmt.Sprintf("%s/%d (stable %d, end %d)", topic, p, s.Offset, e.Offset)
			}
		}
	}
	if len(held) == 0 {
		return nil
	}
	described, err := adm.DescribeProducers(ctx, held)
	if err != nil {
		return fmt.Errorf("describe producers: %w", err)
	}
	var open []string
	for _, dt := range described {
		for _, dp := range dt.Partitions {
			if err := dp.Err; err != nil {
				return fmt.Errorf("describe producers of %s/%d: %w", dp.Topic, dp.Partition, err)
			}
			for _, pr := range dp.ActiveProducers {
				if pr.ProducerID == producerID && pr.CurrentTxnStartOffset >= 0 {
					open = append(open, lag[producer.TopicPartition{Topic: dp.Topic, Partition: dp.Partition}]+fmt.Sprintf(" from %d", pr.CurrentTxnStartOffset))
				}
			}
		}
	}
	if len(open) > 0 {
		return fmt.Errorf("%w by producer %d: %v", ErrStillOpen, producerID, open)
	}
	return nil
}
