package tlsconfig

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/ferry-replicator/ferry/pkg/config"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
)

// pair is a writer (server) and a fetcher (client) trusting one CA and
// admitting each other.
type pair struct {
	ca               *devcerts.CA
	writer, fetcher  *side
	wsrc, fsrc       *Source
	srv              *server
	writerLeafSerial string
}

func newPair(t *testing.T) *pair {
	t.Helper()
	p := &pair{ca: newCA(t, "ca1")}
	wleaf := valid(t, p.ca, writerID)
	p.writerLeafSerial = wleaf.Cert.SerialNumber.Text(16)
	p.writer = newSide(t, wleaf, []string{fetcherID}, p.ca)
	p.fetcher = newSide(t, valid(t, p.ca, fetcherID), []string{writerID}, p.ca)
	p.wsrc = p.writer.source(discard())
	p.fsrc = p.fetcher.source(discard())
	p.srv = startServer(t, p.wsrc.ServerTLS())
	return p
}

func TestMutualTLS(t *testing.T) {
	p := newPair(t)
	conn, err := dial(t, p.srv.addr(), p.fsrc.ClientTLS())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	if err := p.srv.result(t); err != nil {
		t.Fatalf("server handshake: %v", err)
	}
	st := conn.ConnectionState()
	if st.Version != tls.VersionTLS13 {
		t.Errorf("version %x, want TLS 1.3", st.Version)
	}
	if got := identities(st.PeerCertificates[0]); len(got) != 1 || got[0] != writerID {
		t.Errorf("server identities %v, want %s", got, writerID)
	}
	if s := p.wsrc.Status(); s.Identities[0] != writerID || s.CACerts != 1 || s.Denials != 0 || s.LastReloadError != "" {
		t.Errorf("status %+v", s)
	}
}

func TestClientWithoutCertificateRejected(t *testing.T) {
	p := newPair(t)
	cc := p.fsrc.ClientTLS()
	cc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return &tls.Certificate{}, nil // sends an empty certificate message
	}
	if _, err := dial(t, p.srv.addr(), cc); err == nil {
		t.Fatal("client without certificate admitted")
	}
	if err := p.srv.result(t); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("server: %v, want a missing-certificate error", err)
	}
}

func TestOtherCARejectedByServer(t *testing.T) {
	p := newPair(t)
	other := newCA(t, "other")
	// The intruder trusts the real CA and claims the fetcher's identity,
	// but its certificate comes from another CA.
	intruder := newSide(t, valid(t, other, fetcherID), []string{writerID}, p.ca).source(discard())
	if _, err := dial(t, p.srv.addr(), intruder.ClientTLS()); err == nil {
		t.Fatal("client from another CA admitted")
	}
	err := p.srv.result(t)
	if err == nil || !strings.Contains(err.Error(), "not trusted") || !strings.Contains(err.Error(), fetcherID) {
		t.Fatalf("server: %v, want an untrusted-chain error naming %s", err, fetcherID)
	}
	if p.wsrc.Status().Denials != 1 {
		t.Errorf("denials %d, want 1", p.wsrc.Status().Denials)
	}
}

func TestOtherCARejectedByClient(t *testing.T) {
	p := newPair(t)
	other := newCA(t, "other")
	// A server from another CA that trusts the fetchers' CA and presents
	// the writer's identity.
	fake := newSide(t, valid(t, other, writerID), []string{fetcherID}, p.ca).source(discard())
	srv := startServer(t, fake.ServerTLS())
	_, err := dial(t, srv.addr(), p.fsrc.ClientTLS())
	if err == nil || !strings.Contains(err.Error(), "not trusted") || !strings.Contains(err.Error(), writerID) {
		t.Fatalf("client: %v, want an untrusted-chain error naming %s", err, writerID)
	}
}

