package harness

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
)

// Certs makes, once per folder, a development CA with fetcher and writer
// certificates in dir/certs, and returns that folder. Every process the
// harness starts talks mutual TLS with them, as production does.
func Certs(dir string) (string, error) {
	certDir := filepath.Join(dir, "certs")
	if _, err := os.Stat(filepath.Join(certDir, "ca.pem")); err == nil {
		return certDir, nil
	}
	if _, err := devcerts.WriteDir(certDir, devcerts.Options{Validity: 24 * time.Hour}); err != nil {
		return "", fmt.Errorf("dev certificates: %w", err)
	}
	return certDir, nil
}

// TierTLS is the tls section of a tier's configuration: its own
// certificate, the dev CA, and the other tier's identity as the only one
// allowed.
func TierTLS(certDir, tier, peer string) map[string]any {
	return map[string]any{
		"cert_file":   filepath.Join(certDir, tier+".pem"),
		"key_file":    filepath.Join(certDir, tier+"-key.pem"),
		"ca_file":     filepath.Join(certDir, "ca.pem"),
		"allowed_ids": []string{devcerts.SPIFFEID(devcerts.DefaultTrustDomain, peer)},
	}
}

// withTLS adds mutual TLS to a writer or fetcher configuration that does
// not set its own.
func withTLS(dir, bin string, cfg map[string]any) error {
	switch filepath.Base(bin) {
	case "ferry-writer":
		if _, ok := cfg["tls"]; ok {
			return nil
		}
		certDir, err := Certs(dir)
		if err != nil {
			return err
		}
		cfg["tls"] = TierTLS(certDir, "writer", "fetcher")
	case "ferry-fetcher":
		w, ok := cfg["writers"].(map[string]any)
		if !ok {
			return errors.New("fetcher configuration without writers")
		}
		if _, ok := w["tls"]; ok {
			return nil
		}
		certDir, err := Certs(dir)
		if err != nil {
			return err
		}
		w["tls"] = TierTLS(certDir, "fetcher", "writer")
	}
	return nil
}

// FetcherTLS is a client TLS configuration with the dev fetcher identity,
// for tests that talk to a writer directly.
func FetcherTLS(dir string) (*tls.Config, error) {
	certDir, err := Certs(dir)
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(certDir, "fetcher.pem"), filepath.Join(certDir, "fetcher-key.pem"))
	if err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(filepath.Join(certDir, "ca.pem"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS13}, nil
}
