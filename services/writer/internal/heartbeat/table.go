// Package heartbeat keeps, per link and source partition, what the source
// side last said it held (a fetcher's heartbeat: high watermark, log start,
// head timestamp, when it was read) and the source timestamp of the last
// record committed on the target, so the writer can say what a failover
// would lose (the failover meter) with no traffic and after the source
// region is gone. The Table is the one copy in memory; a Store persists it
// to a compacted topic of the target (heartbeats.topic) and reads it back
// at start, so the answer survives a writer restart.
//
// Invariants: a State in the Table passed Check (what a peer sent, or what
// the topic held, is refused otherwise); a partition's record is written at
// most once per persist interval, and only when its State changed.
package heartbeat

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/ferry-replicator/ferry/services/writer/internal/partkey"
)

// Key identifies a source partition within a link, spelt as the
// checkpoint topic spells it (package partkey).
type Key = partkey.Key

// State is what the writer knows of a source partition from the source
// side. Offsets are -1 while unknown.
type State struct {
	// HighWatermark, LogStart, HeadOffset and HeadTimestamp (Unix ms) are
	// the last heartbeat's (ferryv1.PartitionHeartbeat); HighWatermark
	// is -1 until one came.
	HighWatermark int64 `json:"high_watermark"`
	LogStart      int64 `json:"log_start_offset"`
	HeadOffset    int64 `json:"head_offset"`
	HeadTimestamp int64 `json:"head_timestamp"`
	// ObservedAt is when the fetcher read them (Unix ms, its clock).
	ObservedAt int64 `json:"observed_at"`
	// CommittedTimestamp is the largest source timestamp (Unix ms) of the
	// records of the last round that committed any on the target, and
	// CommittedNext the next source offset that round reached; -1 while
	// unknown.
	CommittedTimestamp int64 `json:"committed_timestamp"`
	CommittedNext      int64 `json:"committed_next_offset"`
	// AppendRate is the source's append rate at the last heartbeat, in
	// offsets a second, from the heartbeats' high watermarks and read
	// times, smoothed over RateWindow; -1 until two heartbeats came (or
	// after the high watermark went back). With the heartbeat's age it
	// estimates what the source took after the last heartbeat, which no
	// heartbeat reported: the tail a region loss hides from the meter.
	AppendRate float64 `json:"append_rate"`
	// ReadNext is the offset after what the fetcher had read and queued
	// to its stream at the last heartbeat, and PendingRecords the records
	// of that below it not committed on the target (the heartbeat's
	// count, less each round of the stream committed since): a failover's
	// loss in records below ReadNext, exact; both -1 while unknown (a
	// fetcher older than the count).
	ReadNext       int64 `json:"read_next"`
	PendingRecords int64 `json:"pending_records"`
}

// RateWindow is AppendRate's smoothing: an exponentially weighted mean
// whose weights fall by e each RateWindow, so one slow or bursty second
// moves it little and a change of pace shows within some tens of seconds.
const RateWindow = 10 * time.Second

// Unknown is the State of a partition nothing is known of yet.
var Unknown = State{HighWatermark: -1, LogStart: -1, HeadOffset: -1, HeadTimestamp: -1, ObservedAt: -1, CommittedTimestamp: -1, CommittedNext: -1, AppendRate: -1,
	ReadNext: -1, PendingRecords: -1}

// HasHeartbeat reports whether a heartbeat is known.
func (s State) HasHeartbeat() bool { return s.HighWatermark >= 0 }

// ErrInvalid is what Decode's and Check's refusals match.
var ErrInvalid = errors.New("invalid heartbeat")

// FieldError is Check's refusal: the field and what is wrong with it.
type FieldError struct {
	Field, Problem string
}

func (e *FieldError) Error() string { return ErrInvalid.Error() + ": " + e.Field + " " + e.Problem }

// Is makes a FieldError match ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// Check refuses a State whose offsets make no sense, naming the field: a
// fetcher is admitted, not trusted blindly, and the topic may hold
// records someone else wrote.
func (s State) Check() error {
	bad := func(field string, v int64, why string) error {
		return &FieldError{Field: field, Problem: strconv.FormatInt(v, 10) + " " + why}
	}
	switch {
	case s.HighWatermark < -1:
		return bad("high_watermark", s.HighWatermark, "is negative")
	case s.CommittedTimestamp < -1:
		return bad("committed_timestamp", s.CommittedTimestamp, "is negative")
	case s.CommittedNext < -1:
		return bad("committed_next_offset", s.CommittedNext, "is negative")
	case s.ReadNext < -1:
		return bad("read_next", s.ReadNext, "is negative")
	case s.PendingRecords < -1:
		return bad("pending_records", s.PendingRecords, "is negative")
	case (s.ReadNext < 0) != (s.PendingRecords < 0):
		return &FieldError{Field: "read_next", Problem: fmt.Sprintf("%d with pending_records %d: both or neither", s.ReadNext, s.PendingRecords)}
	case s.AppendRate != -1 && !(s.AppendRate >= 0 && s.AppendRate <= maxRate):
		return &FieldError{Field: "append_rate", Problem: strconv.FormatFloat(s.AppendRate, 'g', -1, 64) + " is neither -1 (unknown) nor a rate"}
	case !s.HasHeartbeat():
		if s.LogStart != -1 || s.HeadOffset != -1 || s.HeadTimestamp != -1 || s.ObservedAt != -1 {
			return &FieldError{Field: "high_watermark", Problem: "-1 (unknown) with other offsets known"}
		}
		return nil
	case s.LogStart < 0:
		return bad("log_start_offset", s.LogStart, "is negative")
	case s.LogStart > s.HighWatermark:
		return bad("log_start_offset", s.LogStart, "is above high_watermark "+strconv.FormatInt(s.HighWatermark, 10))
	case s.HeadOffset < -1:
		return bad("head_offset", s.HeadOffset, "is negative")
	case s.HeadOffset >= s.HighWatermark:
		return bad("head_offset", s.HeadOffset, "is at or above high_watermark "+strconv.FormatInt(s.HighWatermark, 10))
	case s.HeadTimestamp < -1:
		return bad("head_timestamp", s.HeadTimestamp, "is negative")
	case (s.HeadOffset < 0) != (s.HeadTimestamp < 0):
		return &FieldError{Field: "head_offset", Problem: fmt.Sprintf("%d with head_timestamp %d: both or neither", s.HeadOffset, s.HeadTimestamp)}
	case s.ObservedAt <= 0:
		return bad("observed_at", s.ObservedAt, "is not a time")
	}
	return nil
}

