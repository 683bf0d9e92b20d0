package app

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/kafkaclient"
	"github.com/ferry-replicator/ferry/pkg/shards"
	"github.com/ferry-replicator/ferry/services/writer/internal/config"
	"github.com/ferry-replicator/ferry/services/writer/internal/topics"
)

// The whole writer compares the target topics it opened with their
// source every config_sync_interval: a config changed on the target by
// hand shows in /status (topics.drift) and /metrics, and is left alone.
func TestTopicDriftInStatusAndMetrics(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	cfg, stop := runWriterWith(t, cluster.ListenAddrs()[0], func(c *config.Config) { c.ConfigSyncInterval = time.Second })
	defer stop()
	conn, err := grpc.NewClient(cfg.Listen, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The writer serves once its start is done; until then the open fails.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err = openOnce(ctx, conn); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("open: %v", err)
		}
	}
	base, err := kafkaclient.Defaults("operator").Sarama()
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sarama.NewClusterAdmin(cluster.ListenAddrs(), base)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	v := "9999999"
	err = admin.IncrementalAlterConfig(sarama.TopicResource, "east.orders", map[string]sarama.IncrementalAlterConfigsEntry{
		"retention.ms": {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: &v},
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	var last string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var st struct {
			Topics struct {
				Drift []topics.Drift `json:"drift"`
			} `json:"topics"`
		}
		last = get(t, cfg.Admin.Listen, "/status")
		if json.Unmarshal([]byte(last), &st) == nil && len(st.Topics.Drift) == 1 {
			d := st.Topics.Drift[0]
			if d.Link != "east" || d.Topic != "east.orders" || d.Config != "retention.ms" || d.Target != v || d.Source != "7200000" {
				t.Fatalf("/status topics.drift %+v, want east.orders retention.ms target %s source 7200000", d, v)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no drift in /status within 30s; last %s", last)
		}
	}
	if m := get(t, cfg.Admin.Listen, "/metrics"); !strings.Contains(m, `ferry_topic_config_drift{config="retention.ms",link="east",topic="east.orders"} 1`) {
		t.Errorf("/metrics has no drift series for east.orders retention.ms")
	}
}

// openOnce opens shard 0 of link east with topic orders (retention.ms
// 7200000) and ends the stream once answered.
func openOnce(ctx context.Context, conn *grpc.ClientConn) error {
	stream, err := ferryv1.NewReplicationServiceClient(conn).Replicate(ctx)
	if err != nil {
		return err
	}
	open := &ferryv1.Open{Link: "east", Shard: uint32(shards.Of("orders", 0, shards.Default)), Epoch: 1, Fetcher: "f",
		Topics:     []*ferryv1.TopicSpec{{Name: "orders", PartitionCount: 1, Configs: map[string]string{"retention.ms": "7200000"}}},
		Partitions: []*ferryv1.TopicPartition{{Topic: "orders", Partition: 0}}}
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Open{Open: open}}); err != nil {
		return err
	}
	if _, err := stream.Recv(); err != nil {
		return err
	}
	return stream.CloseSend()
}

func get(t *testing.T, addr, path string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
