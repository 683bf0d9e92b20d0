package server

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/services/writer/internal/checkpoint"
	"github.com/ferry-replicator/ferry/services/writer/internal/heartbeat"
	"github.com/ferry-replicator/ferry/services/writer/internal/metrics"
)

// errBadHeartbeat is a heartbeat the writer refuses: for a partition the
// stream's Open does not list, or with offsets that make no sense. A
// fetcher is admitted, not trusted blindly: the meter it feeds decides
// whether an operator fails over.
var errBadHeartbeat = errors.New("bad heartbeat")

// other handles a request that is not a batch: a heartbeat, group offsets
// (groups.go), or a message
// of a newer fetcher this writer does not know (a field of the oneof it
// was built without), which it ignores so that a fetcher may add one
// without breaking it. handled is false for a batch, and for a request
// with nothing in it at all, which the batch check refuses.
func (ss *session) other(req *ferryv1.ReplicateRequest) (handled bool, err error) {
	if hb := req.GetHeartbeat(); hb != nil {
		return true, ss.heartbeat(hb)
	}
	if g := req.GetGroupOffsets(); g != nil {
		return true, ss.groupOffsets(g)
	}
	if req.GetMsg() == nil && len(req.ProtoReflect().GetUnknown()) > 0 {
		return true, nil
	}
	return false, nil
}

// heartbeat checks a heartbeat whole, then keeps it: nothing of a refused
// one is kept.
func (ss *session) heartbeat(hb *ferryv1.Heartbeat) error {
	if cur := ss.s.currentEpoch(ss.link.Name, ss.shard); hb.GetEpoch() != ss.epoch || hb.GetEpoch() < cur {
		ss.s.metrics.StaleEpochs.WithLabelValues(ss.link.Name).Inc()
		return fmt.Errorf("%w: heartbeat epoch %d on a stream of epoch %d, shard at %d", errStaleEpoch, hb.GetEpoch(), ss.epoch, cur)
	}
	seen := make(map[topicPartition]bool, len(hb.GetPartitions()))
	beats := make([]heartbeat.Beat, len(hb.GetPartitions()))
	for i, p := range hb.GetPartitions() {
		tp := topicPartition{Topic: p.GetTopic(), Partition: p.GetPartition()}
		field := fmt.Sprintf("heartbeat.partitions[%d]", i)
		if !ss.opened[tp] {
			return fmt.Errorf("%w: %s: %s/%d is not in shard %d's open", errBadHeartbeat, field, Clip(tp.Topic), tp.Partition, ss.shard)
		}
		if seen[tp] {
			return fmt.Errorf("%w: %s: %s/%d listed twice", errBadHeartbeat, field, tp.Topic, tp.Partition)
		}
		seen[tp] = true
		b := heartbeat.Beat{HighWatermark: p.GetHighWatermark(), LogStart: p.GetLogStartOffset(),
			HeadOffset: p.GetHeadOffset(), HeadTimestamp: p.GetHeadTimestamp(), ObservedAt: p.GetObservedAt(),
			ReadNext: -1, PendingRecords: -1}
		if p.GetReadsCounted() {
			switch {
			case p.GetReadNext() < 0:
				return fmt.Errorf("%w: %s.read_next %d is negative", errBadHeartbeat, field, p.GetReadNext())
			case p.GetRecordsRead() < 0:
				return fmt.Errorf("%w: %s.records_read %d is negative", errBadHeartbeat, field, p.GetRecordsRead())
			}
			b.ReadNext = p.GetReadNext()
		}
		st := heartbeat.Unknown
		st.HighWatermark, st.LogStart, st.HeadOffset, st.HeadTimestamp, st.ObservedAt = b.HighWatermark, b.LogStart, b.HeadOffset, b.HeadTimestamp, b.ObservedAt
		if b.HighWatermark < 0 {
			return fmt.Errorf("%w: %s.high_watermark %d is negative", errBadHeartbeat, field, b.HighWatermark)
		}
		var bad *heartbeat.FieldError
		if err := st.Check(); errors.As(err, &bad) {
			return fmt.Errorf("%w: %s.%s %s", errBadHeartbeat, field, bad.Field, bad.Problem)
		} else if err != nil {
			return fmt.Errorf("%w: %s: %v", errBadHeartbeat, field, err)
		}
		beats[i] = b
	}
	for i, p := range hb.GetPartitions() {
		ss.obs.beat(heartbeat.Key{Link: ss.link.Name, Topic: p.GetTopic(), Partition: p.GetPartition()}, beats[i], p.GetRecordsRead())
	}
	return nil
}

