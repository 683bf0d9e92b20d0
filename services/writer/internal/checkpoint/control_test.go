package checkpoint

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/ferry-replicator/ferry/pkg/linkstate"
)

// controlRecord is link's control record of c, signed by signer (nil:
// unsigned) with purpose.
func controlRecord(t *testing.T, link string, c Control, signer Signer, purpose string) Record {
	t.Helper()
	value, _ := json.Marshal(c)
	rec := Record{Key: []byte(controlKey(link)), Value: value}
	if signer != nil {
		sig, err := signer.Sign(purpose, rec.Key, rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		rec.Headers = sig.Headers()
	}
	return rec
}

func (s *testStore) wantState(t *testing.T, link string, state linkstate.State, gen uint64) {
	t.Helper()
	if c := s.Control(link); c.State != state || c.Generation != gen {
		t.Fatalf("Control(%s) = %s generation %d, want %s generation %d", link, c.State, c.Generation, state, gen)
	}
}

// A control record is taken only if a signer the store admits signed it
// for a control record, and only if it raises the link's generation; a
// record that is not is ignored and counted, never trusted.
func TestControlRecordsVerified(t *testing.T) {
	sg := newSigners(t)
	s := newTestStore(sg, true) // accept_unsigned is for checkpoints only
	now := time.Now().UTC()
	paused := Control{State: linkstate.Paused, By: "op", Time: now, Generation: 1}

	s.wantState(t, "east", linkstate.Running, 0)
	changed := s.ControlChanged()
	s.write(controlRecord(t, "east", paused, sg.writer, controlPurpose))
	s.wantState(t, "east", linkstate.Paused, 1)
	select {
	case <-changed:
	default:
		t.Fatal("ControlChanged not closed by a change")
	}

	running := Control{State: linkstate.Running, By: "mallory", Time: now, Generation: 2}
	s.write(controlRecord(t, "east", running, nil, ""))
	s.refusedAs(t, "unsigned_control", 1)
	s.write(controlRecord(t, "east", running, sg.fetcher, controlPurpose))
	s.refusedAs(t, "unverified_control", 1)
	// A checkpoint's signature does not pass for a control record's.
	s.write(controlRecord(t, "east", running, sg.writer, signPurpose))
	s.refusedAs(t, "unverified_control", 2)
	s.write(Record{Key: []byte(controlKey("east"))})
	s.refusedAs(t, "control_tombstone", 1)
	s.wantState(t, "east", linkstate.Paused, 1)

	// A genuine older record replayed does not undo a later change.
	resumed := Control{State: linkstate.Running, By: "op", Time: now, Generation: 2}
	s.write(controlRecord(t, "east", resumed, sg.writer, controlPurpose))
	s.wantState(t, "east", linkstate.Running, 2)
	s.write(controlRecord(t, "east", paused, sg.writer, controlPurpose))
	s.refusedAs(t, "replayed", 1)
	s.wantState(t, "east", linkstate.Running, 2)

	// Other links are apart, and a checkpoint key of a link named
	// control is a checkpoint, not a control record.
	s.wantState(t, "west", linkstate.Running, 0)
	if _, ok := parseControlKey("control/orders/0"); ok {
		t.Fatal("control/orders/0 read as a control key")
	}
}
