package heartbeat

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/services/writer/internal/partkey"
	"github.com/ferry-replicator/ferry/services/writer/internal/topicscan"
)

// DefaultPersistInterval is heartbeats.persist_interval's default.
const DefaultPersistInterval = 5 * time.Second

// Configs are the heartbeat topic's settings when a writer creates it:
// one record per partition is all that matters.
var Configs = map[string]string{"cleanup.policy": "compact"}

// maxValue bounds a record value: a State encodes to under 256 bytes.
const maxValue = 1024

// Encode is the record of k's State in the heartbeat topic.
func Encode(k Key, s State) (key, value []byte) {
	value, _ = json.Marshal(s) // numbers only: cannot fail
	return []byte(k.String()), value
}

// Decode reads a record of the heartbeat topic strictly: the key spelt as
// Key.String spells it, the value one JSON object with exactly State's
// fields and nothing after it, and a State that passes Check. A nil value
// is a tombstone (ok, tombstone true).
func Decode(key, value []byte) (k Key, s State, tombstone bool, err error) {
	k, ok := partkey.Parse(string(key))
	if !ok {
		return Key{}, State{}, false, fmt.Errorf("%w: key %q is not link/topic/partition", ErrInvalid, clip(key))
	}
	if value == nil {
		return k, State{}, true, nil
	}
	if len(value) > maxValue {
		return Key{}, State{}, false, fmt.Errorf("%w: value of %d bytes, above %d", ErrInvalid, len(value), maxValue)
	}
	// Every field must be present: a missing one would read as 0, a
	// valid offset, where -1 (unknown) was meant.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(value, &fields); err != nil {
		return Key{}, State{}, false, fmt.Errorf("%w: value: %v", ErrInvalid, err)
	}
	// A writer before the append rate wrote the other 7: its rate is
	// unknown; one before the read counts, 8: its counts are unknown.
	_, rated := fields["append_rate"]
	_, counted := fields["read_next"]
	if want := 7 + btoi(rated) + 2*btoi(counted); len(fields) != want || (counted && !rated) {
		return Key{}, State{}, false, fmt.Errorf("%w: value has %d fields, want 10 (8 from a writer before read_next, 7 before append_rate)", ErrInvalid, len(fields))
	}
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Key{}, State{}, false, fmt.Errorf("%w: value: %v", ErrInvalid, err)
	}
	if !rated {
		s.AppendRate = -1
	}
	if !counted {
		s.ReadNext, s.PendingRecords = -1, -1
	}
	if dec.More() {
		return Key{}, State{}, false, fmt.Errorf("%w: value: data after the object", ErrInvalid)
	}
	if err := s.Check(); err != nil {
		return Key{}, State{}, false, err
	}
	return k, s, false, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func clip(b []byte) []byte {
	if len(b) > 128 {
		return b[:128]
	}
	return b
}

// Store persists a Table to the heartbeat topic. The topic is created by
// the caller (compacted, Configs).
type Store struct {
	cl       *kgo.Client
	topic    string
	table    *Table
	interval time.Duration
	log      *slog.Logger
	// writing orders the writes (Run's and Flush's), so an older State
	// never lands after a newer one.
	writing sync.Mutex
}

// NewStore returns a store of table in topic through a client built from
// opts (the target's); interval is heartbeats.persist_interval.
func NewStore(opts []kgo.Opt, topic string, table *Table, interval time.Duration, log *slog.Logger) (*Store, error) {
	cl, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic(topic))...)
	if err != nil {
		return nil, fmt.Errorf("heartbeat client: %w", err)
	}
	if interval <= 0 {
		interval = DefaultPersistInterval
	}
	return &Store{cl: cl, topic: topic, table: table, interval: interval, log: log}, nil
}

// Close releases the client; Run must have returned.
func (s *Store) Close() { s.cl.Close() }

// Load reads the topic from its start to the end it has now (bounded: what
// is written later is this writer's own) into the table, read_committed
// to the last stable offset (topicscan): a transactional record someone
// wrote there does not hold the read. A record that fails Decode is
// skipped and logged; links limits what is kept to the writer's links
// (nil keeps all).
func (s *Store) Load(ctx context.Context, links map[string]bool) (loaded, refused int, err error) {
	err = topicscan.Scan(ctx, s.cl.Opts(), s.topic, nil, func(r *kgo.Record) {
		k, st, tomb, err := Decode(r.Key, r.Value)
		switch {
		case err != nil:
			refused++
			s.log.Warn("heartbeat record refused", "partition", r.Partition, "offset", r.Offset, "err", err)
		case links != nil && !links[k.Link]:
		case tomb:
			s.table.forget(k)
		default:
			s.table.load(k, st)
			loaded++
		}
	})
	if err != nil {
		return loaded, refused, fmt.Errorf("heartbeat topic: %w", err)
	}
	return loaded, refused, nil
}

// Run writes the table's changed States every interval until ctx ends,
// then once more: one batch per interval, so each partition's record is
// written at most once an interval, and only when it changed. A failed
// write is tried again at the next.
func (s *Store) Run(ctx context.Context) {
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), s.interval)
			defer cancel()
			s.flush(fctx)
			return
		case <-tick.C:
			s.flush(ctx)
		}
	}
}

// Flush writes the changed States now; safe beside Run.
func (s *Store) Flush(ctx context.Context) error { return s.flush(ctx) }

func (s *Store) flush(ctx context.Context) error {
	s.writing.Lock()
	defer s.writing.Unlock()
	dirty := s.table.takeDirty()
	if len(dirty) == 0 {
		return nil
	}
	recs := make([]*kgo.Record, 0, len(dirty))
	for k, st := range dirty {
		key, value := Encode(k, st)
		recs = append(recs, &kgo.Record{Key: key, Value: value})
	}
	if err := s.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		s.table.markDirty(dirty)
		if !errors.Is(err, context.Canceled) {
			s.log.Warn("heartbeat write failed; retrying at the next interval", "records", len(recs), "err", err)
		}
		return fmt.Errorf("write heartbeats: %w", err)
	}
	return nil
}
