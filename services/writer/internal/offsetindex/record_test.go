package offsetindex

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"
)

// Entries encode and decode to themselves, and each value has one
// spelling: Append of what Decode read gives back the same bytes.
func TestEntryRoundTrip(t *testing.T) {
	for _, e := range []Entry{
		{From: 0, Next: 0, TargetBefore: -1},                                                            // a Skip first: nothing copied yet
		{From: 5, Next: 20, TargetBefore: 7},                                                            // a Skip later
		{From: 100, Next: 110, TargetBefore: -1, Runs: []Run{{100, 0, 10}}},                             // plain
		{From: 110, Next: 118, TargetBefore: 10, Runs: []Run{{110, 12, 1}, {112, 13, 2}, {117, 15, 1}}}, // compacted, after a marker
		{From: 0, Next: math.MaxInt64, TargetBefore: math.MaxInt64 - 3, Runs: []Run{{math.MaxInt64 - 2, math.MaxInt64 - 2, 2}}},
	} {
		raw, err := e.Append(nil)
		if err != nil {
			t.Fatalf("%+v: %v", e, err)
		}
		got, err := Decode(raw)
		if err != nil {
			t.Fatalf("%+v: decode %x: %v", e, raw, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(e) && !(len(e.Runs) == 0 && len(got.Runs) == 0 && got.From == e.From && got.Next == e.Next && got.TargetBefore == e.TargetBefore) {
			t.Errorf("%+v decodes back as %+v", e, got)
		}
		again, _ := got.Append(nil)
		if !bytes.Equal(again, raw) {
			t.Errorf("%+v: %x encodes again as %x", e, raw, again)
		}
	}
}

// A plain topic's round is one run of a dozen bytes.
func TestPlainRoundIsOneSmallRun(t *testing.T) {
	var e Entry
	e.From, e.Next, e.TargetBefore = 1_000_000, 1_008_192, 1_000_010
	for i := range int64(8) { // eight target batches of 1024 records, one after another
		e.Add(1_000_000+i*1024, 1_000_011+i*1024, 1024)
	}
	raw, err := e.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Runs) != 1 || len(raw) > 14 {
		t.Errorf("%d runs in %d bytes (%x), want 1 run in at most 14", len(e.Runs), len(raw), raw)
	}
}

// Decode refuses, as ErrMalformed, every value Append cannot give.
func TestDecodeIsStrict(t *testing.T) {
	good, _ := Entry{From: 10, Next: 20, TargetBefore: 4, Runs: []Run{{10, 5, 3}, {15, 8, 2}}}.Append(nil)
	for _, tc := range []struct {
		name string
		raw  []byte
	}{
		{"empty", nil},
		{"version 0", append([]byte{0}, good[1:]...)},
		{"version 2", append([]byte{2}, good[1:]...)},
		{"truncated", good[:len(good)-1]},
		{"trailing byte", append(append([]byte{}, good...), 0)},
		{"non-minimal varint", []byte{Version, 0x8a, 0x00, 0, 0, 0}},
		{"varint over 64 bits", []byte{Version, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0, 0, 0}},
		{"from above int64", []byte{Version, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x80, 0x01, 0, 0, 0}},
		{"more runs than bytes", []byte{Version, 0, 0, 5, 0, 0, 0, 0}},
		{"runs above MaxRuns", append([]byte{Version, 0, 0, 0x81, 0x20}, make([]byte, 3*(MaxRuns+1)+1)...)},
		{"run continuing the previous on both sides", []byte{Version, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0}},
		{"offsets past int64", []byte{Version, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0, 1, 0, 0, 5, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if e, err := Decode(tc.raw); !errors.Is(err, ErrMalformed) {
				t.Errorf("Decode(%x) = %+v, %v; want ErrMalformed", tc.raw, e, err)
			}
		})
	}
	if _, err := Decode(good); err != nil {
		t.Fatalf("the good value: %v", err)
	}
}

// Append refuses what Decode would refuse.
func TestAppendRefusesBadEntries(t *testing.T) {
	for _, e := range []Entry{
		{From: -1},
		{TargetBefore: -2},
		{From: 10, Next: 5},
		{From: 10, Next: 20, Runs: []Run{{5, 0, 1}}},
		{From: 10, Next: 20, Runs: []Run{{10, 0, 0}}},
		{From: 10, Next: 20, Runs: []Run{{10, 0, 2}, {12, 2, 1}}},
		{From: 10, Next: 20, Runs: []Run{{10, 4, 2}, {13, 3, 1}}},
		{From: 0, Next: 0, Runs: make([]Run, MaxRuns+1)},
	} {
		if raw, err := e.Append(nil); err == nil {
			t.Errorf("%+v encoded as %x", e, raw)
		}
	}
}

// Split keeps every run, in records of at most MaxRuns runs covering
// consecutive source ranges, each standing where the previous ended.
func TestSplitLargeEntries(t *testing.T) {
	e := Entry{From: 0, TargetBefore: -1}
	for i := range int64(2*MaxRuns + 10) {
		e.Add(2*i, i, 1) // every other source offset compacted away
	}
	e.Next = 2 * int64(len(e.Runs))
	parts := e.Split()
	if len(parts) != 3 {
		t.Fatalf("%d runs split in %d records, want 3", len(e.Runs), len(parts))
	}
	x := NewIndex()
	from, before := e.From, e.TargetBefore
	for i, p := range parts {
		if len(p.Runs) > MaxRuns || p.From != from || p.TargetBefore != before {
			t.Fatalf("part %d: %d runs from %d before %d, want at most %d from %d before %d", i, len(p.Runs), p.From, p.TargetBefore, MaxRuns, from, before)
		}
		raw, err := p.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		x.Add(got)
		from, before = p.Next, p.TargetEnd()
	}
	if from != e.Next || x.Runs() != len(e.Runs) {
		t.Errorf("parts end at %d with %d runs, want %d with %d", from, x.Runs(), e.Next, len(e.Runs))
	}
}

// Extend merges the next round's entry when it continues the entry on both
// sides, keeping gaps on the source as offsets not copied; it refuses one
// that goes back, leaves the target elsewhere, or would pass MaxRuns.
func TestExtendMergesOnlyWhatContinues(t *testing.T) {
	e := Entry{From: 10, Next: 20, TargetBefore: 4, Runs: []Run{{10, 5, 10}}}
	next := Entry{From: 22, Next: 30, TargetBefore: 15, Runs: []Run{{22, 16, 8}}} // a gap at 20-21, a marker at 15
	if !e.Extend(next) {
		t.Fatal("a continuing entry was not merged")
	}
	want := Entry{From: 10, Next: 30, TargetBefore: 4, Runs: []Run{{10, 5, 10}, {22, 16, 8}}}
	if !reflect.DeepEqual(e, want) {
		t.Fatalf("merged %+v, want %+v", e, want)
	}
	plain := Entry{From: 30, Next: 35, TargetBefore: 24, Runs: []Run{{30, 24, 5}}}
	if !e.Extend(plain) || len(e.Runs) != 2 || e.Runs[1] != (Run{22, 16, 13}) || e.Next != 35 {
		t.Fatalf("a contiguous entry merged into %+v, want its run joined to the last", e)
	}
	for name, bad := range map[string]Entry{
		"back on the source":  {From: 34, Next: 40, TargetBefore: 29, Runs: []Run{{34, 29, 6}}},
		"elsewhere on target": {From: 35, Next: 40, TargetBefore: -1, Runs: []Run{{35, 0, 5}}},
		"past MaxRuns":        {From: 35, Next: 35 + 2*MaxRuns, TargetBefore: 29, Runs: manyRuns(35, 29, MaxRuns)},
	} {
		before := e
		before.Runs = append([]Run(nil), e.Runs...)
		if e.Extend(bad) || !reflect.DeepEqual(e, before) {
			t.Errorf("%s: merged, or changed the entry to %+v", name, e)
		}
	}
}

// manyRuns are n runs of one record from source, target, a gap between
// each on both sides.
func manyRuns(source, target int64, n int) []Run {
	out := make([]Run, n)
	for i := range out {
		out[i] = Run{Source: source + 2*int64(i), Target: target + 2*int64(i), Count: 1}
	}
	return out
}
