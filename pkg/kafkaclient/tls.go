package kafkaclient

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/ferry-replicator/ferry/pkg/config"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
)

// TLSConfig is how to reach the brokers over TLS.
type TLSConfig struct {
	// Enabled turns TLS on. The other settings are refused without it, so a
	// forgotten switch cannot silently leave the connection in plaintext.
	Enabled bool `yaml:"enabled"`
	// CAFile is a PEM bundle of the CAs the brokers' certificates chain to;
	// empty uses the system's roots.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a client certificate and key, for brokers
	// that authenticate clients by certificate (ssl.client.auth=required).
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name to verify in the brokers' certificates; empty
	// uses the host of each broker's address.
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify accepts any broker certificate. For a test cluster
	// only: anyone on the path can then read and change the traffic.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

func (c TLSConfig) validate(prefix string, p *config.Problems) {
	if !c.Enabled {
		if c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" || c.ServerName != "" || c.InsecureSkipVerify {
			p.Addf(prefix+".enabled", "TLS settings are set but TLS is off: set enabled: true, or remove them")
		}
		return
	}
	switch {
	case c.CertFile != "" && c.KeyFile == "":
		p.Addf(prefix+".key_file", "required with cert_file")
	case c.CertFile == "" && c.KeyFile != "":
		p.Addf(prefix+".cert_file", "required with key_file")
	case c.CertFile != "":
		if _, err := loadKeyPair(c.CertFile, c.KeyFile); err != nil {
			p.Addf(prefix+".cert_file", "%v", err)
		}
	}
	if c.CAFile != "" {
		if _, err := loadPool(c.CAFile); err != nil {
			p.Addf(prefix+".ca_file", "%v", err)
		}
	}
}

// build reads the files into a tls.Config. TLS 1.2 is the floor: many
// Kafka deployments do not offer 1.3 yet.
func (c TLSConfig) build() (*tls.Config, error) {
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         c.ServerName,
		InsecureSkipVerify: c.InsecureSkipVerify, // off by default; see the field
	}
	if c.CAFile != "" {
		pool, err := loadPool(c.CAFile)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" {
		cert, err := loadKeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// loadKeyPair's errors name the files, never their content.
func loadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("load cert %s with key %s: %w", certFile, keyFile, err)
	}
	return cert, nil
}

func loadPool(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("CA bundle %s holds no PEM certificate", path)
	}
	return pool, nil
}

// Warnings says what in the settings is allowed but unsafe, each naming its
// key under prefix (source, target), for the service to log at start.
func (c Config) Warnings(prefix string) []string {
	if !c.TLS.Enabled || !c.TLS.InsecureSkipVerify {
		return nil
	}
	// Allowed, for test clusters; on loopback nobody else is on the path.
	for _, b := range c.BootstrapServers {
		if !tlsconfig.IsLoopback(b) {
			return []string{fmt.Sprintf("%s.tls.insecure_skip_verify is set for broker %s, which is not on loopback: "+
				"any certificate is accepted, so anyone on the path can read and change the traffic (and the SASL login); "+
				"set %s.tls.ca_file instead", prefix, b, prefix)}
		}
	}
	return nil
}
