package offsetindex

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// An index read from any of a partition's records on answers every
// source offset at or after its start as the index read whole does, over
// copies with rounds sent again, compaction gaps and a topic created
// again: what a read from a landmark relies on.
func TestSuffixAnswersAsTheWholeIndex(t *testing.T) {
	compared := 0
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 13))
		var entries []Entry
		if seed%2 == 0 {
			entries = resent(rng, 400, seed%4 == 0)
		} else {
			_, entries = simulate(rng, 400, 0.7, true)
		}
		whole := NewIndex()
		for _, e := range entries {
			whole.Add(e)
		}
		for k := range entries {
			part := NewIndex()
			for _, e := range entries[k:] {
				part.Add(e)
			}
			for s := int64(0); s < 410; s++ {
				if s < part.Start() {
					continue
				}
				compared++
				want, wantErr := whole.Translate(s)
				got, err := part.Translate(s)
				if got != want || fmt.Sprint(err) != fmt.Sprint(wantErr) {
					t.Fatalf("seed %d, read from record %d (start %d): Translate(%d) = %+v, %v; the whole index: %+v, %v",
						seed, k, part.Start(), s, got, err, want, wantErr)
				}
			}
		}
	}
	if compared == 0 {
		t.Fatal("nothing compared")
	}
}

// Mark keeps at most MaxLandmarks, the oldest and the newest among them,
// ascending, with gaps that grow with age: a read from the landmark below
// an offset costs at most a few times the index written since it.
func TestMarkThinsWithAge(t *testing.T) {
	var ls []Landmark
	for i := int64(0); i < 100_000; i++ {
		ls = Mark(ls, Landmark{Source: 10 * i, Offset: 3 * i})
		if len(ls) > MaxLandmarks || !CheckLandmarks(ls) {
			t.Fatalf("after %d marks: %d landmarks %v", i+1, len(ls), ls)
		}
	}
	newest := ls[len(ls)-1]
	if ls[0].Offset != 0 || newest.Offset != 3*99_999 {
		t.Fatalf("oldest %v newest %v, want offsets 0 and %d", ls[0], newest, 3*99_999)
	}
	// For an offset written a records ago, the read starts at most a
	// factor above a (plus a landmark's spacing near the head).
	for _, back := range []int64{10, 1_000, 30_000, 200_000, 299_000} {
		s := newest.Source - back/3*10
		from := From(ls, s)
		read, since := newest.Offset-from, newest.Offset-s/10*3
		if from > s/10*3 || read > 3*since+64 {
			t.Errorf("offset %d (%d index records ago): read from %d, %d records; want at or below it and at most 3x+64", s, since, from, read)
		}
	}
	if l := Mark(ls, Landmark{Source: 5, Offset: newest.Offset}); len(l) != len(ls) {
		t.Error("a landmark not newer than the newest was added")
	}
}

func TestFromAndCheck(t *testing.T) {
	ls := []Landmark{{Source: 0, Offset: 4}, {Source: 100, Offset: 50}, {Source: 40, Offset: 90}}
	for _, tc := range []struct{ s, want int64 }{{0, 4}, {39, 4}, {40, 90}, {99, 90}, {100, 90}, {500, 90}} {
		if got := From(ls, tc.s); got != tc.want {
			t.Errorf("From(%d) = %d, want %d", tc.s, got, tc.want)
		}
	}
	if got := From(ls[1:2], 10); got != 0 {
		t.Errorf("below every landmark: From = %d, want 0 (the log start)", got)
	}
	tooMany := make([]Landmark, MaxLandmarks+1)
	for i := range tooMany {
		tooMany[i] = Landmark{Source: int64(i), Offset: int64(i)}
	}
	if !CheckLandmarks(tooMany[:MaxLandmarks]) {
		t.Errorf("CheckLandmarks refused %d ascending landmarks", MaxLandmarks)
	}
	for _, bad := range [][]Landmark{{{Source: -1, Offset: 1}}, {{Source: 1, Offset: -1}}, {{Source: 1, Offset: 5}, {Source: 2, Offset: 5}}, tooMany} {
		if CheckLandmarks(bad) {
			t.Errorf("CheckLandmarks(%v) passed", bad)
		}
	}
}
