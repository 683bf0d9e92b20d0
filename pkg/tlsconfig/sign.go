package tlsconfig

import (
	"bytes"
	"cmp"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Signatures on Ferry's own records. Anyone who may produce to a topic
// Ferry reads its own state from (the producer registry) could otherwise
// write what Ferry then trusts. A tier signs such a record with the key of
// the certificate it already holds for the gRPC link, and a reader admits
// it only if the certificate chains to the reader's CA bundle and names one
// of the reader's allowed identities: the same trust as the link's
// handshake, with no key or secret of its own to distribute or rotate.

// Signature is what a signed record carries beside its key and value.
type Signature struct {
	// Chain is the signer's certificate chain, leaf first, DER
	// certificates one after the other (x509.ParseCertificates reads it).
	Chain []byte
	// Value signs the purpose, the key and the value (signedMessage).
	Value []byte
}

// ErrUnsigned reports a record without a signature.
var ErrUnsigned = errors.New("not signed")

// Sign signs key and value for purpose with the current certificate's key.
// purpose names the kind of record, so a signature made for one kind never
// passes for another.
func (s *Source) Sign(purpose string, key, value []byte) (Signature, error) {
	return SignWith(s.cur.Load().cert, purpose, key, value)
}

// SignWith is Sign with cert's key, for a certificate no Source holds (a
// test's, which a Source would refuse as expired).
func SignWith(cert *tls.Certificate, purpose string, key, value []byte) (Signature, error) {
	signer, ok := cert.PrivateKey.(crypto.Signer)
	if !ok {
		return Signature{}, fmt.Errorf("sign %s: the certificate's key (%T) cannot sign", purpose, cert.PrivateKey)
	}
	msg := signedMessage(purpose, key, value)
	var sig []byte
	var err error
	switch signer.Public().(type) {
	case ed25519.PublicKey:
		sig, err = signer.Sign(rand.Reader, msg, crypto.Hash(0))
	case *ecdsa.PublicKey, *rsa.PublicKey:
		digest := sha256.Sum256(msg)
		sig, err = signer.Sign(rand.Reader, digest[:], crypto.SHA256)
	default:
		err = fmt.Errorf("keys of type %T are not supported", signer.Public())
	}
	if err != nil {
		return Signature{}, fmt.Errorf("sign %s: %w", purpose, err)
	}
	return Signature{Chain: bytes.Join(cert.Certificate, nil), Value: sig}, nil
}

// Verify checks that sig signs key and value for purpose with a
// certificate that chains to the current CA bundle and names an allowed
// identity, and returns that identity. The chain is checked as of a moment
// within the leaf's validity, not now: a record signed before its
// certificate expired (certificates rotate, records stay) remains
// verifiable while its CA stays in the bundle.
func (s *Source) Verify(purpose string, key, value []byte, sig Signature) (string, error) {
	return verify(s.cur.Load().pool, &s.trust, &s.signers, purpose, key, value, sig)
}

// verify is Verify against pool and t, caching verified chains in c.
func verify(pool *x509.CertPool, t *trust, c *signerCache, purpose string, key, value []byte, sig Signature) (string, error) {
	if len(sig.Chain) == 0 && len(sig.Value) == 0 {
		return "", ErrUnsigned
	}
	leaf, id, err := c.leaf(pool, t, sig.Chain)
	if err != nil {
		return "", err
	}
	if err := leaf.CheckSignature(algorithm(leaf.PublicKey), signedMessage(purpose, key, value), sig.Value); err != nil {
		return "", fmt.Errorf("signature of %s: %w", id, err)
	}
	return id, nil
}

// signedMessage is what a signature covers: each part length-prefixed, so
// no two (purpose, key, value) give the same bytes; a null value (a
// tombstone) differs from an empty one.
func signedMessage(purpose string, key, value []byte) []byte {
	msg := make([]byte, 0, 32+len(purpose)+len(key)+len(value))
	msg = append(msg, "ferry-record-signature-v1"...)
	msg = binary.AppendUvarint(msg, uint64(len(purpose)))
	msg = append(msg, purpose...)
	msg = binary.AppendUvarint(msg, uint64(len(key)))
	msg = append(msg, key...)
	if value == nil {
		msg = append(msg, 0)
	} else {
		msg = append(msg, 1)
		msg = binary.AppendUvarint(msg, uint64(len(value)))
		msg = append(msg, value...)
	}
	return msg
}

// algorithm is the signature algorithm Sign uses for a key.
func algorithm(pub any) x509.SignatureAlgorithm {
	switch pub.(type) {
	case ed25519.PublicKey:
		return x509.PureEd25519
	case *ecdsa.PublicKey:
		return x509.ECDSAWithSHA256
	case *rsa.PublicKey:
		return x509.SHA256WithRSA
	}
	return x509.UnknownSignatureAlgorithm
}

// signerCache remembers the chains already verified against a CA bundle:
// records of one writer repeat one chain, and a chain verification costs
// far more than the signature's.
type signerCache struct {
	mu   sync.Mutex
	pool *x509.CertPool // the bundle the entries were verified against
	ok   map[[sha256.Size]byte]verifiedSigner
}

type verifiedSigner struct {
	leaf *x509.Certificate
	id   string
}

// maxSigners bounds the cache: chains are chosen by whoever writes the
// topic.
const maxSigners = 256

// maxChain bounds a chain's bytes before it is parsed.
const maxChain = 16 << 10

// leaf parses and verifies chain (cached) against pool and t, and returns
// its leaf and the allowed identity it names.
func (c *signerCache) leaf(pool *x509.CertPool, t *trust, chain []byte) (*x509.Certificate, string, error) {
	if len(chain) > maxChain {
		return nil, "", fmt.Errorf("signer chain of %d bytes, above %d", len(chain), maxChain)
	}
	sum := sha256.Sum256(chain)
	c.mu.Lock()
	if c.pool != pool { // a reload: verify again against the new bundle
		c.pool, c.ok = pool, nil
	}
	v, hit := c.ok[sum]
	c.mu.Unlock()
	if hit {
		return v.leaf, v.id, nil
	}
	certs, err := x509.ParseCertificates(chain)
	if err != nil || len(certs) == 0 {
		return nil, "", fmt.Errorf("signer chain: %w", cmp.Or(err, errors.New("no certificate")))
	}
	leaf := certs[0]
	ids := identities(leaf)
	intermediates := x509.NewCertPool()
	for _, ic := range certs[1:] {
		intermediates.AddCert(ic)
	}
	at := time.Now()
	if at.After(leaf.NotAfter) {
		at = leaf.NotAfter
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots: pool, Intermediates: intermediates, CurrentTime: at,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	}); err != nil {
		return nil, "", fmt.Errorf("signer %s (issuer %q): certificate not trusted: %w", describe(ids), leaf.Issuer.String(), err)
	}
	if err := t.checkIdentity(leaf); err != nil {
		return nil, "", fmt.Errorf("signer: %w", err)
	}
	id := ids[0]
	for _, cand := range ids {
		if t.allowed[normalizeID(cand)] {
			id = cand
			break
		}
	}
	c.mu.Lock()
	if c.pool == pool {
		if c.ok == nil || len(c.ok) >= maxSigners {
			c.ok = map[[sha256.Size]byte]verifiedSigner{}
		}
		c.ok[sum] = verifiedSigner{leaf: leaf, id: id}
	}
	c.mu.Unlock()
	return leaf, id, nil
}

