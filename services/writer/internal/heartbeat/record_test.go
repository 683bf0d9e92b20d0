package heartbeat

import (
	"errors"
	"strings"
	"testing"
)

func valid() State {
	return State{HighWatermark: 10, LogStart: 2, HeadOffset: 9, HeadTimestamp: 1700000000000, ObservedAt: 1700000000500, CommittedTimestamp: 1699999999000, CommittedNext: 7}
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
	b := Beat{HighWatermark: 5, LogStart: 0, HeadOffset: 4, HeadTimestamp: 1, ObservedAt: 2}
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
