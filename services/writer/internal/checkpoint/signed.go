package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"

	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
)

// Signed checkpoints. A writer signs every checkpoint record it writes
// with the key of its gRPC certificate (tlsconfig.Source.Sign), in the two
// record headers the producer registry uses too, and a store takes a
// checkpoint only if a signer its checkpoints.signers admits signed it.
// Barrier records carry no state and stay unsigned.
//
// Verifying costs an ECDSA verification (50-100 us) and every writer
// tails every record, so the tail verifies only what could do harm as it
// reads it. A record is regular when it moves its key forward on the same
// source topic (same source topic id, next source offset at or above the
// latest's): that is what writers write, and it is kept unverified, to be
// verified when an open reads it (Get, cached per record). Anything else
// (a lower offset, another topic id, a tombstone) is irregular and is
// verified at once, with the latest it would replace:
//
//   - it does not verify: ignored, the latest stays;
//   - a lower offset of the same topic, and the latest verifies: a replay
//     of an older genuine record, ignored. Genuine writers never move a
//     checkpoint back: a shard resumes from its checkpoint and commits
//     only what it copies after it, and only forget resets a partition;
//   - the latest does not verify: the new one replaces it;
//   - another topic id: taken (the open compares topic ids);
//   - a tombstone: forgets the key if it names the latest record (below).
//
// A tombstone's value must stay null (compaction drops the key only then),
// and every tombstone of a key is alike: signed as it is, one forget
// could be replayed to forget the key again at any later time. So a
// signed tombstone names, in a header of its own (headerForgets), the
// record it forgets (its partition and offset in the topic), and its
// signature covers that: a tombstone naming another record than the
// latest is a replay, ignored.
//
// The tail keeps one record per key, so its memory does not grow with
// what is written to a key ("Bounded" below bounds new keys). What
// signatures cannot stop: whoever may write the topic can still make
// compaction erase a key (a record of another key does not, but a signed
// tombstone replayed does), and can write a regular forgery, which the
// open then finds unverified: both stop the partition loudly
// (checkpoint_unverified) instead of moving it, so ACLs on the topic stay
// the first defence (docs/security.md).

// Bounded. Kept unverified, every new well-formed key (link/topic/
// partition) written by anyone able to write the topic would cost the
// view its whole record, read back after every restart: a flood of keys
// grew the writer's memory without bound. So what the view holds of
// records it has not verified (their values, decoded and as written,
// their signatures and an overhead: entry.size) is bounded by
// maxUnverified (checkpoints.max_unverified_bytes). A record that would
// be kept unverified past it is verified as it is read instead, as an
// irregular one is: taken, verified, if it verifies, refused (counted as
// unverified_bound, logged) if not; the key's latest record, if any,
// stays. So the bound costs genuine records nothing but a verification,
// and records that do not verify (forgeries, and unsigned ones even
// under accept_unsigned) are what is left out past it. A forged record
// (or tombstone) of a new key is then not kept to stop its open: a
// partition with no checkpoint starts from start_from, as it would have,
// but one whose genuine checkpoint compaction erased under the forgery
// does too, instead of stopping (as it does once a forged tombstone is
// gone). Verified records are not bounded: only the admitted signers
// write them. With tls.insecure nothing is verified and nothing is
// bounded: the topic's ACLs are all there is. Past the bound each record
// read costs a verification (50-100 us), so a flood delays a writer's
// start instead of exhausting its memory.

// DefaultMaxUnverifiedBytes is checkpoints.max_unverified_bytes' default.
// A genuine record (a signed checkpoint, its certificate chain included)
// costs 1 to 2 KiB (1.1 KiB with a development certificate and no
// intermediate): the default holds 30,000 to 60,000 partitions'
// checkpoints unverified, and a target with more costs its writers a
// verification of each one past that as they start.
const DefaultMaxUnverifiedBytes = 64 << 20

