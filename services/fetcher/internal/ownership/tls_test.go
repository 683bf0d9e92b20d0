package ownership

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-replicator/ferry/loadtest/consulagent"
	"github.com/ferry-replicator/ferry/pkg/consulclient"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
)

// consulTLS is a throwaway CA and the certificates of an HTTPS-only Consul
// agent and of a client, as files.
type consulTLS struct {
	ca, agentCert, agentKey, clientCert, clientKey string
}

func writeConsulTLS(t *testing.T) consulTLS {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	ca, err := devcerts.NewCA("consul test CA", now.Add(-time.Minute), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	issue := func(name string, o devcerts.LeafOptions) (string, string) {
		o.NotBefore, o.NotAfter = now.Add(-time.Minute), now.Add(time.Hour)
		leaf, err := ca.Issue(o)
		if err != nil {
			t.Fatal(err)
		}
		cert, key := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		for path, b := range map[string][]byte{cert: leaf.CertPEM, key: leaf.KeyPEM} {
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return cert, key
	}
	files := consulTLS{ca: filepath.Join(dir, "ca.pem")}
	if err := os.WriteFile(files.ca, ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	files.agentCert, files.agentKey = issue("agent", devcerts.LeafOptions{
		CommonName: "server.dc1.consul", DNSNames: []string{"server.dc1.consul", "localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
	})
	files.clientCert, files.clientKey = issue("client", devcerts.LeafOptions{CommonName: "ferry-fetcher"})
	return files
}

// startTLSAgent runs a Consul agent whose HTTP API is HTTPS only and
// demands a client certificate.
func startTLSAgent(t *testing.T, files consulTLS, hcl ...string) *consulagent.Agent {
	t.Helper()
	agent, err := consulagent.Start(context.Background(), consulagent.Options{
		TLS: &consulagent.TLSFiles{CAFile: files.ca, CertFile: files.agentCert, KeyFile: files.agentKey},
		HCL: hcl,
	})
	if err != nil {
		t.Fatalf("start Consul (make consul builds it): %v", err)
	}
	t.Cleanup(func() { _ = agent.Stop() })
	return agent
}

// syncBuffer keeps the backend's log for the failure message.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runForLease runs a backend for cfg, waits for it to hold shard 0, and
// returns what it logged.
func runForLease(t *testing.T, cfg ConsulConfig) string {
	t.Helper()
	var logs syncBuffer
	c, err := NewConsul(cfg, "l", "f", NewMetrics(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatalf("NewConsul: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, ok, err := c.Acquire(ctx, 0)
		if err != nil {
			t.Fatalf("acquire: %v\nlog:\n%s", err, logs.String())
		}
		if ok {
			return logs.String()
		}
		if time.Now().After(deadline) {
			t.Fatalf("no lease within 10s from an HTTPS Consul\nlog:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond) // the session is being created
	}
}

// The lease client honours Consul's own TLS environment variables, as the
// catalog and registration clients do: an HTTPS-only agent that demands a
// client certificate is reached with CONSUL_CACERT and the client pair.
func TestLeasesOverTLSFromConsulEnvironment(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Consul agent")
	}
	files := writeConsulTLS(t)
	agent := startTLSAgent(t, files)
	t.Setenv("CONSUL_HTTP_SSL", "true")
	t.Setenv("CONSUL_CACERT", files.ca)
	t.Setenv("CONSUL_CLIENT_CERT", files.clientCert)
	t.Setenv("CONSUL_CLIENT_KEY", files.clientKey)
	cfg := DefaultConsulConfig()
	cfg.Address = agent.HTTPAddr()
	runForLease(t, cfg)
}

// The lease settings alone reach an HTTPS-only agent that enforces ACLs:
// the CA, the client pair and the token come from files named in the
// configuration (no CONSUL_* variable), and the token is needed.
func TestLeasesOverTLSWithTokenFromSettings(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Consul agent")
	}
	const token = "5b2e0f7c-7d0c-4f0e-9a55-2f6f3f1d6a11"
	files := writeConsulTLS(t)
	agent := startTLSAgent(t, files,
		`acl { enabled = true default_policy = "deny" tokens { initial_management = "`+token+`" } }`)
	for _, v := range []string{"CONSUL_HTTP_SSL", "CONSUL_CACERT", "CONSUL_CLIENT_CERT", "CONSUL_CLIENT_KEY", "CONSUL_HTTP_TOKEN", "CONSUL_HTTP_TOKEN_FILE"} {
		t.Setenv(v, "")
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConsulConfig()
	cfg.Address = agent.HTTPAddr()
	cfg.CAFile, cfg.CertFile, cfg.KeyFile = files.ca, files.clientCert, files.clientKey

	// Without the token the agent refuses a session: the ACLs are on.
	anon, err := consulclient.New(cfg.Config, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if _, _, err := anon.Session().Create(&api.SessionEntry{TTL: "10s"}, nil); err == nil || !strings.Contains(err.Error(), "Permission denied") {
		t.Fatalf("session without a token: err %v, want Permission denied", err)
	}

	cfg.TokenFile = tokenFile
	if logs := runForLease(t, cfg); strings.Contains(logs, token) {
		t.Errorf("the token is in the log:\n%s", logs)
	}
}
