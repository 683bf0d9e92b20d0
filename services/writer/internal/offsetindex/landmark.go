package offsetindex

import "slices"

// A Landmark says where in the index topic a partition's index goes on
// from a source offset: Offset is the index-topic offset of one of the
// partition's index records, whose range starts at source offset Source.
// The writer records one per flush in the partition's checkpoint (a few
// dozen, thinned with age: Mark), so a translation of an old offset reads
// the index partition from the landmark below it, not from its log start.
//
// Reading from any of a partition's records on is as good as reading it
// whole for every source offset at or after the first one the records
// read describe (Index.Start of what was read): a later record replaces
// what it covers again on both readings alike, and what an earlier record
// said of offsets past a later one's start is cut off by it
// (TestSuffixAnswersAsTheWholeIndex). A read from a landmark therefore
// answers an offset at or after the start it found, and only an offset
// before that (a landmark of an aborted record, or rounds sent again from
// further back) needs the read from the log start.
type Landmark struct {
	Source int64 `json:"s"`
	Offset int64 `json:"o"`
}

// MaxLandmarks bounds the landmarks a checkpoint carries (16 bytes each
// in memory, about 30 in its JSON).
const MaxLandmarks = 32

// Mark adds l, the partition's newest landmark, to ls (oldest first) and
// thins them to MaxLandmarks: the landmark dropped is the one whose
// neighbours stand closest together for their distance from the newest.
// The oldest is kept (the read of the oldest offsets starts there), so
// the gaps grow with age and a read from the landmark below an offset
// costs about as much again as the index written since that offset.
func Mark(ls []Landmark, l Landmark) []Landmark {
	if n := len(ls); n > 0 && ls[n-1].Offset >= l.Offset {
		return ls // not newer: a round's records read back
	}
	ls = append(ls, l)
	for len(ls) > MaxLandmarks {
		newest := ls[len(ls)-1].Offset
		drop, best := 1, -1.0
		for i := 1; i < len(ls)-1; i++ {
			gap := float64(ls[i+1].Offset - ls[i-1].Offset)
			age := float64(newest - ls[i-1].Offset)
			if r := gap / age; best < 0 || r < best {
				drop, best = i, r
			}
		}
		ls = slices.Delete(ls, drop, drop+1)
	}
	return ls
}

// From is the index-topic offset a read for source offset s starts at:
// that of the newest landmark at or below s, or 0 (the log start) when
// none is.
func From(ls []Landmark, s int64) int64 {
	for i := len(ls) - 1; i >= 0; i-- {
		if ls[i].Source <= s {
			return ls[i].Offset
		}
	}
	return 0
}

// CheckLandmarks refuses landmarks a checkpoint may not carry: more than
// MaxLandmarks, a negative offset, or offsets not ascending.
func CheckLandmarks(ls []Landmark) bool {
	if len(ls) > MaxLandmarks {
		return false
	}
	for i, l := range ls {
		if l.Source < 0 || l.Offset < 0 || (i > 0 && l.Offset <= ls[i-1].Offset) {
			return false
		}
	}
	return true
}
