// Package groupstate keeps what the writers' group sync knows of each
// consumer group partition in a compacted topic of the target cluster
// (group_sync.state_topic, "__ferry_groups"), so that it outlives the
// writer that learned it. A failover report and failback's --move-groups
// need it most when the source region is gone: a writer restarted then
// learns nothing new from the fetchers, and before this topic its report
// of the groups came back empty.
//
// One record per (link, group, source topic, partition), written by the
// writer whose stream carried that partition's group offsets, at most once
// a persist interval and only when it changed; every writer reads them all
// back at start. The records are not signed: a forged one can add a group
// to the reports, whose positions failback reads from the target group's
// own commits (docs/disaster-recovery.md, "Limits").
package groupstate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/pkg/groupsync"
	"github.com/ferry-replicator/ferry/services/writer/internal/topicscan"
)

// DefaultTopic is group_sync.state_topic's default.
const DefaultTopic = "__ferry_groups"

// Configs are the topic's settings when a writer creates it: one record
// per group partition is all that matters.
var Configs = map[string]string{"cleanup.policy": "compact"}

// ErrInvalid marks a record that does not decode.
var ErrInvalid = errors.New("invalid group state record")

// maxValue bounds a record value: a Part encodes to well under it.
const maxValue = 4096

// Key names one partition of one group of a link, by its source topic.
type Key struct {
	Link, Group, Topic string
	Partition          int32
}

// String is the record key: the fields joined by NUL, which none of them
// may hold (group ids hold no control character, groupsync.CheckName).
func (k Key) String() string {
	return k.Link + "\x00" + k.Group + "\x00" + k.Topic + "\x00" + strconv.Itoa(int(k.Partition))
}

func parseKey(s string) (Key, bool) {
	f := strings.Split(s, "\x00")
	if len(f) != 4 || f[0] == "" || f[2] == "" || groupsync.CheckName(f[1]) != nil ||
		strings.IndexFunc(f[0]+f[2], unicode.IsControl) >= 0 {
		return Key{}, false
	}
	p, err := strconv.ParseInt(f[3], 10, 32)
	if err != nil || p < 0 || strconv.Itoa(int(p)) != f[3] {
		return Key{}, false
	}
	return Key{Link: f[0], Group: f[1], Topic: f[2], Partition: int32(p)}, true
}

// Part is what the group sync knows of one group partition: the writer's
// groupPart and its group's last outcome.
type Part struct {
	// Reported is the group's committed source offset as the fetcher last
	// read it, at ReportedAt (Unix milliseconds of the fetcher's clock).
	Reported   int64 `json:"reported"`
	ReportedAt int64 `json:"reported_at_ms"`
	// Target and StandsFor are where Ferry's commit put the group on the
	// target and the source offset that stands for; -1 when unknown (not
	// synced, or the group is not Ferry's to move: active or owned).
	Target    int64 `json:"target"`
	StandsFor int64 `json:"stands_for"`
	// SyncedAt is the source read time the target position follows (Unix
	// milliseconds; 0: none).
	SyncedAt int64 `json:"synced_at_ms"`
	// Note says why the partition was not synced or is behind.
	Note string `json:"note"`
	// Outcome and Detail are the group's last sync that covered the
	// partition, at Attempted (Unix milliseconds of the writer's clock).
	Outcome   string `json:"outcome"`
	Detail    string `json:"detail"`
	Attempted int64  `json:"attempted_ms"`
	// HandedBack is the group's: handed back to the sync after a round
	// trip (its next sync takes over the target's offsets).
	HandedBack bool `json:"handed_back,omitempty"`
}

// Check says what makes p unusable.
func (p Part) Check() error {
	switch {
	case p.Reported < 0:
		return fmt.Errorf("%w: reported offset %d", ErrInvalid, p.Reported)
	case p.Target < -1 || p.StandsFor < -1 || (p.Target < 0) != (p.StandsFor < 0):
		return fmt.Errorf("%w: target %d standing for %d", ErrInvalid, p.Target, p.StandsFor)
	case p.ReportedAt < 0 || p.SyncedAt < 0 || p.Attempted < 0:
		return fmt.Errorf("%w: a negative time", ErrInvalid)
	case p.Outcome == "":
		return fmt.Errorf("%w: no outcome", ErrInvalid)
	}
	return nil
}

// Encode is the record of k's Part.
func Encode(k Key, p Part) (key, value []byte) {
	value, _ = json.Marshal(p) // numbers and strings: cannot fail
	return []byte(k.String()), value
}

// Decode reads a record strictly: the key as Key.String spells it, the
// value one JSON object of Part's fields and nothing after it, and a Part
// that passes Check. A nil value is a tombstone.
func Decode(key, value []byte) (k Key, p Part, tombstone bool, err error) {
	k, ok := parseKey(string(key))
	if !ok {
		return Key{}, Part{}, false, fmt.Errorf("%w: key %q is not link, group, topic and partition", ErrInvalid, clip(key))
	}
	if value == nil {
		return k, Part{}, true, nil
	}
	if len(value) > maxValue {
		return Key{}, Part{}, false, fmt.Errorf("%w: value of %d bytes, above %d", ErrInvalid, len(value), maxValue)
	}
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Key{}, Part{}, false, fmt.Errorf("%w: value: %v", ErrInvalid, err)
	}
	if dec.More() {
		return Key{}, Part{}, false, fmt.Errorf("%w: value: data after the object", ErrInvalid)
	}
	if err := p.Check(); err != nil {
		return Key{}, Part{}, false, err
	}
	return k, p, false, nil
}

func clip(b []byte) []byte {
	if len(b) > 128 {
		return b[:128]
	}
	return b
}

// Millis is t in Unix milliseconds, 0 for the zero time.
func Millis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// Time is the time of Unix milliseconds ms, the zero time for 0.
func Time(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// Store reads and writes the topic (created by the caller: compacted,
// Configs).
type Store struct {
	opts  []kgo.Opt
	cl    *kgo.Client
	topic string
}

// NewStore returns a store of topic through a client built from opts (the
// target's). Close releases it.
func NewStore(opts []kgo.Opt, topic string) (*Store, error) {
	cl, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic(topic))...)
	if err != nil {
		return nil, fmt.Errorf("group state client: %w", err)
	}
	return &Store{opts: opts, cl: cl, topic: topic}, nil
}

// Close releases the client.
func (s *Store) Close() { s.cl.Close() }

// Topic is the store's topic.
func (s *Store) Topic() string { return s.topic }

// Load returns the latest Part of every key the topic holds (a tombstone
// drops its key) and how many records did not decode (left out).
func (s *Store) Load(ctx context.Context) (map[Key]Part, int, error) {
	parts := map[Key]Part{}
	refused := 0
	err := topicscan.Scan(ctx, s.opts, s.topic, nil, func(r *kgo.Record) {
		k, p, tomb, err := Decode(r.Key, r.Value)
		switch {
		case err != nil:
			refused++
		case tomb:
			delete(parts, k)
		default:
			parts[k] = p
		}
	})
	if err != nil {
		return nil, refused, err
	}
	return parts, refused, nil
}

// Write writes parts, each under its key.
func (s *Store) Write(ctx context.Context, parts map[Key]Part) error {
	recs := make([]*kgo.Record, 0, len(parts))
	for k, p := range parts {
		key, value := Encode(k, p)
		recs = append(recs, &kgo.Record{Key: key, Value: value})
	}
	if err := s.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("write the state of %d group partitions: %w", len(recs), err)
	}
	return nil
}
