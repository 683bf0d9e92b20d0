package control

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/test/bufconn"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/linkstate"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
	"github.com/ferry-replicator/ferry/services/writer/internal/checkpoint"
	"github.com/ferry-replicator/ferry/services/writer/internal/server"
	"github.com/ferry-replicator/ferry/services/writer/internal/server/servertest"
	"github.com/ferry-replicator/ferry/services/writer/internal/topicfilter"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// go-metrics, which sarama uses, starts a process-wide meter ticker.
		goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"),
	)
}

// testShards is the shard count of the test writers' link: every
// partition is in shard 0.
const testShards = 1

// controlWriter is a writer of link east (servertest.Start) with its
// ControlService: TLS as the app wires it, Replicate for the fetcher
// only, control for the operator only (none when operators is empty),
// checkpoints and control records signed with the writer's certificate.
type controlWriter struct {
	*servertest.Writer
	srv    *server.Server
	ctlLis *bufconn.Listener
	ctl    ferryv1.ControlServiceClient
}

func startControlWriter(t *testing.T, pki servertest.PKI, cluster *kfake.Cluster, exactlyOnce bool, operators ...string) *controlWriter {
	t.Helper()
	return startControlWriterWith(t, pki, cluster, exactlyOnce, nil, operators...)
}

// startControlWriterWith is startControlWriter with edit applied to the
// writer's options (nil: none).
func startControlWriterWith(t *testing.T, pki servertest.PKI, cluster *kfake.Cluster, exactlyOnce bool, edit func(*server.Options), operators ...string) *controlWriter {
	t.Helper()
	topics, err := topicfilter.Parse(topicfilter.DefaultInclude, topicfilter.DefaultExclude)
	if err != nil {
		t.Fatal(err)
	}
	links := []server.Link{{Name: "east", ExactlyOnce: exactlyOnce, Topics: topics, Shards: testShards}}
	cfg := pki.Config(t, cluster)
	cw := &controlWriter{}
	cw.Writer = servertest.Start(t, cfg, func(tg *servertest.Target) servertest.Server {
		opts := server.Options{ID: servertest.WriterID, Syncer: tg.Syncer, Target: tg.Kafka, Recorder: tg.Recorder, Index: tg.Index,
			MaxBatchBytes: 1 << 20, MaxGroupBytes: 1 << 20, MaxBufferedBytes: 64 << 20, MaxPartitions: 1000, MaxStreams: 1000, MaxStreamsPerPeer: 1000,
			Producer:     server.ProducerSettings{Compression: recordbatch.LZ4, MaxMessageBytes: 1 << 20, MergeBelow: 64 << 10, Timeout: 10 * time.Second, TransactionTimeout: 10 * time.Second},
			ReplicateIDs: tlsconfig.NewIDs([]string{servertest.FetcherID})}
		if edit != nil {
			edit(&opts)
		}
		cw.srv = server.New(opts, links, tg.Ensurer, tg.Store, tg.Codecs, tg.Metrics, tg.Log)
		return cw.srv
	})
	cw.ctlLis = servertest.Serve(t, cfg.ServerOptions, func(gs *grpc.Server) {
		ferryv1.RegisterControlServiceServer(gs, New(cw.srv, tlsconfig.NewIDs(operators), cw.Log))
	})
	cw.ctl = cw.dialControl(t, servertest.Creds(pki.Operator))
	return cw
}

func (w *controlWriter) dialControl(t *testing.T, c credentials.TransportCredentials) ferryv1.ControlServiceClient {
	t.Helper()
	return ferryv1.NewControlServiceClient(servertest.Conn(t, w.ctlLis, c))
}

func (w *controlWriter) setState(ctx context.Context, t *testing.T, state linkstate.State, reason string) *ferryv1.LinkControl {
	t.Helper()
	resp, err := w.ctl.SetLinkState(ctx, &ferryv1.SetLinkStateRequest{Link: "east", State: state.Proto(), Reason: reason})
	if err != nil {
		t.Fatalf("set link east %s: %v", state, err)
	}
	return resp.GetControl()
}

// wantLinkRefusal checks that err is the refusal of link east in state,
// as the fetcher reads it.
func wantLinkRefusal(t *testing.T, err error, state linkstate.State) {
	t.Helper()
	r, ok := linkstate.From(err)
	if !ok || r.State != state || r.Link != "east" {
		t.Fatalf("stream ended with %v; want the refusal of link east as %s", err, state)
	}
	servertest.WantRefusal(t, err, codes.FailedPrecondition, `link "east"`)
}

