package e2e

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/ferry-replicator/ferry/loadtest/harness"
	"github.com/ferry-replicator/ferry/loadtest/workload"
	"github.com/ferry-replicator/ferry/pkg/batch"
	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/shards"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
)

// TestWriterRefusesBadInput talks to a real writer as a hostile or broken
// fetcher would, and checks each refusal's status and that nothing of the
// refused input reaches the target.
func TestWriterRefusesBadInput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := newEnv(t)
	e.startWriter()
	tlsCfg, err := harness.FetcherTLS(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(e.writerAddr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := ferryv1.NewReplicationServiceClient(conn)
	codecs, err := batch.NewCodecs(64 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer codecs.Close()

	good := func(partition int32) *ferryv1.Batch {
		var enc batch.Encoder
		for i := range 10 {
			enc.Append(int64(i), time.Now().UnixMilli(), []byte("k"), []byte("some value to write"), nil)
		}
		b := codecs.Seal(&enc, ferryv1.Codec_CODEC_ZSTD)
		b.Topic, b.Partition, b.Sequence, b.Epoch = "t.hostile", partition, 1, 5
		return b
	}
	open := func(link string, epoch uint64) *ferryv1.Open {
		return &ferryv1.Open{
			Link: link, Shard: uint32(shards.Of("t.hostile", 0, shards.Default)), Epoch: epoch, Fetcher: "hostile",
			Topics:     []*ferryv1.TopicSpec{{Name: "t.hostile", PartitionCount: 2}},
			Partitions: []*ferryv1.TopicPartition{{Topic: "t.hostile", Partition: 0}},
		}
	}
	tests := []struct {
		name  string
		open  *ferryv1.Open
		batch func() *ferryv1.Batch
		want  codes.Code
	}{
		{"unknown link", open("nope", 5), nil, codes.FailedPrecondition},
		{"open without partitions", &ferryv1.Open{Link: "test", Shard: 3, Epoch: 5}, nil, codes.InvalidArgument},
		{"checksum mismatch", open("test", 5), func() *ferryv1.Batch {
			b := good(0)
			b.Payload[len(b.Payload)/2] ^= 0xff
			return b
		}, codes.DataLoss},
		{"compression bomb", open("test", 5), func() *ferryv1.Batch {
			var enc batch.Encoder
			enc.Append(0, 0, nil, make([]byte, 32<<20), nil) // 32 MiB of zeros, a few KiB compressed
			b := codecs.Seal(&enc, ferryv1.Codec_CODEC_ZSTD)
			b.Topic, b.Partition, b.Sequence, b.Epoch = "t.hostile", 0, 1, 5
			return b
		}, codes.InvalidArgument},
		{"unknown codec", open("test", 5), func() *ferryv1.Batch {
			b := good(0)
			b.Codec = 99
			return b
		}, codes.InvalidArgument},
		{"partition the stream did not open", open("test", 5), func() *ferryv1.Batch { return good(1) }, codes.FailedPrecondition},
		{"batch epoch differs from the open", open("test", 5), func() *ferryv1.Batch {
			b := good(0)
			b.Epoch = 4
			return b
		}, codes.FailedPrecondition},
		{"oversized message", open("test", 5), func() *ferryv1.Batch {
			b := good(0)
			b.Payload = make([]byte, 8<<20)
			return b
		}, codes.ResourceExhausted},
		// Last: an open with a higher epoch makes epoch 5 stale.
		{"stale epoch after a newer owner", open("test", 6), func() *ferryv1.Batch {
			b := good(0)
			b.Epoch = 6
			b.Payload[0] ^= 0xff // refused anyway; the next case checks epoch 5
			return b
		}, codes.DataLoss},
		{"open with a stale epoch", open("test", 5), nil, codes.FailedPrecondition},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stream, err := client.Replicate(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Open{Open: tt.open}}); err != nil {
				t.Fatal(err)
			}
			if tt.batch != nil {
				resp, err := stream.Recv()
				if err != nil {
					t.Fatalf("open refused: %v", err)
				}
				if resp.GetOpened() == nil {
					t.Fatalf("first answer is not Opened: %v", resp)
				}
				_ = stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Batch{Batch: tt.batch()}})
			}
			_, err = stream.Recv()
			if got := status.Code(err); got != tt.want {
				t.Fatalf("status %v (%v), want %v", got, err, tt.want)
			}
		})
	}
	if n := e.targetRecords(ctx, "src.t.hostile"); n != 0 {
		t.Fatalf("refused input wrote %d records to the target", n)
	}
}

