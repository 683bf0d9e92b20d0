package groupstate

import (
	"errors"
	"strings"
	"testing"
)

// A record reads back as written, and only in the writer's own spelling:
// anything else is refused, naming what is wrong.
func TestDecode(t *testing.T) {
	k := Key{Link: "east", Group: "billing/eu v2", Topic: "orders", Partition: 7}
	p := Part{Reported: 17, ReportedAt: 1, Target: 13, StandsFor: 17, SyncedAt: 1, Outcome: "moved", Attempted: 2}
	key, value := Encode(k, p)
	gk, gp, tomb, err := Decode(key, value)
	if err != nil || tomb || gk != k || gp != p {
		t.Fatalf("Decode(Encode) = %+v %+v %v %v; want %+v %+v", gk, gp, tomb, err, k, p)
	}
	if gk, _, tomb, err := Decode(key, nil); err != nil || !tomb || gk != k {
		t.Fatalf("tombstone: %+v %v %v", gk, tomb, err)
	}
	for _, tc := range []struct {
		name, key, value, says string
	}{
		{"three fields", "east\x00g\x00orders", `{}`, "not link, group, topic and partition"},
		{"partition not a number", "east\x00g\x00orders\x00x", `{}`, "not link, group"},
		{"partition spelt otherwise", "east\x00g\x00orders\x0007", `{}`, "not link, group"},
		{"control character in the group", "east\x00g\n\x00orders\x007", `{}`, "not link, group"},
		{"unknown field", string(key), `{"reported":1,"target":-1,"stands_for":-1,"outcome":"moved","extra":1}`, "unknown field"},
		{"data after the object", string(key), string(value) + `{}`, "data after the object"},
		{"negative reported offset", string(key), `{"reported":-1,"target":-1,"stands_for":-1,"outcome":"moved"}`, "reported offset -1"},
		{"target without what it stands for", string(key), `{"reported":1,"target":4,"stands_for":-1,"outcome":"moved"}`, "target 4 standing for -1"},
		{"no outcome", string(key), `{"reported":1,"target":-1,"stands_for":-1}`, "no outcome"},
		{"too large", string(key), `{"detail":"` + strings.Repeat("x", maxValue) + `"}`, "above"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, err := Decode([]byte(tc.key), []byte(tc.value))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Decode: %v; want ErrInvalid saying %q", err, tc.says)
			}
		})
	}
}