func TestValidityWindow(t *testing.T) {
	now := time.Now()
	cases := map[string][2]time.Time{
		"expired":       {now.Add(-2 * time.Hour), now.Add(-time.Hour)},
		"not yet valid": {now.Add(time.Hour), now.Add(2 * time.Hour)},
	}
	for name, window := range cases {
		t.Run(name+" client", func(t *testing.T) {
			p := newPair(t)
			leaf := issue(t, p.ca, fetcherID, window[0], window[1])
			cert, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
			if err != nil {
				t.Fatal(err)
			}
			cc := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true, Certificates: []tls.Certificate{cert}}
			if _, err := dial(t, p.srv.addr(), cc); err == nil {
				t.Fatal("admitted")
			}
			if err := p.srv.result(t); err == nil || !strings.Contains(err.Error(), "expired or is not yet valid") {
				t.Fatalf("server: %v", err)
			}
		})
		t.Run(name+" server", func(t *testing.T) {
			p := newPair(t)
			leaf := issue(t, p.ca, writerID, window[0], window[1])
			cert, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
			if err != nil {
				t.Fatal(err)
			}
			srv := startServer(t, &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAnyClientCert})
			_, err = dial(t, srv.addr(), p.fsrc.ClientTLS())
			if err == nil || !strings.Contains(err.Error(), "expired or is not yet valid") {
				t.Fatalf("client: %v", err)
			}
		})
	}
}

func TestWrongIdentityRejectedByServer(t *testing.T) {
	p := newPair(t)
	intruder := newSide(t, valid(t, p.ca, intruderID), []string{writerID}, p.ca).source(discard())
	if _, err := dial(t, p.srv.addr(), intruder.ClientTLS()); err == nil {
		t.Fatal("client with a wrong identity admitted")
	}
	err := p.srv.result(t)
	if err == nil || !strings.Contains(err.Error(), intruderID) || !strings.Contains(err.Error(), "not in allowed_ids") {
		t.Fatalf("server: %v, want a denial naming %s", err, intruderID)
	}
}

func TestWrongIdentityRejectedByClient(t *testing.T) {
	p := newPair(t)
	// Another fetcher (same CA, valid certificate) posing as a writer.
	impostor := newSide(t, valid(t, p.ca, fetcherID), []string{fetcherID}, p.ca).source(discard())
	srv := startServer(t, impostor.ServerTLS())
	_, err := dial(t, srv.addr(), p.fsrc.ClientTLS())
	if err == nil || !strings.Contains(err.Error(), fetcherID) || !strings.Contains(err.Error(), "not in allowed_ids") {
		t.Fatalf("client: %v, want a denial naming %s", err, fetcherID)
	}
}

func TestDNSIdentity(t *testing.T) {
	ca := newCA(t, "ca")
	w := newSide(t, valid(t, ca, "writer.ferry.internal"), []string{"Fetcher.Ferry.Internal"}, ca).source(discard())
	f := newSide(t, valid(t, ca, "fetcher.ferry.internal"), []string{"writer.ferry.internal"}, ca).source(discard())
	srv := startServer(t, w.ServerTLS())
	if _, err := dial(t, srv.addr(), f.ClientTLS()); err != nil {
		t.Fatalf("dial: %v", err)
	}
	if err := srv.result(t); err != nil {
		t.Fatalf("server: %v", err)
	}
}

func TestTLS12Rejected(t *testing.T) {
	p := newPair(t)
	cc := p.fsrc.ClientTLS()
	cc.MinVersion, cc.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	if _, err := dial(t, p.srv.addr(), cc); err == nil {
		t.Fatal("TLS 1.2 client admitted")
	}
	if err := p.srv.result(t); err == nil || !strings.Contains(err.Error(), "version") {
		t.Fatalf("server: %v, want a protocol version error", err)
	}
}

