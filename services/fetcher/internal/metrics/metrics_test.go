package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// ferry_link_shards carries the link's shard count with its name, so that
// a rule can compare it with the shards the link's fetchers own
// (ferry_shards_owned, which has no link label) and page on a shard no
// fetcher holds.
func TestLinkShards(t *testing.T) {
	reg := prometheus.NewRegistry()
	RegisterLinkShards(reg, "east", 8)
	want := `# HELP ferry_link_shards Shards the link is cut into (link.shards): each one should be owned by one fetcher.
# TYPE ferry_link_shards gauge
ferry_link_shards{link="east"} 8
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ferry_link_shards"); err != nil {
		t.Fatal(err)
	}
}
