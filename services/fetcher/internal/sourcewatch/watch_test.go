package sourcewatch

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferry-replicator/ferry/services/fetcher/internal/discovery"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/rawfetch"
)

const topic = "orders"

// source is a one-broker kfake cluster with a topic of four partitions,
// partition p holding p+1 records, and a log of the ListOffsets requests
// it answers.
type source struct {
	cluster  *kfake.Cluster
	producer *kgo.Client
	fetcher  *rawfetch.Fetcher

	mu     sync.Mutex
	lists  []list
	refuse bool // answer every partition of every ListOffsets with an error
}

// list is a ListOffsets request: the timestamp it asks at (-2 log start,
// -1 high watermark, -3 head) and the partitions it asks, in order.
type list struct {
	at    int64
	parts []discovery.Partition
}

func newSource(t *testing.T) *source {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	base := time.Now()
	for p := range int32(4) {
		for i := range p + 1 {
			// A millisecond apart: the head is the newest record.
			r := &kgo.Record{Partition: p, Value: []byte("v"), Timestamp: base.Add(time.Duration(i) * time.Millisecond)}
			if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	s := &source{cluster: c, producer: cl, fetcher: rawfetch.New(cl, rawfetch.Options{MaxWait: 100 * time.Millisecond})}
	c.ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		var l list
		for _, rt := range req.(*kmsg.ListOffsetsRequest).Topics {
			for _, rp := range rt.Partitions {
				l.at = rp.Timestamp // rawfetch asks one timestamp per request
				l.parts = append(l.parts, discovery.Partition{Topic: rt.Topic, Partition: rp.Partition})
			}
		}
		slices.SortFunc(l.parts, func(a, b discovery.Partition) int { return int(a.Partition - b.Partition) })
		s.mu.Lock()
		s.lists = append(s.lists, l)
		refuse := s.refuse
		s.mu.Unlock()
		if !refuse {
			return nil, nil, false // observe only
		}
		return refused(req.(*kmsg.ListOffsetsRequest)), nil, true
	})
	return s
}

// refused answers every partition of req with a non-retriable error, as a
// leader that cannot serve it.
func refused(req *kmsg.ListOffsetsRequest) *kmsg.ListOffsetsResponse {
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	resp.SetVersion(req.GetVersion())
	for _, rt := range req.Topics {
		t := kmsg.NewListOffsetsResponseTopic()
		t.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			p := kmsg.NewListOffsetsResponseTopicPartition()
			p.Partition = rp.Partition
			p.ErrorCode = kerr.UnknownServerError.Code
			t.Partitions = append(t.Partitions, p)
		}
		resp.Topics = append(resp.Topics, t)
	}
	return resp
}

func (s *source) setRefusing(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse = on
}

// taken returns and forgets the requests logged so far.
func (s *source) taken() []list {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lists
	s.lists = nil
	return l
}

func parts(ns ...int32) []discovery.Partition {
	var ps []discovery.Partition
	for _, n := range ns {
		ps = append(ps, discovery.Partition{Topic: topic, Partition: n})
	}
	return ps
}

func newWatcher(s *source) *Watcher {
	return New(s.fetcher, time.Hour, slog.New(slog.DiscardHandler))
}

// expectAsked fails unless got are the requests of one read: the two of
// the bounds (log start, high watermark) of the partitions read before
// (known), the head of those whose bounds moved, and the three (log start,
// high watermark, head) of those never read (fresh).
func expectAsked(t *testing.T, got []list, known, moved, fresh []discovery.Partition) {
	t.Helper()
	var want []list
	if len(known) > 0 {
		want = append(want, list{-2, known}, list{-1, known})
	}
	if len(moved) > 0 { // the head after the bounds just read
		want = append(want, list{-3, moved})
	}
	if len(fresh) > 0 {
		want = append(want, list{-2, fresh}, list{-1, fresh}, list{-3, fresh})
	}
	if !slices.EqualFunc(got, want, func(a, b list) bool { return a.at == b.at && slices.Equal(a.parts, b.parts) }) {
		t.Fatalf("ListOffsets requests %v, want %v", got, want)
	}
}

