package translation

import (
	"context"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/pkg/testwait"
	"github.com/ferry-replicator/ferry/services/writer/internal/offsetindex"
	"github.com/ferry-replicator/ferry/services/writer/internal/partkey"
)

// The entries a resumed checkpoint carries are held twice: by the progress,
// which extends them in place round after round (Entry.Extend), and by the
// translator, whose index load reads them meanwhile. The translator's must
// not change under it (a data race, and a tail it did not confirm).
func TestTranslatorTailIsItsOwn(t *testing.T) {
	tp := partkey.Partition{Topic: "orders", Partition: 0}
	carried := []offsetindex.Entry{{From: 10, Next: 15, TargetBefore: 11, Runs: []offsetindex.Run{{Source: 10, Target: 11, Count: 5}}}}
	tr := New()
	tr.Resumed(tp, 15, 16, carried)

	next := offsetindex.Entry{From: 15, Next: 19, TargetBefore: 16, Runs: []offsetindex.Run{{Source: 15, Target: 16, Count: 4}}}
	if !carried[0].Extend(next) {
		t.Fatal("the next round's entry did not extend the carried one")
	}
	tail := tr.parts[tp].tail
	if len(tail) != 1 || tail[0].Next != 15 || len(tail[0].Runs) != 1 || tail[0].Runs[0].Count != 5 {
		t.Fatalf("translator's tail %+v changed with the progress's entry, want [10,15) in one run of 5", tail)
	}
}

// Before the index is read, what rounds commit is kept in the tail for the
// load to add: entries that continue each other merged, and no more runs
// than an index holds (and one entry) however long the shard copies
// without a group needing its index.
func TestTranslatorTailIsBounded(t *testing.T) {
	tp := partkey.Partition{Topic: "orders", Partition: 0}
	tr := New()
	tr.Resumed(tp, 0, 0, nil)
	// Rounds of 3 records each, a transaction marker after each on the
	// target: one run a round, each round continuing the last.
	source, target, end := int64(0), int64(0), int64(0) // end: after the last copied record
	round := func() offsetindex.Entry {
		e := offsetindex.Entry{From: source, Next: source + 3, TargetBefore: end, Runs: []offsetindex.Run{{Source: source, Target: target, Count: 3}}}
		source, end, target = source+3, target+3, target+4
		return e
	}
	commit := func() {
		e := round()
		tr.Confirm(tp, e.Next, e.TargetEnd(), []offsetindex.Entry{e})
	}
	for range 3 {
		commit()
	}
	if p := tr.parts[tp]; len(p.tail) != 1 || p.tailRuns != 3 || p.tail[0].From != 0 || p.tail[0].Next != 9 {
		t.Fatalf("three rounds that continue each other: tail of %d entries, %d runs, %+v; want one entry [0,9) of 3 runs", len(p.tail), p.tailRuns, p.tail)
	}
	for range 2*groupIndexRuns + 10 {
		commit()
	}
	p := tr.parts[tp]
	runs := 0
	for _, e := range p.tail {
		runs += len(e.Runs)
	}
	if runs != p.tailRuns || runs < groupIndexRuns || runs > groupIndexRuns+offsetindex.MaxRuns {
		t.Fatalf("tail of %d runs (counted %d), want between %d and %d", runs, p.tailRuns, groupIndexRuns, groupIndexRuns+offsetindex.MaxRuns)
	}
	if last := p.tail[len(p.tail)-1]; last.Next != source {
		t.Fatalf("tail ends at %d, want the last round's end %d", last.Next, source)
	}
	// Loaded (nothing in the index topic: no reader), the index answers
	// from the tail: the last round's first record.
	tr.load(t.Context(), Reads{Link: "east"}, nil)
	if pos, why, ok := tr.Translate(tp, source-3); !ok || pos.Target != target-4 {
		t.Fatalf("translate %d after the load: %+v %q %v, want target %d", source-3, pos, why, ok, target-4)
	}
}

// Before the index is read, what the stream committed answers the offsets
// it covers, kept up to date round after round, and reads no index; an
// offset before it needs the index topic (index_loading, the load asked
// for).
func TestTranslatorAnswersFromTheTailBeforeTheLoad(t *testing.T) {
	tp := partkey.Partition{Topic: "orders", Partition: 0}
	tr := New()
	tr.Resumed(tp, 100, 120, nil) // an earlier stream copied up to 100
	source, target := int64(100), int64(120)
	commit := func() { // a round of 3 records and a marker after them
		e := offsetindex.Entry{From: source, Next: source + 3, TargetBefore: target, Runs: []offsetindex.Run{{Source: source, Target: target, Count: 3}}}
		tr.Confirm(tp, e.Next, e.TargetEnd(), []offsetindex.Entry{e})
		source, target = source+3, target+4
	}
	commit()
	commit()
	if pos, why, ok := tr.Translate(tp, 104); !ok || pos.Target != 125 || pos.Source != 104 {
		t.Fatalf("translate 104 from the tail: %+v %q %v, want target 125", pos, why, ok)
	}
	commit() // after the tail became an index: it follows
	if pos, why, ok := tr.Translate(tp, 107); !ok || pos.Target != 129 {
		t.Fatalf("translate 107 from the tail a round later: %+v %q %v, want target 129", pos, why, ok)
	}
	if tr.isNeeded {
		t.Fatal("the load was asked for offsets the tail covers")
	}
	if _, why, ok := tr.Translate(tp, 99); ok || why != NotLoading || !tr.isNeeded {
		t.Fatalf("translate 99, before the tail: %q %v, asked for the load %v; want index_loading and the load asked for", why, ok, tr.isNeeded)
	}
}

