package server

import (
	"testing"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/services/writer/internal/topicfilter"
	"github.com/ferry-replicator/ferry/services/writer/internal/topics"
)

// syncLink is a link with the default config allow list and floors.
func syncLink(t *testing.T) Link {
	return Link{Name: "east", Configs: topics.ConfigCopy{Allow: allowSet(topics.DefaultConfigAllow...), MinRetentionMs: 3_600_000, MinRetentionBytes: 100 << 20},
		Topics: mustFilter(t, topicfilter.DefaultInclude, topicfilter.DefaultExclude)}
}

// A source config changed after the target topic was created reaches the
// target with the next open that carries it (the fetcher reopens its
// shards when a discovery sees a config change), within the link's allow
// list and floors: a config left out never travels, a retention below
// the floor is raised.
func TestSourceConfigChangeReachesTheTarget(t *testing.T) {
	w := startWriter(t, []Link{syncLink(t)})
	spec := func(configs map[string]string) *ferryv1.TopicSpec {
		return &ferryv1.TopicSpec{Name: "orders", PartitionCount: 1, Configs: configs}
	}
	if err := w.openSpecs(t, "east", spec(map[string]string{"retention.ms": "7200000", "compression.type": "zstd"})); err != nil {
		t.Fatal(err)
	}
	changed := map[string]string{"retention.ms": "10800000", "cleanup.policy": "compact", "segment.bytes": "14", "min.insync.replicas": "1"}
	if err := w.openSpecs(t, "east", spec(changed)); err != nil {
		t.Fatal(err)
	}
	got := w.targetConfigs(t, "orders")
	if got["retention.ms"] != "10800000" || got["cleanup.policy"] != "compact" {
		t.Errorf("target configs %v after the source changed retention.ms and cleanup.policy: want retention.ms=10800000 cleanup.policy=compact", got)
	}
	if _, ok := got["compression.type"]; ok {
		t.Errorf("target configs %v: compression.type, which the source no longer sets, is still set", got)
	}
	for _, k := range []string{"segment.bytes", "min.insync.replicas"} {
		if v, ok := got[k]; ok {
			t.Errorf("target %s = %s: a config outside the allow list travelled", k, v)
		}
	}
	if err := w.openSpecs(t, "east", spec(map[string]string{"retention.ms": "1", "cleanup.policy": "compact"})); err != nil {
		t.Fatal(err)
	}
	if got := w.targetConfigs(t, "orders")["retention.ms"]; got != "3600000" {
		t.Errorf("target retention.ms = %s after the source set 1, want the link's floor 3600000", got)
	}
}
