package app

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/services/writer/internal/config"
)

// The writer creates the offset index topic with time retention
// (offset_index.retention) and as many partitions as the checkpoint topic,
// and never grows an existing one: the partition of a key's records
// depends on the count.
func TestOffsetIndexTopicIsCreatedNeverGrown(t *testing.T) {
	for _, tc := range []struct {
		name     string
		existing int32 // partitions of an index topic there before; 0: none
		want     int32
	}{{"created", 0, 3}, {"existing", 2, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []kfake.Opt{kfake.NumBrokers(1)}
			if tc.existing > 0 {
				opts = append(opts, kfake.SeedTopics(tc.existing, "__ferry_offset_index"))
			}
			cluster, err := kfake.NewCluster(opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer cluster.Close()
			cfg := config.Defaults()
			cfg.ID = "w1"
			cfg.Listen, cfg.Admin.Listen = freeAddr(t), freeAddr(t)
			cfg.TLS.Insecure = true
			cfg.Target.BootstrapServers = cluster.ListenAddrs()
			cfg.Checkpoints.Partitions = 3
			cfg.OffsetIndex.Retention = 30 * 24 * time.Hour
			cfg.Links = []config.Link{{Name: "east", Naming: "prefix", Prefix: "east."}}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			runErr := make(chan error, 1)
			go func() { runErr <- Run(ctx, &cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
			defer func() {
				cancel()
				if err := <-runErr; err != nil {
					t.Errorf("Run = %v", err)
				}
			}()
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				if resp, err := http.Get("http://" + cfg.Admin.Listen + "/readyz"); err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						break
					}
				}
				if time.Now().After(deadline) {
					t.Fatal("writer not ready")
				}
			}
			cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			adm := kadm.NewClient(cl)
			topics, err := adm.ListTopics(ctx, "__ferry_offset_index")
			if err != nil {
				t.Fatal(err)
			}
			if n := int32(len(topics["__ferry_offset_index"].Partitions)); n != tc.want {
				t.Errorf("offset index topic has %d partitions, want %d", n, tc.want)
			}
			if tc.existing > 0 {
				return
			}
			rcs, err := adm.DescribeTopicConfigs(ctx, "__ferry_offset_index")
			if err != nil {
				t.Fatal(err)
			}
			rc, err := rcs.On("__ferry_offset_index", nil)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, c := range rc.Configs {
				got[c.Key] = c.MaybeValue()
			}
			if got["cleanup.policy"] != "delete" || got["retention.ms"] != "2592000000" {
				t.Errorf("offset index topic configs cleanup.policy=%q retention.ms=%q, want delete and 30 days", got["cleanup.policy"], got["retention.ms"])
			}
		})
	}
}
