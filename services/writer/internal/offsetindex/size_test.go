package offsetindex

import (
	"math/rand/v2"
	"testing"

	"github.com/ferry-replicator/ferry/pkg/recordbatch"
)

// TestSizePerMillionRecords measures what the index adds for a million
// source records, copied in rounds of perRound records of the partition:
// value bytes, and bytes as Kafka records (key "east/orders/7", value, the
// record's own framing; the 61-byte batch header is shared by all of a
// round's index records of an index partition and counted once a round
// here, as for a round of one partition). A compacted source is simulated
// with a fraction of its offsets removed at random. docs/architecture.md,
// "Offset index", quotes the table it logs (go test -v -run
// TestSizePerMillionRecords).
func TestSizePerMillionRecords(t *testing.T) {
	const million = 1_000_000
	key := []byte(Key{Link: "east", Topic: "orders", Partition: 7}.String())
	t.Logf("%-22s %9s %8s %10s %12s %14s", "source", "perRound", "rounds", "runs", "value bytes", "record bytes")
	for _, tc := range []struct {
		name    string
		removed float64 // fraction of offsets compaction removed
	}{{"plain", 0}, {"compacted 10% removed", 0.1}, {"compacted 50% removed", 0.5}} {
		for _, perRound := range []int64{10, 1024, 8192} {
			rng := rand.New(rand.NewPCG(1, 2))
			var rounds, runs, values, records int64
			target, before := int64(5_000_000), int64(4_999_999)
			for s := int64(10_000_000); s < 10_000_000+million; {
				e := Entry{From: s, Next: s + perRound, TargetBefore: before}
				target++ // exactly-once: the previous round's commit marker
				for ; s < e.Next; s++ {
					if rng.Float64() < tc.removed {
						continue
					}
					e.Add(s, target, 1)
					target++
				}
				before = e.TargetEnd()
				for _, part := range e.Split() {
					value, err := part.Append(nil)
					if err != nil {
						t.Fatal(err)
					}
					raw, err := recordbatch.Build(nil, []recordbatch.Record{{Timestamp: 1, Key: key, Value: value}}, recordbatch.None)
					if err != nil {
						t.Fatal(err)
					}
					values += int64(len(value))
					records += int64(len(raw))
					runs += int64(len(part.Runs))
				}
				rounds++
			}
			t.Logf("%-22s %9d %8d %10d %12d %14d", tc.name, perRound, rounds, runs, values, records)
			if tc.removed == 0 && values/rounds > 16 {
				t.Errorf("plain: %d value bytes a round, want at most 16 (one run)", values/rounds)
			}
		}
	}
}