// TestRotationWithReload walks a full CA rotation with explicit reloads:
// bundle old+new on both sides, new certificates, then the old CA dropped.
func TestRotationWithReload(t *testing.T) {
	p := newPair(t)
	old, err := dial(t, p.srv.addr(), p.fsrc.ClientTLS())
	if err != nil {
		t.Fatal(err)
	}
	p.srv.result(t)

	ca2 := newCA(t, "ca2")
	// 1. Both sides trust old and new CA.
	p.writer.writeCAs(p.ca, ca2)
	p.fetcher.writeCAs(p.ca, ca2)
	reload(t, p.wsrc, p.fsrc)
	if got := p.wsrc.Status().CACerts; got != 2 {
		t.Fatalf("CA certs %d, want 2", got)
	}
	// 2. The writer gets a certificate from the new CA; the fetcher, still
	// on the old CA, connects during the overlap.
	wleaf2 := valid(t, ca2, writerID)
	p.writer.writeLeaf(wleaf2)
	reload(t, p.wsrc)
	conn := mustDial(t, p.srv, p.fsrc.ClientTLS())
	if got := conn.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(wleaf2.Cert.SerialNumber) != 0 {
		t.Fatalf("server presented serial %x, want the new %x", got, wleaf2.Cert.SerialNumber)
	}
	// The connection opened before the rotation still works.
	if err := ping(old); err != nil {
		t.Fatalf("old connection after rotation: %v", err)
	}
	// 3. The fetcher moves to the new CA too, then both drop the old CA.
	p.fetcher.writeLeaf(valid(t, ca2, fetcherID))
	reload(t, p.fsrc)
	mustDial(t, p.srv, p.fsrc.ClientTLS())
	p.writer.writeCAs(ca2)
	p.fetcher.writeCAs(ca2)
	reload(t, p.wsrc, p.fsrc)
	mustDial(t, p.srv, p.fsrc.ClientTLS())
	// A client still holding an old-CA certificate is now refused.
	straggler := newSide(t, valid(t, p.ca, fetcherID), []string{writerID}, p.ca, ca2).source(discard())
	if _, err := dial(t, p.srv.addr(), straggler.ClientTLS()); err == nil {
		t.Fatal("old-CA client admitted after the old CA was dropped")
	}
	if err := p.srv.result(t); err == nil || !strings.Contains(err.Error(), "not trusted") {
		t.Fatalf("server: %v", err)
	}
	if err := ping(old); err != nil {
		t.Fatalf("old connection after the CA was dropped: %v", err)
	}
}

func TestRotationByPolling(t *testing.T) {
	p := newPair(t)
	// A fast interval for the test; Run stops with the context.
	p.writer.cfg.ReloadInterval = 20 * time.Millisecond
	wsrc := p.writer.source(discard())
	srv := startServer(t, wsrc.ServerTLS())
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); wsrc.Run(ctx) }()
	defer func() { cancel(); wg.Wait() }()

	leaf := valid(t, p.ca, writerID)
	p.writer.writeLeaf(leaf)
	deadline := time.Now().Add(10 * time.Second)
	for wsrc.Status().Serial != leaf.Cert.SerialNumber.Text(16) {
		if time.Now().After(deadline) {
			t.Fatal("polling did not pick up the new certificate")
		}
		time.Sleep(10 * time.Millisecond)
	}
	conn := mustDial(t, srv, p.fsrc.ClientTLS())
	if got := conn.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(leaf.Cert.SerialNumber) != 0 {
		t.Fatalf("server presented serial %x, want %x", got, leaf.Cert.SerialNumber)
	}
}

func TestFailedReloadKeepsMaterial(t *testing.T) {
	p := newPair(t)
	var logs syncBuffer
	p.writer.cfg.ReloadInterval = 20 * time.Millisecond
	wsrc := p.writer.source(slog.New(slog.NewTextHandler(&logs, nil)))
	srv := startServer(t, wsrc.ServerTLS())

	p.writer.write(p.writer.cfg.CertFile, []byte("not a certificate"))
	err := wsrc.Reload()
	if err == nil || !strings.Contains(err.Error(), p.writer.cfg.CertFile) {
		t.Fatalf("reload: %v, want an error naming the cert file", err)
	}
	if got := wsrc.Status(); got.Serial != p.writerLeafSerial || got.LastReloadError == "" {
		t.Fatalf("status after a failed reload: %+v", got)
	}
	if !strings.Contains(logs.String(), "tls reload failed") {
		t.Errorf("failure not logged: %s", logs.String())
	}
	conn := mustDial(t, srv, p.fsrc.ClientTLS())
	if got := conn.ConnectionState().PeerCertificates[0].SerialNumber.Text(16); got != p.writerLeafSerial {
		t.Fatalf("served %s after a failed reload, want the old %s", got, p.writerLeafSerial)
	}

	// Polling retries and recovers once the files are good again.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); wsrc.Run(ctx) }()
	defer func() { cancel(); wg.Wait() }()
	leaf := valid(t, p.ca, writerID)
	p.writer.writeLeaf(leaf)
	deadline := time.Now().Add(10 * time.Second)
	for st := wsrc.Status(); st.Serial != leaf.Cert.SerialNumber.Text(16) || st.LastReloadError != ""; st = wsrc.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("no recovery: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestExpiredCertificateNotLoaded(t *testing.T) {
	p := newPair(t)
	p.writer.writeLeaf(issue(t, p.ca, writerID, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)))
	if err := p.wsrc.Reload(); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("reload: %v, want expired", err)
	}
	if p.wsrc.Status().Serial != p.writerLeafSerial {
		t.Fatal("expired certificate replaced a valid one")
	}
}

