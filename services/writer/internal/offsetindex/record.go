// Package offsetindex is the exact offset index: where each copied source
// record landed on the target, so a source offset translates to the target
// offset a consumer should resume at, and back (issue 23, item 1).
//
// The writer computes one index entry per source partition for each round
// it commits, beside the partition's checkpoint. The entry rides in the
// checkpoint (merged with the next rounds' while they continue it,
// Entry.Extend) until a round flushes it to the index topic, once a
// flush interval: exactly-once, in that round's transaction; at-least-once,
// with its checkpoints, after the target acknowledged the data. Readers add
// what a checkpoint carries to what the topic holds (Index.Extend). A
// record is keyed "link/topic/partition" (the
// checkpoint key's spelling) and holds what the round copied of the
// partition as runs: records contiguous on both the source and the target.
// All of a partition's records go to one partition of the index topic
// (PartitionOf), so they are read back in the order they were written.
//
// Source records the writer did not copy (aborted transactions, control
// batches, records compaction removed, Skips) have no entry: a translation
// answers the first copied record at or after the offset asked, which is
// what a consumer positioned there reads next.
//
// The index topic is also writable by others, so Decode is strict and
// bounded: one spelling of each record (minimal varints, runs merged),
// offsets within int64, at most MaxRuns runs, nothing after the end.
package offsetindex

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/ferry-replicator/ferry/services/writer/internal/partkey"
)

// Version is the first byte of every index record value.
const Version = 1

// MaxRuns bounds the runs of one index record. A round of a heavily
// compacted partition can copy more runs than that (one per gap): the
// writer then splits its entry into several records (Entry.Split), so a
// record stays far below a topic's max.message.bytes (at most some 120 KB
// at 30 bytes a run, typically 3 to 6 bytes a run) and Decode never
// allocates more than MaxRuns runs.
const MaxRuns = 4096

// Key identifies a source partition within a link, spelt like a
// checkpoint key (package partkey).
type Key = partkey.Key

// PartitionOf is the index partition of k's records in a topic of
// partitions partitions: the checkpoint topic's function, so with as many
// index partitions as checkpoint partitions the index record of a source
// partition lands at the partition number of its checkpoint, and a round
// adds at most one index partition per checkpoint partition to its
// transaction.
func PartitionOf(k Key, partitions int32) int32 { return partkey.PartitionOf(k, partitions) }

// Run is Count records at source offsets Source.. that landed at target
// offsets Target.., each contiguous.
type Run struct {
	Source, Target, Count int64
}

// SourceEnd is the source offset after the run's last record.
func (r Run) SourceEnd() int64 { return r.Source + r.Count }

// TargetEnd is the target offset after the run's last record.
func (r Run) TargetEnd() int64 { return r.Target + r.Count }

// Entry is what one round copied of one source partition: one index
// record.
type Entry struct {
	// From and Next bound the source offsets the round covered, [From,
	// Next): its batches' first offset and the offset after their last.
	// Offsets in that range without a run were not copied.
	From, Next int64
	// TargetBefore is the target offset after the partition's last copied
	// record before the round, -1 when none is known: where the target
	// stands for a round that copies nothing (a Skip).
	TargetBefore int64
	// Runs are the records copied, ascending on both sides.
	Runs []Run
}

// Add appends count records at source offset source landing at target
// offset target, merging them into the last run when contiguous with it on
// both sides.
func (e *Entry) Add(source, target, count int64) {
	if n := len(e.Runs); n > 0 {
		last := &e.Runs[n-1]
		if last.SourceEnd() == source && last.TargetEnd() == target {
			last.Count += count
			return
		}
	}
	e.Runs = append(e.Runs, Run{Source: source, Target: target, Count: count})
}

// Extend appends next, the entry of the round after e's, to e when next
// continues it (starts at or after e's end on the source, where e left the
// target) and the runs stay within MaxRuns; it says whether it did. It
// grows e.Runs in place: e must not share them.
func (e *Entry) Extend(next Entry) bool {
	if next.From < e.Next || next.TargetBefore != e.TargetEnd() || len(e.Runs)+len(next.Runs) > MaxRuns {
		return false
	}
	for _, r := range next.Runs {
		e.Add(r.Source, r.Target, r.Count)
	}
	e.Next = next.Next
	return true
}

