package checkpoint

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
)

// signers are a writer's Source (which signs) and Verifier (which admits
// the writer's own identity, under its CA), and a fetcher's Source of the
// same CA, whose identity no writer admits.
type signers struct {
	writer, fetcher *tlsconfig.Source
	verifier        *tlsconfig.Verifier
	ca              *devcerts.CA
}

func newSigners(t testing.TB) signers {
	t.Helper()
	dir := t.TempDir()
	if _, err := devcerts.WriteDir(dir, devcerts.Options{Validity: time.Hour}); err != nil {
		t.Fatal(err)
	}
	src := func(tier, peer string) *tlsconfig.Source {
		s, err := tlsconfig.NewSource(tlsconfig.Config{
			CertFile: filepath.Join(dir, tier+".pem"), KeyFile: filepath.Join(dir, tier+"-key.pem"),
			CAFile: filepath.Join(dir, "ca.pem"), AllowedIDs: []string{devcerts.SPIFFEID(devcerts.DefaultTrustDomain, peer)},
		}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	sg := signers{writer: src("writer", "fetcher"), fetcher: src("fetcher", "writer")}
	v, err := tlsconfig.NewVerifier(sg.writer, "", sg.writer.OwnIdentities())
	if err != nil {
		t.Fatal(err)
	}
	sg.verifier = v
	return sg
}

// testStore is a Store without Kafka, fed by apply as its tail would be.
type testStore struct {
	*Store
	refused *prometheus.CounterVec
	next    int64 // the next offset in the topic
}

func newTestStore(sg signers, acceptUnsigned bool) *testStore {
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "refused"}, []string{"reason"})
	s := &Store{
		topic: "__ferry_checkpoints", partitions: 1, log: slog.New(slog.DiscardHandler), cps: map[Key]*entry{}, read: make([]int64, 1),
		signer: sg.writer, verifier: sg.verifier, acceptUnsigned: acceptUnsigned,
		metrics: Metrics{Refused: refused, AcceptedUnsigned: prometheus.NewCounter(prometheus.CounterOpts{Name: "unsigned"})},
	}
	s.cond = sync.NewCond(&s.mu)
	return &testStore{Store: s, refused: refused}
}

var key = Key{Link: "east", Topic: "orders", Partition: 0}

// write applies rec as the tail reads it, and returns its offset.
func (s *testStore) write(rec Record) int64 {
	m := &sarama.ConsumerMessage{Key: rec.Key, Value: rec.Value, Offset: s.next}
	for _, h := range rec.Headers {
		m.Headers = append(m.Headers, &sarama.RecordHeader{Key: []byte(h.Key), Value: h.Value})
	}
	s.next++
	s.apply(0, m)
	return m.Offset
}