func TestDenialsLoggedAndRateLimited(t *testing.T) {
	p := newPair(t)
	var logs syncBuffer
	wsrc := p.writer.source(slog.New(slog.NewTextHandler(&logs, nil)))
	wsrc.denials.every = time.Hour // not a second: a slow machine must not log twice
	srv := startServer(t, wsrc.ServerTLS())
	intruder := newSide(t, valid(t, p.ca, intruderID), []string{writerID}, p.ca).source(discard())
	for range 3 {
		dial(t, srv.addr(), intruder.ClientTLS())
		srv.result(t)
	}
	out := logs.String()
	if n := strings.Count(out, "tls client denied"); n != 1 {
		t.Errorf("%d denial lines within the interval, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, intruderID) || !strings.Contains(out, "remote=127.0.0.1:") {
		t.Errorf("denial line lacks the identity or the remote address:\n%s", out)
	}
	if got := wsrc.Status().Denials; got != 3 {
		t.Errorf("denials %d, want 3", got)
	}
}

func TestGRPC(t *testing.T) {
	p := newPair(t)
	ids := make(chan string, 1)
	gs := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(p.wsrc.ServerTLS())),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: p.wsrc.MaxConnectionAge()}),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			ids <- PeerIdentity(ctx)
			return h(ctx, req)
		}),
	)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); gs.Serve(lis) }()
	defer func() { gs.Stop(); wg.Wait() }()

	call := func(cfg *tls.Config) error {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	if err := call(p.fsrc.ClientTLS()); err != nil {
		t.Fatalf("check: %v", err)
	}
	if got := <-ids; got != fetcherID {
		t.Errorf("PeerIdentity %q, want %q", got, fetcherID)
	}
	intruder := newSide(t, valid(t, p.ca, intruderID), []string{writerID}, p.ca).source(discard())
	err = call(intruder.ClientTLS())
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("intruder: %v, want Unavailable", err)
	}
	if PeerIdentity(context.Background()) != "" {
		t.Error("identity without a peer")
	}
}

func TestValidate(t *testing.T) {
	ca := newCA(t, "ca")
	good := newSide(t, valid(t, ca, writerID), []string{fetcherID}, ca)
	expired := newSide(t, issue(t, ca, writerID, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)), []string{fetcherID}, ca)
	mismatch := newSide(t, valid(t, ca, writerID), []string{fetcherID}, ca)
	mismatch.write(mismatch.cfg.KeyFile, valid(t, ca, writerID).KeyPEM)
	garbageCA := newSide(t, valid(t, ca, writerID), []string{fetcherID}, ca)
	garbageCA.write(garbageCA.cfg.CAFile, []byte("junk"))

	with := func(c Config, f func(*Config)) Config { f(&c); return c }
	cases := []struct {
		name string
		cfg  Config
		addr string
		want []string // substrings of problems, in order; none for a valid config
	}{
		{"valid", good.cfg, "0.0.0.0:7400", nil},
		{"insecure loopback v4", Config{Insecure: true}, "127.0.0.1:7400", nil},
		{"insecure loopback v6", Config{Insecure: true}, "[::1]:7400", nil},
		{"insecure localhost", Config{Insecure: true}, "localhost:7400", nil},
		{"insecure all interfaces", Config{Insecure: true}, ":7400", []string{"srv.tls.insecure: plaintext"}},
		{"insecure remote", Config{Insecure: true}, "writer.example:7400", []string{"srv.tls.insecure: plaintext"}},
		{"nothing set", Defaults(), "0.0.0.0:7400", []string{
			"srv.tls.cert_file: required", "srv.tls.key_file: required", "srv.tls.ca_file: required", "srv.tls.allowed_ids: required"}},
		{"missing files", with(good.cfg, func(c *Config) { c.CertFile, c.CAFile = "/nonexistent/c.pem", "/nonexistent/ca.pem" }), "", []string{
			"srv.tls.cert_file: read cert /nonexistent/c.pem", "srv.tls.ca_file: read CA bundle /nonexistent/ca.pem"}},
		{"missing key", with(good.cfg, func(c *Config) { c.KeyFile = "/nonexistent/k.pem" }), "", []string{"srv.tls.key_file: read key /nonexistent/k.pem"}},
		{"key mismatch", mismatch.cfg, "", []string{"srv.tls.cert_file: load cert"}},
		{"expired", expired.cfg, "", []string{"srv.tls.cert_file: " + expired.cfg.CertFile + " expired at"}},
		{"bad CA", garbageCA.cfg, "", []string{"srv.tls.ca_file: CA bundle"}},
		{"bad ids", with(good.cfg, func(c *Config) {
			c.AllowedIDs = []string{"*.ferry.internal", "https://ferry/x", "spiffe://ferry.local/ferry/fetcher?x=1", "writer.ferry.internal"}
		}), "", []string{"srv.tls.allowed_ids: \"*.ferry", "srv.tls.allowed_ids: \"https", "srv.tls.allowed_ids: \"spiffe"}},
		{"durations", with(good.cfg, func(c *Config) { c.MaxConnectionAge, c.ReloadInterval = 0, -1 }), "", []string{
			"srv.tls.max_connection_age: must be positive", "srv.tls.reload_interval: must be positive"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var p config.Problems
			tc.cfg.Validate("srv.tls", tc.addr, &p)
			if len(p) != len(tc.want) {
				t.Fatalf("problems %q, want %d like %q", p, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(p[i], w) && !strings.Contains(p[i], w) {
					t.Errorf("problem %q, want %q", p[i], w)
				}
				if !strings.HasPrefix(p[i], "srv.tls.") {
					t.Errorf("problem %q does not name its key", p[i])
				}
			}
		})
	}
}

