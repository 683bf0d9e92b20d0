package shards

import "testing"

// The placement is part of the contract between deployed fetchers, the
// writers' transactional ids and stored leases: a change would move shards
// under running clusters. These values pin it.
func TestOfIsStable(t *testing.T) {
	cases := []struct {
		topic     string
		partition int32
		n, want   int
	}{
		{"orders", 0, 64, 28},
		{"orders", 7, 64, 9},
		{"t.real", 3, 64, 62},
		{"a", 0, 1, 0},
		{"payments.eu", 11, 1000, 600},
	}
	for _, c := range cases {
		if got := Of(c.topic, c.partition, c.n); got != c.want {
			t.Errorf("Of(%q, %d, %d) = %d, want %d", c.topic, c.partition, c.n, got, c.want)
		}
	}
}

func TestOfSpreads(t *testing.T) {
	seen := map[int]bool{}
	for p := range int32(256) {
		s := Of("orders", p, 64)
		if s < 0 || s >= 64 {
			t.Fatalf("partition %d in shard %d, outside [0,64)", p, s)
		}
		seen[s] = true
	}
	if len(seen) < 48 {
		t.Fatalf("256 partitions fill only %d of 64 shards", len(seen))
	}
}
