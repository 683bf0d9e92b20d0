package offsetindex

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// copied is a partition's copy as the target holds it: the source offset
// of each copied record by target offset (absent: a marker, or nothing).
type copied struct {
	bySource map[int64]int64 // source offset -> target offset
	sources  []int64         // copied source offsets, ascending
	targets  []int64         // their target offsets, ascending
}

func (c *copied) add(s, t int64) {
	c.bySource[s] = t
	c.sources = append(c.sources, s)
	c.targets = append(c.targets, t)
}

// wantForward is the target offset of the first copied record at or
// after s, or the end after the last one.
func (c *copied) wantForward(s int64) Position {
	for i, src := range c.sources {
		if src >= s {
			return Position{Offset: c.targets[i]}
		}
	}
	if len(c.targets) == 0 {
		return Position{Offset: -1, End: true}
	}
	return Position{Offset: c.targets[len(c.targets)-1] + 1, End: true}
}

// wantBack is the source offset of the first copied record at or after
// target offset t, or the end after the last one.
func (c *copied) wantBack(t int64) Position {
	for i, tgt := range c.targets {
		if tgt >= t {
			return Position{Offset: c.sources[i]}
		}
	}
	return Position{Offset: c.sources[len(c.sources)-1] + 1, End: true}
}

// simulate copies a source partition of n offsets in random rounds the
// way the writer does: each offset is copied with probability keep
// (others are aborted, compacted away, markers or Skips), a round's
// records land contiguously on the target in one or several batches
// (which may start with a marker gap: exactly-once), and each round
// gives one entry per partition.
func simulate(rng *rand.Rand, n int64, keep float64, markers bool) (*copied, []Entry) {
	c := &copied{bySource: map[int64]int64{}}
	var entries []Entry
	target, before := int64(0), int64(-1)
	for s := int64(0); s < n; {
		size := 1 + rng.Int64N(40)
		e := Entry{From: s, Next: min(s+size, n), TargetBefore: before}
		if markers && rng.IntN(2) == 0 {
			target += 1 + rng.Int64N(2) // the previous commit's marker, an abort's
		}
		for ; s < e.Next; s++ {
			if rng.Float64() >= keep {
				continue
			}
			if markers && rng.IntN(50) == 0 {
				target++ // records of another transaction between batches
			}
			e.Add(s, target, 1)
			c.add(s, target)
			target++
		}
		before = e.TargetEnd()
		entries = append(entries, e)
	}
	return c, entries
}

// Translation is exact at every offset, both ways, over random copies:
// plain, compacted, sparse, with markers between rounds or not.
func TestTranslationIsExactEverywhere(t *testing.T) {
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 7))
		keep := []float64{1, 0.9, 0.5, 0.05}[seed%4]
		c, entries := simulate(rng, 600, keep, seed%2 == 1)
		if len(c.sources) == 0 {
			continue
		}
		x := NewIndex()
		for _, e := range entries {
			raw, err := e.Append(nil)
			if err != nil {
				t.Fatal(err)
			}
			d, err := Decode(raw)
			if err != nil {
				t.Fatal(err)
			}
			x.Add(d)
		}
		for s := int64(0); s <= 610; s++ {
			got, err := x.Translate(s)
			if want := c.wantForward(s); err != nil || got != want {
				t.Fatalf("seed %d: Translate(%d) = %+v, %v; want %+v", seed, s, got, err, want)
			}
		}
		last := c.targets[len(c.targets)-1]
		for tgt := int64(0); tgt <= last+5; tgt++ {
			got, err := x.TranslateBack(tgt)
			if want := c.wantBack(tgt); err != nil || got != want {
				t.Fatalf("seed %d: TranslateBack(%d) = %+v, %v; want %+v", seed, tgt, got, err, want)
			}
		}
	}
}