// entryOverhead approximates, in bytes, what the view spends on a record
// beyond its bytes: the entry, its decoded Checkpoint and the map slot.
const entryOverhead = 256

// size is what e, the record of k, costs the view while it is kept
// unverified: its value twice (as written and decoded), its signature
// and the record a tombstone forgets, its key, and entryOverhead.
func (e *entry) size(k Key) int64 {
	return int64(entryOverhead + len(k.Link) + len(k.Topic) + 2*len(e.value) + len(e.sig.Chain) + len(e.sig.Value) + len(e.forgets))
}

// fits reports whether keeping e unverified as k's latest record keeps
// the view within maxUnverified; s.mu held.
func (s *Store) fits(k Key, e *entry) bool {
	if s.maxUnverified <= 0 || s.verifier == nil {
		return true
	}
	held := s.unverifiedBytes
	if latest, ok := s.cps[k]; ok {
		held -= latest.cost
	}
	return held+e.size(k) <= s.maxUnverified
}

// put makes e k's latest record in cps, charging it to unverifiedBytes
// unless it is verified (or nothing is: tls.insecure); s.mu held.
func (s *Store) put(k Key, e *entry) {
	s.drop(k)
	if !e.verified && s.verifier != nil {
		e.cost = e.size(k)
		s.unverifiedBytes += e.cost
	}
	s.cps[k] = e
}

// drop removes k's latest record from cps and gives back its charge;
// s.mu held.
func (s *Store) drop(k Key) {
	if old, ok := s.cps[k]; ok {
		s.unverifiedBytes -= old.cost
		old.cost = 0
		delete(s.cps, k)
	}
}

// keep makes e k's latest record unverified, to be verified when an
// open reads it, if the bound allows it; past the bound it is verified
// now, and refused unless it verifies ("Bounded" above); s.mu held.
func (s *Store) keep(k Key, e *entry) {
	if !s.fits(k, e) {
		if err := s.check(k, e); err != nil {
			s.refuseBound(k, e, err)
			return
		}
	}
	s.set(k, e)
}

// refuseBound refuses e, which does not verify (err), past the bound;
// s.mu held.
func (s *Store) refuseBound(k Key, e *entry, err error) {
	s.refuse(k, e, "unverified_bound", fmt.Errorf("not verified, with checkpoints.max_unverified_bytes (%d) of records not verified yet held already: %w", s.maxUnverified, err))
}

// UnverifiedBytes is what the view holds of records it has not verified
// (at most checkpoints.max_unverified_bytes).
func (s *Store) UnverifiedBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unverifiedBytes
}

// signPurpose names checkpoint records in their signatures, so a signature
// made for another kind of record (a producer registry entry) never passes
// for a checkpoint's.
const (
	signPurpose   = "ferry-checkpoint"
	forgetPurpose = "ferry-checkpoint-forget"
	// headerForgets names, in a tombstone, the record it forgets:
	// "partition/offset" in the checkpoint topic.
	headerForgets = "ferry-forgets"
)

// Signer signs checkpoint records: the writer's tlsconfig.Source.
type Signer interface {
	Sign(purpose string, key, value []byte) (tlsconfig.Signature, error)
}

// Verifier checks their signatures: a tlsconfig.Verifier of the writer's
// checkpoints.signers.
type Verifier interface {
	Verify(purpose string, key, value []byte, sig tlsconfig.Signature) (string, error)
}

// ErrUnverified is what an UnverifiedError is.
var ErrUnverified = errors.New("checkpoint unverified")

// UnverifiedError is a partition's latest checkpoint that is unsigned or
// does not verify: the partition must stop, not start from start_from.
type UnverifiedError struct {
	Key Key
	// Topic, Partition and Offset locate the record in the checkpoint
	// topic.
	Topic     string
	Partition int32
	Offset    int64
	// Err says why: tlsconfig.ErrUnsigned, or what did not verify.
	Err error
}

