package app

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/ferry-replicator/ferry/services/fetcher/internal/config"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/writertest"
)

// freeAddr returns a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// A fetcher started while its source is down waits for it: /healthz
// answers, /readyz says what the start waits for, and once the source
// listens the fetcher discovers it and is ready, without a restart. A stop
// while it waits is a clean exit.
func TestSourceDownAtStartIsWaitedFor(t *testing.T) {
	source := freeAddr(t)
	_, portText, _ := net.SplitHostPort(source)
	port, err := strconv.Atoi(portText)
	if err != nil {
		t.Fatal(err)
	}
	writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
	start := func(t *testing.T) (*config.Config, context.CancelFunc, chan error) {
		cfg := config.Defaults()
		cfg.ID = "f1"
		cfg.Admin.Listen = freeAddr(t)
		cfg.Source.BootstrapServers = []string{source}
		cfg.Writers.Addresses = []string{writer.Addr()}
		cfg.Writers.TLS.Insecure = true
		cfg.Lease.Address = "" // local ownership: no Consul here
		cfg.Link.Name = "east"
		cfg.Link.DiscoveryInterval = 200 * time.Millisecond
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		runErr := make(chan error, 1)
		go func() { runErr <- Run(ctx, &cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
		return &cfg, cancel, runErr
	}
	get := func(addr, path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	readyz := func(t *testing.T, cfg *config.Config, what string, ok func(code int, body string) bool) {
		t.Helper()
		var code int
		var body string
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if code, body = get(cfg.Admin.Listen, "/readyz"); ok(code, body) {
				return
			}
		}
		t.Fatalf("%s: never; last /readyz %d %q", what, code, body)
	}
	waiting := func(t *testing.T, cfg *config.Config) {
		t.Helper()
		readyz(t, cfg, "/readyz names the source it waits for", func(code int, body string) bool {
			return code == http.StatusServiceUnavailable && strings.Contains(body, "waiting for the source cluster")
		})
		if code, body := get(cfg.Admin.Listen, "/healthz"); code != http.StatusOK {
			t.Fatalf("/healthz %d %q while the start waits, want 200", code, body)
		}
		if code, body := get(cfg.Admin.Listen, "/status"); code != http.StatusOK || !strings.Contains(body, `"starting"`) {
			t.Fatalf("/status %d %q while the start waits, want what it waits for", code, body)
		}
	}

	t.Run("stopped while waiting", func(t *testing.T) {
		cfg, cancel, runErr := start(t)
		waiting(t, cfg)
		cancel()
		if err := <-runErr; err != nil {
			t.Fatalf("Run = %v, want a clean stop", err)
		}
	})
	t.Run("source comes up", func(t *testing.T) {
		cfg, cancel, runErr := start(t)
		defer func() {
			cancel()
			if err := <-runErr; err != nil {
				t.Errorf("Run = %v", err)
			}
		}()
		waiting(t, cfg)
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(1, "t"))
		if err != nil {
			t.Fatal(err)
		}
		defer cluster.Close()
		readyz(t, cfg, "ready once the source listens", func(code int, _ string) bool { return code == http.StatusOK })
		if code, body := get(cfg.Admin.Listen, "/status"); code != http.StatusOK || !strings.Contains(body, `"shards"`) {
			t.Fatalf("/status %d %q once started, want the shards", code, body)
		}
	})
}
