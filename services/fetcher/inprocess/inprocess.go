// Package inprocess runs the whole fetcher (its app, as ferry-fetcher runs
// it) inside a test of another package, such as ferryctl's or the
// observability test that scrapes it, which the compiler keeps from
// importing the fetcher's internal packages. It is for tests only: it
// takes a testing.TB, and the fetcher stops at Stop or at the test's end.
// Shards are owned locally (no Consul).
package inprocess

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/app"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/config"
)

// Options configure a fetcher.
type Options struct {
	// ID names the fetcher.
	ID string
	// Link is the link it copies, owning every shard (no Consul).
	Link string
	// Source are the source cluster's bootstrap servers.
	Source []string
	// Writers are the writers' gRPC addresses.
	Writers []string
	// CertDir holds devcerts.WriteDir's files: the fetcher presents
	// fetcher.pem and admits writer.pem's identity.
	CertDir string
	// Topics are the topics copied (anchored regular expressions); empty
	// copies every topic the defaults include.
	Topics []string
	// GroupsInterval is link.groups.interval (at least 1s); zero keeps
	// the default.
	GroupsInterval time.Duration
	// HeartbeatInterval is link.heartbeat.interval; zero keeps the
	// default.
	HeartbeatInterval time.Duration
}

// Fetcher is a running fetcher.
type Fetcher struct {
	// Admin is its admin host:port (/metrics, /readyz, /status).
	Admin string
	// Registry holds its metrics, also those no event has created a
	// series of yet.
	Registry *prometheus.Registry

	t      testing.TB
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// Start runs the fetcher until Stop or the test's end, and returns once
// its /readyz answers 200 (the source discovered).
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
	if len(o.Topics) > 0 {
		cfg.Link.Topics.Include = o.Topics
	}
	if o.GroupsInterval > 0 {
		cfg.Link.Groups.Interval = o.GroupsInterval
	}
	if o.HeartbeatInterval > 0 {
		cfg.Link.Heartbeat.Interval = o.HeartbeatInterval
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	f := &Fetcher{Admin: cfg.Admin.Listen, Registry: reg, t: t, cancel: cancel, done: make(chan error, 1)}
	go func() { f.done <- app.RunWith(ctx, &cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), reg) }()
	t.Cleanup(f.Stop)
	f.waitReady(cfg.ID)
	return f
}

// Stop stops the fetcher and waits for it (a second call does nothing).
func (f *Fetcher) Stop() {
	f.once.Do(func() {
		f.cancel()
		if err := <-f.done; err != nil {
			f.t.Errorf("fetcher: %v", err)
		}
	})
}

// waitReady polls /readyz until it answers 200.
func (f *Fetcher) waitReady(id string) {
	f.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		select {
		case err := <-f.done:
			f.done <- nil // for Stop, which waits for the end
			f.t.Fatalf("fetcher %s ended while starting: %v", id, err)
		default:
		}
		resp, err := http.Get("http://" + f.Admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, with a deadline
	}
	f.t.Fatalf("fetcher %s not ready within 60s", id)
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