func (e *UnverifiedError) Error() string {
	return fmt.Sprintf("checkpoint of %s (%s partition %d offset %d) unverified: %v", e.Key, e.Topic, e.Partition, e.Offset, e.Err)
}

func (e *UnverifiedError) Unwrap() []error { return []error{ErrUnverified, e.Err} }

// entry is the latest record the tail took for a key, as it was written.
type entry struct {
	cp        Checkpoint
	value     []byte // nil for a tombstone
	sig       tlsconfig.Signature
	forgets   []byte // a tombstone's headerForgets
	partition int32  // of the checkpoint topic
	offset    int64
	// verified caches a successful verification of this record. A
	// failure is not cached: it may pass once the signers' CA bundle is
	// fixed, and failures are rare (an open stops the partition).
	verified bool
	// cost is what the record is charged in Store.unverifiedBytes while
	// it is in the view unverified (put), 0 otherwise.
	cost int64
}

func (e *entry) signed() bool { return len(e.sig.Chain) > 0 || len(e.sig.Value) > 0 }

// position is the record's place in the checkpoint topic, as a tombstone
// names the record it forgets.
func (e *entry) position() string { return fmt.Sprintf("%d/%d", e.partition, e.offset) }

// check verifies e, the record of k, once; s.mu held.
func (s *Store) check(k Key, e *entry) error {
	if s.verifier == nil || e.verified {
		return nil
	}
	purpose, value := signPurpose, e.value
	if value == nil {
		purpose, value = forgetPurpose, e.forgets
	}
	if _, err := s.verifier.Verify(purpose, []byte(k.String()), value, e.sig); err != nil {
		return err
	}
	e.verified = true
	s.unverifiedBytes -= e.cost
	e.cost = 0
	return nil
}

// take applies the record e of k read by the tail (see the comment at the
// top); s.mu held.
func (s *Store) take(k Key, e *entry) {
	latest, ok := s.cps[k]
	switch {
	case s.verifier == nil: // tls.insecure: nothing is verified
		s.set(k, e)
		return
	case !ok && e.value == nil:
		if err := s.check(k, e); err != nil {
			// Nothing to forget, but nothing before it either: a
			// tombstone written after the partition's checkpoint makes
			// compaction erase that checkpoint. Kept as a mark, so an
			// open stops the partition instead of starting it from
			// start_from (Get). Not past the bound: a mark is kept
			// unverified too.
			if !s.fits(k, e) {
				s.refuseBound(k, e, err)
				return
			}
			s.refuse(k, e, refusedReason(e, err), err)
			s.put(k, e)
			if !e.signed() {
				s.unsigned++
			}
		}
		return
	case !ok, latest.value == nil && e.value != nil:
		s.keep(k, e) // verified when an open reads it
		return
	case e.value != nil && bytes.Equal(e.cp.SourceTopicID, latest.cp.SourceTopicID) && e.cp.NextSourceOffset >= latest.cp.NextSourceOffset:
		s.keep(k, e) // regular: verified when an open reads it
		return
	}
	if err := s.check(k, e); err != nil && (e.value == nil || !errors.Is(err, tlsconfig.ErrUnsigned) || !s.acceptUnsigned) {
		s.refuse(k, e, refusedReason(e, err), err)
		return
	} else if err != nil && !s.fits(k, e) { // unsigned, under accept_unsigned: kept unverified
		s.refuseBound(k, e, err)
		return
	}
	if e.value == nil && string(e.forgets) != latest.position() {
		s.refuse(k, e, "replayed", fmt.Errorf("the tombstone forgets the record at %s, the latest is at %s", e.forgets, latest.position()))
		return
	}
	if e.value != nil && bytes.Equal(e.cp.SourceTopicID, latest.cp.SourceTopicID) && s.check(k, latest) == nil {
		s.refuse(k, e, "replayed", fmt.Errorf("next source offset %d is below the latest's %d (offset %d)",
			e.cp.NextSourceOffset, latest.cp.NextSourceOffset, latest.offset))
		return
	}
	s.set(k, e)
}

