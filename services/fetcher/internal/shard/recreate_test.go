package shard

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/metrics"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/writertest"
)

// recreate deletes topic from the source and creates it again with one
// partition, then produces n records into the new topic.
func (s *source) recreate(t *testing.T, topic string, n int) {
	t.Helper()
	ctx := context.Background()
	adm := kadm.NewClient(s.producer)
	if _, err := adm.DeleteTopic(ctx, topic); err != nil {
		t.Fatalf("delete %s: %v", topic, err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
	// A producer of its own: s.producer has the old topic's id cached.
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for range n {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("new")}).FirstErr(); err != nil {
			t.Fatalf("produce into the new %s: %v", topic, err)
		}
	}
}

// recreatedWhileReading runs a shard over topic t and the
// idle topic "other", reading through a Fetcher whose client has opts, and
// holds it inside its first round over t's six records (one batch each,
// one batch in flight, acknowledgements held). Meanwhile t is deleted and
// created again with ten records, past the old position, and the
// acknowledgements flow again.
func recreatedWhileReading(t *testing.T, opts []kgo.Opt, edit func(*Settings)) (*source, *Runner, *metrics.Metrics, *writertest.Writer, []byte, []byte) {
	t.Helper()
	const topic = "t"
	src := newSource(t, topic, "other")
	src.produce(t, topic, 6)
	oldID := src.topicID(t, topic)
	m := metrics.New(prometheus.NewRegistry())
	writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
	writer.HoldAcks()
	r, _, _ := startRunnerDeps(t, src, newWriters(t, writer.Addr()), m, func(s *Settings) {
		s.BatchMaxBytes, s.MaxInflightBytes = 1, 1
		edit(s)
	}, func(d *Deps) { d.RawFetch = src.rawFetcher(t, opts...) }, make(chan struct{}), topic, "other")
	records := func() float64 { return testutil.ToFloat64(m.Records.WithLabelValues(testLink, topic, "0")) }
	// One sent, one waiting for credit, outSlots queued, one being queued.
	writertest.WaitFor(t, 10*time.Second, "the loop blocked in its first round", func() bool { return records() == outSlots+3 })
	src.recreate(t, topic, 10)
	newID := src.topicID(t, topic)
	if slices.Equal(newID, oldID) {
		t.Fatal("the recreated topic kept its id")
	}
	writer.ReleaseAcks()
	return src, r, m, writer, oldID, newID
}

// firstOffsets are the first offsets of the wire batches of topic the
// writer received, in order.
func firstOffsets(w *writertest.Writer, topic string) []int64 {
	var out []int64
	for _, b := range w.Received() {
		if b.GetTopic() == topic {
			out = append(out, b.GetFirstOffset())
		}
	}
	return out
}

var fetchByName = func() []kgo.Opt {
	v := kversion.Stable()
	v.SetMaxKeyVersion(int16(kmsg.Fetch), 12)
	return []kgo.Opt{kgo.MaxVersions(v)}
}()

// A source topic deleted and created again while its shard reads it, the
// new topic already past the old position, stops the partition as
// topic_recreated, as at open: nothing of the new topic reaches the writer
// (no record of it is taken for the old topic's, none skipped silently),
// and the shard's other partitions go on. Whether the fetcher asks by
// topic id (Fetch v13+) or by name (up to v12).
func TestPassThroughTopicRecreatedWhileReadingStops(t *testing.T) {
	for _, v := range []struct {
		name string
		opts []kgo.Opt
	}{{"by topic id", nil}, {"by name", fetchByName}} {
		t.Run(v.name, func(t *testing.T) {
			src, r, m, writer, oldID, newID := recreatedWhileReading(t, v.opts, func(*Settings) {})
			newSent := func() bool {
				return slices.ContainsFunc(firstOffsets(writer, "t"), func(o int64) bool { return o >= 6 })
			}
			writertest.WaitFor(t, 10*time.Second, "t/0 stopped or the new topic copied", func() bool {
				return stops(m, "t", ReasonTopicRecreated)() == 1 || newSent()
			})
			writertest.WaitFor(t, 10*time.Second, "t/0's six records committed", func() bool { return committedOf(m, "t")() >= 6 })
			if got := firstOffsets(writer, "t"); !slices.Equal(got, []int64{0, 1, 2, 3, 4, 5}) {
				t.Fatalf("batches of t from %v: want the old topic's 0..5 only, nothing of the new topic", got)
			}
			if n := committedOf(m, "t")(); n != 6 {
				t.Fatalf("t/0 committed to %v, want 6", n)
			}
			if n := stops(m, "t", ReasonTopicRecreated)(); n != 1 {
				t.Fatalf("t/0 stopped %v times as topic_recreated, want once", n)
			}
			stopped := r.Status().Partitions["t/0"].Stopped
			for _, want := range []string{ReasonTopicRecreated, fmt.Sprintf("%x", oldID), fmt.Sprintf("%x", newID)} {
				if !strings.Contains(stopped, want) {
					t.Errorf("/status says %q, want it to name %q", stopped, want)
				}
			}
			src.produce(t, "other", 3)
			writertest.WaitFor(t, 10*time.Second, "other's records committed", func() bool { return committedOf(m, "other")() == 3 })
			if got := firstOffsets(writer, "t"); len(got) != 6 {
				t.Fatalf("batches of t from %v after the stop", got)
			}
		})
	}
}

// With link.on_data_loss: skip, a topic recreated while read is counted
// and logged as topic_recreated, and its partition goes on from the new
// topic's start, as when the recreation is found at open: the shard
// reopens naming the new id (the writer checkpoints under it) and reads
// the new topic from offset 0. Nothing of it is read from the old
// position on.
func TestPassThroughTopicRecreatedWhileReadingSkip(t *testing.T) {
	for _, v := range []struct {
		name string
		opts []kgo.Opt
	}{{"by topic id", nil}, {"by name", fetchByName}} {
		t.Run(v.name, func(t *testing.T) {
			_, r, m, writer, _, newID := recreatedWhileReading(t, v.opts, func(s *Settings) { s.SkipOnDataLoss = true })
			writertest.WaitFor(t, 10*time.Second, "the new topic's ten records committed", func() bool {
				offs := firstOffsets(writer, "t")
				return len(offs) > 0 && offs[len(offs)-1] == 9 && committedOf(m, "t")() == 10
			})
			// The old topic's batches (the last of them possibly unsent when
			// the session ended), then the new topic's from its start.
			got := firstOffsets(writer, "t")
			restart := slices.Index(got[1:], 0) + 1
			if restart == 0 || restart > 6 || !slices.Equal(got[:restart], []int64{0, 1, 2, 3, 4, 5}[:restart]) ||
				!slices.Equal(got[restart:], []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) {
				t.Fatalf("batches of t from %v: want the old topic's from 0, then the new topic's 0..9", got)
			}
			if n := stops(m, "t", ReasonTopicRecreated)(); n != 1 {
				t.Fatalf("topic_recreated counted %v times, want once", n)
			}
			if s := r.Status().Partitions["t/0"].Stopped; s != "" {
				t.Fatalf("t/0 stopped under skip: %q", s)
			}
			opens := writer.OpenRequests()
			last := opens[len(opens)-1]
			i := slices.IndexFunc(last.GetTopics(), func(s *ferryv1.TopicSpec) bool { return s.GetName() == "t" })
			if i < 0 || !slices.Equal(last.GetTopics()[i].GetTopicId(), newID) {
				t.Fatalf("the last of %d opens names t with id %x, want the new id %x", len(opens), last.GetTopics()[max(i, 0)].GetTopicId(), newID)
			}
		})
	}
}
