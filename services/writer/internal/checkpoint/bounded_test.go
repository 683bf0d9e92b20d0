package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/pkg/kafkaclient"
)

// A flood of well-formed keys on the checkpoint topic (anyone with Write
// on it) does not grow the view's memory without bound, at start (the
// tail reads the whole topic again) or while it runs: past
// max_unverified_bytes a record is verified as it is read, taken if it
// verifies and refused, counted, if not. Genuine checkpoints written
// before and after the flood are all taken.
func TestUnverifiedRecordsAreBounded(t *testing.T) {
	const (
		topic  = "__ferry_checkpoints"
		bound  = 64 << 10
		forged = 600
		pad    = 1 << 10 // bytes of each forged value beyond the checkpoint
	)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": ptr("compact")}, topic); err != nil {
		t.Fatal(err)
	}
	sg := newSigners(t)
	signer := &Store{signer: sg.writer, partitions: 1}
	genuine := func(i int) *kgo.Record {
		t.Helper()
		k := Key{Link: "east", Topic: "orders", Partition: int32(i)}
		rec, err := signer.Record(k, Checkpoint{NextSourceOffset: int64(100 + i), TargetOffset: int64(i), Writer: "w1", Time: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		return kafkaRecord(rec)
	}
	var recs []*kgo.Record
	for i := range 10 {
		recs = append(recs, genuine(i))
	}
	for i := range forged {
		k := Key{Link: "east", Topic: fmt.Sprintf("flood-%d", i), Partition: 0}
		value, _ := json.Marshal(Checkpoint{NextSourceOffset: 1, Writer: strings.Repeat("m", pad)})
		rec := Record{Key: []byte(k.String()), Value: value}
		if i%2 == 1 { // signed by an identity no writer admits
			sig, err := sg.fetcher.Sign(signPurpose, rec.Key, rec.Value)
			if err != nil {
				t.Fatal(err)
			}
			rec.Headers = sig.Headers()
		}
		recs = append(recs, kafkaRecord(rec))
	}
	for i := 10; i < 20; i++ {
		recs = append(recs, genuine(i))
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	// A writer (re)started on the topic reads it all.
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "refused"}, []string{"reason"})
	base, err := kafkaclient.Defaults("ferry-test").Sarama()
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(cluster.ListenAddrs(), base, Options{
		Topic: topic, Partitions: 1, ReplicationFactor: -1, Writer: "w1",
		Signer: sg.writer, Verifier: sg.verifier, MaxUnverifiedBytes: bound,
		Metrics: Metrics{Refused: refused},
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}

	s.mu.Lock()
	wantCharged(t, s)
	held, kept := 0, 0
	for k, e := range s.cps {
		if e.verified {
			continue
		}
		held += len(e.value) + len(e.sig.Chain) + len(e.sig.Value)
		if strings.HasPrefix(k.Topic, "flood-") {
			kept++
		}
	}
	s.mu.Unlock()
	if held > bound {
		t.Errorf("the view holds %d bytes of records it has not verified (%d forged keys), above the bound of %d", held, kept, bound)
	}
	if n := testutil.ToFloat64(refused.WithLabelValues("unverified_bound")); int(n) != forged-kept || n == 0 {
		t.Errorf("refused{reason=unverified_bound} = %v, want the %d forged records not kept", n, forged-kept)
	}
	for i := range 20 {
		k := Key{Link: "east", Topic: "orders", Partition: int32(i)}
		if cp, ok, err := s.Get(k); err != nil || !ok || cp.NextSourceOffset != int64(100+i) {
			t.Errorf("genuine checkpoint of %s: %+v, %v, %v; want next %d", k, cp, ok, err, 100+i)
		}
	}
	if n := s.UnverifiedBytes(); n > bound {
		t.Errorf("UnverifiedBytes = %d, above the bound of %d", n, bound)
	}
	// A forged record kept under the bound is refused by the open, as
	// before.
	for i := range forged {
		k := Key{Link: "east", Topic: fmt.Sprintf("flood-%d", i), Partition: 0}
		if _, ok, err := s.Get(k); ok && !errors.Is(err, ErrUnverified) {
			t.Fatalf("forged checkpoint of %s taken: %v", k, err)
		}
	}
	s.mu.Lock()
	wantCharged(t, s)
	s.mu.Unlock()
}

// wantCharged checks that s.unverifiedBytes is what its records not
// verified are charged; s.mu held.
func wantCharged(t *testing.T, s *Store) {
	t.Helper()
	sum := int64(0)
	for k, e := range s.cps {
		switch {
		case e.verified && e.cost != 0:
			t.Errorf("%s: verified, but charged %d", k, e.cost)
		case !e.verified && e.cost != e.size(k):
			t.Errorf("%s: not verified, charged %d, want %d", k, e.cost, e.size(k))
		}
		sum += e.cost
	}
	if sum != s.unverifiedBytes {
		t.Errorf("unverifiedBytes = %d, its records are charged %d", s.unverifiedBytes, sum)
	}
}

// kafkaRecord is rec as a franz-go client produces it.
func kafkaRecord(rec Record) *kgo.Record {
	r := &kgo.Record{Key: rec.Key, Value: rec.Value, Partition: rec.Partition}
	for _, h := range rec.Headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	return r
}

// Past the bound a running view verifies what it would have kept
// unverified: a forgery moving a partition forward that would grow what
// is held past it is refused at once and the genuine checkpoint stays, a genuine commit replacing its key's
// latest is kept as before, and nothing is charged twice or left charged.
func TestBoundedViewKeepsTheGenuineLatest(t *testing.T) {
	s := newTestStore(newSigners(t), false)
	s.commit(t, 100, nil)
	s.mu.Lock()
	s.maxUnverified = s.cps[key].cost + 1<<10 // room for k and a little
	s.mu.Unlock()
	flood := func(i int) Record {
		value, _ := json.Marshal(Checkpoint{NextSourceOffset: 1, Writer: "mallory"})
		return Record{Key: []byte(Key{Link: "east", Topic: fmt.Sprintf("flood-%d", i), Partition: 0}.String()), Value: value}
	}
	for i := range 20 {
		s.write(flood(i))
		s.write(Record{Key: []byte(Key{Link: "east", Topic: fmt.Sprintf("tomb-%d", i), Partition: 0}.String())}) // a mark
	}
	s.mu.Lock()
	wantCharged(t, s.Store)
	if s.unverifiedBytes > s.maxUnverified {
		t.Errorf("unverifiedBytes %d above the bound %d", s.unverifiedBytes, s.maxUnverified)
	}
	s.mu.Unlock()
	if n := testutil.ToFloat64(s.refused.WithLabelValues("unverified_bound")); n == 0 {
		t.Error("nothing refused past the bound")
	}

	// Forwards, and larger than the record it would replace by more than
	// the room left: verified now, refused.
	big := forged(t, 1000, nil)
	big.Value, _ = json.Marshal(Checkpoint{NextSourceOffset: 1000, Writer: strings.Repeat("m", 4<<10)})
	s.write(big)
	s.want(t, 100, true, false)
	s.commit(t, 120, nil) // replaces key's latest within the bound
	s.mu.Lock()
	if e := s.cps[key]; e.verified || e.cp.NextSourceOffset != 120 {
		t.Errorf("the genuine commit is kept as %+v, want unverified at 120", e)
	}
	s.mu.Unlock()
	s.want(t, 120, true, false)
	s.mu.Lock()
	wantCharged(t, s.Store)
	s.mu.Unlock()
}