// untilEnd reads the stream's answers until it ends and returns how it
// ended and the last committed next offset of orders/0 acknowledged.
func untilEnd(stream ferryv1.ReplicationService_ReplicateClient, acked int64) (int64, error) {
	for {
		resp, err := stream.Recv()
		if err != nil {
			return acked, err
		}
		for _, p := range resp.GetAck().GetCommitted() {
			acked = p.GetNextOffset()
		}
	}
}

// Only control.allowed_ids may call the ControlService, and they may not
// call Replicate: the gRPC port admits both fetchers and operators.
func TestControlAdmitsOnlyItsOperators(t *testing.T) {
	pki := servertest.NewPKI(t)
	w := startControlWriter(t, pki, nil, false, servertest.OperatorID)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	_, err := w.dialControl(t, servertest.Creds(pki.Fetcher)).Status(ctx, &ferryv1.StatusRequest{})
	servertest.WantRefusal(t, err, codes.PermissionDenied, servertest.FetcherID, "control.allowed_ids")
	_, err = w.dialControl(t, servertest.Creds(pki.Fetcher)).SetLinkState(ctx, &ferryv1.SetLinkStateRequest{Link: "east", State: ferryv1.LinkState_LINK_STATE_PAUSED})
	servertest.WantRefusal(t, err, codes.PermissionDenied, servertest.FetcherID)
	_, err = servertest.OpenShard(ctx, t, w.Dial(t, servertest.Creds(pki.Operator)), "east", 0, testShards, 1)
	servertest.WantRefusal(t, err, codes.PermissionDenied, servertest.OperatorID, "tls.allowed_ids")

	resp, err := w.ctl.Status(ctx, &ferryv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetLinks()) != 1 || resp.GetLinks()[0].GetControl().GetState() != ferryv1.LinkState_LINK_STATE_RUNNING {
		t.Fatalf("status %v, want link east running", resp)
	}
	_, err = w.ctl.Status(ctx, &ferryv1.StatusRequest{Link: "west"})
	servertest.WantRefusal(t, err, codes.NotFound, `"west"`)

	off := startControlWriter(t, pki, nil, false)
	_, err = off.ctl.Status(ctx, &ferryv1.StatusRequest{})
	servertest.WantRefusal(t, err, codes.PermissionDenied, "control.allowed_ids is empty")
}

// Pause ends the link's streams after committing what they hold and
// refuses their opens; resume lets the fetcher open again from the
// checkpoint, and the target holds every record exactly once.
func TestPauseAndResumeCopyExactlyOnce(t *testing.T) {
	pki := servertest.NewPKI(t)
	w := startControlWriter(t, pki, nil, true, servertest.OperatorID)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	stream, err := servertest.OpenShard(ctx, t, w.Client, "east", 0, testShards, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := servertest.SendToPartition(t, stream, 1, 0, 0, servertest.SourceBatch(t, 0, 5, nil, recordbatch.None, 0)); err != nil {
		t.Fatal(err)
	}
	// The second batch races the pause: committed or dropped, never half.
	servertest.SendTo(t, stream, 2, 0, servertest.WireKafka(t, 5, servertest.SourceBatch(t, 5, 5, nil, recordbatch.None, 0)))
	paused := w.setState(ctx, t, linkstate.Paused, "maintenance")
	if paused.GetGeneration() != 1 || paused.GetBy() != servertest.OperatorID {
		t.Fatalf("paused as %v, want generation 1 by %s", paused, servertest.OperatorID)
	}
	start := time.Now()
	_, err = untilEnd(stream, 5)
	wantLinkRefusal(t, err, linkstate.Paused)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the stream ended %v after the pause", took)
	}
	_, err = servertest.OpenShard(ctx, t, w.Client, "east", 0, testShards, 2)
	wantLinkRefusal(t, err, linkstate.Paused)
	if got := w.Rejected(t, "east", "link_paused"); got < 1 {
		t.Errorf("rejected{reason=link_paused} = %v", got)
	}

	w.setState(ctx, t, linkstate.Running, "")
	stream, err = servertest.OpenShard(ctx, t, w.Client, "east", 0, testShards, 2)
	if err != nil {
		t.Fatalf("open after resume: %v", err)
	}
	from := w.resumeFrom(t, 0)
	b := servertest.WireKafka(t, from, servertest.SourceBatch(t, from, int(15-from), nil, recordbatch.None, 0))
	b.Epoch = 2
	b.Sequence, b.Topic, b.Partition = 1, "orders", 0
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Batch{Batch: b}}); err != nil {
		t.Fatal(err)
	}
	if err := servertest.AwaitAck(stream, 1); err != nil {
		t.Fatal(err)
	}
	servertest.CloseStream(t, stream)
	if got, want := servertest.PartitionValues(t, w.Cluster, 0), servertest.Vals(0, 15); !equalStrings(got, want) {
		t.Fatalf("target holds %v, want %v exactly once", got, want)
	}
}

