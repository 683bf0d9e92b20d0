package tlsconfig

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A writer's signature verifies at a fetcher that admits the writer's
// identity, and nothing else does: another purpose, key or value, another
// CA, an identity the reader does not admit, no signature at all.
func TestSignatureVerifiesOnlyWhatWasSigned(t *testing.T) {
	p := newPair(t)
	sig, err := p.wsrc.Sign("producer-entry", []byte("42"), []byte(`{"producer_id":42}`))
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.fsrc.Verify("producer-entry", []byte("42"), []byte(`{"producer_id":42}`), sig)
	if err != nil || id != writerID {
		t.Fatalf("Verify = %q, %v; want %q", id, err, writerID)
	}
	for name, c := range map[string]struct {
		purpose    string
		key, value []byte
	}{
		"another purpose": {"checkpoint", []byte("42"), []byte(`{"producer_id":42}`)},
		"another key":     {"producer-entry", []byte("43"), []byte(`{"producer_id":42}`)},
		"another value":   {"producer-entry", []byte("42"), []byte(`{"producer_id":43}`)},
		"a null value":    {"producer-entry", []byte("42"), nil},
	} {
		if _, err := p.fsrc.Verify(c.purpose, c.key, c.value, sig); err == nil {
			t.Errorf("%s: verified", name)
		}
	}
	if _, err := p.fsrc.Verify("producer-entry", []byte("42"), []byte("v"), Signature{}); !errors.Is(err, ErrUnsigned) {
		t.Errorf("no signature: %v, want ErrUnsigned", err)
	}

	// The fetcher's own certificate is from the same CA, but the fetcher
	// admits writers only.
	fsig, err := p.fsrc.Sign("producer-entry", []byte("42"), []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.fsrc.Verify("producer-entry", []byte("42"), []byte("v"), fsig); !errors.Is(err, ErrIdentityNotAllowed) {
		t.Errorf("signed by a fetcher: %v, want ErrIdentityNotAllowed", err)
	}

	// A writer identity from a CA the reader does not trust.
	other := newSide(t, valid(t, newCA(t, "other"), writerID), []string{fetcherID}, newCA(t, "other2")).source(discard())
	osig, err := other.Sign("producer-entry", []byte("42"), []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.fsrc.Verify("producer-entry", []byte("42"), []byte("v"), osig); err == nil || !strings.Contains(err.Error(), "not trusted") {
		t.Errorf("signed under another CA: %v, want not trusted", err)
	}

	// Someone else's signature on the writer's chain.
	forged := Signature{Chain: sig.Chain, Value: fsig.Value}
	if _, err := p.fsrc.Verify("producer-entry", []byte("42"), []byte("v"), forged); err == nil {
		t.Error("a fetcher's signature under the writer's chain verified")
	}
	if _, err := p.fsrc.Verify("producer-entry", []byte("42"), []byte("v"), Signature{Chain: bytes.Repeat([]byte{1}, maxChain+1), Value: sig.Value}); err == nil {
		t.Error("an oversized chain was parsed")
	}
}

// Certificates expire and rotate; records stay. A record signed while its
// certificate was valid verifies after it expired, as long as its CA is
// in the bundle.
func TestSignatureOutlivesItsCertificate(t *testing.T) {
	p := newPair(t)
	now := time.Now()
	old := issue(t, p.ca, writerID, now.Add(-2*time.Hour), now.Add(-time.Hour))
	cert, err := tls.X509KeyPair(old.CertPEM, old.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	digest := sha256.Sum256(signedMessage("producer-entry", []byte("7"), []byte("v")))
	value, err := cert.PrivateKey.(crypto.Signer).Sign(rand.Reader, digest[:], crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	sig := Signature{Chain: bytes.Join(cert.Certificate, nil), Value: value}
	if id, err := p.fsrc.Verify("producer-entry", []byte("7"), []byte("v"), sig); err != nil || id != writerID {
		t.Fatalf("expired signer: %q, %v; want %q", id, err, writerID)
	}
	// Its CA leaves the bundle: nothing vouches for it any more.
	p.fetcher.writeCAs(newCA(t, "ca2"))
	if err := p.fsrc.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.fsrc.Verify("producer-entry", []byte("7"), []byte("v"), sig); err == nil {
		t.Fatal("verified after its CA left the bundle")
	}
}

// A Verifier has trust of its own: a writer verifies the checkpoints of
// writers, which its link's allowed_ids (fetchers) do not name. It follows
// the Source's CA bundle by default, or reads a bundle of its own, again
// when the file changes.
func TestVerifierHasItsOwnTrust(t *testing.T) {
	p := newPair(t)
	sig, err := p.wsrc.Sign("checkpoint", []byte("k"), []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.wsrc.Verify("checkpoint", []byte("k"), []byte("v"), sig); !errors.Is(err, ErrIdentityNotAllowed) {
		t.Fatalf("the writer's Source admits fetchers only: %v, want ErrIdentityNotAllowed", err)
	}
	if ids := p.wsrc.OwnIdentities(); len(ids) != 1 || ids[0] != writerID {
		t.Fatalf("own identities %v, want [%s]", ids, writerID)
	}
	own, err := NewVerifier(p.wsrc, "", p.wsrc.OwnIdentities())
	if err != nil {
		t.Fatal(err)
	}
	if id, err := own.Verify("checkpoint", []byte("k"), []byte("v"), sig); err != nil || id != writerID {
		t.Fatalf("own verifier: %q, %v; want %q", id, err, writerID)
	}

	// A bundle of another CA, in a file of its own: not trusted, until
	// the file holds the writer's CA too.
	caFile := filepath.Join(t.TempDir(), "signers.pem")
	if err := os.WriteFile(caFile, newCA(t, "other").CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	other, err := NewVerifier(p.wsrc, caFile, []string{writerID})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Verify("checkpoint", []byte("k"), []byte("v"), sig); err == nil || !strings.Contains(err.Error(), "not trusted") {
		t.Fatalf("another CA: %v, want not trusted", err)
	}
	if err := os.WriteFile(caFile, append(newCA(t, "other").CertPEM, p.ca.CertPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Verify("checkpoint", []byte("k"), []byte("v"), sig); err != nil {
		t.Fatalf("after the bundle gained the writer's CA: %v", err)
	}
}
