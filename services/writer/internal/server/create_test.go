package server

import (
	"context"
	"maps"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/services/writer/internal/topicfilter"
	"github.com/ferry-replicator/ferry/services/writer/internal/topics"
)

// openSpecs sends an Open of partition 0 of each topic spec on shard 1 and
// returns its answer's error (nil: Opened), ending the stream after.
func (w *testWriter) openSpecs(t *testing.T, link string, specs ...*ferryv1.TopicSpec) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := w.client.Replicate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	open := &ferryv1.Open{Link: link, Shard: 0, Epoch: 1, Fetcher: "f", Topics: specs}
	for _, s := range specs {
		open.Partitions = append(open.Partitions, &ferryv1.TopicPartition{Topic: s.GetName(), Partition: 0})
	}
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Open{Open: open}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		return err
	}
	closeStream(t, stream)
	return nil
}

func allowSet(keys ...string) map[string]bool {
	m := map[string]bool{}
	for _, k := range keys {
		m[k] = true
	}
	return m
}

// targetConfigs are the configs the target topic was created with.
func (w *testWriter) targetConfigs(t *testing.T, topic string) map[string]string {
	t.Helper()
	info := w.cluster.TopicInfo(topic)
	if info == nil {
		t.Fatalf("target topic %s not created", topic)
	}
	out := map[string]string{}
	for k, v := range info.Configs {
		if v != nil {
			out[k] = *v
		}
	}
	return out
}

// A created target topic takes only the allowed source configs, and
// retention only when it keeps at least Kafka's default: a fetcher's
// retention.ms=1 (deleting every copy at once), remote.storage.enable or
// tiny segments do not reach the target. An operator's allow list
// replaces the default.
func TestCreatedTopicTakesOnlySafeConfigs(t *testing.T) {
	hostile := map[string]string{
		"retention.ms": "1", "retention.bytes": "1024", "remote.storage.enable": "true", "segment.bytes": "14",
		"min.insync.replicas": "1", "unclean.leader.election.enable": "true", "message.timestamp.type": "LogAppendTime",
		"cleanup.policy": "compact", "compression.type": "zstd", "max.message.bytes": "2097152", "min.compaction.lag.ms": "1000",
	}
	tests := []struct {
		name    string
		allow   []string
		configs map[string]string
		want    map[string]string
	}{
		{"hostile source, default list: retention raised to the floors", topics.DefaultConfigAllow, hostile, map[string]string{
			"cleanup.policy": "compact", "compression.type": "zstd", "max.message.bytes": "2097152", "min.compaction.lag.ms": "1000",
			"retention.ms": "3600000", "retention.bytes": "104857600",
		}},
		{"retention forever is copied", topics.DefaultConfigAllow,
			map[string]string{"retention.ms": "-1", "retention.bytes": "-1"},
			map[string]string{"retention.ms": "-1", "retention.bytes": "-1"}},
		{"retention above the floors is copied as the source has it", topics.DefaultConfigAllow,
			map[string]string{"retention.ms": "123456789", "retention.bytes": "1073741824"},
			map[string]string{"retention.ms": "123456789", "retention.bytes": "1073741824"}},
		{"unreadable retention is dropped", topics.DefaultConfigAllow, map[string]string{"retention.ms": "soon", "retention.bytes": "-7"}, map[string]string{}},
		{"operator's list", []string{"segment.bytes"}, hostile, map[string]string{"segment.bytes": "14"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := startWriter(t, []Link{{Name: "east", Configs: topics.ConfigCopy{Allow: allowSet(tt.allow...), MinRetentionMs: 3_600_000, MinRetentionBytes: 100 << 20}, Topics: mustFilter(t, topicfilter.DefaultInclude, topicfilter.DefaultExclude)}})
			if err := w.openSpecs(t, "east", &ferryv1.TopicSpec{Name: "orders", PartitionCount: 1, Configs: tt.configs}); err != nil {
				t.Fatalf("open refused: %v", err)
			}
			if got := w.targetConfigs(t, "orders"); !maps.Equal(got, tt.want) {
				t.Errorf("target topic configs %v, want %v", got, tt.want)
			}
		})
	}
}

// A topic above max_partitions is refused before it is created or grown:
// growth cannot be undone, and each partition costs every broker.
func TestTopicAboveMaxPartitionsIsRefused(t *testing.T) {
	w := startWriter(t, passthroughLinks(t, false))
	err := w.openSpecs(t, "east", &ferryv1.TopicSpec{Name: "orders", PartitionCount: 1001})
	wantRefusal(t, err, codes.PermissionDenied, `topic "orders"`, "1001 partitions", "max_partitions 1000")
	if w.cluster.TopicInfo("orders") != nil {
		t.Error("the topic was created")
	}
	if err := w.openSpecs(t, "east", &ferryv1.TopicSpec{Name: "orders", PartitionCount: 2}); err != nil {
		t.Fatal(err)
	}
	err = w.openSpecs(t, "east", &ferryv1.TopicSpec{Name: "orders", PartitionCount: 5000})
	wantRefusal(t, err, codes.PermissionDenied, "5000 partitions")
	if n := len(w.cluster.PartitionInfos("orders")); n != 2 {
		t.Errorf("target topic has %d partitions after a refused growth, want 2", n)
	}
	if got := w.rejected(t, "east", "topic_refused"); got != 2 {
		t.Errorf("rejected{reason=topic_refused} = %v, want 2", got)
	}
}

// Platform topics (Schema Registry's, Kafka Connect's, Confluent's,
// MirrorMaker 2's) are refused even by a link whose allow list takes every
// topic, unless the link names them in platform_topics.
func TestPlatformTopicsAreReserved(t *testing.T) {
	all := mustFilter(t, []string{".*"}, []string{})
	w := startWriter(t, []Link{
		{Name: "open", Topics: all},
		{Name: "schemas-dr", Topics: all, PlatformTopics: allowSet("_schemas")},
	})
	for _, topic := range []string{"_schemas", "connect-configs", "connect-offsets", "connect-status", "_confluent-command", "mm2-offset-syncs.west.internal"} {
		err := w.openSpecs(t, "open", &ferryv1.TopicSpec{Name: topic, PartitionCount: 1})
		wantRefusal(t, err, codes.PermissionDenied, `topic "`+topic+`"`, "platform topic", "links[].platform_topics")
	}
	if err := w.openSpecs(t, "schemas-dr", &ferryv1.TopicSpec{Name: "_schemas", PartitionCount: 1}); err != nil {
		t.Fatalf("a link naming _schemas in platform_topics was refused it: %v", err)
	}
	err := w.openSpecs(t, "schemas-dr", &ferryv1.TopicSpec{Name: "connect-configs", PartitionCount: 1})
	wantRefusal(t, err, codes.PermissionDenied, `topic "connect-configs"`)
}