// shardEpoch is the highest epoch the shard has seen on s (its line in
// Status), 0 when none.
func shardEpoch(s *server.Server, link string, shard uint32) uint64 {
	for _, st := range s.Status() {
		if st.Link == link && st.Shard == shard {
			return st.Epoch
		}
	}
	return 0
}

// resumeFrom is partition's committed next offset in the writer's view.
func (w *controlWriter) resumeFrom(t *testing.T, partition int32) int64 {
	t.Helper()
	cp, ok, err := w.Store.Get(checkpoint.Key{Link: "east", Topic: "orders", Partition: partition})
	if err != nil || !ok {
		t.Fatalf("checkpoint of orders/%d: %v, %v", partition, ok, err)
	}
	return cp.NextSourceOffset
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A failover recorded through one writer ends the link's stream on
// another writer of the target and refuses every later open there, a
// zombie fetcher's with a newer epoch included, which writes nothing and
// does not raise the shard's epoch.
func TestFailedOverRefusesZombiesOnEveryWriter(t *testing.T) {
	pki := servertest.NewPKI(t)
	w1 := startControlWriter(t, pki, nil, false, servertest.OperatorID)
	w2 := startControlWriter(t, pki, w1.Cluster, false, servertest.OperatorID)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	stream, err := servertest.OpenShard(ctx, t, w2.Client, "east", 0, testShards, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := servertest.SendToPartition(t, stream, 1, 0, 0, servertest.SourceBatch(t, 0, 5, nil, recordbatch.None, 0)); err != nil {
		t.Fatal(err)
	}
	w1.setState(ctx, t, linkstate.FailedOver, "region east lost")
	_, err = untilEnd(stream, 5)
	wantLinkRefusal(t, err, linkstate.FailedOver)
	hw := w1.Cluster.PartitionInfo("orders", 0).HighWatermark

	_, err = servertest.OpenShard(ctx, t, w2.Client, "east", 0, testShards, 7)
	wantLinkRefusal(t, err, linkstate.FailedOver)
	if got := shardEpoch(w2.srv, "east", 0); got != 1 {
		t.Errorf("shard epoch %d after the zombie's open, want 1", got)
	}
	if got := w1.Cluster.PartitionInfo("orders", 0).HighWatermark; got != hw {
		t.Errorf("orders/0 high watermark %d after the zombie's open, want %d", got, hw)
	}
	resp, err := w2.ctl.Status(ctx, &ferryv1.StatusRequest{Link: "east"})
	if err != nil {
		t.Fatal(err)
	}
	if c := resp.GetLinks()[0].GetControl(); c.GetState() != ferryv1.LinkState_LINK_STATE_FAILED_OVER || c.GetReason() != "region east lost" {
		t.Fatalf("writer 2 reports %v, want failed_over", c)
	}
}

// A control record anyone able to write the checkpoint topic forges
// (unsigned, or signed by a certificate checkpoints.signers does not
// admit) is ignored: the link runs on.
func TestForgedControlRecordIgnored(t *testing.T) {
	pki := servertest.NewPKI(t)
	w := startControlWriter(t, pki, nil, false, servertest.OperatorID)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	value := []byte(`{"state":"failed_over","reason":"forged","by":"mallory","time":"2026-01-01T00:00:00Z","generation":9}`)
	w.ProduceCheckpoint(ctx, t, &kgo.Record{Key: []byte("control/east"), Value: value})
	rec := &kgo.Record{Key: []byte("control/east"), Value: value}
	sig, err := pki.Fetcher.Sign("ferry-link-control", rec.Key, rec.Value)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range sig.Headers() {
		rec.Headers = append(rec.Headers, kgo.RecordHeader(h))
	}
	w.ProduceCheckpoint(ctx, t, rec)

	if _, err := servertest.OpenShard(ctx, t, w.Client, "east", 0, testShards, 1); err != nil {
		t.Fatalf("open after forged control records: %v", err)
	}
	if c := w.Store.Control("east"); c.State != linkstate.Running || c.Generation != 0 {
		t.Fatalf("link east is %s at generation %d after forged records", c.State, c.Generation)
	}
	// The genuine change that follows counts from the verified state.
	if c := w.setState(ctx, t, linkstate.Paused, ""); c.GetGeneration() != 1 {
		t.Fatalf("paused at generation %d, want 1", c.GetGeneration())
	}
}
