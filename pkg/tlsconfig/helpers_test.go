package tlsconfig

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	fetcherID  = "spiffe://ferry.local/ferry/fetcher"
	writerID   = "spiffe://ferry.local/ferry/writer"
	intruderID = "spiffe://ferry.local/ferry/intruder"
)

func newCA(t *testing.T, name string) *devcerts.CA {
	t.Helper()
	ca, err := devcerts.NewCA(name, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// issue signs a leaf with id as URI SAN (or DNS SAN without "://").
func issue(t *testing.T, ca *devcerts.CA, id string, notBefore, notAfter time.Time) *devcerts.Leaf {
	t.Helper()
	o := devcerts.LeafOptions{CommonName: id, NotBefore: notBefore, NotAfter: notAfter}
	if strings.Contains(id, "://") {
		o.URIs = []string{id}
	} else {
		o.DNSNames = []string{id}
	}
	leaf, err := ca.Issue(o)
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

func valid(t *testing.T, ca *devcerts.CA, id string) *devcerts.Leaf {
	return issue(t, ca, id, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
}

// side is one process's files in its own folder.
type side struct {
	t   *testing.T
	dir string
	cfg Config
}

func newSide(t *testing.T, leaf *devcerts.Leaf, allowed []string, cas ...*devcerts.CA) *side {
	t.Helper()
	dir := t.TempDir()
	s := &side{t: t, dir: dir}
	s.cfg = Defaults()
	s.cfg.CertFile = filepath.Join(dir, "cert.pem")
	s.cfg.KeyFile = filepath.Join(dir, "key.pem")
	s.cfg.CAFile = filepath.Join(dir, "ca.pem")
	s.cfg.AllowedIDs = allowed
	s.writeLeaf(leaf)
	s.writeCAs(cas...)
	return s
}

func (s *side) writeLeaf(leaf *devcerts.Leaf) {
	s.t.Helper()
	// Key first: a poll between the two writes sees a mismatched pair and
	// keeps the old material, as it would in production.
	s.write(s.cfg.KeyFile, leaf.KeyPEM)
	s.write(s.cfg.CertFile, leaf.CertPEM)
}

func (s *side) writeCAs(cas ...*devcerts.CA) {
	s.t.Helper()
	var bundle []byte
	for _, ca := range cas {
		bundle = append(bundle, ca.CertPEM...)
	}
	s.write(s.cfg.CAFile, bundle)
}

func (s *side) write(path string, data []byte) {
	s.t.Helper()
	if err := devcerts.WriteFileAtomic(path, data, 0o600); err != nil {
		s.t.Fatal(err)
	}
}

func (s *side) source(log *slog.Logger) *Source {
	s.t.Helper()
	src, err := NewSource(s.cfg, log)
	if err != nil {
		s.t.Fatal(err)
	}
	return src
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// syncBuffer is a log sink safe to read while handshakes write to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// server is a TLS echo server on loopback; the result of each handshake
// arrives on handshakes.
type server struct {
	ln         net.Listener
	handshakes chan error
	wg         sync.WaitGroup
	mu         sync.Mutex
	conns      []net.Conn
}

func startServer(t *testing.T, cfg *tls.Config) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{ln: ln, handshakes: make(chan error, 100)}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			raw, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, raw)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer raw.Close()
				conn := tls.Server(raw, cfg)
				raw.SetDeadline(time.Now().Add(10 * time.Second))
				err := conn.Handshake()
				s.handshakes <- err
				if err != nil {
					return
				}
				raw.SetDeadline(time.Time{})
				io.Copy(conn, conn) // echo until the client closes
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *server) addr() string { return s.ln.Addr().String() }

// result returns the outcome of the next server-side handshake.
func (s *server) result(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.handshakes:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("no server handshake")
		return nil
	}
}

// dial connects, handshakes and echoes a byte, so a rejection by the server
// (which TLS 1.3 reports after the client's handshake returns) surfaces.
func dial(t *testing.T, addr string, cfg *tls.Config) (*tls.Conn, error) {
	t.Helper()
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conn := tls.Client(raw, cfg)
	raw.SetDeadline(time.Now().Add(10 * time.Second))
	if err := conn.Handshake(); err != nil {
		raw.Close()
		return nil, err
	}
	if err := ping(conn); err != nil {
		raw.Close()
		return nil, err
	}
	raw.SetDeadline(time.Time{})
	t.Cleanup(func() { conn.Close() })
	return conn, nil
}

func ping(conn *tls.Conn) error {
	if _, err := conn.Write([]byte{'x'}); err != nil {
		return err
	}
	b := make([]byte, 1)
	if _, err := io.ReadFull(conn, b); err != nil {
		return err
	}
	if b[0] != 'x' {
		return errors.New("echo mismatch")
	}
	return nil
}
