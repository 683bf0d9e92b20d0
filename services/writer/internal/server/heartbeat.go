package server

import (
	"errors"
	"fmt"
	"math"
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
			return fmt.Errorf("%w: %s: %s/%d is not in shard %d's open", errBadHeartbeat, field, clip(tp.Topic), tp.Partition, ss.shard)
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

// Exposure is one partition's line of the failover meter in /status.
type Exposure struct {
	Link      string `json:"link"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// SourceHighWatermark and SourceLogStart are the last heartbeat's.
	SourceHighWatermark int64 `json:"source_high_watermark"`
	SourceLogStart      int64 `json:"source_log_start_offset"`
	// Committed is the next source offset committed on the target (the
	// checkpoint), -1 when nothing is.
	Committed int64 `json:"committed_next_offset"`
	// Records would be lost if the source died now.
	Records int64 `json:"exposure_records"`
	// Seconds is the source time those records span: the source head's
	// timestamp minus that of the last record committed on the target;
	// the partition's lag in seconds. Absent when unknown.
	Seconds *float64 `json:"exposure_seconds,omitempty"`
	// HeartbeatAge is the last heartbeat's age in seconds, from when the
	// fetcher read the source (its clock) to now (the writer's).
	HeartbeatAge float64 `json:"heartbeat_age_seconds"`
	// ObservedAt is when the fetcher read the source.
	ObservedAt time.Time `json:"heartbeat_observed_at"`
	// AppendRate is the source's append rate at the last heartbeat
	// (offsets a second, heartbeat.State.AppendRate), and AfterHeartbeat
	// the offsets it estimates the source took since, which no heartbeat
	// reported: AppendRate times HeartbeatAge, rounded up. After a region
	// loss the age runs on past the loss, so the estimate only grows
	// beyond what the source can have taken. Absent while the rate is
	// unknown (fewer than two heartbeats).
	AppendRate     *float64 `json:"source_append_rate,omitempty"`
	AfterHeartbeat *int64   `json:"after_heartbeat_estimate_offsets,omitempty"`
	// LostRecords are Records' records below what the fetcher had read at
	// the last heartbeat (ReadNext) not committed on the target: records,
	// exactly, not offsets (no transaction marker or aborted record is
	// among them); nil while unknown (a fetcher older than the count).
	// UnreadOffsets are Records' offsets at and above ReadNext, which no
	// one read: at most that many records more.
	LostRecords   *int64 `json:"lost_records,omitempty"`
	UnreadOffsets *int64 `json:"unread_offsets,omitempty"`
	// Moved says an operator moved the checkpoint past Committed
	// (failback), and Resume is where the link resumes: the checkpoint's
	// next source offset, -1 when there is none.
	Moved  bool  `json:"checkpoint_moved,omitempty"`
	Resume int64 `json:"resume_next_offset"`
}

// afterHeartbeat estimates the offsets a source appending rate a second
// took in age seconds, rounded up; nil for an unknown rate.
func afterHeartbeat(rate, age float64) *int64 {
	if rate < 0 {
		return nil
	}
	v := int64(math.Ceil(math.Min(rate*age, math.MaxInt64/2)))
	return &v
}

// Failover is the failover meter: per partition of the writer's links with
// a heartbeat, what a failover now would lose, from the target side alone
// (the heartbeat table and the checkpoint view): it answers with the
// source gone.
func (s *Server) Failover() []Exposure {
	now := time.Now()
	var out []Exposure
	for k, st := range s.beats.All() {
		if _, ok := s.links[k.Link]; !ok || !st.HasHeartbeat() {
			continue
		}
		e := exposure(k, st, s.committed(k), now)
		e.Resume, e.Moved = s.resumeAt(k)
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Exposure) int {
		return strings.Compare(a.Link+"/"+a.Topic, b.Link+"/"+b.Topic)*2 + cmpInt(a.Partition, b.Partition)
	})
	return out
}

func cmpInt(a, b int32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
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

// exposure computes a partition's meter. What is at risk is what the
// source held above both the checkpoint and its log start (below the log
// start, retention has removed it already): nothing committed, all the
// source holds. A heartbeat older than the checkpoint can say less than
// is committed: the meter is then 0, not negative. The seconds come from
// the last round this writer committed, so after the partition was
// copied elsewhere they can be more than the truth, never less.
func exposure(k heartbeat.Key, st heartbeat.State, next int64, now time.Time) Exposure {
	e := Exposure{
		Link: k.Link, Topic: k.Topic, Partition: k.Partition,
		SourceHighWatermark: st.HighWatermark, SourceLogStart: st.LogStart, Committed: next,
		Records:      max(0, st.HighWatermark-max(next, st.LogStart)),
		HeartbeatAge: max(0, now.Sub(time.UnixMilli(st.ObservedAt)).Seconds()),
		ObservedAt:   time.UnixMilli(st.ObservedAt).UTC(),
	}
	switch {
	case e.Records == 0:
		e.Seconds = new(float64)
	case st.HeadTimestamp >= 0 && st.CommittedTimestamp >= 0 && next >= 0:
		v := math.Max(0, float64(st.HeadTimestamp-st.CommittedTimestamp)/1000)
		e.Seconds = &v
	}
	if st.AppendRate >= 0 {
		r := st.AppendRate
		e.AppendRate, e.AfterHeartbeat = &r, afterHeartbeat(r, e.HeartbeatAge)
	}
	if st.ReadNext >= 0 {
		lost, unread := st.PendingRecords, max(0, st.HighWatermark-max(st.ReadNext, next, st.LogStart))
		if e.Records == 0 {
			lost = 0 // the heartbeat is older than the checkpoint
		}
		e.LostRecords, e.UnreadOffsets = &lost, &unread
	}
	return e
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
