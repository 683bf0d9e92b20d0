package app

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/shards"
	"github.com/ferry-replicator/ferry/services/writer/internal/config"
	"github.com/ferry-replicator/ferry/services/writer/internal/heartbeat"
)

// runWriter runs the whole writer on target until the returned stop.
func runWriter(t *testing.T, target string) (cfg config.Config, stop func()) {
	t.Helper()
	return runWriterWith(t, target, func(*config.Config) {})
}

// runWriterWith is runWriter with the configuration edited.
func runWriterWith(t *testing.T, target string, edit func(*config.Config)) (cfg config.Config, stop func()) {
	t.Helper()
	cfg = config.Defaults()
	cfg.ID = "w1"
	cfg.Listen, cfg.Admin.Listen = freeAddr(t), freeAddr(t)
	cfg.TLS.Insecure = true
	cfg.Target.BootstrapServers = []string{target}
	cfg.Links = []config.Link{{Name: "east", Naming: "prefix", Prefix: "east."}}
	edit(&cfg)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- Run(ctx, &cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	return cfg, func() {
		cancel()
		if err := <-runErr; err != nil {
			t.Errorf("Run = %v", err)
		}
	}
}

// failoverStatus polls the writer's /status until its failover section
// holds a line satisfying ok.
func failoverStatus(t *testing.T, admin string, ok func(heartbeat.Exposure) bool) heartbeat.Exposure {
	t.Helper()
	var last string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + admin + "/status")
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		last = string(body)
		var st struct {
			Failover []heartbeat.Exposure `json:"failover"`
		}
		if json.Unmarshal(body, &st) != nil {
			continue
		}
		for _, e := range st.Failover {
			if ok(e) {
				return e
			}
		}
	}
	t.Fatalf("no failover line as wanted within 30s; last /status %s", last)
	return heartbeat.Exposure{}
}

// The whole writer shows the failover meter in /status, writes the
// heartbeats to __ferry_heartbeats when it stops, and a writer started
// again on the same target shows the same meter with no fetcher at all.
func TestFailoverMeterInStatusAcrossRestart(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	target := cluster.ListenAddrs()[0]

	cfg, stop := runWriter(t, target)
	conn, err := grpc.NewClient(cfg.Listen, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stream ferryv1.ReplicationService_ReplicateClient
	var opened *ferryv1.ReplicateResponse
	// The writer serves once its start is done; until then the open fails.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if stream, err = ferryv1.NewReplicationServiceClient(conn).Replicate(ctx); err != nil {
			continue
		}
		open := &ferryv1.Open{Link: "east", Shard: uint32(shards.Of("orders", 0, shards.Default)), Epoch: 1, Fetcher: "f",
			Topics:     []*ferryv1.TopicSpec{{Name: "orders", PartitionCount: 1}},
			Partitions: []*ferryv1.TopicPartition{{Topic: "orders", Partition: 0}}}
		if err = stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Open{Open: open}}); err != nil {
			continue
		}
		if opened, err = stream.Recv(); err == nil {
			break
		}
	}
	if err != nil || !opened.GetOpened().GetHeartbeats() {
		t.Fatalf("open answered %v, %v; want an Opened taking heartbeats", opened, err)
	}
	now := time.Now().UnixMilli()
	hb := &ferryv1.Heartbeat{Epoch: 1, Partitions: []*ferryv1.PartitionHeartbeat{
		{Topic: "orders", Partition: 0, HighWatermark: 40, LogStartOffset: 5, HeadOffset: 39, HeadTimestamp: now, ObservedAt: now},
	}}
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Heartbeat{Heartbeat: hb}}); err != nil {
		t.Fatal(err)
	}
	// Nothing copied: all the source holds is at risk.
	want := func(e heartbeat.Exposure) bool {
		return e.Link == "east" && e.Topic == "orders" && e.Records == 35 && e.Committed == -1 && e.SourceHighWatermark == 40 && e.SourceLogStart == 5
	}
	before := failoverStatus(t, cfg.Admin.Listen, want)
	_ = stream.CloseSend()
	stop() // the heartbeats are written as the writer stops

	cfg2, stop2 := runWriter(t, target)
	defer stop2()
	after := failoverStatus(t, cfg2.Admin.Listen, want)
	if !after.ObservedAt.Equal(before.ObservedAt) || after.HeartbeatAge < before.HeartbeatAge {
		t.Fatalf("meter after the restart %+v, want the heartbeat of %+v", after, before)
	}
}