// refusedReason is the reason a record e that does not verify (err) is
// refused under.
func refusedReason(e *entry, err error) string {
	switch {
	case !errors.Is(err, tlsconfig.ErrUnsigned):
		return "unverified"
	case e.value == nil:
		return "unsigned_tombstone"
	}
	return "unsigned"
}

// set makes e k's latest record, or forgets k for a tombstone; s.mu held.
func (s *Store) set(k Key, e *entry) {
	if old, ok := s.cps[k]; ok && !old.signed() {
		s.unsigned--
	}
	if e.value == nil {
		s.drop(k)
		return
	}
	if !e.signed() {
		s.unsigned++
	}
	s.put(k, e)
}

// refuse counts and logs (rate-limited: anyone able to write the topic
// could flood the log) a record the tail ignores; s.mu held.
func (s *Store) refuse(k Key, e *entry, reason string, err error) {
	if c := s.metrics.Refused; c != nil {
		c.WithLabelValues(reason).Inc()
	}
	if n, ok := s.refused.allow(); ok {
		s.log.Warn("ignoring checkpoint record", "reason", reason, "key", k.String(), "partition", e.partition, "offset", e.offset, "err", err, "suppressed_before", n)
	}
}

// UnsignedLatest is how many keys' latest records carry no signature:
// checkpoints of writers older than signing, which only
// checkpoints.accept_unsigned lets an open take.
func (s *Store) UnsignedLatest() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unsigned
}

// signed builds the record of k holding value, signed unless the store
// has no Signer.
func (s *Store) signed(k Key, value []byte, at time.Time) (Record, error) {
	rec := Record{Partition: s.PartitionOf(k), Key: []byte(k.String()), Value: value, Time: at}
	if s.signer == nil {
		return rec, nil
	}
	sig, err := s.signer.Sign(signPurpose, rec.Key, rec.Value)
	if err != nil {
		return Record{}, fmt.Errorf("checkpoint of %s: %w", k, err)
	}
	rec.Headers = sig.Headers()
	return rec, nil
}

// tombstone builds the tombstone of k that forgets its latest record e,
// signed unless the store has no Signer.
func (s *Store) tombstone(k Key, e *entry) (Record, error) {
	rec := Record{Partition: s.PartitionOf(k), Key: []byte(k.String()), Time: time.Now()}
	if s.signer == nil {
		return rec, nil
	}
	forgets := []byte(e.position())
	sig, err := s.signer.Sign(forgetPurpose, rec.Key, forgets)
	if err != nil {
		return Record{}, fmt.Errorf("tombstone of %s: %w", k, err)
	}
	rec.Headers = append(sig.Headers(), tlsconfig.Header{Key: headerForgets, Value: forgets})
	return rec, nil
}

// Forget writes a signed tombstone for k, the operator's way to send a
// partition back to start_from, and returns the checkpoint it forgot once
// the store's own view has taken the tombstone. It writes nothing when k
// has no checkpoint.
func (s *Store) Forget(ctx context.Context, k Key) (Checkpoint, error) {
	if err := s.Sync(ctx); err != nil {
		return Checkpoint{}, err
	}
	s.mu.Lock()
	e, ok := s.cps[k]
	s.mu.Unlock()
	if !ok {
		return Checkpoint{}, fmt.Errorf("%s has no checkpoint in %s: nothing to forget", k, s.topic)
	}
	rec, err := s.tombstone(k, e)
	if err != nil {
		return Checkpoint{}, err
	}
	if err := s.send(rec); err != nil {
		return Checkpoint{}, fmt.Errorf("tombstone of %s: %w", k, err)
	}
	if err := s.Sync(ctx); err != nil {
		return Checkpoint{}, err
	}
	s.mu.Lock()
	_, still := s.cps[k]
	s.mu.Unlock()
	if still {
		return Checkpoint{}, fmt.Errorf("tombstone of %s written but not taken (a checkpoint written since, or checkpoints.signers does not admit this writer?)", k)
	}
	return e.cp, nil
}