// TestWriterRefusesClientsWithoutTheFetcherIdentity: a plaintext client
// fails the handshake (Unavailable); a client whose certificate comes from
// the writer's CA but carries the writer's identity (not a fetcher's)
// completes it and gets PermissionDenied on every method of the service,
// listed from the generated descriptor so a new method is covered too. The
// writer logs the denial with the presented identity and writes nothing; a
// real fetcher with that identity counts its restarts as permission_denied.
func TestWriterRefusesClientsWithoutTheFetcherIdentity(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := newEnv(t)
	e.startWriter()
	wrong, err := harness.FetcherTLS(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	certDir, _ := harness.Certs(e.dir)
	writerCert, err := tls.LoadX509KeyPair(filepath.Join(certDir, "writer.pem"), filepath.Join(certDir, "writer-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	wrong.Certificates = []tls.Certificate{writerCert}
	writerID := devcerts.SPIFFEID(devcerts.DefaultTrustDomain, "writer")
	for name, tc := range map[string]struct {
		creds credentials.TransportCredentials
		want  codes.Code
	}{
		"plaintext":      {insecure.NewCredentials(), codes.Unavailable},
		"wrong identity": {credentials.NewTLS(wrong), codes.PermissionDenied},
	} {
		conn, err := grpc.NewClient(e.writerAddr, grpc.WithTransportCredentials(tc.creds))
		if err != nil {
			t.Fatal(err)
		}
		for method, err := range callEveryFerryMethod(ctx, conn) {
			if code := status.Code(err); code != tc.want {
				t.Errorf("%s client, %s: %v, want %v", name, method, err, tc.want)
			}
			if tc.want == codes.PermissionDenied && !strings.Contains(status.Convert(err).Message(), writerID) {
				t.Errorf("%s client, %s: %q does not name the presented identity %s", name, method, status.Convert(err).Message(), writerID)
			}
		}
		conn.Close()
	}
	logData, err := os.ReadFile(e.writer.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	var denial string
	for _, line := range strings.Split(string(logData), "\n") {
		if strings.Contains(line, "tls client denied") && strings.Contains(line, "/ferry.v1.ReplicationService/") {
			denial = line
		}
	}
	if !strings.Contains(denial, writerID) || !strings.Contains(denial, "not in allowed_ids") {
		t.Errorf("no denial log line naming %s and the method; writer log:\n%s", writerID, logData)
	}

	// A real fetcher presenting the writer's identity keeps retrying, and
	// its restarts metric tells the operator why.
	e.createTopic("t.hostile", 2, nil)
	e.produce(ctx, workload.Options{Topic: "t.hostile", Partitions: 2, Records: 100, ValueBytes: 50, Seed: 3})
	cfg := harness.FetcherConfig("fetcher-1", e.fetcherAdmin, "test", e.src, []string{e.writerAddr}, `t\..*`)
	cfg["writers"].(map[string]any)["tls"] = harness.TierTLS(certDir, "writer", "writer")
	f, err := harness.Start(e.dir, filepath.Join(binDir, "ferry-fetcher"), "fetcher", cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.fetcher = f
	t.Cleanup(func() { e.stop(f) })
	e.waitMetric(`ferry_fetcher_stream_restarts_total{link="test",reason="permission_denied"}`, 2)

	if n := e.targetRecords(ctx, "src.t.hostile"); n != 0 {
		t.Fatalf("refused clients wrote %d records", n)
	}
}

// callEveryFerryMethod calls each method of the Ferry gRPC service, from
// its generated descriptor, with an empty message, and returns each
// outcome by full method name. A stream counts as refused when its first
// receive fails.
func callEveryFerryMethod(ctx context.Context, conn *grpc.ClientConn) map[string]error {
	desc := ferryv1.ReplicationService_ServiceDesc
	out := map[string]error{}
	for _, m := range desc.Methods {
		full := "/" + desc.ServiceName + "/" + m.MethodName
		out[full] = conn.Invoke(ctx, full, &emptypb.Empty{}, &emptypb.Empty{})
	}
	for i, st := range desc.Streams {
		full := "/" + desc.ServiceName + "/" + st.StreamName
		s, err := conn.NewStream(ctx, &desc.Streams[i], full)
		if err == nil {
			err = s.RecvMsg(&emptypb.Empty{})
		}
		out[full] = err
	}
	return out
}

// TestCertificateRotationMidStream replaces the CA and both tiers'
// certificates while records flow. The new files carry both the old and the
// new CA first (the overlap window), then the new CA alone; SIGHUP makes
// each tier reload at once, and a short maximum connection age makes the
// streams re-handshake with the new material. Nothing may be lost.
func TestCertificateRotationMidStream(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	certDir, err := harness.Certs(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	wtls := harness.TierTLS(certDir, "writer", "fetcher")
	wtls["max_connection_age"] = "3s"
	e.writerExtra = map[string]any{"tls": wtls}
	e.createTopic("t.rot", 2, nil)
	e.startWriter()
	e.startFetcher(nil)
	const records = 6000
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.produce(ctx, workload.Options{Topic: "t.rot", Partitions: 2, Records: records, ValueBytes: 200, Rate: 800, Seed: 4})
	}()
	e.waitFor(ctx, "src.t.rot", 1000)

	oldCA, err := os.ReadFile(filepath.Join(certDir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := devcerts.WriteDir(certDir, devcerts.Options{Validity: time.Hour, Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	newCA, err := os.ReadFile(filepath.Join(certDir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	hup := func() {
		for _, p := range []*harness.Process{e.writer, e.fetcher} {
			if err := syscall.Kill(p.PID(), syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Overlap: both CAs trusted while the tiers move to the new certificates.
	if err := devcerts.WriteFileAtomic(filepath.Join(certDir, "ca.pem"), append(append([]byte{}, newCA...), oldCA...), 0o644); err != nil {
		t.Fatal(err)
	}
	hup()
	// A deliberate gap, past the writer's max_connection_age (3s): every
	// connection then in use was opened after the reload, with the new
	// material. Nothing reports a handshake to wait on instead.
	time.Sleep(5 * time.Second)
	if err := devcerts.WriteFileAtomic(filepath.Join(certDir, "ca.pem"), newCA, 0o644); err != nil {
		t.Fatal(err)
	}
	hup()
	// A fetcher started now can only connect with the new material on both
	// sides: the old CA is trusted nowhere any more.
	if err := e.fetcher.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := e.fetcher.Restart(); err != nil {
		t.Fatal(err)
	}
	<-done
	e.waitFor(ctx, "src.t.rot", records)
	res := e.verify(ctx, "t.rot")
	recordScenario(t, "", res, 0)
	if !res.OK() || res.Produced != records {
		t.Fatalf("certificate rotation mid-stream: %+v", res)
	}
}