// An index at its size bound costs a committed round no copy of its runs:
// trimming is amortized over many rounds (it used to clone the whole
// slice, some 1.5 MB, on every round of a partition once over the bound,
// which hours of exactly-once copying reach), and the index stays within
// the bound and a quarter of it.
func TestTranslatorTrimIsAmortized(t *testing.T) {
	tp := partkey.Partition{Topic: "orders", Partition: 0}
	tr := New()
	tr.Resumed(tp, 0, 0, nil)
	tr.load(t.Context(), Reads{Link: "east"}, nil)      // nothing to read: the index is the rounds'
	source, target, end := int64(0), int64(0), int64(0) // end: after the last copied record
	commit := func() {
		// An exactly-once round: its marker leaves a gap on the target,
		// so each round adds a run.
		e := offsetindex.Entry{From: source, Next: source + 3, TargetBefore: end, Runs: []offsetindex.Run{{Source: source, Target: target, Count: 3}}}
		source, end, target = source+3, target+3, target+4
		tr.Confirm(tp, e.Next, e.TargetEnd(), []offsetindex.Entry{e})
	}
	for range groupIndexRuns + 1 {
		commit()
	}
	const rounds = 2_000
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range rounds {
		commit()
	}
	runtime.ReadMemStats(&after)
	perRound := float64(after.TotalAlloc-before.TotalAlloc) / rounds
	if limit := 24.0 * groupIndexRuns / 100; perRound > limit { // a hundredth of a copy
		t.Errorf("%.0f bytes allocated a round at the bound, want at most %.0f: the trim copies the index every round", perRound, limit)
	}
	if n := tr.parts[tp].idx.Runs(); n < groupIndexRuns || n > groupIndexRuns+groupIndexRuns/4 {
		t.Errorf("index of %d runs, want between %d and %d", n, groupIndexRuns, groupIndexRuns+groupIndexRuns/4)
	}
	if pos, why, ok := tr.Translate(tp, source-3); !ok || pos.Target != target-4 {
		t.Fatalf("translate %d: %+v %q %v, want target %d", source-3, pos, why, ok, target-4)
	}
}

// olderIndex writes to a new index topic the records of orders/0 copied
// exactly-once in rounds of 3 records and a marker, runs runs in all
// (MaxRuns a record), and returns the client options, the topic, and
// the source and target offsets after the copy.
func olderIndex(t *testing.T, runs int) ([]kgo.Opt, offsetindex.Topic, int64, int64) {
	opts, index, next, end, _ := olderIndexMarked(t, runs)
	return opts, index, next, end
}

// olderIndexMarked is olderIndex, and the landmarks of its records as the
// writer's checkpoint would carry them.
func olderIndexMarked(t *testing.T, runs int) ([]kgo.Opt, offsetindex.Topic, int64, int64, []offsetindex.Landmark) {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "idx"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	opts := []kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}
	prod, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic("idx"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	key := offsetindex.Key{Link: "east", Topic: "orders", Partition: 0}
	source, target, before := int64(0), int64(0), int64(-1)
	var recs []*kgo.Record
	var froms []int64
	for left := runs; left > 0; {
		e := offsetindex.Entry{From: source, TargetBefore: before}
		for range min(left, offsetindex.MaxRuns) {
			e.Add(source, target, 3)
			source, target = source+3, target+4
			left--
		}
		e.Next, before = source, e.TargetEnd()
		v, err := e.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Key: []byte(key.String()), Value: v})
		froms = append(froms, e.From)
	}
	res := prod.ProduceSync(t.Context(), recs...)
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	var marks []offsetindex.Landmark
	for i, r := range res {
		marks = offsetindex.Mark(marks, offsetindex.Landmark{Source: froms[i], Offset: r.Record.Offset})
	}
	return opts, offsetindex.Topic{Name: "idx", Partitions: 1}, source, target, marks
}

