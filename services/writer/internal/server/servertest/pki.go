package servertest

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"google.golang.org/grpc/credentials"

	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
	"github.com/ferry-replicator/ferry/services/writer/internal/checkpoint"
)

// The identities of PKI's fetcher and operator (ferryctl).
var (
	FetcherID  = devcerts.SPIFFEID(devcerts.DefaultTrustDomain, "fetcher")
	OperatorID = devcerts.SPIFFEID(devcerts.DefaultTrustDomain, "ferryctl")
)

// PKI is one development CA's certificates as Sources: the writer's
// admits fetchers and operators at its port, as the app wires it
// (grpcTLS); the fetcher's and the operator's dial it.
type PKI struct {
	Writer, Fetcher, Operator *tlsconfig.Source
}

// NewPKI writes a development CA and its certificates under the test's
// temporary directory.
func NewPKI(t *testing.T) PKI {
	t.Helper()
	dir := t.TempDir()
	if _, err := devcerts.WriteDir(dir, devcerts.Options{Validity: time.Hour}); err != nil {
		t.Fatal(err)
	}
	src := func(tier string, peers ...string) *tlsconfig.Source {
		s, err := tlsconfig.NewSource(tlsconfig.Config{
			CertFile: filepath.Join(dir, tier+".pem"), KeyFile: filepath.Join(dir, tier+"-key.pem"),
			CAFile: filepath.Join(dir, "ca.pem"), AllowedIDs: peers,
		}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	writerID := devcerts.SPIFFEID(devcerts.DefaultTrustDomain, "writer")
	return PKI{Writer: src("writer", FetcherID, OperatorID), Fetcher: src("fetcher", writerID), Operator: src("ferryctl", writerID)}
}

// Creds are a client's TLS credentials from s.
func Creds(s *tlsconfig.Source) credentials.TransportCredentials {
	return credentials.NewTLS(s.ClientTLS())
}

// Config is a writer of cluster (nil: one of its own) with TLS as the app
// wires it: its port admits fetchers and operators, Writer.Client is the
// fetcher's, and checkpoints and control records are signed with the
// writer's certificate. The server's options must still admit only the
// fetcher to Replicate (Options.ReplicateIDs).
func (p PKI) Config(t *testing.T, cluster *kfake.Cluster) Config {
	t.Helper()
	v, err := tlsconfig.NewVerifier(p.Writer, "", p.Writer.OwnIdentities())
	if err != nil {
		t.Fatal(err)
	}
	return Config{
		Cluster:       cluster,
		Store:         func(o *checkpoint.Options) { o.Signer, o.Verifier = p.Writer, v },
		ServerOptions: p.Writer.ServerOptions(),
		Creds:         Creds(p.Fetcher),
	}
}