// Record headers that carry a Signature beside the record it signs: the
// same two in every topic where Ferry signs its records (the producer
// registry, the checkpoints).
const (
	HeaderChain     = "ferry-signer-chain"
	HeaderSignature = "ferry-signature"
)

// Header is one record header; franz-go's kgo.RecordHeader and
// recordbatch.Header convert to and from it.
type Header struct {
	Key   string
	Value []byte
}

// Headers are the record headers that carry s.
func (s Signature) Headers() []Header {
	return []Header{{Key: HeaderChain, Value: s.Chain}, {Key: HeaderSignature, Value: s.Value}}
}

// ReadHeader takes what a record header holds of a signature; a caller
// passes each header of the record in turn, and headers of other names
// are ignored. A record without both is unsigned (Verify says
// ErrUnsigned, or that the signature is incomplete).
func (s *Signature) ReadHeader(key string, value []byte) {
	switch key {
	case HeaderChain:
		s.Chain = value
	case HeaderSignature:
		s.Value = value
	}
}

// Verifier checks record signatures against trust of its own, which may
// differ from the gRPC link's: a CA bundle and a list of allowed
// identities. A writer verifies its checkpoints with one (the signers are
// writers, whereas the link's allowed_ids name fetchers).
type Verifier struct {
	trust   trust
	pool    func() *x509.CertPool
	signers signerCache
}

