package kafkabroker

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"time"

	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
)

// setupTLS issues the broker's certificate and a client certificate for this
// package's own probes from Options.TLSCA, and returns the server properties
// of a TLS-only client listener that requires client certificates.
//
// The PEM material goes inline into server.properties (ssl.keystore.key,
// ssl.keystore.certificate.chain, ssl.truststore.certificates): a PEM key
// store given as a file (ssl.keystore.location) needs an encrypted key and
// ssl.key.password, while inline PEM accepts the unencrypted PKCS#8 key
// devcerts writes. The broker also talks to itself over this listener
// (transaction markers go through the inter-broker listener), as a client
// with its own certificate, so that certificate serves both uses.
func (b *Broker) setupTLS() (map[string]string, error) {
	ca := b.opts.TLSCA
	// Backdated like devcerts.WriteDir's certificates, so that a slightly
	// different clock never sees them as not yet valid.
	notBefore, notAfter := time.Now().Add(-5*time.Minute), time.Now().Add(24*time.Hour)
	server, err := ca.Issue(devcerts.LeafOptions{
		CommonName: "kafka-" + b.opts.Name,
		DNSNames:   []string{"localhost"},
		IPs:        []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:  notBefore,
		NotAfter:   notAfter,
	})
	if err != nil {
		return nil, fmt.Errorf("broker certificate: %w", err)
	}
	probe, err := ca.Issue(devcerts.LeafOptions{CommonName: "kafkabroker-probe", NotBefore: notBefore, NotAfter: notAfter})
	if err != nil {
		return nil, fmt.Errorf("probe certificate: %w", err)
	}
	cert, err := tls.X509KeyPair(probe.CertPEM, probe.KeyPEM)
	if err != nil {
		return nil, fmt.Errorf("probe certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	b.clientTLS = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, Certificates: []tls.Certificate{cert}}

	listeners := fmt.Sprintf("SSL://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", b.opts.Port, b.opts.ControllerPort)
	return map[string]string{
		"listeners":                      listeners,
		"advertised.listeners":           fmt.Sprintf("SSL://127.0.0.1:%d", b.opts.Port),
		"inter.broker.listener.name":     "SSL",
		"listener.security.protocol.map": "SSL:SSL,CONTROLLER:PLAINTEXT",
		"ssl.client.auth":                "required",
		"ssl.keystore.type":              "PEM",
		"ssl.keystore.key":               string(server.KeyPEM),
		"ssl.keystore.certificate.chain": string(server.CertPEM),
		"ssl.truststore.type":            "PEM",
		"ssl.truststore.certificates":    string(ca.CertPEM),
	}, nil
}
