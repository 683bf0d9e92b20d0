package ownership

import "testing"

func TestTargetSharesAddUpToTotal(t *testing.T) {
	for _, tc := range []struct {
		members []string
		total   int
	}{
		{[]string{"a", "b", "c"}, 10},
		{[]string{"a", "b", "c", "d"}, 10},
		{[]string{"a"}, 7},
		{[]string{"a", "b"}, 1},
		{[]string{"a", "b", "c"}, 2000},
	} {
		sum := 0
		for _, id := range tc.members {
			c := &Consul{id: id, members: tc.members}
			share := c.Target(tc.total)
			if low := tc.total / len(tc.members); share < low || share > low+1 {
				t.Errorf("%v total %d: %s gets %d, want %d or %d", tc.members, tc.total, id, share, low, low+1)
			}
			sum += share
		}
		if sum != tc.total {
			t.Errorf("%v total %d: shares add up to %d", tc.members, tc.total, sum)
		}
	}
	// A fetcher not yet in the list counts itself in.
	c := &Consul{id: "b", members: []string{"a", "c"}}
	if got := c.Target(9); got != 3 {
		t.Errorf("unlisted fetcher of 3 with 9 shards gets %d, want 3", got)
	}
}
