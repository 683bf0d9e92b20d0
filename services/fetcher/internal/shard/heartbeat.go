package shard

import (
	"context"
	"fmt"
	"maps"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/discovery"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/sourcewatch"
)

// heartbeats sends a heartbeat after each read of the source's offsets
// (package sourcewatch), until ctx ends, whether or not data flows: the writer
// keeps the last one of each partition, so the target side knows what the
// source held when the source is gone (the failover meter). The session
// starts it only for a writer whose Opened says it takes heartbeats.
func (s *session) heartbeats(ctx context.Context) error {
	for {
		read, next := s.r.lastRead()
		if hb := s.r.heartbeat(read, s.counts()); hb != nil {
			if err := s.report(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Heartbeat{Heartbeat: hb}}); err != nil {
				return fmt.Errorf("send heartbeat: %w", err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-next:
		}
	}
}

// readCount is what a session queued of a partition to its stream: the
// offset after it, and the records of its batches (their record_count:
// transaction markers and aborted records are in none).
type readCount struct {
	next, records int64
}

// countFrom starts the session's counts at the partitions' first offsets.
func (s *session) countFrom(start map[discovery.Partition]int64) {
	s.countMu.Lock()
	defer s.countMu.Unlock()
	s.counted = make(map[discovery.Partition]readCount, len(start))
	for p, off := range start {
		s.counted[p] = readCount{next: off}
	}
}

// countedTo records that the session queued p up to next, records more.
func (s *session) countedTo(p discovery.Partition, next int64, records uint32) {
	s.countMu.Lock()
	defer s.countMu.Unlock()
	c := s.counted[p]
	s.counted[p] = readCount{next: next, records: c.records + int64(records)}
}

// counts is a copy of the session's counts.
func (s *session) counts() map[discovery.Partition]readCount {
	s.countMu.Lock()
	defer s.countMu.Unlock()
	return maps.Clone(s.counted)
}

// heartbeat is the heartbeat of a read, in the shard's partition order,
// with what the session queued of each partition (counted); nil when
// nothing has been read yet.
func (r *Runner) heartbeat(read map[discovery.Partition]sourcewatch.Observed, counted map[discovery.Partition]readCount) *ferryv1.Heartbeat {
	if len(read) == 0 {
		return nil
	}
	hb := &ferryv1.Heartbeat{Epoch: r.epoch}
	for _, p := range r.parts {
		o, ok := read[p]
		if !ok {
			continue
		}
		hb.Partitions = append(hb.Partitions, &ferryv1.PartitionHeartbeat{
			Topic: p.Topic, Partition: p.Partition,
			HighWatermark: o.HighWatermark, LogStartOffset: o.LogStart,
			HeadTimestamp: o.HeadTimestamp, HeadOffset: o.HeadOffset,
			ObservedAt: o.At.UnixMilli(),
		})
		if c, ok := counted[p]; ok {
			ph := hb.Partitions[len(hb.Partitions)-1]
			ph.ReadNext, ph.RecordsRead, ph.ReadsCounted = c.next, c.records, true
		}
	}
	return hb
}

// sendRequest sends one request on the stream, in turn with the others.
func (s *session) sendRequest(req *ferryv1.ReplicateRequest) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.stream.Send(req)
}
