package offsetindex

import (
	"errors"
	"fmt"
	"slices"
	"sort"
)

// ErrBeforeIndex marks an offset older than the index's first entry: its
// records were pruned with the index topic's retention (or written before
// the index existed). BeforeIndexError says where the index starts.
var ErrBeforeIndex = errors.New("offset before the offset index")

// ErrNotIndexed marks a partition with no index record at all.
var ErrNotIndexed = errors.New("partition not in the offset index")

// BeforeIndexError is an offset older than the index's first entry.
type BeforeIndexError struct {
	// Offset is the offset asked; Start, the first the index answers for,
	// on the same side (Target: target offsets).
	Offset, Start int64
	Target        bool
}

func (e *BeforeIndexError) Error() string {
	side := "source"
	if e.Target {
		side = "target"
	}
	return fmt.Sprintf("%s offset %d is before the offset index, which starts at %s offset %d", side, e.Offset, side, e.Start)
}

// Is makes errors.Is(err, ErrBeforeIndex) true.
func (e *BeforeIndexError) Is(target error) bool { return target == ErrBeforeIndex }

// Position is a translation's answer.
type Position struct {
	// Offset is the offset, on the other side, of the first copied record
	// at or after the one asked: where a consumer positioned at the asked
	// offset goes on reading. Past the last copied record it is the end,
	// the offset after the last copied record (End; -1 on the target when
	// nothing of the partition was ever copied).
	Offset int64
	// End says no copied record is at or after the asked offset (yet).
	End bool
}

// Index is one source partition's index records merged, in the order they
// were written, into one list of runs ascending on both sides.
//
// A later record covering source offsets an earlier one covered (a round
// sent again at-least-once after a failure wrote part of it, or a source
// topic deleted and created again) replaces what the earlier one said from
// there on: the latest record describes the copy the writer went on from.
// Records copied with no index record start the index again after them.
type Index struct {
	// from and targetFrom are where the index starts: the first record's
	// From, and its TargetBefore (0 when -1): target offsets below it were
	// written before the index's first record.
	from, targetFrom int64
	// next is the source offset after the last record's range; targetEnd,
	// the target offset after the last copied record (-1: none yet).
	next, targetEnd int64
	runs            []Run
	empty           bool
	// trimmed says Trim dropped runs since the index last started: the
	// index topic holds older ones (TranslateAll answers from them).
	trimmed bool
	// refused counts the key's records that did not decode.
	refused int
}

// NewIndex returns an index with no record.
func NewIndex() *Index { return &Index{empty: true} }

// Add merges the next index record of the partition.
func (x *Index) Add(e Entry) {
	// A record whose target stands past where the index's last record
	// left it, with source offsets between them, follows records copied
	// without an index record (at-least-once, a round whose checkpoint
	// committed and whose index record's partition refused the produce;
	// or a writer older than the index): the index starts again at it
	// rather than calling those offsets not copied.
	copiedUnindexed := e.From >= x.next && e.TargetBefore > x.targetEnd
	if x.empty || e.From <= x.from || copiedUnindexed {
		*x = Index{from: e.From, targetFrom: max(e.TargetBefore, 0), next: e.From, targetEnd: e.TargetBefore, refused: x.refused}
	}
	if e.From < x.next {
		x.truncate(e.From, max(e.TargetBefore, 0))
	}
	if n := len(e.Runs); n > 0 {
		// A record whose target goes back (a writer that kept producing
		// after the shard moved on) replaces what it overlaps there too.
		x.truncate(e.From, e.Runs[0].Target)
		for _, r := range e.Runs {
			x.add(r)
		}
	}
	x.next, x.targetEnd = e.Next, e.TargetEnd()
}

// Extend adds e, an entry a checkpoint carried (not yet in the index topic
// when the checkpoint was read, see the writer's flush_interval), to the
// index read after it, which may hold part or all of e already: a flush
// between the two reads wrote it. Only what the index does not hold yet is
// added; adding the rest again would cut off what the index holds after
// it. A part that does not continue where the index ends on the target
// belongs to a copy the index has since replaced, and is left out.
func (x *Index) Extend(e Entry) {
	switch {
	case x.empty || e.From >= x.next:
		x.Add(e)
	case e.Next > x.next:
		if tail := e.After(x.next); tail.TargetBefore == x.targetEnd {
			x.Add(tail)
		}
	}
}