// CheckSigners signs a probe with signer and verifies it with verifier: a
// writer whose own checkpoints its signers settings would refuse would
// stop every partition it opens, so it must not start.
func CheckSigners(signer Signer, verifier Verifier) error {
	key, value := []byte("probe/start-up"), []byte("{}")
	sig, err := signer.Sign(signPurpose, key, value)
	if err != nil {
		return err
	}
	_, err = verifier.Verify(signPurpose, key, value, sig)
	return err
}

// Put writes cp as k's checkpoint, signed with the store's Signer, and
// returns once the store's own view has taken it: the operator's way to
// move a partition past a record (docs/operations.md) and to sign a
// checkpoint again (Unsigned). A checkpoint below k's latest on the same
// source topic is a replay to every writer's view, so it is refused
// here: forget the partition first.
func (s *Store) Put(ctx context.Context, k Key, cp Checkpoint) error {
	if err := s.Sync(ctx); err != nil {
		return err
	}
	if cur, ok, err := s.Get(k); err == nil && ok && bytes.Equal(cur.SourceTopicID, cp.SourceTopicID) && cp.NextSourceOffset < cur.NextSourceOffset {
		return fmt.Errorf("%s: next source offset %d is below the checkpoint's %d, which every writer would ignore as a replay: forget the partition first",
			k, cp.NextSourceOffset, cur.NextSourceOffset)
	}
	rec, err := s.Record(k, cp)
	if err != nil {
		return err
	}
	if err := s.send(rec); err != nil {
		return fmt.Errorf("checkpoint of %s: %w", k, err)
	}
	if err := s.Sync(ctx); err != nil {
		return err
	}
	got, ok, err := s.Get(k)
	if err != nil || !ok || got.NextSourceOffset != cp.NextSourceOffset || !bytes.Equal(got.SourceTopicID, cp.SourceTopicID) {
		return fmt.Errorf("checkpoint of %s written but not taken (a checkpoint written since?): the view holds %+v (%v)", k, got, err)
	}
	return nil
}

// Move sets k's next source offset to next, keeping what else its
// checkpoint says (target offset, source topic id, epoch), signed like
// every record the store writes: the operator's way to move a partition
// (`ferry-writer checkpoint set`). It returns the checkpoint before
// (found false: there was none). Like Put, it moves forward only.
func (s *Store) Move(ctx context.Context, k Key, next int64, writer string) (prev Checkpoint, found bool, err error) {
	moved, err := s.MoveAll(ctx, []Move{{Key: k, Next: next}}, writer, false)
	if err != nil {
		return Checkpoint{}, false, err
	}
	return moved[0].Prev, moved[0].Found, nil
}

// Move is one partition's checkpoint move (MoveAll).
type Move struct {
	Key  Key
	Next int64
}

// Moved is what a Move found: the checkpoint before it (Found false:
// there was none).
type Moved struct {
	Prev  Checkpoint
	Found bool
}

