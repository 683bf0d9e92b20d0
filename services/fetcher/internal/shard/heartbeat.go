package shard

import (
	"context"
	"fmt"

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
		if hb := s.r.heartbeat(read); hb != nil {
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

// heartbeat is the heartbeat of a read, in the shard's partition order;
// nil when nothing has been read yet.
func (r *Runner) heartbeat(read map[discovery.Partition]sourcewatch.Observed) *ferryv1.Heartbeat {
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
	}
	return hb
}

// sendRequest sends one request on the stream, in turn with the others.
func (s *session) sendRequest(req *ferryv1.ReplicateRequest) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.stream.Send(req)
}