// Offsets before the first record answer ErrBeforeIndex naming where the
// index starts, on either side; a partition without records, ErrNotIndexed.
func TestBeforeTheIndex(t *testing.T) {
	x := NewIndex()
	if _, err := x.Translate(0); !errors.Is(err, ErrNotIndexed) {
		t.Fatalf("empty index: %v, want ErrNotIndexed", err)
	}
	// The first record left (retention pruned those before) starts at
	// source 1000, the target standing at 400.
	x.Add(Entry{From: 1000, Next: 1010, TargetBefore: 400, Runs: []Run{{1002, 401, 8}}})
	var before *BeforeIndexError
	if _, err := x.Translate(999); !errors.As(err, &before) || !errors.Is(err, ErrBeforeIndex) || before.Start != 1000 || before.Target {
		t.Errorf("Translate(999): %v, want ErrBeforeIndex starting at source 1000", err)
	}
	if _, err := x.TranslateBack(399); !errors.As(err, &before) || before.Start != 400 || !before.Target {
		t.Errorf("TranslateBack(399): %v, want ErrBeforeIndex starting at target 400", err)
	} else if want := "target offset 399 is before the offset index, which starts at target offset 400"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if got, err := x.Translate(1000); err != nil || got != (Position{Offset: 401}) {
		t.Errorf("Translate(1000) = %+v, %v; want 401 (1000 and 1001 were not copied)", got, err)
	}
	if got, err := x.TranslateBack(400); err != nil || got != (Position{Offset: 1002}) {
		t.Errorf("TranslateBack(400) = %+v, %v; want 1002 (a marker at 400)", got, err)
	}
}

// A record that covers again what earlier ones covered (a round sent
// again after an at-least-once failure) replaces them from there on, and
// a record going back to or before the index's start begins it anew (a
// source topic created again).
func TestLaterRecordsReplaceWhatTheyCoverAgain(t *testing.T) {
	x := NewIndex()
	x.Add(Entry{From: 0, Next: 10, TargetBefore: -1, Runs: []Run{{0, 0, 10}}})
	x.Add(Entry{From: 10, Next: 20, TargetBefore: 10, Runs: []Run{{10, 10, 10}}}) // its checkpoint failed
	x.Add(Entry{From: 10, Next: 20, TargetBefore: 10, Runs: []Run{{10, 20, 10}}}) // sent again: the copy goes on from 20
	for _, tc := range []struct{ s, want int64 }{{9, 9}, {10, 20}, {15, 25}} {
		if got, _ := x.Translate(tc.s); got.Offset != tc.want {
			t.Errorf("Translate(%d) = %+v, want %d", tc.s, got, tc.want)
		}
	}
	if got, _ := x.TranslateBack(12); got.Offset != 10 {
		t.Errorf("TranslateBack(12), in the first copy, = %+v, want 10 (the copy gone on from)", got)
	}
	x.Add(Entry{From: 0, Next: 5, TargetBefore: 30, Runs: []Run{{0, 31, 5}}}) // a new topic of the name
	if got, _ := x.Translate(0); got.Offset != 31 || x.Runs() != 1 {
		t.Errorf("after a new start: Translate(0) = %+v with %d runs, want 31 with 1", got, x.Runs())
	}
	if _, err := x.TranslateBack(29); !errors.Is(err, ErrBeforeIndex) {
		t.Errorf("TranslateBack(29) after a new start: %v, want ErrBeforeIndex", err)
	}
}

// Records copied with no index record between two (at-least-once: a
// round's checkpoint committed but its index record's partition refused
// the produce; or an older writer) show as a target that moved on between
// them: the index starts again after them rather than calling their
// source offsets not copied.
func TestRecordsCopiedWithoutIndexStartItAgain(t *testing.T) {
	x := NewIndex()
	x.Add(Entry{From: 0, Next: 10, TargetBefore: -1, Runs: []Run{{0, 0, 10}}})
	// 10..19 went to target 10..19 without an index record.
	x.Add(Entry{From: 20, Next: 30, TargetBefore: 20, Runs: []Run{{20, 21, 10}}})
	var before *BeforeIndexError
	if got, err := x.Translate(15); !errors.As(err, &before) || before.Start != 20 {
		t.Errorf("Translate(15), copied without an index record: %+v, %v; want ErrBeforeIndex starting at 20", got, err)
	}
	if _, err := x.TranslateBack(15); !errors.Is(err, ErrBeforeIndex) {
		t.Errorf("TranslateBack(15): %v, want ErrBeforeIndex", err)
	}
	// A gap with the target where it was (markers, aborted records)
	// is offsets not copied.
	x.Add(Entry{From: 35, Next: 40, TargetBefore: 31, Runs: []Run{{36, 33, 4}}})
	if got, err := x.Translate(32); err != nil || got != (Position{Offset: 33}) {
		t.Errorf("Translate(32), not copied: %+v, %v; want 33", got, err)
	}
}