// MoveAll moves the checkpoints of moves as Move does, in one pass: one
// sync before, every record in one produce request, one sync after
// (failback moves every partition of a link; a pass per partition took
// 2.5-3 s each on a small cluster, so a link of ten partitions outlived
// ferryctl's default timeout half done). Every move is checked before
// anything is written: a checkpoint that does not verify, or a move
// backwards, writes nothing. With keepCopied each moved checkpoint
// remembers where the copy stood (Checkpoint.CopiedNext), kept across
// moves until a round writes the partition again.
func (s *Store) MoveAll(ctx context.Context, moves []Move, writer string, keepCopied bool) ([]Moved, error) {
	if err := s.Sync(ctx); err != nil {
		return nil, err
	}
	out := make([]Moved, len(moves))
	cps := make([]Checkpoint, len(moves))
	now := time.Now().UTC()
	for i, m := range moves {
		cur, ok, err := s.Get(m.Key)
		if err != nil {
			return nil, fmt.Errorf("%w: forget the partition first, then set it", err)
		}
		if ok && m.Next < cur.NextSourceOffset {
			return nil, fmt.Errorf("%s: next source offset %d is below the checkpoint's %d, which every writer would ignore as a replay: forget the partition first",
				m.Key, m.Next, cur.NextSourceOffset)
		}
		cp := Checkpoint{NextSourceOffset: m.Next, TargetOffset: -1, Writer: writer, Time: now}
		if ok {
			// The index entries it carries still say where what was copied
			// landed: they stay until the partition's next flush writes them.
			cp.TargetOffset, cp.SourceTopicID, cp.Epoch, cp.Unindexed = cur.TargetOffset, cur.SourceTopicID, cur.Epoch, cur.Unindexed
			cp.Landmarks = cur.Landmarks
			if keepCopied || cur.CopiedNext != nil {
				copied := cur.Copied()
				cp.CopiedNext = &copied
			}
		}
		out[i], cps[i] = Moved{Prev: cur, Found: ok}, cp
	}
	msgs := make([]*sarama.ProducerMessage, 0, len(moves))
	for i, m := range moves {
		rec, err := s.Record(m.Key, cps[i])
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, message(s.topic, rec))
	}
	if err := s.barrier.SendMessages(msgs); err != nil {
		return nil, fmt.Errorf("checkpoints of %d partitions: %w", len(moves), err)
	}
	if err := s.Sync(ctx); err != nil {
		return nil, err
	}
	for i, m := range moves {
		got, ok, err := s.Get(m.Key)
		if err != nil || !ok || got.NextSourceOffset != cps[i].NextSourceOffset || !bytes.Equal(got.SourceTopicID, cps[i].SourceTopicID) {
			return nil, fmt.Errorf("checkpoint of %s written but not taken (a checkpoint written since?): the view holds %+v (%v)", m.Key, got, err)
		}
	}
	return out, nil
}

// send produces rec outside any shard's round.
func (s *Store) send(rec Record) error {
	_, _, err := s.barrier.SendMessage(message(s.topic, rec))
	return err
}

// message is rec as sarama produces it to topic.
func message(topic string, rec Record) *sarama.ProducerMessage {
	msg := &sarama.ProducerMessage{Topic: topic, Partition: rec.Partition, Key: sarama.ByteEncoder(rec.Key), Timestamp: rec.Time}
	if rec.Value != nil {
		msg.Value = sarama.ByteEncoder(rec.Value)
	}
	for _, h := range rec.Headers {
		msg.Headers = append(msg.Headers, sarama.RecordHeader{Key: []byte(h.Key), Value: h.Value})
	}
	return msg
}

// NotSignedByMe lists the keys whose latest checkpoint Get takes (it
// verifies, or is unsigned and AcceptUnsigned is on) but that the store's
// Signer did not sign with its current certificate: unsigned ones of
// writers older than signing, and ones signed with a certificate since
// replaced, which stop verifying once their CA leaves the signers' bundle.
// Put signs them again; an idle partition is otherwise never signed anew.
func (s *Store) NotSignedByMe() ([]Key, error) {
	if s.signer == nil {
		return nil, errors.New("no key to sign with (tls.insecure)")
	}
	probe, err := s.signer.Sign(signPurpose, []byte("probe/chain"), nil)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	keys := make([]Key, 0, len(s.cps))
	for k, e := range s.cps {
		if e.value != nil && !bytes.Equal(e.sig.Chain, probe.Chain) {
			keys = append(keys, k)
		}
	}
	s.mu.Unlock()
	var out []Key
	for _, k := range keys {
		if _, ok, err := s.Get(k); ok && err == nil {
			out = append(out, k)
		}
	}
	return out, nil
}
