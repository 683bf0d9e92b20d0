package heartbeat

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func valid() State {
	return State{HighWatermark: 10, LogStart: 2, HeadOffset: 9, HeadTimestamp: 1700000000000, ObservedAt: 1700000000500, CommittedTimestamp: 1699999999000, CommittedNext: 7, AppendRate: 12.5,
		ReadNext: 9, PendingRecords: 1}
}

// A record round-trips, and Decode refuses every record that is not
// exactly what Encode writes of a State that passes Check.
func TestDecodeIsStrict(t *testing.T) {
	k := Key{Link: "east", Topic: "orders", Partition: 3}
	key, value := Encode(k, valid())
	gotK, gotS, tomb, err := Decode(key, value)
	if err != nil || tomb || gotK != k || gotS != valid() {
		t.Fatalf("round trip: %v %+v %v %v", gotK, gotS, tomb, err)
	}
	if _, _, tomb, err := Decode(key, nil); err != nil || !tomb {
		t.Fatalf("tombstone: %v %v", tomb, err)
	}
	full := string(value)
	// A record of a writer before the read counts: the counts unknown;
	// and before the append rate: the rate unknown too.
	uncounted := strings.Replace(full, `,"read_next":9,"pending_records":1`, ``, 1)
	want := valid()
	want.ReadNext, want.PendingRecords = -1, -1
	if _, got, _, err := Decode(key, []byte(uncounted)); err != nil || got != want {
		t.Errorf("a record without read_next (%s): %+v, %v; want %+v", uncounted, got, err, want)
	}
	old := strings.Replace(uncounted, `,"append_rate":12.5`, ``, 1)
	want.AppendRate = -1
	if _, got, _, err := Decode(key, []byte(old)); err != nil || got != want {
		t.Errorf("a record without append_rate (%s): %+v, %v; want %+v", old, got, err, want)
	}
	for _, tc := range []struct{ name, key, value, says string }{
		{"key with a leading zero", "east/orders/03", full, "key"},
		{"key with a plus", "east/orders/+3", full, "key"},
		{"key with four parts", "east/orders/3/x", full, "key"},
		{"negative partition", "east/orders/-3", full, "key"},
		{"unknown field", string(key), strings.Replace(full, "}", `,"extra":1}`, 1), "fields"},
		{"missing field", string(key), `{"high_watermark":10,"log_start_offset":2,"head_offset":9,"head_timestamp":1,"observed_at":1,"committed_timestamp":1}`, "fields"},
		{"data after the object", string(key), full + "{}", "value"},
		{"not JSON", string(key), "\x00\x01", "value"},
		{"string for a number", string(key), strings.Replace(full, `"high_watermark":10`, `"high_watermark":"10"`, 1), "value"},
		{"log start above the high watermark", string(key), strings.Replace(full, `"log_start_offset":2`, `"log_start_offset":11`, 1), "log_start_offset"},
		{"head at the high watermark", string(key), strings.Replace(full, `"head_offset":9`, `"head_offset":10`, 1), "head_offset"},
		{"no observation time", string(key), strings.Replace(full, `"observed_at":1700000000500`, `"observed_at":0`, 1), "observed_at"},
		{"too large", string(key), full + strings.Repeat(" ", maxValue), "bytes"},
		{"negative rate", string(key), strings.Replace(full, `"append_rate":12.5`, `"append_rate":-2`, 1), "append_rate"},
		{"rate beyond any partition", string(key), strings.Replace(full, `"append_rate":12.5`, `"append_rate":1e300`, 1), "append_rate"},
		{"rate and a field missing", string(key), strings.Replace(full, `"committed_next_offset":7,`, ``, 1), "fields"},
		{"read count without the rate", string(key), strings.Replace(full, `"append_rate":12.5,`, ``, 1), "fields"},
		{"read count half there", string(key), strings.Replace(full, `,"pending_records":1`, ``, 1), "fields"},
		{"negative pending records", string(key), strings.Replace(full, `"pending_records":1`, `"pending_records":-2`, 1), "pending_records"},
		{"pending records without a read position", string(key), strings.Replace(full, `"read_next":9`, `"read_next":-1`, 1), "read_next"},
	} {
		if _, _, _, err := Decode([]byte(tc.key), []byte(tc.value)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: Decode = %v, want an invalid-heartbeat error saying %q", tc.name, err, tc.says)
		}
	}
}

// Only changed States are written, once each until they change again.
func TestTableWritesChangesOnly(t *testing.T) {
	tb := NewTable()
	k := Key{Link: "east", Topic: "orders", Partition: 0}
	b := Beat{HighWatermark: 5, LogStart: 0, HeadOffset: 4, HeadTimestamp: 1, ObservedAt: 2, ReadNext: -1, PendingRecords: -1}
	tb.Beat(k, b)
	if d := tb.takeDirty(); len(d) != 1 {
		t.Fatalf("%d dirty after a first beat, want 1", len(d))
	}
	tb.Beat(k, b)
	if d := tb.takeDirty(); len(d) != 0 {
		t.Fatalf("%d dirty after the same beat again, want 0", len(d))
	}
	tb.Committed(k, 3, 1)
	if d := tb.takeDirty(); len(d) != 1 || d[k].CommittedNext != 3 || d[k].HighWatermark != 5 {
		t.Fatalf("dirty %+v after a commit, want the whole state", d)
	}
}