func TestNewSourceRefuses(t *testing.T) {
	if _, err := NewSource(Config{Insecure: true}, discard()); err == nil {
		t.Error("insecure config gave a source")
	}
	ca := newCA(t, "ca")
	s := newSide(t, valid(t, ca, writerID), nil, ca)
	if _, err := NewSource(s.cfg, discard()); err == nil {
		t.Error("empty allowed_ids gave a source")
	}
	s.cfg.AllowedIDs = []string{fetcherID}
	if err := os.Remove(s.cfg.CAFile); err != nil {
		t.Fatal(err)
	}
	if _, err := NewSource(s.cfg, discard()); err == nil || !strings.Contains(err.Error(), s.cfg.CAFile) {
		t.Errorf("missing CA: %v", err)
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:1": true, "127.0.0.2:1": true, "[::1]:1": true, "localhost:1": true, "LOCALHOST": true, "::1": true,
		":1": false, "0.0.0.0:1": false, "[::]:1": false, "10.0.0.1:1": false, "writer:1": false, "": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func mustDial(t *testing.T, srv *server, cfg *tls.Config) *tls.Conn {
	t.Helper()
	conn, err := dial(t, srv.addr(), cfg)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	if err := srv.result(t); err != nil {
		t.Fatalf("server handshake: %v", err)
	}
	return conn
}

func reload(t *testing.T, srcs ...*Source) {
	t.Helper()
	for _, s := range srcs {
		if err := s.Reload(); err != nil {
			t.Fatalf("reload: %v", err)
		}
	}
}

// An X.509 SVID names exactly one SPIFFE ID. A certificate naming an
// allowed fetcher ID and another one besides (a CA that signs whatever
// SANs it is asked for) is refused on both sides, not admitted on the
// first match.
func TestSeveralURISANsRefused(t *testing.T) {
	p := newPair(t)
	both, err := p.ca.Issue(devcerts.LeafOptions{
		CommonName: "both", URIs: []string{fetcherID, intruderID},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	double := newSide(t, both, []string{writerID}, p.ca).source(discard())
	if _, err := dial(t, p.srv.addr(), double.ClientTLS()); err == nil {
		t.Fatal("client with two URI SANs admitted")
	}
	if err := p.srv.result(t); err == nil || !strings.Contains(err.Error(), "exactly one URI SAN") {
		t.Fatalf("server: %v, want a denial for two URI SANs", err)
	}
	bothWriter, err := p.ca.Issue(devcerts.LeafOptions{
		CommonName: "both", URIs: []string{writerID, intruderID},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	impostor := newSide(t, bothWriter, []string{fetcherID}, p.ca).source(discard())
	srv := startServer(t, impostor.ServerTLS())
	if _, err := dial(t, srv.addr(), p.fsrc.ClientTLS()); err == nil || !strings.Contains(err.Error(), "exactly one URI SAN") {
		t.Fatalf("client: %v, want a denial for two URI SANs", err)
	}
}
