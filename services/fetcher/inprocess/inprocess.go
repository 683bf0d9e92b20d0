// Package inprocess runs the whole fetcher (its app, as ferry-fetcher runs
// it) inside a test of another package, which the compiler keeps from
// importing the fetcher's internal packages: the observability test scrapes
// it. It is for tests only: it takes a testing.TB and stops the fetcher at
// the test's end. Shards are owned locally (no Consul).
package inprocess

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/app"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/config"
)

// Options describe the fetcher.
type Options struct {
	// ID names the fetcher.
	ID string
	// Source are the source cluster's bootstrap servers (a kfake
	// cluster's ListenAddrs).
	Source []string
	// Writers are the writers' gRPC addresses.
	Writers []string
	// CertDir holds devcerts.WriteDir's files: the fetcher connects with
	// fetcher.pem and admits writer.pem's identity.
	CertDir string
	// Link is the link copied, every topic of the source.
	Link string
	// GroupsInterval is link.groups.interval (0: the default).
	GroupsInterval time.Duration
}

// Fetcher is a running fetcher.
type Fetcher struct {
	// Admin is its admin host:port (/metrics, /readyz, /status).
	Admin string
	// Registry holds its metrics, also those no event has created a
	// series of yet.
	Registry *prometheus.Registry
}

// Start runs the fetcher until the test ends and returns once its /readyz
// answers 200 (the source discovered).
func Start(t testing.TB, o Options) *Fetcher {
	t.Helper()
	cfg := config.Defaults()
	cfg.ID = o.ID
	cfg.Admin.Listen = freeAddr(t)
	cfg.Source.BootstrapServers = o.Source
	cfg.Writers.Addresses = o.Writers
	cfg.Writers.TLS.CertFile, cfg.Writers.TLS.KeyFile = filepath.Join(o.CertDir, "fetcher.pem"), filepath.Join(o.CertDir, "fetcher-key.pem")
	cfg.Writers.TLS.CAFile = filepath.Join(o.CertDir, "ca.pem")
	cfg.Writers.TLS.AllowedIDs = []string{devcerts.SPIFFEID(devcerts.DefaultTrustDomain, "writer")}
	cfg.Lease.Address = "" // local ownership: every shard, no Consul
	cfg.Link.Name = o.Link
	cfg.Link.DiscoveryInterval = 200 * time.Millisecond
	if o.GroupsInterval > 0 {
		cfg.Link.Groups.Interval = o.GroupsInterval
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.RunWith(ctx, &cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), reg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("fetcher %s: %v", o.ID, err)
		}
	})
	waitReady(t, cfg, done)
	return &Fetcher{Admin: cfg.Admin.Listen, Registry: reg}
}

// waitReady polls /readyz until it answers 200.
func waitReady(t testing.TB, cfg config.Config, done chan error) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		select {
		case err := <-done:
			done <- nil // for the cleanup, which waits for the end
			t.Fatalf("fetcher %s ended while starting: %v", cfg.ID, err)
		default:
		}
		resp, err := http.Get("http://" + cfg.Admin.Listen + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, with a deadline
	}
	t.Fatalf("fetcher %s not ready within 60s", cfg.ID)
}

// freeAddr is a loopback address nothing listens on now: Run binds its own
// listeners and does not report their addresses.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
