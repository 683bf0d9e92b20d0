// Package inprocess runs the whole writer (its app, as ferry-writer runs
// it) inside a test of another service, such as ferryctl's, which the
// compiler keeps from importing the writer's internal packages. It is for
// tests only: it takes a testing.TB and stops the writer at the test's
// end.
package inprocess

import (
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	ferryconfig "github.com/ferry-replicator/ferry/pkg/config"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
	"github.com/ferry-replicator/ferry/services/writer/internal/app"
	"github.com/ferry-replicator/ferry/services/writer/internal/config"
)

// Options describe the writer.
type Options struct {
	// ID names the writer.
	ID string
	// Target are the target cluster's bootstrap servers (a kfake
	// cluster's ListenAddrs).
	Target []string
	// CertDir holds devcerts.WriteDir's files: the writer serves with
	// writer.pem, admits fetcher.pem's identity to Replicate and signs its
	// checkpoints and control records.
	CertDir string
	// ControlIDs are control.allowed_ids.
	ControlIDs []string
	// Links are the link names served, each with naming prefix "<link>."
	// and exactly-once delivery.
	Links []string
	// MaxMessageBytes, when not 0, is producer.max_message_bytes (and
	// producer.merge_below is 0): a record above it is refused for good,
	// and its partition stopped.
	MaxMessageBytes int
}

// Writer is a running writer.
type Writer struct {
	// Addr is its gRPC host:port.
	Addr string
	// Admin is its admin host:port (/metrics, /readyz, /status).
	Admin string
	// Registry holds its metrics, also those no event has created a
	// series of yet.
	Registry *prometheus.Registry
}

// Start runs the writer until the test ends and returns once its gRPC
// port reports SERVING.
func Start(t testing.TB, o Options) *Writer {
	t.Helper()
	cfg := config.Defaults()
	cfg.ID = o.ID
	cfg.Listen, cfg.Admin.Listen = freeAddr(t), freeAddr(t)
	cfg.Target.BootstrapServers = o.Target
	cfg.TLS.CertFile, cfg.TLS.KeyFile = filepath.Join(o.CertDir, "writer.pem"), filepath.Join(o.CertDir, "writer-key.pem")
	cfg.TLS.CAFile = filepath.Join(o.CertDir, "ca.pem")
	cfg.TLS.AllowedIDs = []string{devcerts.SPIFFEID(devcerts.DefaultTrustDomain, "fetcher")}
	cfg.Control.AllowedIDs = o.ControlIDs
	cfg.Producer.TransactionTimeout = config.MinTransactionTimeout(cfg.Producer.Timeout)
	if o.MaxMessageBytes != 0 {
		cfg.Producer.MaxMessageBytes, cfg.Producer.MergeBelow = ferryconfig.ByteSize(o.MaxMessageBytes), 0
	}
	for _, name := range o.Links {
		cfg.Links = append(cfg.Links, config.Link{Name: name, Naming: "prefix", Prefix: name + "."})
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
			t.Errorf("writer %s: %v", o.ID, err)
		}
	})
	waitServing(t, cfg, done)
	return &Writer{Addr: cfg.Listen, Admin: cfg.Admin.Listen, Registry: reg}
}

// waitServing polls the writer's gRPC health service, as a fetcher's
// certificate, until it answers SERVING.
func waitServing(t testing.TB, cfg config.Config, done chan error) {
	t.Helper()
	src, err := tlsconfig.NewSource(tlsconfig.Config{
		CertFile: filepath.Join(filepath.Dir(cfg.TLS.CertFile), "fetcher.pem"), KeyFile: filepath.Join(filepath.Dir(cfg.TLS.CertFile), "fetcher-key.pem"),
		CAFile: cfg.TLS.CAFile, AllowedIDs: []string{devcerts.SPIFFEID(devcerts.DefaultTrustDomain, "writer")},
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(cfg.Listen, grpc.WithTransportCredentials(credentials.NewTLS(src.ClientTLS())))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		select {
		case err := <-done:
			done <- nil // for the cleanup, which waits for the end
			t.Fatalf("writer %s ended while starting: %v", cfg.ID, err)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, with a deadline
	}
	t.Fatalf("writer %s not serving within 60s", cfg.ID)
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
