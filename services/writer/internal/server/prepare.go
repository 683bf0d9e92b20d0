package server

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/pkg/refusal"
	"github.com/ferry-replicator/ferry/services/writer/internal/checkpoint"
	"github.com/ferry-replicator/ferry/services/writer/internal/fence"
	"github.com/ferry-replicator/ferry/services/writer/internal/producer"
	"github.com/ferry-replicator/ferry/services/writer/internal/topics"
)

// The steps that open a shard, before its first batch: the target topics
// ensured and their batch limit taken, the shard's older transactions
// fenced (exactly-once), the producer created and recorded, the
// checkpoints synced and the resume positions answered.

// prepare runs the open's steps on the stream's target client cl and
// returns the shard's producer and the target's Kafka cluster id (for the
// Opened; empty without a Recorder).
func (ss *session) prepare(log *slog.Logger, cl *producer.Client) (prod *producer.Producer, targetCluster string, err error) {
	s := ss.s
	limit := s.opts.Producer.MaxMessageBytes
	by := "the writer's producer.max_message_bytes"
	for _, t := range ss.open.GetTopics() {
		target := ss.link.Naming.Target(t.GetName())
		configs, dropped := ss.link.Configs.Copy(t.GetConfigs())
		err := step(log, "ensure target topic", func() error {
			return s.topics.Ensure(topics.Spec{
				Name:              target,
				Partitions:        t.GetPartitionCount(),
				ReplicationFactor: ss.link.ReplicationFactor,
				Configs:           configs,
				Dropped:           dropped,
			})
		})
		if err != nil {
			return nil, "", err
		}
		ss.syncTopic(log, target, t, configs)
		// A target topic that takes smaller batches than the producer
		// would send refuses them all, however small the records: the
		// shard sends batches no larger than it takes, and a record
		// above that stops its partition (oversized).
		topicMax, err := s.topics.MaxMessageBytes(target)
		if err != nil {
			return nil, "", err
		}
		if topicMax < limit {
			limit, by = topicMax, "target topic "+target+" max.message.bytes "+strconv.Itoa(topicMax)
		}
	}
	if r := s.opts.Index.Retention; r > 0 {
		for _, topic := range s.gaps.note(ss.link.Name, ss.open.GetTopics(), r) {
			log.Warn("the offset index cannot cover this source topic: a consumer group further behind than the index keeps translates as before_index at failover",
				"topic", topic, "why", s.gaps.reason(ss.link.Name, topic))
		}
	}
	ss.maxBatch = limit
	ss.maxRecord, ss.maxRecordBy = limit-recordbatch.HeaderSize, by+" less the batch header"
	popts := producer.Options{Timeout: s.opts.Producer.Timeout}
	if ss.link.ExactlyOnce {
		// One transactional id per shard. Abort fences every older
		// producer of the shard, on this writer or any other, and ends
		// as aborted whatever they left open on the shard's partitions
		// (package fence says why a coordinator can leave one); the
		// producer created next fences again and waits for that abort
		// to complete, all before the checkpoints are read below.
		popts.TransactionalID = transactionalID(ss.link.Name, ss.shard)
		popts.TransactionTimeout = s.opts.Producer.TransactionTimeout
		err := step(log, "abort open transactions", func() error {
			return fence.Abort(ss.ctx, cl, popts.TransactionalID, popts.TransactionTimeout, ss.writable())
		})
		if err != nil {
			return nil, "", fmt.Errorf("abort open transactions of shard %d: %w", ss.shard, err)
		}
	}
	err = step(log, "target producer", func() (err error) {
		prod, err = producer.New(ss.ctx, cl, popts)
		if err != nil {
			return fmt.Errorf("target producer: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	if rec := s.opts.Recorder; rec != nil {
		id, _ := prod.ID()
		err := step(log, "record producer id", func() (err error) {
			// The fetcher skips what this writer copies only when it
			// reads the target on a link back to the source: it
			// compares the source recorded here with its own target.
			if targetCluster, err = rec.ClusterID(ss.ctx); err != nil {
				return err
			}
			return rec.Record(ss.ctx, id, ss.link.Name, ss.shard, ss.open.GetSourceClusterId())
		})
		if err != nil {
			return nil, "", err
		}
	}
	if ss.link.ExactlyOnce {
		err := step(log, "check no transaction open", func() error {
			id, _ := prod.ID()
			return fence.CheckClosed(ss.ctx, cl.Client, ss.dataPartitions(), id)
		})
		if err != nil {
			return nil, "", fmt.Errorf("open shard %d: %w", ss.shard, err)
		}
	}
	return prod, targetCluster, step(log, "checkpoint sync", func() error { return s.store.Sync(ss.ctx) })
}

// resume answers the open: each partition's resume position from its
// committed checkpoint, which also sets where the stream starts. A
// partition whose checkpoint does not verify is refused (unverified),
// and the open with it.
func (ss *session) resume(log *slog.Logger, targetCluster string) (*ferryv1.Opened, error) {
	s := ss.s
	opened := &ferryv1.Opened{Writer: s.opts.ID, TargetClusterId: targetCluster}
	for tp := range ss.next {
		pos := &ferryv1.PartitionPosition{Topic: tp.Topic, Partition: tp.Partition}
		cp, ok, err := ss.progress.resume(tp)
		if err != nil {
			return nil, unverified(log, ss.link.Name, tp, err)
		}
		if ok {
			pos.NextOffset, pos.HasCheckpoint, pos.SourceTopicId = cp.NextSourceOffset, true, cp.SourceTopicID
			ss.next[tp] = cp.NextSourceOffset
			// A checkpoint of an earlier topic of the name (deleted and
			// created again) does not bound the new one's offsets, which
			// start anew: the fetcher, told the old id, stops the
			// partition, or under on_data_loss: skip copies the new topic
			// from its start.
			if id := ss.topicIDs[tp.Topic]; len(id) > 0 && len(cp.SourceTopicID) > 0 && !bytes.Equal(id, cp.SourceTopicID) {
				ss.next[tp] = 0
				ss.progress.tr.Resumed(tp, -1, -1, nil) // the old topic's copy is no group's position
			}
		}
		opened.Resume = append(opened.Resume, pos)
	}
	return opened, nil
}

// unverified is the refusal of tp, whose checkpoint did not verify (err),
// logged loudly: the fetcher stops the partition (checkpoint_unverified)
// and opens the shard again without it. Starting it from start_from
// instead would copy it again, or skip what is not copied yet.
func unverified(log *slog.Logger, link string, tp topicPartition, err error) error {
	var ue *checkpoint.UnverifiedError
	if !errors.As(err, &ue) {
		return fmt.Errorf("checkpoint of %s/%d: %w", tp.Topic, tp.Partition, err)
	}
	log.Error("partition stopped: its checkpoint does not verify (forged, replayed or signed by a writer checkpoints.signers does not admit)",
		"link", link, "topic", tp.Topic, "partition", tp.Partition, "reason", "checkpoint_unverified",
		"checkpoint_topic", ue.Topic, "checkpoint_partition", ue.Partition, "checkpoint_offset", ue.Offset, "err", ue.Err)
	return refusal.Refusal{
		Reason: refusal.CheckpointUnverified, Topic: tp.Topic, Partition: tp.Partition, Offset: ue.Offset,
		Setting: ue.Topic + " partition " + strconv.Itoa(int(ue.Partition)), Cause: ue.Err.Error(),
	}
}

// dataPartitions are the target partitions the shard's records go to.
func (ss *session) dataPartitions() fence.Partitions {
	parts := fence.Partitions{}
	for tp := range ss.next {
		t := ss.link.Naming.Target(tp.Topic)
		parts[t] = append(parts[t], tp.Partition)
	}
	return parts
}

// writable are all the target partitions the shard's transactions touch:
// its data partitions and every checkpoint and offset index partition.
func (ss *session) writable() fence.Partitions {
	parts := ss.dataPartitions()
	for p := range ss.s.store.Partitions() {
		parts[ss.s.store.Topic()] = append(parts[ss.s.store.Topic()], p)
	}
	for p := range ss.s.opts.Index.Partitions {
		parts[ss.s.opts.Index.Name] = append(parts[ss.s.opts.Index.Name], p)
	}
	return parts
}

// step runs one step of an open and logs, every openStepWarn, that it is
// still waiting, so a stuck open names what it waits for.
func step(log *slog.Logger, name string, f func() error) error {
	start := time.Now()
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(openStepWarn)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				log.Warn("shard open step slow", "step", name, "waited", time.Since(start).Round(time.Second))
			}
		}
	}()
	err := f()
	close(done)
	log.Debug("shard open step done", "step", name, "took", time.Since(start), "err", err)
	return err
}

// openStepWarn is how long an open step may wait before it is logged.
const openStepWarn = 10 * time.Second

// transactionalID names the target producer of a shard. It must never
// change for a shard, or fencing across owners would be lost.
func transactionalID(link string, shard uint32) string {
	return "ferry-" + link + "-" + strconv.Itoa(int(shard))
}