// Trim keeps the newest runs exactly: what they cover translates as
// before, and an offset before the first kept run is ErrBeforeIndex
// naming where the index now starts.
func TestTrimKeepsTheNewestRuns(t *testing.T) {
	x := NewIndex()
	x.Add(Entry{From: 0, Next: 10, TargetBefore: -1, Runs: []Run{{0, 0, 3}, {5, 4, 2}}})
	x.Add(Entry{From: 10, Next: 20, TargetBefore: 6, Runs: []Run{{12, 8, 4}, {18, 13, 2}}})
	x.Trim(2)
	if x.Runs() != 2 || x.Start() != 12 || x.TargetStart() != 8 {
		t.Fatalf("trimmed to %d runs from %d->%d, want 2 from 12->8", x.Runs(), x.Start(), x.TargetStart())
	}
	var before *BeforeIndexError
	if _, err := x.Translate(11); !errors.As(err, &before) || before.Start != 12 {
		t.Fatalf("Translate(11) after the trim: %v, want before the index at 12", err)
	}
	for s, want := range map[int64]Position{12: {Offset: 8}, 16: {Offset: 13}, 19: {Offset: 14}, 20: {Offset: 15, End: true}} {
		if got, err := x.Translate(s); err != nil || got != want {
			t.Errorf("Translate(%d) = %+v, %v; want %+v", s, got, err, want)
		}
	}
}

// The writer's deferred flushes, read back as translations read them:
// entries merged while a checkpoint carries them (Entry.Extend), written
// to the topic at random flushes, and a reader that takes the checkpoint
// first and reads the topic after, some entries and flushes later
// (Index.Extend). The index read so equals the copy up to the later of the
// two: exact at every offset, both ways, whether the reads overlap or not.
func TestCarriedEntriesTranslateAsFlushed(t *testing.T) {
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 11))
		keep := []float64{1, 0.9, 0.5}[seed%3]
		_, entries := simulate(rng, 400, keep, seed%2 == 1)
		var topic, carried []Entry
		flushedAt := 0 // entries[:flushedAt] are in topic
		var cpCarried []Entry
		cpAt := rng.IntN(len(entries)) + 1              // the checkpoint is read after entries[:cpAt]
		topicAt := cpAt + rng.IntN(len(entries)-cpAt+1) // the topic, after entries[:topicAt]
		var topicRead []Entry
		lastFlushBy := 0
		for i, e := range entries {
			if n := len(carried); n == 0 || !carried[n-1].Extend(e) {
				e.Runs = slices.Clone(e.Runs) // Extend grows them
				carried = append(carried, e)
			}
			if rng.IntN(4) == 0 { // a flush
				topic = append(topic, carried...)
				carried, flushedAt = nil, i+1
			}
			if i+1 == cpAt {
				cpCarried = append([]Entry(nil), carried...)
				for j := range cpCarried {
					cpCarried[j].Runs = append([]Run(nil), cpCarried[j].Runs...)
				}
			}
			if i+1 == topicAt {
				topicRead, lastFlushBy = append([]Entry(nil), topic...), flushedAt
			}
		}
		x := NewIndex()
		for _, e := range topicRead {
			x.Add(e)
		}
		for _, e := range cpCarried {
			x.Extend(e)
		}
		want := &copied{bySource: map[int64]int64{}}
		for _, e := range entries[:max(cpAt, lastFlushBy)] {
			for _, r := range e.Runs {
				for k := range r.Count {
					want.add(r.Source+k, r.Target+k)
				}
			}
		}
		if len(want.sources) == 0 {
			continue
		}
		for s := int64(0); s <= 410; s++ {
			if got, err := x.Translate(s); err != nil || got != want.wantForward(s) {
				t.Fatalf("seed %d: Translate(%d) = %+v, %v; want %+v", seed, s, got, err, want.wantForward(s))
			}
		}
		last := want.targets[len(want.targets)-1]
		for tgt := int64(0); tgt <= last+5; tgt++ {
			if got, err := x.TranslateBack(tgt); err != nil || got != want.wantBack(tgt) {
				t.Fatalf("seed %d: TranslateBack(%d) = %+v, %v; want %+v", seed, tgt, got, err, want.wantBack(tgt))
			}
		}
	}
}

