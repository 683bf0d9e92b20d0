package server

import (
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
