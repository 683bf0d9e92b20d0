package discovery

import (
	"testing"

	"github.com/IBM/sarama"
)

func TestSelectorAnchorsAndExcludes(t *testing.T) {
	sel, err := NewSelector([]string{"orders.*", "payments"}, []string{`.*[\-\.]internal`, `__.*`})
	if err != nil {
		t.Fatal(err)
	}
	for topic, want := range map[string]bool{
		"orders": true, "orders.eu": true, "payments": true,
		"payments.v2":     false, // anchored: "payments" is not a prefix match
		"my-orders":       false,
		"orders.internal": false, "__consumer_offsets": false,
	} {
		if got := sel.Match(topic); got != want {
			t.Errorf("Match(%q) = %v, want %v", topic, got, want)
		}
	}
	if _, err := NewSelector([]string{"("}, nil); err == nil {
		t.Error("bad include compiled")
	}
}

type staticLister map[string]sarama.TopicDetail

func (s staticLister) ListTopics() (map[string]sarama.TopicDetail, error) { return s, nil }

func (s staticLister) DescribeTopics(names []string) ([]*sarama.TopicMetadata, error) {
	var out []*sarama.TopicMetadata
	for _, n := range names {
		out = append(out, &sarama.TopicMetadata{Name: n, Uuid: sarama.Uuid{byte(len(n))}})
	}
	return out, nil
}

func TestShardsAreStableAsPartitionsGrow(t *testing.T) {
	sel, _ := NewSelector([]string{".*"}, nil)
	before, err := Discover(staticLister{"a": {NumPartitions: 4}, "b": {NumPartitions: 2}}, sel, 16)
	if err != nil {
		t.Fatal(err)
	}
	after, err := Discover(staticLister{"a": {NumPartitions: 8}, "b": {NumPartitions: 2}, "c": {NumPartitions: 3}}, sel, 16)
	if err != nil {
		t.Fatal(err)
	}
	where := func(p Plan) map[Partition]int {
		m := map[Partition]int{}
		for s, parts := range p.Shards {
			for _, pt := range parts {
				m[pt] = s
			}
		}
		return m
	}
	wb, wa := where(before), where(after)
	if len(wb) != 6 || len(wa) != 13 {
		t.Fatalf("placed %d and %d partitions, want 6 and 13", len(wb), len(wa))
	}
	for p, s := range wb {
		if wa[p] != s {
			t.Errorf("%v moved from shard %d to %d when partitions were added", p, s, wa[p])
		}
	}
}