// beat keeps a heartbeat of the stream. Of one that counted its reads, the
// records read but not committed are what the fetcher read (read, since
// the stream opened) less what the stream committed: both count each
// batch's record_count, so markers and aborted records (in no batch) are
// never among them.
func (o *observer) beat(k heartbeat.Key, b heartbeat.Beat, read int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if b.ReadNext >= 0 {
		b.PendingRecords = max(0, read-o.records[k])
	}
	o.beats.Beat(k, b)
}

// committedRecords counts the records of a committed batch of k ending at
// last, for the stream's next heartbeats and the table's pending records.
func (o *observer) committedRecords(k heartbeat.Key, last, n int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.records == nil {
		o.records = map[heartbeat.Key]int64{}
	}
	o.records[k] += n
	o.beats.CommittedRecords(k, last, n)
}

// commitTimes keeps, per partition of batches whose checkpoints are now
// committed, the largest source timestamp of their records: the meter's
// seconds are the source head's timestamp minus it.
func (o *observer) commitTimes(done committed) {
	if o.beats == nil {
		return
	}
	for _, w := range done.batches {
		k := heartbeat.Key{Link: o.link.Name, Topic: w.b.GetTopic(), Partition: w.b.GetPartition()}
		if n := w.b.GetRecordCount(); n > 0 {
			o.committedRecords(k, w.b.GetLastOffset(), int64(n))
		}
		ts := maxTimestamp(w)
		if ts < 0 {
			continue // a Skip: no records
		}
		if st, _ := o.beats.Get(k); st.CommittedNext > w.b.GetLastOffset() && st.CommittedTimestamp >= ts {
			continue
		}
		o.beats.Committed(k, w.b.GetLastOffset()+1, ts)
	}
}

// maxTimestamp is the largest source timestamp of w's records, -1 if it
// has none. A passing Kafka batch's is in its header; that counts the
// batch's records below the batch's first offset too, which were copied
// before.
func maxTimestamp(w work) int64 {
	ts := int64(-1)
	for i := range w.parts {
		p := &w.parts[i]
		if p.passes() {
			ts = max(ts, p.kafka.Info.MaxTimestamp)
			continue
		}
		for j := range p.recs {
			ts = max(ts, p.recs[j].Timestamp)
		}
	}
	return ts
}

// Failover is the failover meter: per partition of the writer's links with
// a heartbeat, what a failover now would lose, from the target side alone
// (the heartbeat table and the checkpoint view): it answers with the
// source gone.
func (s *Server) Failover() []heartbeat.Exposure {
	now := time.Now()
	var out []heartbeat.Exposure
	for k, st := range s.beats.All() {
		if _, ok := s.links[k.Link]; !ok || !st.HasHeartbeat() {
			continue
		}
		e := heartbeat.ExposureOf(k, st, s.committed(k), now)
		e.Resume, e.Moved = s.resumeAt(k)
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b heartbeat.Exposure) int {
		return strings.Compare(a.Link+"/"+a.Topic, b.Link+"/"+b.Topic)*2 + cmp.Compare(a.Partition, b.Partition)
	})
	return out
}

// committed is k's committed next source offset, -1 when none is. A
// checkpoint that does not verify counts as none: the meter may overstate
// what is at risk, never understate it.
func (s *Server) committed(k heartbeat.Key) int64 {
	if cp, ok, err := s.store.Get(checkpoint.Key{Link: k.Link, Topic: k.Topic, Partition: k.Partition}); ok && err == nil {
		return cp.Copied() // not where failback moved it: what the target holds
	}
	return -1
}

// resumeAt is where k's link resumes (its checkpoint's next source
// offset, -1 when none) and whether an operator moved it past the copy.
func (s *Server) resumeAt(k heartbeat.Key) (int64, bool) {
	if cp, ok, err := s.store.Get(checkpoint.Key{Link: k.Link, Topic: k.Topic, Partition: k.Partition}); ok && err == nil {
		return cp.NextSourceOffset, cp.CopiedNext != nil
	}
	return -1, false
}

// failoverMetrics is the meter as the metrics serve it.
func (s *Server) failoverMetrics() []metrics.Exposure {
	all := s.Failover()
	out := make([]metrics.Exposure, len(all))
	for i, e := range all {
		out[i] = metrics.Exposure{Link: e.Link, Topic: e.Topic, Partition: e.Partition, Records: e.Records, HeartbeatAge: e.HeartbeatAge}
		if e.Seconds != nil {
			out[i].Seconds, out[i].HasSeconds = *e.Seconds, true
		}
	}
	return out
}
