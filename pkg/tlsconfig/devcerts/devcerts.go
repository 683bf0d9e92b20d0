// Package devcerts issues a throwaway certificate authority and workload
// certificates for local runs and tests: ECDSA P-256 keys, SPIFFE URI SANs,
// and the loopback names a process on one machine is dialled by. Production
// certificates come from cert-manager, Vault PKI or SPIRE (docs/security.md).
package devcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DefaultTrustDomain is the SPIFFE trust domain of local certificates.
const DefaultTrustDomain = "ferry.local"

// SPIFFEID returns the SPIFFE ID Ferry gives a tier in a trust domain:
// spiffe://<trustDomain>/ferry/<tier>.
func SPIFFEID(trustDomain, tier string) string {
	return "spiffe://" + trustDomain + "/ferry/" + tier
}

// CA is a certificate authority that signs leaf certificates.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA creates a self-signed CA valid from notBefore to notAfter.
func NewCA(name string, notBefore, notAfter time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Ferry development"}},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		// Path length 0: this CA signs leaves only, never another CA.
		MaxPathLen:     0,
		MaxPathLenZero: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("sign CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: encodeCert(der), KeyPEM: keyPEM}, nil
}

// LeafOptions describes a workload certificate.
type LeafOptions struct {
	// CommonName is informative only; peers check the SANs.
	CommonName string
	// URIs are URI SANs, normally one SPIFFE ID.
	URIs []string
	// DNSNames and IPs are the names the holder is dialled by.
	DNSNames []string
	IPs      []net.IP
	// NotBefore and NotAfter bound the validity.
	NotBefore, NotAfter time.Time
}

// Leaf is an issued certificate and its private key.
type Leaf struct {
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
}

// Issue signs a certificate for both TLS server and client use: a fetcher
// dials a writer, and either may be the server in tests.
func (ca *CA) Issue(o LeafOptions) (*Leaf, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	uris := make([]*url.URL, 0, len(o.URIs))
	for _, s := range o.URIs {
		u, err := url.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("URI SAN %q: %w", s, err)
		}
		uris = append(uris, u)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: o.CommonName},
		NotBefore:    o.NotBefore,
		NotAfter:     o.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         uris,
		DNSNames:     o.DNSNames,
		IPAddresses:  o.IPs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("sign certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &Leaf{Cert: cert, CertPEM: encodeCert(der), KeyPEM: keyPEM}, nil
}

// Options configures WriteDir.
type Options struct {
	// TrustDomain of the SPIFFE IDs; DefaultTrustDomain when empty.
	TrustDomain string
	// Validity of every certificate, from five minutes ago (so a slightly
	// slow clock elsewhere on the machine does not see "not yet valid").
	Validity time.Duration
	// Overwrite replaces existing files; without it WriteDir refuses to
	// touch a folder that already holds any of them.
	Overwrite bool
	// Now is the issue time; time.Now when zero.
	Now time.Time
}

// WriteDir writes ca.pem, ca-key.pem and, for each tier, <tier>.pem and
// <tier>-key.pem into dir, and returns the paths written. Keys are mode
// 0600. Each file is written to a temporary name and renamed, so a process
// polling the folder never reads half a file.
func WriteDir(dir string, o Options) ([]string, error) {
	if o.TrustDomain == "" {
		o.TrustDomain = DefaultTrustDomain
	}
	if o.Validity <= 0 {
		return nil, errors.New("validity must be positive")
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	// ferryctl is the operators' tool (control.allowed_ids).
	tiers := []string{"fetcher", "writer", "ferryctl"}
	names := []string{"ca.pem", "ca-key.pem"}
	for _, t := range tiers {
		names = append(names, t+".pem", t+"-key.pem")
	}
	if !o.Overwrite {
		for _, n := range names {
			p := filepath.Join(dir, n)
			if _, err := os.Stat(p); err == nil {
				return nil, fmt.Errorf("%s exists (overwrite to replace)", p)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("check %s: %w", p, err)
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}

	notBefore, notAfter := o.Now.Add(-5*time.Minute), o.Now.Add(o.Validity)
	ca, err := NewCA("Ferry development CA", notBefore, notAfter)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{"ca.pem": ca.CertPEM, "ca-key.pem": ca.KeyPEM}
	for _, t := range tiers {
		leaf, err := ca.Issue(LeafOptions{
			CommonName: "ferry-" + t,
			URIs:       []string{SPIFFEID(o.TrustDomain, t)},
			DNSNames:   []string{"localhost"},
			IPs:        []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
			NotBefore:  notBefore,
			NotAfter:   notAfter,
		})
		if err != nil {
			return nil, fmt.Errorf("issue %s: %w", t, err)
		}
		files[t+".pem"], files[t+"-key.pem"] = leaf.CertPEM, leaf.KeyPEM
	}
	var written []string
	for _, n := range names {
		mode := os.FileMode(0o644)
		if strings.HasSuffix(n, "-key.pem") {
			mode = 0o600
		}
		p := filepath.Join(dir, n)
		if err := WriteFileAtomic(p, files[n], mode); err != nil {
			return written, err
		}
		written = append(written, p)
	}
	return written, nil
}

// WriteFileAtomic writes data to a temporary file in path's folder and
// renames it over path, so readers see the old or the new content, never a
// mix.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Chmod(mode)
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, werr)
	}
	return nil
}

func newSerial() (*big.Int, error) {
	// 128 random bits: serials must be unique per CA, and unpredictable.
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	return n, nil
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