// The load reads each partition from the landmark below the oldest offset
// that needed it, not from the index's start, and answers from there;
// an older offset asked later is read from the topic for itself.
func TestLoadReadsFromTheLandmark(t *testing.T) {
	opts, index, next, end, marks := olderIndexMarked(t, 20*offsetindex.MaxRuns)
	rd := Reads{Opts: opts, Index: index, Link: "east", Landmarks: func(offsetindex.Key) []offsetindex.Landmark { return marks }}
	tp := partkey.Partition{Topic: "orders", Partition: 0}
	tr := New()
	tr.Resumed(tp, next, end-1, nil)
	recent := next - 30 // in the last record's range: 10 rounds of 3 back
	if _, why, ok := tr.Translate(tp, recent); ok || why != NotLoading {
		t.Fatalf("translate %d before the load: %q %v, want index_loading", recent, why, ok)
	}
	tr.load(t.Context(), rd, slog.New(slog.DiscardHandler))
	x := tr.parts[tp].idx
	if last := marks[len(marks)-1]; x.Start() != last.Source || !x.Trimmed() {
		t.Fatalf("the load's index starts at %d (trimmed %v), want at the last landmark's %d, older offsets left to the topic", x.Start(), x.Trimmed(), last.Source)
	}
	want := func(s int64) int64 { return s/3*4 + s%3 }
	if pos, why, ok := tr.Translate(tp, recent); !ok || pos.Target != want(recent) {
		t.Fatalf("translate %d: %+v %q %v; want target %d", recent, pos, why, ok, want(recent))
	}
	if _, why, ok := tr.Translate(tp, 7); ok || why != NotLoading {
		t.Fatalf("translate 7, before the load's start: %q %v; want index_loading (asked of the index topic)", why, ok)
	}
	if err := tr.answerOlder(t.Context(), rd); err != nil {
		t.Fatal(err)
	}
	if pos, why, ok := tr.Translate(tp, 7); !ok || pos.Target != want(7) {
		t.Fatalf("translate 7: %+v %q %v; want target %d", pos, why, ok, want(7))
	}
}

// A group offset older than the runs the translator keeps in memory
// (hours of exactly-once copying, a group never synced before) is asked
// of the index topic and translated exactly; it used to answer
// before_index for good. So is an offset the failed load never read.
func TestOffsetOlderThanMemoryTranslates(t *testing.T) {
	opts, index, next, end := olderIndex(t, groupIndexRuns+3*offsetindex.MaxRuns)
	rd := Reads{Opts: opts, Index: index, Link: "east"}
	tp := partkey.Partition{Topic: "orders", Partition: 0}
	log := slog.New(slog.DiscardHandler)
	for _, failed := range []bool{false, true} {
		tr := New()
		tr.Resumed(tp, next, end-1, nil) // the last record's marker at end-1
		if failed {
			rd := rd
			rd.Index.Name = "absent" // the load cannot read it
			tr.load(t.Context(), rd, log)
		} else {
			tr.load(t.Context(), rd, log)
			if x := tr.parts[tp].idx; !x.Trimmed() || x.Start() <= 0 {
				t.Fatalf("the loaded index starts at %d (trimmed %v): the test needs more runs than memory keeps", x.Start(), x.Trimmed())
			}
		}
		// Offsets in the first, the 1000th and the 5000th run.
		asked := map[int64]int64{1: 1, 3*1000 + 2: 4*1000 + 2, 3*5000 + 0: 4 * 5000}
		for s := range asked {
			if _, why, ok := tr.Translate(tp, s); ok || why != NotLoading {
				t.Fatalf("load failed %v: translate %d, older than memory: %q %v; want index_loading (asked of the index topic)", failed, s, why, ok)
			}
		}
		if err := tr.answerOlder(t.Context(), rd); err != nil {
			t.Fatal(err)
		}
		for s, want := range asked {
			if pos, why, ok := tr.Translate(tp, s); !ok || pos.Target != want || pos.Source != s {
				t.Errorf("load failed %v: translate %d: %+v %q %v; want target %d", failed, s, pos, why, ok, want)
			}
		}
		if n := len(tr.parts[tp].asked); n != 0 {
			t.Errorf("%d offsets still asked after the read", n)
		}
	}
}

// As a stream runs it (translator.run): the load once a translation needs
// it, then reads for older offsets, during the stream and after it, until
// the shard's next stream or the drain ends it; older offsets then answer
// before_index.
func TestOlderOffsetsAreReadUntilRunEnds(t *testing.T) {
	opts, index, next, end := olderIndex(t, groupIndexRuns+3*offsetindex.MaxRuns)
	tp := partkey.Partition{Topic: "orders", Partition: 0}
	tr := New()
	tr.Resumed(tp, next, end-1, nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stream, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tr.Run(ctx, stream, Reads{Opts: opts, Index: index, Link: "east"}, slog.New(slog.DiscardHandler))
	}()
	translated := func(s, want int64) func() bool {
		return func() bool {
			pos, _, ok := tr.Translate(tp, s)
			return ok && pos.Target == want
		}
	}
	testwait.For(t, 30*time.Second, "offset 1 translated during the stream", translated(1, 1))
	close(stream)
	testwait.For(t, 30*time.Second, "offset 6000 translated after the stream", translated(3*2000, 4*2000))
	cancel()
	<-finished
	if pos, why, ok := tr.Translate(tp, 3*3000); ok || why != NotBeforeIndex {
		t.Errorf("translate 9000 once run ended: %+v %q %v, want before_index", pos, why, ok)
	}
}
