package tlsconfig

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Source holds the current certificate, key and CA pool, and replaces them
// when the files change. Handshakes read the current material without
// locking; a failed reload keeps the previous material.
type Source struct {
	cfg Config
	log *slog.Logger
	// trust holds allowed_ids.
	trust

	cur atomic.Pointer[material]

	// reloadMu serialises reloads, so a slow load cannot overwrite the
	// result of a later one.
	reloadMu sync.Mutex
	lastErr  error // guarded by reloadMu
	// reloadErrors counts failed reloads, for metrics.
	reloadErrors atomic.Uint64

	denials denialLog
	// signers caches the signer chains Verify has checked.
	signers signerCache
}

// material is one consistent set of files, never modified once stored.
type material struct {
	cert     *tls.Certificate // Leaf is set
	pool     *x509.CertPool
	caCerts  int
	stamp    stamp
	loadedAt time.Time
}

// stamp identifies the content of the three files cheaply. Kubernetes
// updates a mounted Secret by swapping a symlink; os.Stat follows it, so the
// swap shows as a new modification time.
type stamp [3]struct {
	mod  time.Time
	size int64
}

// fileError ties a load error to the setting naming the file.
type fileError struct {
	key string
	err error
}

func (e *fileError) Error() string { return e.err.Error() }
func (e *fileError) Unwrap() error { return e.err }

// NewSource loads the files named by cfg. log receives reloads and denials.
func NewSource(cfg Config, log *slog.Logger) (*Source, error) {
	if cfg.Insecure {
		return nil, errors.New("tls is off (insecure): there is no material to load")
	}
	if len(cfg.AllowedIDs) == 0 {
		return nil, errors.New("allowed_ids is empty: no peer could connect")
	}
	s := &Source{cfg: cfg, log: log, trust: newTrust(cfg.AllowedIDs)}
	m, err := load(cfg)
	if err != nil {
		return nil, err
	}
	s.cur.Store(m)
	s.logLoaded("start", m)
	return s, nil
}

// Reload re-reads the files now, changed or not (the service calls it on
// SIGHUP). On failure the previous material stays in use; the error is
// logged and returned.
func (s *Source) Reload() error {
	return s.reload("reload")
}

// Run checks the files every reload_interval and reloads when one changed,
// or when the last reload failed, until ctx ends. The caller runs it in a
// goroutine it owns. With a non-positive interval it only waits for ctx.
func (s *Source) Run(ctx context.Context) {
	if s.cfg.ReloadInterval <= 0 {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(s.cfg.ReloadInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.poll()
		}
	}
}

func (s *Source) poll() {
	st, err := statFiles(s.cfg)
	s.reloadMu.Lock()
	unchanged := err == nil && st == s.cur.Load().stamp && s.lastErr == nil
	s.reloadMu.Unlock()
	if unchanged {
		return
	}
	// A failed reload is retried on every poll: the failure may be a file
	// caught half-replaced, and a stale certificate is an outage in waiting,
	// worth a log line every interval.
	_ = s.reload("file change")
}

func (s *Source) reload(trigger string) error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	m, err := load(s.cfg)
	s.lastErr = err
	if err != nil {
		s.reloadErrors.Add(1)
		old := s.cur.Load()
		s.log.Error("tls reload failed, keeping the previous certificate",
			"trigger", trigger, "err", err,
			"current_not_after", old.cert.Leaf.NotAfter.UTC())
		return err
	}
	s.cur.Store(m)
	s.logLoaded(trigger, m)
	return nil
}

func (s *Source) logLoaded(trigger string, m *material) {
	s.log.Info("tls certificate loaded", "trigger", trigger,
		"identities", identities(m.cert.Leaf),
		"serial", m.cert.Leaf.SerialNumber.Text(16),
		"not_after", m.cert.Leaf.NotAfter.UTC(),
		"ca_certs", m.caCerts)
}