// Beat is a heartbeat's part of a State. ReadNext and PendingRecords are
// -1 when the heartbeat did not count its reads.
type Beat struct {
	HighWatermark, LogStart, HeadOffset, HeadTimestamp, ObservedAt int64
	ReadNext, PendingRecords                                       int64
}

// MaxEntries bounds the partitions a Table holds: what it loads from the
// topic (which others may write) and what fetchers report, whose
// partitions are already bounded by the links' Opens.
const MaxEntries = 1 << 20

// Table holds the State of every partition the writer has heard of.
type Table struct {
	mu      sync.Mutex
	entries map[Key]*entry
}

type entry struct {
	st    State
	dirty bool // changed since it was last persisted
}

// NewTable returns an empty table.
func NewTable() *Table { return &Table{entries: map[Key]*entry{}} }

// get returns k's entry, made Unknown if new; nil when the table is full.
// t.mu is held.
func (t *Table) get(k Key) *entry {
	e := t.entries[k]
	if e == nil {
		if len(t.entries) >= MaxEntries {
			return nil
		}
		e = &entry{st: Unknown}
		t.entries[k] = e
	}
	return e
}

// maxRate bounds AppendRate: offsets are int64, and a rate above what
// any partition takes (2^40 a second) says the record was made up.
const maxRate = 1 << 40

// Beat records a heartbeat of k that passed Check, and moves the append
// rate: the high watermark's growth since the last heartbeat over the
// time between their reads (the fetcher's clock), weighted into the mean
// by how much of RateWindow that time spans. A high watermark that went
// back (the partition truncated, or recreated) starts the rate again; a
// heartbeat read no later than the last one leaves it.
func (t *Table) Beat(k Key, b Beat) {
	t.update(k, func(s *State) {
		s.AppendRate = nextRate(*s, b)
		s.HighWatermark, s.LogStart, s.HeadOffset, s.HeadTimestamp, s.ObservedAt = b.HighWatermark, b.LogStart, b.HeadOffset, b.HeadTimestamp, b.ObservedAt
		s.ReadNext, s.PendingRecords = b.ReadNext, b.PendingRecords
	})
}

func nextRate(prev State, b Beat) float64 {
	switch {
	case !prev.HasHeartbeat() || b.HighWatermark < prev.HighWatermark:
		return -1
	case b.ObservedAt <= prev.ObservedAt:
		return prev.AppendRate
	}
	dt := time.Duration(b.ObservedAt-prev.ObservedAt) * time.Millisecond
	now := min(float64(b.HighWatermark-prev.HighWatermark)/dt.Seconds(), maxRate)
	if prev.AppendRate < 0 {
		return now
	}
	w := 1 - math.Exp(-dt.Seconds()/RateWindow.Seconds())
	return prev.AppendRate + w*(now-prev.AppendRate)
}

// Committed records that a round committed k's records up to next, the
// largest of their source timestamps ts (Unix ms).
func (t *Table) Committed(k Key, next, ts int64) {
	t.update(k, func(s *State) { s.CommittedNext, s.CommittedTimestamp = next, ts })
}

// CommittedRecords takes n records committed on the target, of a batch of
// k ending at last (its last source offset), off the records pending
// below the last heartbeat's ReadNext; a batch at or past it was read
// after that heartbeat, and is not among them.
func (t *Table) CommittedRecords(k Key, last, n int64) {
	t.update(k, func(s *State) {
		if s.ReadNext >= 0 && last < s.ReadNext {
			s.PendingRecords = max(0, s.PendingRecords-n)
		}
	})
}

func (t *Table) update(k Key, fn func(*State)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.get(k)
	if e == nil {
		return
	}
	was := e.st
	fn(&e.st)
	e.dirty = e.dirty || e.st != was
}

// load sets k's State as read back from the topic; not dirty.
func (t *Table) load(k Key, s State) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.get(k); e != nil {
		e.st = s
	}
}

// forget drops k (a tombstone in the topic).
func (t *Table) forget(k Key) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.entries, k)
}

// Get returns k's State.
func (t *Table) Get(k Key) (State, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.entries[k]
	if !ok {
		return Unknown, false
	}
	return e.st, true
}

// All returns a copy of every State.
func (t *Table) All() map[Key]State {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[Key]State, len(t.entries))
	for k, e := range t.entries {
		out[k] = e.st
	}
	return out
}

// takeDirty returns the States changed since the last take, marking them
// clean.
func (t *Table) takeDirty() map[Key]State {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[Key]State{}
	for k, e := range t.entries {
		if e.dirty {
			out[k] = e.st
			e.dirty = false
		}
	}
	return out
}

// markDirty marks States whose write failed, unless they changed since.
func (t *Table) markDirty(failed map[Key]State) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range maps.Keys(failed) {
		if e := t.entries[k]; e != nil {
			e.dirty = true
		}
	}
}
