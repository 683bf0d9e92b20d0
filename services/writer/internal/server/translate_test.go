package server

import (
	"runtime"
	"testing"

	"github.com/ferry-replicator/ferry/services/writer/internal/offsetindex"
)

// The entries a resumed checkpoint carries are held twice: by the progress,
// which extends them in place round after round (Entry.Extend), and by the
// translator, whose index load reads them meanwhile. The translator's must
// not change under it (a data race, and a tail it did not confirm).
func TestTranslatorTailIsItsOwn(t *testing.T) {
	tp := topicPartition{"orders", 0}
	carried := []offsetindex.Entry{{From: 10, Next: 15, TargetBefore: 11, Runs: []offsetindex.Run{{Source: 10, Target: 11, Count: 5}}}}
	tr := newTranslator()
	tr.resumed(tp, 15, 16, carried)

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
	tp := topicPartition{"orders", 0}
	tr := newTranslator()
	tr.resumed(tp, 0, 0, nil)
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
		tr.confirm(tp, e.Next, e.TargetEnd(), []offsetindex.Entry{e})
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
	tr.load(t.Context(), nil, offsetindex.Topic{}, "east", nil)
	if pos, why, ok := tr.translate(tp, source-3); !ok || pos.Target != target-4 {
		t.Fatalf("translate %d after the load: %+v %q %v, want target %d", source-3, pos, why, ok, target-4)
	}
}

// Before the index is read, what the stream committed answers the offsets
// it covers, kept up to date round after round, and reads no index; an
// offset before it needs the index topic (index_loading, the load asked
// for).
func TestTranslatorAnswersFromTheTailBeforeTheLoad(t *testing.T) {
	tp := topicPartition{"orders", 0}
	tr := newTranslator()
	tr.resumed(tp, 100, 120, nil) // an earlier stream copied up to 100
	source, target := int64(100), int64(120)
	commit := func() { // a round of 3 records and a marker after them
		e := offsetindex.Entry{From: source, Next: source + 3, TargetBefore: target, Runs: []offsetindex.Run{{Source: source, Target: target, Count: 3}}}
		tr.confirm(tp, e.Next, e.TargetEnd(), []offsetindex.Entry{e})
		source, target = source+3, target+4
	}
	commit()
	commit()
	if pos, why, ok := tr.translate(tp, 104); !ok || pos.Target != 125 || pos.Source != 104 {
		t.Fatalf("translate 104 from the tail: %+v %q %v, want target 125", pos, why, ok)
	}
	commit() // after the tail became an index: it follows
	if pos, why, ok := tr.translate(tp, 107); !ok || pos.Target != 129 {
		t.Fatalf("translate 107 from the tail a round later: %+v %q %v, want target 129", pos, why, ok)
	}
	if tr.isNeeded {
		t.Fatal("the load was asked for offsets the tail covers")
	}
	if _, why, ok := tr.translate(tp, 99); ok || why != notLoading || !tr.isNeeded {
		t.Fatalf("translate 99, before the tail: %q %v, asked for the load %v; want index_loading and the load asked for", why, ok, tr.isNeeded)
	}
}

// An index at its size bound costs a committed round no copy of its runs:
// trimming is amortized over many rounds (it used to clone the whole
// slice, some 1.5 MB, on every round of a partition once over the bound,
// which hours of exactly-once copying reach), and the index stays within
// the bound and a quarter of it.
func TestTranslatorTrimIsAmortized(t *testing.T) {
	tp := topicPartition{"orders", 0}
	tr := newTranslator()
	tr.resumed(tp, 0, 0, nil)
	tr.load(t.Context(), nil, offsetindex.Topic{}, "east", nil) // nothing to read: the index is the rounds'
	source, target, end := int64(0), int64(0), int64(0)         // end: after the last copied record
	commit := func() {
		// An exactly-once round: its marker leaves a gap on the target,
		// so each round adds a run.
		e := offsetindex.Entry{From: source, Next: source + 3, TargetBefore: end, Runs: []offsetindex.Run{{Source: source, Target: target, Count: 3}}}
		source, end, target = source+3, target+3, target+4
		tr.confirm(tp, e.Next, e.TargetEnd(), []offsetindex.Entry{e})
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
	if pos, why, ok := tr.translate(tp, source-3); !ok || pos.Target != target-4 {
		t.Fatalf("translate %d: %+v %q %v, want target %d", source-3, pos, why, ok, target-4)
	}
}
