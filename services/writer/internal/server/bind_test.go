package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"

	"github.com/ferry-replicator/ferry/pkg/batch"
	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
	"github.com/ferry-replicator/ferry/services/writer/internal/checkpoint"
	"github.com/ferry-replicator/ferry/services/writer/internal/topicfilter"
)

const (
	eastFetcher = "spiffe://ferry.test/ferry/fetcher-east"
	westFetcher = "spiffe://ferry.test/ferry/fetcher-west"
)

// testPKI is a CA and the certificates of a TLS writer and its fetchers:
// every certificate it issues is trusted by the writer, as the writer's
// tls.allowed_ids admits every fetcher of every link.
type testPKI struct {
	ca   *devcerts.CA
	pool *x509.CertPool
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	ca, err := devcerts.NewCA("ferry test CA", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return &testPKI{ca: ca, pool: pool}
}

func (p *testPKI) pair(t *testing.T, o devcerts.LeafOptions) tls.Certificate {
	t.Helper()
	o.NotBefore, o.NotAfter = time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	leaf, err := p.ca.Issue(o)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// server is the writer's TLS: a client certificate of the CA required.
func (p *testPKI) server(t *testing.T) []grpc.ServerOption {
	t.Helper()
	cert := p.pair(t, devcerts.LeafOptions{CommonName: "writer", DNSNames: []string{"writer.test"}})
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(&tls.Config{
		MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: p.pool,
	}))}
}

// client is a fetcher presenting the SPIFFE id.
func (p *testPKI) client(t *testing.T, id string) credentials.TransportCredentials {
	t.Helper()
	cert := p.pair(t, devcerts.LeafOptions{CommonName: id, URIs: []string{id}})
	return credentials.NewTLS(&tls.Config{
		MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, RootCAs: p.pool, ServerName: "writer.test",
	})
}

// boundWriter serves link east (4 shards, east's fetcher only) and link
// west (4 shards, any admitted peer) over TLS; it returns the clients of
// east's and west's fetchers.
func boundWriter(t *testing.T) (w *testWriter, east, west ferryv1.ReplicationServiceClient) {
	t.Helper()
	pki := newTestPKI(t)
	topics := mustFilter(t, topicfilter.DefaultInclude, topicfilter.DefaultExclude)
	links := []Link{
		{Name: "east", Topics: topics, Shards: 4, AllowedIDs: tlsconfig.NewIDs([]string{eastFetcher})},
		{Name: "west", Topics: topics, Shards: 4},
	}
	w = startWriterGRPC(t, links, func(*Options) {}, pki.server(t), pki.client(t, eastFetcher))
	return w, w.client, w.dial(t, pki.client(t, westFetcher))
}

// A link with allowed_ids is opened only by those identities: another
// fetcher the writer admits (west's) cannot open east's shards, while it
// may open west's, which names none.
func TestLinkAdmitsOnlyItsFetchers(t *testing.T) {
	w, east, west := boundWriter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	_, err := openShard(ctx, t, west, "east", 1, 4, 1)
	wantRefusal(t, err, codes.PermissionDenied, `link "east"`, westFetcher, "links[].allowed_ids")
	if got := w.rejected(t, "east", "peer_refused"); got != 1 {
		t.Errorf("rejected{link=east,reason=peer_refused} = %v, want 1", got)
	}
	if w.cluster.TopicInfo("orders") != nil {
		t.Error("a refused open created the target topic")
	}
	s, err := openShard(ctx, t, east, "east", 1, 4, 1)
	if err != nil {
		t.Fatalf("east's fetcher refused on its link: %v", err)
	}
	closeStream(t, s)
	s, err = openShard(ctx, t, west, "west", 1, 4, 1)
	if err != nil {
		t.Fatalf("west's fetcher refused on a link without allowed_ids: %v", err)
	}
	closeStream(t, s)
}

// A shard number at or above the link's shard count is refused: shard
// numbers (and with them transactional ids and the writer's shard map)
// stay within what the link has.
func TestShardOutsideTheLinkIsRefused(t *testing.T) {
	w, east, _ := boundWriter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, shard := range []uint32{4, math.MaxUint32} {
		_, err := openShard(ctx, t, east, "east", shard, 4, 1)
		wantRefusal(t, err, codes.InvalidArgument, "shard", "links[].shards", "0..3")
	}
	if n := len(w.srv.Status()); n != 0 {
		t.Errorf("the writer's shard map holds %d shards after refused opens, want 0", n)
	}
	s, err := openShard(ctx, t, east, "east", 3, 4, 1)
	if err != nil {
		t.Fatalf("shard 3 of 4 refused: %v", err)
	}
	closeStream(t, s)
}

