package heartbeat

import (
	"math"
	"time"
)

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
	// (offsets a second, State.AppendRate), and AfterHeartbeat
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

// ExposureOf computes a partition's meter from its state st and next,
// its committed next source offset (-1: none). What is at risk is what the
// source held above both the checkpoint and its log start (below the log
// start, retention has removed it already): nothing committed, all the
// source holds. A heartbeat older than the checkpoint can say less than
// is committed: the meter is then 0, not negative. The seconds come from
// the last round this writer committed, so after the partition was
// copied elsewhere they can be more than the truth, never less.
func ExposureOf(k Key, st State, next int64, now time.Time) Exposure {
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