// truncate drops what the runs say from source offset src or target
// offset tgt on.
func (x *Index) truncate(src, tgt int64) {
	for n := len(x.runs); n > 0; n = len(x.runs) {
		last := &x.runs[n-1]
		keep := min(src-last.Source, tgt-last.Target, last.Count)
		if keep == last.Count {
			return
		}
		if keep > 0 {
			last.Count = keep
			return
		}
		x.runs = x.runs[:n-1]
	}
}

func (x *Index) add(r Run) {
	if n := len(x.runs); n > 0 {
		last := &x.runs[n-1]
		if last.SourceEnd() == r.Source && last.TargetEnd() == r.Target {
			last.Count += r.Count
			return
		}
	}
	x.runs = append(x.runs, r)
}

// Refused is how many of the partition's records Load left out because
// they did not decode: someone other than the writers wrote the topic.
func (x *Index) Refused() int { return x.refused }

// Runs is how many runs the index holds (24 bytes each).
func (x *Index) Runs() int { return len(x.runs) }

// Start is the first source offset the index answers for; TargetStart, the
// first target offset.
func (x *Index) Start() int64       { return x.from }
func (x *Index) TargetStart() int64 { return x.targetFrom }

// Translate answers source offset s: the target offset of the first copied
// record at or after s.
func (x *Index) Translate(s int64) (Position, error) {
	if x.empty {
		return Position{}, ErrNotIndexed
	}
	if s < x.from {
		return Position{}, &BeforeIndexError{Offset: s, Start: x.from}
	}
	i := sort.Search(len(x.runs), func(i int) bool { return x.runs[i].SourceEnd() > s })
	if i == len(x.runs) {
		return Position{Offset: x.targetEnd, End: true}, nil
	}
	r := x.runs[i]
	return Position{Offset: r.Target + max(s-r.Source, 0)}, nil
}

// TranslateBack answers target offset t: the source offset of the first
// copied record at or after t. Past the last copied record it answers the
// source offset after it (the index's start when nothing was copied).
func (x *Index) TranslateBack(t int64) (Position, error) {
	if x.empty {
		return Position{}, ErrNotIndexed
	}
	if t < x.targetFrom {
		return Position{}, &BeforeIndexError{Offset: t, Start: x.targetFrom, Target: true}
	}
	i := sort.Search(len(x.runs), func(i int) bool { return x.runs[i].TargetEnd() > t })
	if i == len(x.runs) {
		end := x.from
		if n := len(x.runs); n > 0 {
			end = x.runs[n-1].SourceEnd()
		}
		return Position{Offset: end, End: true}, nil
	}
	r := x.runs[i]
	return Position{Offset: r.Source + max(t-r.Target, 0)}, nil
}

// Bound keeps the index within n runs and a quarter: past that it trims
// it to n (Trim). A caller adding a round's runs at a time and bounding
// after each pays one copy of the runs every n/4 runs added, not one a
// round: at the writer's bound a copy is some 1.5 MB.
func (x *Index) Bound(n int) {
	if n > 0 && len(x.runs) > n+n/4 {
		x.Trim(n)
	}
}

// Trim keeps at most n runs, the newest: the index then starts at the
// first run kept, and older offsets answer ErrBeforeIndex. It bounds an
// index kept in memory for long (the writer's group sync) at 24 bytes a
// run.
func (x *Index) Trim(n int) {
	drop := len(x.runs) - n
	if drop <= 0 || n <= 0 {
		return
	}
	x.runs = slices.Clone(x.runs[drop:]) // let the dropped ones go
	x.from, x.targetFrom = x.runs[0].Source, x.runs[0].Target
	x.trimmed = true
}

// Trimmed says the index dropped its oldest runs (Trim) since it last
// started: an offset before Start may still translate from the index
// topic, which holds them (Reader.TranslateAll).
func (x *Index) Trimmed() bool { return x.trimmed }

// keepAnswers drops the runs that answer none of asks (source offsets,
// ascending): Translate still answers each of asks as before, and the
// records added after still merge as they would have (a record replacing
// runs cuts from its start on, which only drops runs kept or not), but
// nothing else translates. A pass over a partition's records for a few
// offsets so holds a few runs, however many the topic holds.
func (x *Index) keepAnswers(asks []int64) {
	kept, j := x.runs[:0], 0
	for _, r := range x.runs {
		// r answers every ask below its end not answered by a run before.
		answers := false
		for ; j < len(asks) && asks[j] < r.SourceEnd(); j++ {
			answers = true
		}
		if answers {
			kept = append(kept, r)
		}
	}
	x.runs = kept
}