// FuzzDecode: Decode never panics, and what it takes re-encodes to a
// record it reads back the same (nothing it accepts is ambiguous).
func FuzzDecode(f *testing.F) {
	key, value := Encode(Key{Link: "l", Topic: "t", Partition: 1}, valid())
	f.Add(key, value)
	f.Add([]byte("l/t/0"), []byte(nil))
	u, _ := Encode(Key{Link: "l", Topic: "t", Partition: 0}, Unknown)
	f.Add([]byte("l/t/0"), u)
	f.Add([]byte("l/t/01"), value)
	f.Fuzz(func(t *testing.T, key, value []byte) {
		k, s, tomb, err := Decode(key, value)
		if err != nil || tomb {
			return
		}
		if err := s.Check(); err != nil {
			t.Fatalf("Decode took a State Check refuses: %v", err)
		}
		k2, v2 := Encode(k, s)
		gk, gs, _, err := Decode(k2, v2)
		if err != nil || gk != k || gs != s {
			t.Fatalf("re-encoded record reads back %v %+v %v", gk, gs, err)
		}
	})
}

// The append rate follows the high watermark's growth between heartbeats
// over the time between their reads: unknown after one heartbeat, the
// first growth as it is, then weighted by how much of RateWindow each
// step spans; a heartbeat read no later leaves it, and a high watermark
// that went back starts it again.
func TestAppendRate(t *testing.T) {
	tb := NewTable()
	k := Key{Link: "east", Topic: "orders", Partition: 0}
	at := int64(1_700_000_000_000)
	beat := func(hw, ms int64) float64 {
		t.Helper()
		tb.Beat(k, Beat{HighWatermark: hw, LogStart: 0, HeadOffset: -1, HeadTimestamp: -1, ObservedAt: at + ms, ReadNext: -1, PendingRecords: -1})
		st, _ := tb.Get(k)
		if err := st.Check(); err != nil {
			t.Fatal(err)
		}
		return st.AppendRate
	}
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-6 }
	if r := beat(0, 0); r != -1 {
		t.Errorf("rate after one heartbeat: %v, want -1 (unknown)", r)
	}
	if r := beat(100, 1000); !near(r, 100) {
		t.Errorf("rate after 100 offsets in 1s: %v, want 100", r)
	}
	w := 1 - math.Exp(-0.1)
	if r := beat(400, 2000); !near(r, 100+w*(300-100)) {
		t.Errorf("rate after 300 more in 1s: %v, want %v", r, 100+w*200)
	}
	before := beat(400, 2000)
	if r := beat(900, 1500); r != before {
		t.Errorf("a heartbeat read earlier moved the rate from %v to %v", before, r)
	}
	// Ten idle seconds (after the last read, at 1.5s): the rate falls by e.
	if r := beat(900, 11500); !near(r, before*math.Exp(-1)) {
		t.Errorf("rate after 10s idle: %v, want %v", r, before*math.Exp(-1))
	}
	if r := beat(50, 12500); r != -1 {
		t.Errorf("rate after the high watermark went back: %v, want -1", r)
	}
}

// The records pending below a heartbeat's read position fall by what each
// round commits below it, never below 0; a batch read after the heartbeat
// (at or past its position) is not among them, and a heartbeat that did
// not count (an older fetcher) leaves them unknown.
func TestPendingRecordsFallWithCommitsBelowTheReadPosition(t *testing.T) {
	tb := NewTable()
	k := Key{Link: "east", Topic: "orders", Partition: 0}
	tb.Beat(k, Beat{HighWatermark: 100, HeadOffset: -1, HeadTimestamp: -1, ObservedAt: 1, ReadNext: 80, PendingRecords: 30})
	pending := func() int64 { st, _ := tb.Get(k); return st.PendingRecords }
	tb.CommittedRecords(k, 59, 12) // a batch ending below 80
	if got := pending(); got != 18 {
		t.Fatalf("pending %d after 12 committed below the read position, want 18", got)
	}
	tb.CommittedRecords(k, 85, 9) // read after the heartbeat
	if got := pending(); got != 18 {
		t.Fatalf("pending %d after a batch past the read position, want 18 still", got)
	}
	tb.CommittedRecords(k, 79, 40)
	if got := pending(); got != 0 {
		t.Fatalf("pending %d after more committed than pending, want 0", got)
	}
	tb.Beat(k, Beat{HighWatermark: 120, HeadOffset: -1, HeadTimestamp: -1, ObservedAt: 2, ReadNext: -1, PendingRecords: -1})
	tb.CommittedRecords(k, 90, 5)
	if st, _ := tb.Get(k); st.ReadNext != -1 || st.PendingRecords != -1 || st.Check() != nil {
		t.Fatalf("after an uncounted heartbeat: read_next %d pending %d (%v), want both unknown", st.ReadNext, st.PendingRecords, st.Check())
	}
}
