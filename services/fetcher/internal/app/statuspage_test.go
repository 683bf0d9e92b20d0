package app

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/pkg/tracing"
	"github.com/ferry-replicator/ferry/pkg/tracing/otlptest"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/config"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/shard"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/writertest"
)

// A running fetcher's status page shows, from the same value as /status,
// its shards and each partition's lag in records, and the partition its
// writer refused as stopped, with the reason. (The writer's page is read
// in Chromium: services/writer/internal/app TestStatusPageInChromium.)
// With tracing at sampling 1 and tracing.ui_url set, it links to the
// Jaeger UI's search for ferry-fetcher and to the trace of a batch the
// writer received, a trace the fetcher exported.
func TestStatusPageShowsPartitions(t *testing.T) {
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100") // ms: spans reach the receiver soon
	spans := otlptest.Start(t)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t", "u"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	producer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	for range 5 {
		if err := producer.ProduceSync(context.Background(), &kgo.Record{Topic: "t", Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
	writer.RefuseCheckpointOf("u", 0)
	writer.SetTargetCluster("target") // link.skip_replicated, on by default, needs it
	cfg := config.Defaults()
	cfg.ID = "f1"
	cfg.Admin.Listen = freeAddr(t)
	cfg.Source.BootstrapServers = cluster.ListenAddrs()
	cfg.Writers.Addresses = []string{writer.Addr()}
	cfg.Writers.TLS.Insecure = true
	cfg.Lease.Address = "" // local ownership: no Consul here
	cfg.Link.Name = "east"
	cfg.Link.Shards = 1
	cfg.Link.DiscoveryInterval = 200 * time.Millisecond
	cfg.Tracing.Endpoint, cfg.Tracing.SamplingRatio, cfg.Tracing.UIURL = spans.Addr, 1, "http://jaeger.example:16686"
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

	writertest.WaitFor(t, 30*time.Second, "t/0 copied and u/0 stopped in /status", func() bool {
		var st struct {
			Shards []shard.Status `json:"shards"`
		}
		resp, err := http.Get("http://" + cfg.Admin.Listen + "/status")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		if json.NewDecoder(resp.Body).Decode(&st) != nil || len(st.Shards) != 1 {
			return false
		}
		p := st.Shards[0].Partitions
		return p["t/0"].Committed == 5 && p["t/0"].HighWater == 5 && p["u/0"].Stopped != ""
	})
	resp, err := http.Get("http://" + cfg.Admin.Listen + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	page := string(body)
	for _, want := range []string{
		`<b id="fetcher">f1</b>`, `<b id="link">east</b>`,
		`<td>t/0</td><td class="n">5</td><td class="n">5</td><td class="n lag-records">0</td>`,
		`<td>u/0</td>`, "checkpoint unverified",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("status page lacks %q:\n%s", want, page)
		}
	}

	// The batch's trace, as the writer received it in the batch's
	// traceparent; exported, and linked from the page.
	trace := tracing.ParseTraceparent(writer.Received()[0].GetTraceparent()).TraceID().String()
	writertest.WaitFor(t, 30*time.Second, "the batch's trace exported", func() bool { return spans.Has(trace) })
	for _, want := range []string{
		`href="http://jaeger.example:16686/search?service=ferry-fetcher"`,
		`href="http://jaeger.example:16686/trace/` + trace + `"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("status page lacks %s:\n%s", want, page)
		}
	}
}