// Clone is e with runs of its own, for a holder that Extends it while
// another still reads e.
func (e Entry) Clone() Entry {
	e.Runs = slices.Clone(e.Runs)
	return e
}

// After is the part of e from source offset src on (src within [From,
// Next]): its TargetBefore is where e's records before src left the target.
func (e Entry) After(src int64) Entry {
	tail := Entry{From: src, Next: e.Next, TargetBefore: e.TargetBefore}
	for _, r := range e.Runs {
		switch {
		case r.SourceEnd() <= src:
			tail.TargetBefore = r.TargetEnd()
		case r.Source < src:
			cut := src - r.Source
			tail.TargetBefore = r.Target + cut
			tail.Runs = append(tail.Runs, Run{Source: src, Target: r.Target + cut, Count: r.Count - cut})
		default:
			tail.Runs = append(tail.Runs, r)
		}
	}
	return tail
}

// TargetEnd is the target offset after the entry's last copied record, or
// TargetBefore when it copied none.
func (e Entry) TargetEnd() int64 {
	if n := len(e.Runs); n > 0 {
		return e.Runs[n-1].TargetEnd()
	}
	return e.TargetBefore
}

// Split cuts e into entries of at most MaxRuns runs each, covering
// consecutive source ranges: each starts where the previous ends (after
// its last run) and stands on the target where the previous ends.
func (e Entry) Split() []Entry {
	if len(e.Runs) <= MaxRuns {
		return []Entry{e}
	}
	var out []Entry
	from, before := e.From, e.TargetBefore
	for runs := e.Runs; len(runs) > 0; {
		n := min(len(runs), MaxRuns)
		part := Entry{From: from, Next: e.Next, TargetBefore: before, Runs: runs[:n]}
		runs = runs[n:]
		if len(runs) > 0 {
			part.Next = part.Runs[n-1].SourceEnd()
		}
		out = append(out, part)
		from, before = part.Next, part.TargetEnd()
	}
	return out
}

// ErrMalformed marks a value Decode refuses.
var ErrMalformed = errors.New("malformed offset index record")

// check says what makes e unencodable, nil when nothing does: the rules
// Decode holds a value to.
func (e Entry) check() error {
	switch {
	case e.From < 0:
		return fmt.Errorf("from %d below 0", e.From)
	case e.TargetBefore < -1:
		return fmt.Errorf("target before %d below -1", e.TargetBefore)
	case len(e.Runs) > MaxRuns:
		return fmt.Errorf("%d runs, above %d", len(e.Runs), MaxRuns)
	}
	src, tgt := e.From, max(e.TargetBefore, 0)
	for i, r := range e.Runs {
		switch {
		case r.Count < 1:
			return fmt.Errorf("run %d: %d records", i, r.Count)
		case r.Source < src || r.Target < tgt:
			return fmt.Errorf("run %d at %d->%d, before %d->%d", i, r.Source, r.Target, src, tgt)
		case i > 0 && r.Source == src && r.Target == tgt:
			return fmt.Errorf("run %d at %d->%d continues run %d on both sides", i, r.Source, r.Target, i-1)
		case r.Source > math.MaxInt64-r.Count || r.Target > math.MaxInt64-r.Count:
			return fmt.Errorf("run %d: %d records at %d->%d pass the largest offset", i, r.Count, r.Source, r.Target)
		}
		src, tgt = r.SourceEnd(), r.TargetEnd()
	}
	if e.Next < src {
		return fmt.Errorf("next %d before the end of the runs %d", e.Next, src)
	}
	return nil
}

// Append appends e's encoding to dst:
//
//	version  byte    Version
//	from     uvarint From
//	before   uvarint TargetBefore+1
//	n        uvarint number of runs
//	n runs:  uvarint source gap   (Source less the previous run's source end; From for the first)
//	         uvarint target gap   (Target less the previous run's target end; max(TargetBefore, 0) for the first)
//	         uvarint Count-1
//	tail     uvarint Next less the last run's source end (From without runs)
//
// A plain topic's round is one run: a dozen bytes. It refuses an entry
// Decode would refuse.
func (e Entry) Append(dst []byte) ([]byte, error) {
	if err := e.check(); err != nil {
		return dst, fmt.Errorf("encode offset index entry: %w", err)
	}
	dst = append(dst, Version)
	dst = binary.AppendUvarint(dst, uint64(e.From))
	dst = binary.AppendUvarint(dst, uint64(e.TargetBefore+1))
	dst = binary.AppendUvarint(dst, uint64(len(e.Runs)))
	src, tgt := e.From, max(e.TargetBefore, 0)
	for _, r := range e.Runs {
		dst = binary.AppendUvarint(dst, uint64(r.Source-src))
		dst = binary.AppendUvarint(dst, uint64(r.Target-tgt))
		dst = binary.AppendUvarint(dst, uint64(r.Count-1))
		src, tgt = r.SourceEnd(), r.TargetEnd()
	}
	return binary.AppendUvarint(dst, uint64(e.Next-src)), nil
}