// NewVerifier admits signers whose chain ends in the CA bundle caFile and
// that name one of allowedIDs. With caFile empty, or src's own ca_file, it
// follows src's bundle as src reloads it; another bundle is read now and
// again whenever the file changes (checked at each verification, which is
// rare: see package checkpoint).
func NewVerifier(src *Source, caFile string, allowedIDs []string) (*Verifier, error) {
	if len(allowedIDs) == 0 {
		return nil, errors.New("verifier: no allowed identity")
	}
	v := &Verifier{trust: newTrust(allowedIDs)}
	if caFile == "" || caFile == src.cfg.CAFile {
		v.pool = func() *x509.CertPool { return src.cur.Load().pool }
		return v, nil
	}
	f := &poolFile{path: caFile, log: src.log}
	if err := f.load(); err != nil {
		return nil, err
	}
	v.pool = f.current
	return v, nil
}

// Verify is Source.Verify against the Verifier's trust.
func (v *Verifier) Verify(purpose string, key, value []byte, sig Signature) (string, error) {
	return verify(v.pool(), &v.trust, &v.signers, purpose, key, value, sig)
}

// OwnIdentities are the identities of src's certificate that name it as
// a signer: its SPIFFE IDs when it has any, else its DNS names. A
// certificate's DNS names are often shared (the development certificates
// all name localhost), while its SPIFFE ID names the workload.
func (s *Source) OwnIdentities() []string {
	leaf := s.cur.Load().cert.Leaf
	var ids []string
	for _, u := range leaf.URIs {
		ids = append(ids, u.String())
	}
	if len(ids) == 0 {
		ids = append(ids, leaf.DNSNames...)
	}
	return ids
}

// poolFile is a CA bundle read again when its file changes.
type poolFile struct {
	path string
	log  *slog.Logger

	mu    sync.Mutex
	mod   time.Time
	size  int64
	pool  *x509.CertPool
	stale bool // the last reload failed: logged once until one succeeds
}

func (f *poolFile) load() error {
	fi, err := os.Stat(f.path)
	if err != nil {
		return fmt.Errorf("stat CA bundle %s: %w", f.path, err)
	}
	pool, _, err := loadPool(f.path)
	if err != nil {
		return err
	}
	f.pool, f.mod, f.size = pool, fi.ModTime(), fi.Size()
	return nil
}

// current is the bundle, read again first if the file changed; a failed
// read keeps the previous one.
func (f *poolFile) current() *x509.CertPool {
	f.mu.Lock()
	defer f.mu.Unlock()
	fi, err := os.Stat(f.path)
	if err == nil && fi.ModTime().Equal(f.mod) && fi.Size() == f.size {
		return f.pool
	}
	if err == nil {
		err = f.load()
	}
	if err != nil && !f.stale {
		f.log.Error("signers CA bundle reload failed, keeping the previous one", "file", f.path, "err", err)
	}
	f.stale = err != nil
	return f.pool
}
