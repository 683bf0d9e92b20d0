package heartbeat

import (
	"testing"
	"time"
)

// The meter's arithmetic, case by case: what is at risk lies above both
// the checkpoint and the log start; the lost records are the heartbeat's
// count, the unread offsets what lies above what the fetcher read; a
// heartbeat older than the checkpoint says nothing is at risk (never a
// negative count); the tail after the heartbeat grows with its age.
func TestExposureOf(t *testing.T) {
	k := Key{Link: "east", Topic: "orders", Partition: 3}
	now := time.UnixMilli(1_000_000)
	beat := func(edit func(*State)) State {
		st := Unknown
		st.HighWatermark, st.LogStart, st.HeadOffset, st.HeadTimestamp = 100, 10, 99, 990_000
		st.ObservedAt, st.CommittedTimestamp = 998_000, 980_000
		st.AppendRate, st.ReadNext, st.PendingRecords = 50, 90, 25
		if edit != nil {
			edit(&st)
		}
		return st
	}
	for _, tc := range []struct {
		name         string
		st           State
		next         int64
		records      int64
		lost, unread int64 // -1: absent
		seconds      float64
		after        int64 // -1: absent
		hasSeconds   bool
	}{
		{name: "behind the heartbeat", st: beat(nil), next: 60,
			records: 40, lost: 25, unread: 10, seconds: 10, hasSeconds: true, after: 100},
		{name: "nothing committed: from the log start", st: beat(nil), next: -1,
			records: 90, lost: 25, unread: 10, after: 100},
		{name: "checkpoint below the log start", st: beat(nil), next: 5,
			records: 90, lost: 25, unread: 10, seconds: 10, hasSeconds: true, after: 100},
		{name: "heartbeat older than the checkpoint", st: beat(nil), next: 120,
			records: 0, lost: 0, unread: 0, seconds: 0, hasSeconds: true, after: 100},
		{name: "fetcher without a count", st: beat(func(s *State) { s.ReadNext, s.PendingRecords = -1, -1 }), next: 60,
			records: 40, lost: -1, unread: -1, seconds: 10, hasSeconds: true, after: 100},
		{name: "rate unknown", st: beat(func(s *State) { s.AppendRate = -1 }), next: 60,
			records: 40, lost: 25, unread: 10, seconds: 10, hasSeconds: true, after: -1},
		{name: "read past the checkpoint's range", st: beat(func(s *State) { s.ReadNext = 50 }), next: 60,
			records: 40, lost: 25, unread: 40, seconds: 10, hasSeconds: true, after: 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := ExposureOf(k, tc.st, tc.next, now)
			if e.Records != tc.records || e.Committed != tc.next || e.SourceHighWatermark != 100 || e.SourceLogStart != 10 {
				t.Errorf("records %d committed %d hw %d log start %d; want %d %d 100 10", e.Records, e.Committed, e.SourceHighWatermark, e.SourceLogStart, tc.records, tc.next)
			}
			if e.HeartbeatAge != 2 {
				t.Errorf("heartbeat age %v, want 2", e.HeartbeatAge)
			}
			checkOpt(t, "lost records", e.LostRecords, tc.lost)
			checkOpt(t, "unread offsets", e.UnreadOffsets, tc.unread)
			checkOpt(t, "after heartbeat", e.AfterHeartbeat, tc.after)
			switch {
			case tc.hasSeconds && (e.Seconds == nil || *e.Seconds != tc.seconds):
				t.Errorf("seconds %v, want %v", e.Seconds, tc.seconds)
			case !tc.hasSeconds && e.Seconds != nil:
				t.Errorf("seconds %v, want none", *e.Seconds)
			}
		})
	}
}

func checkOpt(t *testing.T, what string, got *int64, want int64) {
	t.Helper()
	switch {
	case want < 0 && got != nil:
		t.Errorf("%s %d, want none", what, *got)
	case want >= 0 && (got == nil || *got != want):
		t.Errorf("%s %v, want %d", what, got, want)
	}
}