// commit writes the store's own signed checkpoint of key at next.
func (s *testStore) commit(t *testing.T, next int64, topicID []byte) Record {
	t.Helper()
	rec, err := s.Record(key, Checkpoint{NextSourceOffset: next, TargetOffset: next, SourceTopicID: topicID, Writer: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	s.write(rec)
	return rec
}

// forged is a checkpoint of key at next as anyone else writes it, signed
// by signer (nil: unsigned).
func forged(t *testing.T, next int64, signer Signer) Record {
	t.Helper()
	value, _ := json.Marshal(Checkpoint{NextSourceOffset: next, TargetOffset: next, Writer: "mallory"})
	rec := Record{Key: []byte(key.String()), Value: value}
	if signer != nil {
		sig, err := signer.Sign(signPurpose, rec.Key, rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		rec.Headers = sig.Headers()
	}
	return rec
}

// want checks what Get answers for key.
func (s *testStore) want(t *testing.T, next int64, found bool, unverified bool) {
	t.Helper()
	cp, ok, err := s.Get(key)
	switch {
	case unverified:
		if !errors.Is(err, ErrUnverified) {
			t.Fatalf("Get = %+v, %v, %v; want ErrUnverified", cp, ok, err)
		}
	case err != nil || ok != found || ok && cp.NextSourceOffset != next:
		t.Fatalf("Get = %+v, %v, %v; want next %d, found %v", cp, ok, err, next, found)
	}
}

func (s *testStore) refusedAs(t *testing.T, reason string, want float64) {
	t.Helper()
	if got := testutil.ToFloat64(s.refused.WithLabelValues(reason)); got != want {
		t.Errorf("refused{reason=%s} = %v, want %v", reason, got, want)
	}
}

// A forged checkpoint that moves the partition forward is kept unverified
// by the tail (verifying every record would cost every writer 50-100 us a
// record) and refused when an open reads it; one that moves it anywhere
// else is verified as it is read and ignored: the genuine one stays.
func TestForgedCheckpointsAreNotTaken(t *testing.T) {
	sg := newSigners(t)
	other := newSigners(t) // a writer identity under another CA
	for name, signer := range map[string]Signer{
		"unsigned": nil, "signed by a fetcher": sg.fetcher, "signed under another CA": other.writer,
	} {
		t.Run(name, func(t *testing.T) {
			s := newTestStore(sg, false)
			s.commit(t, 100, nil)
			s.write(forged(t, 10, signer)) // backwards: ignored
			s.want(t, 100, true, false)
			if name == "unsigned" {
				s.refusedAs(t, "unsigned", 1)
			} else {
				s.refusedAs(t, "unverified", 1)
			}
			s.write(forged(t, 1000, signer)) // forwards: refused at Get
			s.want(t, 0, true, true)
			// The genuine writer's next commit, below the forgery, replaces it.
			s.commit(t, 120, nil)
			s.want(t, 120, true, false)
		})
	}
	t.Run("a signature moved onto another value", func(t *testing.T) {
		s := newTestStore(sg, false)
		genuine := s.commit(t, 100, nil)
		moved := forged(t, 1000, nil)
		moved.Headers = genuine.Headers
		s.write(moved)
		_, _, err := s.Get(key)
		var ue *UnverifiedError
		if !errors.As(err, &ue) || ue.Offset != 1 || ue.Topic != "__ferry_checkpoints" {
			t.Fatalf("Get: %v; want an UnverifiedError at offset 1", err)
		}
	})
}

// An older genuine record written again (a replay) does not move the
// partition back; another source topic id (a recreated topic) does, once
// it verifies.
func TestReplayedCheckpointIsIgnored(t *testing.T) {
	s := newTestStore(newSigners(t), false)
	old := s.commit(t, 10, nil)
	s.commit(t, 100, nil)
	s.write(old)
	s.want(t, 100, true, false)
	s.refusedAs(t, "replayed", 1)
	s.commit(t, 5, []byte("new-topic-id...."))
	s.want(t, 5, true, false)
}

// Only a signed tombstone naming the latest record forgets it: an
// unsigned one is ignored (it used to send the partition back to
// start_from), and a signed one written again later is a replay.
func TestOnlyASignedForgetForgets(t *testing.T) {
	s := newTestStore(newSigners(t), false)
	s.commit(t, 100, nil)
	s.write(Record{Key: []byte(key.String())})
	s.want(t, 100, true, false)
	s.refusedAs(t, "unsigned_tombstone", 1)

	s.mu.Lock()
	forget, err := s.tombstone(key, s.cps[key])
	s.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	s.write(forget)
	s.want(t, 0, false, false)
	s.commit(t, 50, nil)
	s.write(forget) // the same tombstone again
	s.want(t, 50, true, false)
	s.refusedAs(t, "replayed", 1)
}

// A writer restarted after compaction erased a partition's checkpoint
// under a forged tombstone finds only the tombstone: the open stops the
// partition rather than start it from start_from.
func TestTombstoneAloneStopsTheOpen(t *testing.T) {
	s := newTestStore(newSigners(t), false)
	s.write(Record{Key: []byte(key.String())})
	s.want(t, 0, false, true)
	if n := s.UnsignedLatest(); n != 1 {
		t.Errorf("UnsignedLatest = %d, want 1", n)
	}
}

// Checkpoints of writers older than signing are taken only with
// accept_unsigned, and counted, until the partition's next commit signs
// it.
func TestAcceptUnsignedTakesLegacyCheckpoints(t *testing.T) {
	sg := newSigners(t)
	strict, lax := newTestStore(sg, false), newTestStore(sg, true)
	for _, s := range []*testStore{strict, lax} {
		s.write(forged(t, 70, nil))
	}
	strict.want(t, 0, true, true)
	lax.want(t, 70, true, false)
	if got := testutil.ToFloat64(lax.metrics.AcceptedUnsigned); got != 1 {
		t.Errorf("accepted unsigned %v, want 1", got)
	}
	if n := lax.UnsignedLatest(); n != 1 {
		t.Errorf("UnsignedLatest = %d, want 1", n)
	}
	lax.commit(t, 80, nil)
	if n := lax.UnsignedLatest(); n != 0 {
		t.Errorf("after a signed commit UnsignedLatest = %d, want 0", n)
	}
}

// Certificates expire and rotate; checkpoints stay. One signed while its
// certificate was valid verifies after it expired.
func TestCheckpointOutlivesItsCertificate(t *testing.T) {
	sg := newSigners(t)
	dir := t.TempDir()
	ca, err := devcerts.NewCA("ca", time.Now().Add(-3*time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	id := devcerts.SPIFFEID(devcerts.DefaultTrustDomain, "writer")
	leaf, err := ca.Issue(devcerts.LeafOptions{URIs: []string{id}, NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := devcerts.WriteFileAtomic(caFile, ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := tlsconfig.NewVerifier(sg.writer, caFile, []string{id})
	if err != nil {
		t.Fatal(err)
	}
	sg.verifier = v
	s := newTestStore(sg, false)
	s.write(forged(t, 42, expiredSigner{&cert}))
	s.want(t, 42, true, false)
}

type expiredSigner struct{ cert *tls.Certificate }

func (e expiredSigner) Sign(purpose string, key, value []byte) (tlsconfig.Signature, error) {
	return tlsconfig.SignWith(e.cert, purpose, key, value)
}

// The start-up probe: a writer's own signature must pass its signers
// settings.
func TestCheckSigners(t *testing.T) {
	sg := newSigners(t)
	if err := CheckSigners(sg.writer, sg.verifier); err != nil {
		t.Fatalf("own signature: %v", err)
	}
	fetchers, err := tlsconfig.NewVerifier(sg.writer, "", []string{devcerts.SPIFFEID(devcerts.DefaultTrustDomain, "fetcher")})
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckSigners(sg.writer, fetchers); !errors.Is(err, tlsconfig.ErrIdentityNotAllowed) {
		t.Fatalf("signers admitting fetchers only: %v, want ErrIdentityNotAllowed", err)
	}
}