// Decode reads an index record value, strictly: the one encoding Append
// gives (minimal varints, contiguous runs merged), every offset within
// int64 and nothing after the end. It allocates at most MaxRuns runs.
func Decode(b []byte) (Entry, error) {
	d := decoder{b: b}
	e, err := d.entry()
	if err == nil && len(d.b) > 0 {
		err = fmt.Errorf("%d bytes after the end", len(d.b))
	}
	if err == nil {
		err = e.check()
	}
	if err != nil {
		return Entry{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return e, nil
}

type decoder struct{ b []byte }

func (d *decoder) entry() (Entry, error) {
	if len(d.b) == 0 {
		return Entry{}, errors.New("empty")
	}
	if d.b[0] != Version {
		return Entry{}, fmt.Errorf("version %d, want %d", d.b[0], Version)
	}
	d.b = d.b[1:]
	var e Entry
	from, err := d.offset("from", 0)
	if err != nil {
		return Entry{}, err
	}
	before, err := d.offset("target before", 0)
	if err != nil {
		return Entry{}, err
	}
	e.From, e.TargetBefore = from, before-1
	n, err := d.uvarint("run count")
	if err != nil {
		return Entry{}, err
	}
	// Each run takes at least three bytes: a count beyond what is left
	// is refused before anything is allocated.
	if n > MaxRuns || n > uint64(len(d.b)/3) {
		return Entry{}, fmt.Errorf("%d runs in %d bytes (at most %d)", n, len(d.b), MaxRuns)
	}
	e.Runs = make([]Run, 0, n)
	src, tgt := e.From, max(e.TargetBefore, 0)
	for i := range n {
		var r Run
		if r.Source, err = d.offset(fmt.Sprintf("run %d source", i), src); err != nil {
			return Entry{}, err
		}
		if r.Target, err = d.offset(fmt.Sprintf("run %d target", i), tgt); err != nil {
			return Entry{}, err
		}
		count, err := d.offset(fmt.Sprintf("run %d count", i), 1)
		if err != nil {
			return Entry{}, err
		}
		r.Count = count
		if r.Source > math.MaxInt64-r.Count || r.Target > math.MaxInt64-r.Count {
			return Entry{}, fmt.Errorf("run %d: %d records at %d->%d pass the largest offset", i, r.Count, r.Source, r.Target)
		}
		e.Runs = append(e.Runs, r)
		src, tgt = r.SourceEnd(), r.TargetEnd()
	}
	if e.Next, err = d.offset("next", src); err != nil {
		return Entry{}, err
	}
	return e, nil
}

// offset reads a uvarint and adds it to base, refusing a sum above the
// largest int64.
func (d *decoder) offset(what string, base int64) (int64, error) {
	v, err := d.uvarint(what)
	if err != nil {
		return 0, err
	}
	if v > uint64(math.MaxInt64-base) {
		return 0, fmt.Errorf("%s: %d past %d passes the largest offset", what, v, base)
	}
	return base + int64(v), nil
}

// uvarint reads a minimal uvarint: its last byte is not 0 unless it is
// the only one, so each value has one spelling.
func (d *decoder) uvarint(what string) (uint64, error) {
	v, n := binary.Uvarint(d.b)
	switch {
	case n == 0:
		return 0, fmt.Errorf("%s: truncated", what)
	case n < 0:
		return 0, fmt.Errorf("%s: varint overflows 64 bits", what)
	case n > 1 && d.b[n-1] == 0:
		return 0, fmt.Errorf("%s: varint of %d bytes is not minimal", what, n)
	}
	d.b = d.b[n:]
	return v, nil
}
