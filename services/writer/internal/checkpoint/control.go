package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/ferry-replicator/ferry/pkg/linkstate"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
)

// Link control records. An operator's pause, resume or failover of a link
// (ferryctl, through any writer's ControlService) is a record of the
// checkpoint topic under the key control/<link>, so every writer of the
// target reads it with the checkpoints it tails, and a writer started
// later finds it there. Link names hold no slash and checkpoint keys have
// three parts, so the two kinds of key cannot be taken for each other.
//
// A control record decides whether a link's fetchers may write at all, so
// unlike a checkpoint it is verified as the tail reads it (they are few),
// and one that does not verify is ignored with a log, never trusted: the
// link keeps its last verified state. Each change carries the link's next
// generation; a record that does not raise it is a replay of an older
// genuine one (or lost a race with another operator's change) and is
// ignored too. Tombstones are never written for control keys and are
// ignored; compaction keeps the latest record of each key, which is the
// state in force.

const (
	controlPrefix  = "control/"
	controlPurpose = "ferry-link-control"
)

// Control is a link's recorded state: the value of its control record.
type Control struct {
	State  linkstate.State `json:"state"`
	Reason string          `json:"reason,omitempty"`
	// By is the identity of the caller that set it.
	By   string    `json:"by"`
	Time time.Time `json:"time"`
	// Generation counts the link's changes: 1 for the first.
	Generation uint64 `json:"generation"`
}

// ErrGeneration is a conditional change whose expected generation is not
// the link's current one.
var ErrGeneration = errors.New("link state changed meanwhile")

// controlKey is the record key of link's control record.
func controlKey(link string) string { return controlPrefix + link }

// parseControlKey reads a control record's key: control/<link>, with
// exactly one slash (a checkpoint key of a link named control has three
// parts).
func parseControlKey(key string) (string, bool) {
	link, ok := strings.CutPrefix(key, controlPrefix)
	if !ok || link == "" || strings.Contains(link, "/") {
		return "", false
	}
	return link, true
}

// applyControl takes a control record read by the tail if it verifies and
// raises its link's generation; s.mu held.
func (s *Store) applyControl(link string, p int32, m *sarama.ConsumerMessage) {
	k := Key{Link: link}
	e := &entry{partition: p, offset: m.Offset, value: m.Value}
	if m.Value == nil {
		s.refuse(k, e, "control_tombstone", errors.New("control records are never deleted"))
		return
	}
	for _, h := range m.Headers {
		if h != nil {
			e.sig.ReadHeader(string(h.Key), h.Value)
		}
	}
	if s.verifier != nil {
		if _, err := s.verifier.Verify(controlPurpose, m.Key, m.Value, e.sig); err != nil {
			reason := "unverified_control"
			if errors.Is(err, tlsconfig.ErrUnsigned) {
				reason = "unsigned_control"
			}
			s.refuse(k, e, reason, err)
			return
		}
	}
	var c Control
	if err := json.Unmarshal(m.Value, &c); err != nil {
		s.refuse(k, e, "unreadable", err)
		return
	}
	if _, err := linkstate.Parse(string(c.State)); err != nil {
		s.refuse(k, e, "unreadable", err)
		return
	}
	if cur, ok := s.controls[link]; ok && c.Generation <= cur.Generation {
		s.refuse(k, e, "replayed", fmt.Errorf("control generation %d, the link is at %d", c.Generation, cur.Generation))
		return
	}
	if s.controls == nil {
		s.controls = map[string]Control{}
	}
	s.controls[link] = c
	s.log.Info("link state", "link", link, "state", c.State, "reason", c.Reason, "by", c.By, "generation", c.Generation)
	if s.ctlChanged != nil {
		close(s.ctlChanged)
		s.ctlChanged = nil
	}
}

// Control returns link's state as the view holds it; a link never set is
// running, with generation 0.
func (s *Store) Control(link string) Control {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.controls[link]; ok {
		return c
	}
	return Control{State: linkstate.Running}
}

// ControlChanged is closed at the next change of any link's state: read
// it before Control, so no change falls between the two.
func (s *Store) ControlChanged() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctlChanged == nil {
		s.ctlChanged = make(chan struct{})
	}
	return s.ctlChanged
}

// SetControl records c as link's next state, signed, and returns it as
// the view took it. With expected non-zero the change is made only if
// the link is at that generation (ErrGeneration otherwise). Two changes
// racing get the same generation; the one the topic orders first wins on
// every writer, and the other is reported here as ErrGeneration.
func (s *Store) SetControl(ctx context.Context, link string, c Control, expected uint64) (Control, error) {
	if err := s.Sync(ctx); err != nil {
		return Control{}, err
	}
	cur := s.Control(link)
	if expected != 0 && cur.Generation != expected {
		return Control{}, fmt.Errorf("%w: link %s is at generation %d, not %d", ErrGeneration, link, cur.Generation, expected)
	}
	c.Generation = cur.Generation + 1
	value, _ := json.Marshal(c) // strings, a time and a number cannot fail
	rec := Record{Partition: s.partitionOfKey(controlKey(link)), Key: []byte(controlKey(link)), Value: value, Time: c.Time}
	if s.signer != nil {
		sig, err := s.signer.Sign(controlPurpose, rec.Key, rec.Value)
		if err != nil {
			return Control{}, fmt.Errorf("control record of link %s: %w", link, err)
		}
		rec.Headers = sig.Headers()
	}
	if err := s.send(rec); err != nil {
		return Control{}, fmt.Errorf("control record of link %s: %w", link, err)
	}
	if err := s.Sync(ctx); err != nil {
		return Control{}, err
	}
	got := s.Control(link)
	if got.Generation != c.Generation || got.By != c.By || !got.Time.Equal(c.Time) || got.State != c.State {
		return Control{}, fmt.Errorf("%w: link %s: the view holds generation %d (%s by %s), not this change (checkpoints.signers does not admit this writer?)",
			ErrGeneration, link, got.Generation, got.State, got.By)
	}
	return got, nil
}
