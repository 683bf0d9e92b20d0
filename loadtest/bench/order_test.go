package bench

import (
	"slices"
	"testing"
)

// Repeated catch-up rounds alternate the order of the systems, so each
// runs first in half the rounds, and the configured order is left as it
// was.
func TestRoundOrderAlternates(t *testing.T) {
	systems := []System{FerryEOS, FerryBaselineEOS, MM2EOS}
	first := map[System]int{}
	for i := range 4 {
		order := roundOrder(systems, i)
		want := slices.Clone(systems)
		if i%2 == 1 {
			slices.Reverse(want)
		}
		if !slices.Equal(order, want) {
			t.Fatalf("round %d runs %v, want %v", i, order, want)
		}
		first[order[0]]++
	}
	if first[FerryEOS] != 2 || first[MM2EOS] != 2 {
		t.Errorf("first of a round over 4 rounds: %v, want ferry-eos and mm2-eos twice each", first)
	}
	if !slices.Equal(systems, []System{FerryEOS, FerryBaselineEOS, MM2EOS}) {
		t.Errorf("the configured order changed to %v", systems)
	}
}