func (s *source) produce(t *testing.T, p int32) {
	t.Helper()
	if err := s.producer.ProduceSync(context.Background(), &kgo.Record{Partition: p, Value: []byte("v"), Timestamp: time.Now().Add(time.Second)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// Shards following partitions on the same leader share a read: one round
// of three requests asks the leader about all of them, and each shard
// sees its own partitions' offsets.
func TestOneReadForEveryFollower(t *testing.T) {
	s := newSource(t)
	w := newWatcher(s)
	w.Follow(parts(0, 1))
	w.Follow(parts(2, 3))
	w.read(context.Background())
	expectAsked(t, s.taken(), nil, nil, parts(0, 1, 2, 3))

	for _, shard := range [][]discovery.Partition{parts(0, 1), parts(2, 3)} {
		got, _ := w.Last(shard)
		if len(got) != len(shard) {
			t.Fatalf("last read of %v: %v", shard, got)
		}
		for p, o := range got {
			want := int64(p.Partition) + 1
			if o.HighWatermark != want || o.LogStart != 0 || o.HeadOffset != want-1 || o.HeadTimestamp < 0 {
				t.Errorf("%v: %+v, want log start 0, high watermark %d, head %d with its timestamp", p, o.Offsets, want, want-1)
			}
		}
	}
}

// A partition whose fetch answers since the last read carried the bounds
// read before is not asked again: its observation is renewed at the
// answer's time. The others are asked their bounds, and only those whose
// bounds moved their head: the head costs the leader a batch read and
// decompressed.
func TestOnlyMovedPartitionsAreAsked(t *testing.T) {
	s := newSource(t)
	w := newWatcher(s)
	w.Follow(parts(0, 1, 2))
	w.read(context.Background())
	s.taken()
	first, _ := w.Last(parts(0, 1, 2))

	at := first[parts(0)[0]].At.Add(time.Minute)
	w.NoteFetched(parts(0)[0], 1, 0, at) // as read: still
	w.NoteFetched(parts(1)[0], 5, 0, at) // an answer said it moved; it did not
	w.read(context.Background())
	expectAsked(t, s.taken(), parts(1, 2), nil, nil)
	got, _ := w.Last(parts(0, 1, 2))
	if o := got[parts(0)[0]]; o.At != at || o.Offsets != first[parts(0)[0]].Offsets {
		t.Errorf("still partition: %+v, want the read before renewed at %v", o, at)
	}
	for _, p := range parts(1, 2) {
		if o := got[p]; o.Offsets != first[p].Offsets || !o.At.After(first[p].At) {
			t.Errorf("%v: %+v, want the read before %+v, observed anew", p, o, first[p])
		}
	}

	// Notes last one read: without answers every partition's bounds are
	// asked, and the head of the one that grew, after them (no second
	// read of its bounds).
	s.produce(t, 2)
	w.read(context.Background())
	expectAsked(t, s.taken(), parts(0, 1, 2), parts(2), nil)
	got, _ = w.Last(parts(2))
	if o := got[parts(2)[0]]; o.HighWatermark != 4 || o.HeadOffset != 3 || o.HeadTimestamp <= first[parts(2)[0]].HeadTimestamp {
		t.Errorf("partition 2 after a record: %+v, want high watermark 4 and head 3, newer than %+v", o.Offsets, first[parts(2)[0]].Offsets)
	}
}

// A partition nobody follows any more is not read, and its observation is
// gone; one still followed by another shard (a handover) is read on.
func TestUnfollowedPartitionsAreLeft(t *testing.T) {
	s := newSource(t)
	w := newWatcher(s)
	unfollowA := w.Follow(parts(0, 1))
	w.Follow(parts(1, 2)) // partition 1 moves from shard A to shard B
	w.read(context.Background())
	s.taken()

	unfollowA()
	unfollowA() // once only: B still follows partition 1
	w.read(context.Background())
	expectAsked(t, s.taken(), parts(1, 2), nil, nil)
	if got, _ := w.Last(parts(0, 1)); len(got) != 1 {
		t.Errorf("after unfollowing partition 0: %v, want partition 1 alone", got)
	}
}

// A partition newly followed is read at once, not an interval later, so a
// new shard's first heartbeat does not wait.
func TestFollowingReadsAtOnce(t *testing.T) {
	s := newSource(t)
	w := newWatcher(s) // an hour between reads
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })

	deadline := time.After(10 * time.Second)
	for _, shard := range [][]discovery.Partition{parts(0), parts(3)} {
		w.Follow(shard)
		for {
			got, next := w.Last(shard)
			if len(got) == 1 {
				break
			}
			select {
			case <-next:
			case <-deadline:
				t.Fatalf("%v not read within 10s of being followed", shard)
			}
		}
	}
}

// While the leaders refuse to answer, every partition keeps its last
// observation, time and all, and each read still ends (heartbeats go on,
// their observed_at saying how old the offsets are); a partition never
// read stays unknown. Once the leaders answer again, what moved meanwhile
// is read.
func TestRefusedReadKeepsTheLastObservation(t *testing.T) {
	s := newSource(t)
	w := newWatcher(s)
	w.Follow(parts(0, 1, 2))
	w.read(context.Background())
	first, _ := w.Last(parts(0, 1, 2))
	if len(first) != 3 {
		t.Fatalf("first read: %v", first)
	}

	s.produce(t, 2) // moved while the leader refuses
	s.setRefusing(true)
	w.Follow(parts(3)) // never read
	_, next := w.Last(parts(0))
	w.read(context.Background())
	select {
	case <-next:
	default:
		t.Fatal("a refused read did not end: heartbeats would wait on it")
	}
	if len(s.taken()) == 0 {
		t.Fatal("the refusing leader was not asked")
	}
	got, _ := w.Last(parts(0, 1, 2, 3))
	if _, ok := got[parts(3)[0]]; ok {
		t.Errorf("partition 3, never answered, has an observation: %+v", got[parts(3)[0]])
	}
	for _, p := range parts(0, 1, 2) {
		if got[p] != first[p] {
			t.Errorf("%v after a refused read: %+v, want the last observation %+v unchanged", p, got[p], first[p])
		}
	}

	s.setRefusing(false)
	w.read(context.Background())
	got, _ = w.Last(parts(2, 3))
	if o := got[parts(2)[0]]; o.HighWatermark != 4 || o.HeadOffset != 3 || !o.At.After(first[parts(2)[0]].At) {
		t.Errorf("partition 2 once answered: %+v, want high watermark 4, head 3, observed anew", o)
	}
	if o, ok := got[parts(3)[0]]; !ok || o.HighWatermark != 4 {
		t.Errorf("partition 3 once answered: %+v (%v), want high watermark 4", o, ok)
	}
}