// A checkpoint's carried entry that the index topic holds in part (a flush
// between the two reads) adds only its tail; one whose tail does not
// continue where the index ends on the target belongs to a copy the topic
// has since replaced, and adds nothing.
func TestExtendAddsOnlyWhatTheIndexLacks(t *testing.T) {
	carried := Entry{From: 0, Next: 30, TargetBefore: -1, Runs: []Run{{0, 0, 10}, {12, 10, 18}}}
	x := NewIndex()
	x.Add(Entry{From: 0, Next: 20, TargetBefore: -1, Runs: []Run{{0, 0, 10}, {12, 10, 8}}})
	x.Extend(carried)
	for s, want := range map[int64]Position{5: {Offset: 5}, 11: {Offset: 10}, 20: {Offset: 18}, 29: {Offset: 27}, 30: {Offset: 28, End: true}} {
		if got, err := x.Translate(s); err != nil || got != want {
			t.Errorf("overlapping: Translate(%d) = %+v, %v; want %+v", s, got, err, want)
		}
	}

	// The topic holds a later copy of 0..19 (at target 40..): the carried
	// entry's tail continues target 18, not 60, and is left out.
	x = NewIndex()
	x.Add(Entry{From: 0, Next: 20, TargetBefore: 39, Runs: []Run{{0, 40, 20}}})
	x.Extend(carried)
	if got, err := x.Translate(25); err != nil || got != (Position{Offset: 60, End: true}) {
		t.Errorf("replaced copy: Translate(25) = %+v, %v; want the index's end at 60", got, err)
	}
	// Held whole already: nothing changes.
	x.Extend(Entry{From: 0, Next: 10, TargetBefore: 39, Runs: []Run{{0, 40, 10}}})
	if got, err := x.Translate(15); err != nil || got != (Position{Offset: 55}) {
		t.Errorf("held whole: Translate(15) = %+v, %v; want 55", got, err)
	}
}

// resent is simulate's copy with rounds sent again (an at-least-once
// round whose checkpoint failed: its records stay on the target and the
// copy goes on after them from the same source offset) and, with reset,
// the source topic created again halfway (offsets from 0 anew).
func resent(rng *rand.Rand, n int64, reset bool) []Entry {
	var entries []Entry
	target, before := int64(0), int64(-1)
	round := func(from, next int64) Entry {
		e := Entry{From: from, Next: next, TargetBefore: before}
		for s := from; s < next; s++ {
			if rng.IntN(4) != 0 {
				e.Add(s, target, 1)
				target++
			}
		}
		return e
	}
	for pass := 0; pass < 2; pass++ {
		for s := int64(0); s < n; {
			next := min(s+1+rng.Int64N(30), n)
			if rng.IntN(6) == 0 {
				entries = append(entries, round(s, next)) // its checkpoint failed
				target += rng.Int64N(3)
			}
			e := round(s, next)
			before = e.TargetEnd()
			entries = append(entries, e)
			s = next
		}
		if !reset {
			break
		}
		target += 5
	}
	return entries
}

// An index pruned to the runs that answer some offsets (keepAnswers,
// after every record, the tightest it can be) answers those offsets as
// the whole index does, over copies with rounds sent again and a topic
// created again, and holds only those runs.
func TestKeepAnswersTranslatesAsTheWholeIndex(t *testing.T) {
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 11))
		entries := resent(rng, 500, seed%3 == 0)
		whole := NewIndex()
		for _, e := range entries {
			whole.Add(e)
		}
		for trial := range 10 {
			asks := make([]int64, 1+rng.IntN(6))
			for i := range asks {
				asks[i] = rng.Int64N(510)
			}
			slices.Sort(asks)
			sparse := NewIndex()
			for _, e := range entries {
				sparse.Add(e)
				sparse.keepAnswers(asks)
				if sparse.Runs() > len(asks) {
					t.Fatalf("seed %d trial %d: %d runs kept for %d asks", seed, trial, sparse.Runs(), len(asks))
				}
			}
			for _, s := range asks {
				want, wantErr := whole.Translate(s)
				got, err := sparse.Translate(s)
				if got != want || fmt.Sprint(err) != fmt.Sprint(wantErr) {
					t.Fatalf("seed %d trial %d: Translate(%d) = %+v, %v; the whole index: %+v, %v", seed, trial, s, got, err, want, wantErr)
				}
			}
		}
	}
}