// A peer that may not open a shard cannot raise the shard's epoch either:
// west's fetcher opening east's shard 1 at the highest epoch there is
// leaves the real owner's epoch 5 good.
func TestRefusedPeerDoesNotRaiseTheEpoch(t *testing.T) {
	w, east, west := boundWriter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := openShard(ctx, t, west, "east", 1, 4, math.MaxUint64)
	wantRefusal(t, err, codes.PermissionDenied, `link "east"`)
	if e := w.srv.currentEpoch("east", 1); e != 0 {
		t.Errorf("shard epoch %d after a refused open, want 0", e)
	}
	s, err := openShard(ctx, t, east, "east", 1, 4, 5)
	if err != nil {
		t.Fatalf("the shard's owner at epoch 5 was refused: %v", err)
	}
	closeStream(t, s)
}

// A Skip moves a checkpoint without records, so its range must lie below
// the source's high watermark it carries, and it must carry one: a Skip to
// 2^62 (silent loss of everything below) is refused, names what it
// claimed, and moves no checkpoint.
func TestSkipBeyondTheSourceIsRefused(t *testing.T) {
	far := int64(1) << 62
	tests := []struct {
		name  string
		skip  *ferryv1.Batch
		parts []string
	}{
		{"beyond its high watermark", batch.Skip(0, far, 100), []string{"skip of orders/0", "0..4611686018427387904", "source high watermark 100"}},
		{"without a high watermark", batch.Skip(0, far, 0), []string{"skip of orders/0", "0..4611686018427387904", "no source high watermark"}},
		{"at its high watermark", batch.Skip(0, 100, 100), []string{"0..100", "source high watermark 100"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := startWriter(t, passthroughLinks(t, false))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			stream := w.openOrders(ctx, t, "east")
			_, err := sendWire(t, stream, 1, tt.skip)
			wantRefusal(t, err, codes.InvalidArgument, tt.parts...)
			if err := w.store.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if cp, ok, _ := w.store.Get(checkpoint.Key{Link: "east", Topic: "orders", Partition: 0}); ok {
				t.Errorf("a refused skip left checkpoint %+v", cp)
			}
			if got := w.rejected(t, "east", "beyond_source"); got != 1 {
				t.Errorf("rejected{reason=beyond_source} = %v, want 1", got)
			}
		})
	}
	// A record batch may carry the high watermark too, and is held to it.
	t.Run("record batch beyond its high watermark", func(t *testing.T) {
		w := startWriter(t, passthroughLinks(t, false))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		stream := w.openOrders(ctx, t, "east")
		b := wireKafka(t, 0, sourceBatch(t, 0, 10, nil, 0, 0))
		b.SourceHighWatermark = 5
		_, err := sendWire(t, stream, 1, b)
		wantRefusal(t, err, codes.InvalidArgument, "batch of orders/0", "0..9", "source high watermark 5")
		refusedWhole(t, w, "beyond_source")
	})
}

// A shard lists only its own partitions (shards.Of with links[].shards):
// a fetcher whose link.shards differs (during a change) would copy a
// partition under another shard's transactional id beside the shard that
// holds it, and neither stream would fence the other.
func TestOpenOfAnotherShardsPartitionIsRefused(t *testing.T) {
	w, east, _ := boundWriter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := inShard("orders", 2, 4)
	for _, shard := range []uint32{0, 1, 3} {
		stream, err := east.Replicate(ctx)
		if err != nil {
			t.Fatal(err)
		}
		open := &ferryv1.Open{Link: "east", Shard: shard, Epoch: 1, Fetcher: "f",
			Topics:     []*ferryv1.TopicSpec{{Name: "orders", PartitionCount: p + 1}},
			Partitions: []*ferryv1.TopicPartition{{Topic: "orders", Partition: p}}}
		if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Open{Open: open}}); err != nil {
			t.Fatal(err)
		}
		_, err = stream.Recv()
		wantRefusal(t, err, codes.FailedPrecondition, fmt.Sprintf("orders/%d is in shard 2 of the link's 4 (links[].shards), not %d", p, shard), "link.shards")
	}
	if got := w.rejected(t, "east", "not_in_shard"); got != 3 {
		t.Errorf("rejected{reason=not_in_shard} = %v, want 3", got)
	}
	if w.cluster.PartitionInfo("orders", p) != nil {
		t.Errorf("the target topic was created for refused opens")
	}
	s, err := openShard(ctx, t, east, "east", 2, 4, 1)
	if err != nil {
		t.Fatalf("shard 2 refused its own partition: %v", err)
	}
	closeStream(t, s)
}