// Status describes the material in use, for a status page or metrics.
type Status struct {
	// Identities are this process's own SPIFFE IDs and DNS names.
	Identities []string
	// Serial is the certificate's serial number in hex.
	Serial string
	// NotAfter is when the certificate expires.
	NotAfter time.Time
	// LoadedAt is when the material in use was read.
	LoadedAt time.Time
	// CACerts counts the CA certificates trusted.
	CACerts int
	// LastReloadError is the error of the latest reload, empty once one
	// succeeds.
	LastReloadError string
	// Denials counts peers refused since start.
	Denials uint64
}

// Status returns the current material's description.
func (s *Source) Status() Status {
	m := s.cur.Load()
	st := Status{
		Identities: identities(m.cert.Leaf),
		Serial:     m.cert.Leaf.SerialNumber.Text(16),
		NotAfter:   m.cert.Leaf.NotAfter,
		LoadedAt:   m.loadedAt,
		CACerts:    m.caCerts,
		Denials:    s.denials.total.Load(),
	}
	s.reloadMu.Lock()
	if s.lastErr != nil {
		st.LastReloadError = s.lastErr.Error()
	}
	s.reloadMu.Unlock()
	return st
}

// MaxConnectionAge is the configured maximum connection age, for the
// server's gRPC keepalive parameters.
func (s *Source) MaxConnectionAge() time.Duration { return s.cfg.MaxConnectionAge }

func load(cfg Config) (*material, error) {
	// Stat before reading: a file changed after this point shows as a new
	// stamp at the next poll, so no change is missed.
	st, err := statFiles(cfg)
	if err != nil {
		return nil, err
	}
	cert, err := loadKeyPair(cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return nil, err
	}
	if time.Now().After(cert.Leaf.NotAfter) {
		return nil, &fileError{"cert_file", fmt.Errorf("load cert %s: expired at %s",
			cfg.CertFile, cert.Leaf.NotAfter.UTC().Format(time.RFC3339))}
	}
	pool, n, err := loadPool(cfg.CAFile)
	if err != nil {
		return nil, err
	}
	return &material{cert: cert, pool: pool, caCerts: n, stamp: st, loadedAt: time.Now()}, nil
}

func statFiles(cfg Config) (stamp, error) {
	var st stamp
	for i, f := range [...]struct{ key, path string }{
		{"cert_file", cfg.CertFile}, {"key_file", cfg.KeyFile}, {"ca_file", cfg.CAFile},
	} {
		fi, err := os.Stat(f.path)
		if err != nil {
			return st, &fileError{f.key, fmt.Errorf("stat %s: %w", f.path, err)}
		}
		st[i].mod, st[i].size = fi.ModTime(), fi.Size()
	}
	return st, nil
}

// loadKeyPair reads a certificate chain and its key. Errors name the files,
// never their content.
func loadKeyPair(certFile, keyFile string) (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, &fileError{"cert_file", fmt.Errorf("read cert %s: %w", certFile, err)}
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, &fileError{"key_file", fmt.Errorf("read key %s: %w", keyFile, err)}
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, &fileError{"cert_file", fmt.Errorf("load cert %s with key %s: %w", certFile, keyFile, err)}
	}
	if cert.Leaf == nil { // set by X509KeyPair since Go 1.23 unless GODEBUG x509keypairleaf=0
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, &fileError{"cert_file", fmt.Errorf("parse cert %s: %w", certFile, err)}
		}
	}
	return &cert, nil
}

// loadPool reads a PEM bundle of CA certificates. Unlike
// CertPool.AppendCertsFromPEM it refuses a bundle with a broken
// certificate instead of skipping it.
func loadPool(path string) (*x509.CertPool, int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, &fileError{"ca_file", fmt.Errorf("read CA bundle %s: %w", path, err)}
	}
	pool := x509.NewCertPool()
	n := 0
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, 0, &fileError{"ca_file", fmt.Errorf("parse CA bundle %s, certificate %d: %w", path, n+1, err)}
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, 0, &fileError{"ca_file", fmt.Errorf("CA bundle %s holds no PEM certificate", path)}
	}
	return pool, n, nil
}
