package kafkabroker

import (
	"context"
	"crypto/tls"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
)

// TestTLSBroker starts a broker whose only client listener is TLS with
// client certificates required: a client with a certificate from the
// broker's CA produces in a transaction (the markers go through the
// broker's own TLS client) and reads it back; a plaintext client, a client
// without a certificate and one with a certificate from another CA are all
// refused. It fails, never skips, when java or the jars are missing.
func TestTLSBroker(t *testing.T) {
	ca := newTestCA(t, "kafka test CA")
	b, err := Start(timeout(t, 2*time.Minute), Options{Name: "tls", TLSCA: ca})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Stop(); err != nil {
			t.Error(err)
		}
	})
	ctx := timeout(t, time.Minute)

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.DialTLSConfig(b.ClientTLS()),
		kgo.TransactionalID("tls-test"), kgo.DefaultProduceTopic("secure"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 2, 1, nil, "secure"); err != nil {
		t.Fatalf("create topic over TLS: %v", err)
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	recs := make([]*kgo.Record, 50)
	for i := range recs {
		recs[i] = &kgo.Record{Value: fmt.Appendf(nil, "v%d", i)}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce over TLS: %v", err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit over TLS: %v", err)
	}
	got := consume(t, ctx, b.Addr(), "secure", len(recs),
		kgo.DialTLSConfig(b.ClientTLS()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if len(got) != len(recs) {
		t.Fatalf("read %d committed records, want %d", len(got), len(recs))
	}

	other := newTestCA(t, "other CA")
	stranger, err := other.Issue(devcerts.LeafOptions{CommonName: "stranger", NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	strangerCert, err := tls.X509KeyPair(stranger.CertPEM, stranger.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	noCert := b.ClientTLS()
	noCert.Certificates = nil
	otherCA := b.ClientTLS()
	otherCA.Certificates = []tls.Certificate{strangerCert}
	for name, opt := range map[string][]kgo.Opt{
		"plaintext":           nil,
		"no certificate":      {kgo.DialTLSConfig(noCert)},
		"another CA's client": {kgo.DialTLSConfig(otherCA)},
	} {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.Addr())}, opt...)...)
		if err != nil {
			t.Fatal(err)
		}
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = kadm.NewClient(cl).BrokerMetadata(actx)
		cancel()
		cl.Close()
		if err == nil {
			t.Errorf("%s: metadata answered, want a refusal", name)
		} else {
			t.Logf("%s refused: %v", name, err)
		}
	}
}

func newTestCA(t *testing.T, name string) *devcerts.CA {
	t.Helper()
	ca, err := devcerts.NewCA(name, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return ca
}
