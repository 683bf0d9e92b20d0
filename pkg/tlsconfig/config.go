// Package tlsconfig gives Ferry's gRPC link between the tiers mutual TLS:
// the settings, a Source that keeps the certificate, key and CA bundle
// fresh from disk while the process runs, and the server and client
// tls.Configs built on it, which admit only peers whose certificate chains
// to the current CA bundle and names an allowed SPIFFE ID or DNS name.
//
// The service owns the wiring: it validates Config, creates a Source, runs
// Source.Run in a goroutine it stops at shutdown, calls Source.Reload on
// SIGHUP, and gives ServerTLS or ClientTLS to grpc's credentials.NewTLS.
package tlsconfig

import (
	"errors"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/ferry-replicator/ferry/pkg/config"
)

// Config is the TLS setting of one side of the fetcher-writer link.
type Config struct {
	// CertFile and KeyFile hold this process's certificate chain and
	// private key (PEM).
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// CAFile is the PEM bundle of CAs a peer's chain must end in. During a
	// CA rotation it holds the old and the new CA.
	CAFile string `yaml:"ca_file"`
	// AllowedIDs lists the identities a peer may present: SPIFFE IDs
	// (spiffe://ferry.example/ferry/fetcher), matched against URI SANs, or
	// DNS names, matched against DNS SANs. A peer must present one.
	AllowedIDs []string `yaml:"allowed_ids"`
	// Insecure turns TLS off. Allowed only with a loopback address, for
	// tests and single-machine demos.
	Insecure bool `yaml:"insecure"`
	// MaxConnectionAge is how long a server keeps a connection before
	// asking the client to reconnect (gRPC keepalive MaxConnectionAge), so
	// long-lived streams handshake again and pick up rotated certificates
	// and a shrunken allowed list.
	MaxConnectionAge time.Duration `yaml:"max_connection_age"`
	// ReloadInterval is how often the files are checked for changes.
	ReloadInterval time.Duration `yaml:"reload_interval"`
}

// Defaults returns the settings used when a file leaves them out.
func Defaults() Config {
	return Config{MaxConnectionAge: time.Hour, ReloadInterval: 10 * time.Second}
}

// Validate records every problem under the key prefix (server.tls,
// writers.tls). addr is the address this side listens on or dials; it
// matters only for insecure, which must stay on loopback. A client with
// several addresses validates once and checks the others with IsLoopback.
func (c Config) Validate(prefix, addr string, p *config.Problems) {
	if c.Insecure {
		if !IsLoopback(addr) {
			p.Addf(prefix+".insecure", "plaintext is allowed only on a loopback address, not %q", addr)
		}
		return
	}
	required := func(key, value string) bool {
		if value == "" {
			p.Addf(prefix+"."+key, "required (TLS is on unless insecure is set, on loopback only)")
			return false
		}
		return true
	}
	haveCert := required("cert_file", c.CertFile)
	haveKey := required("key_file", c.KeyFile)
	if haveCert && haveKey {
		if cert, err := loadKeyPair(c.CertFile, c.KeyFile); err != nil {
			p.Addf(prefix+"."+fileKey(err, "cert_file"), "%v", err)
		} else if now := time.Now(); now.After(cert.Leaf.NotAfter) {
			p.Addf(prefix+".cert_file", "%s expired at %s", c.CertFile, cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
		} else if now.Before(cert.Leaf.NotBefore) {
			p.Addf(prefix+".cert_file", "%s is not valid before %s", c.CertFile, cert.Leaf.NotBefore.UTC().Format(time.RFC3339))
		}
	}
	if required("ca_file", c.CAFile) {
		if _, _, err := loadPool(c.CAFile); err != nil {
			p.Addf(prefix+".ca_file", "%v", err)
		}
	}
	if len(c.AllowedIDs) == 0 {
		p.Addf(prefix+".allowed_ids", "required: the SPIFFE IDs or DNS names of the peers to admit")
	}
	for _, id := range c.AllowedIDs {
		if err := checkID(id); err != nil {
			p.Addf(prefix+".allowed_ids", "%q: %v", id, err)
		}
	}
	if c.MaxConnectionAge <= 0 {
		p.Addf(prefix+".max_connection_age", "must be positive")
	}
	if c.ReloadInterval <= 0 {
		p.Addf(prefix+".reload_interval", "must be positive")
	}
}

// IsLoopback reports whether addr (host:port, or a bare host) names only
// this machine: localhost or a loopback IP. An empty host (":7400") listens
// on every interface, so it is not loopback.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// checkID accepts a SPIFFE ID or a DNS name; wildcards are refused because
// matching is exact.
func checkID(id string) error {
	if strings.Contains(id, "://") {
		u, err := url.Parse(id)
		switch {
		case err != nil:
			return errors.New("not a valid URI")
		case u.Scheme != "spiffe":
			return errors.New("URI identities must be SPIFFE IDs (spiffe://trust-domain/path)")
		case u.Host == "" || u.User != nil || u.Port() != "" || u.RawQuery != "" || u.Fragment != "":
			return errors.New("a SPIFFE ID is spiffe://trust-domain/path, without user, port, query or fragment")
		case u.String() != id:
			return errors.New("not in canonical form")
		}
		return nil
	}
	if id == "" || strings.ContainsAny(id, "*/: ") {
		return errors.New("want a SPIFFE ID or an exact DNS name (no wildcards)")
	}
	return nil
}

// CheckID reports why id is not an identity allowed_ids can name (a
// SPIFFE ID or an exact DNS name), nil when it is.
func CheckID(id string) error { return checkID(id) }

// CheckCAFile reports why the PEM bundle at path cannot serve as a CA
// bundle, nil when it can.
func CheckCAFile(path string) error {
	_, _, err := loadPool(path)
	return err
}

// fileKey names the setting a load error is about, defaulting to def.
func fileKey(err error, def string) string {
	var fe *fileError
	if errors.As(err, &fe) {
		return fe.key
	}
	return def
}
