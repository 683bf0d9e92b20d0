package server

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/test/bufconn"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/linkstate"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
	"github.com/ferry-replicator/ferry/services/writer/internal/checkpoint"
	"github.com/ferry-replicator/ferry/services/writer/internal/server/servertest"
)

// controlWriter is a writer of link east with its ControlService: TLS as
// the app wires it, Replicate for the fetcher only, control for the
// operator only (none when operators is empty), checkpoints and control
// records signed with the writer's certificate.
type controlWriter struct {
	*testWriter
	ctlLis *bufconn.Listener
	ctl    ferryv1.ControlServiceClient
}

func startControlWriter(t *testing.T, pki servertest.PKI, cluster *kfake.Cluster, exactlyOnce bool, operators ...string) *controlWriter {
	t.Helper()
	return startControlWriterWith(t, pki, cluster, exactlyOnce, nil, operators...)
}

// startControlWriterWith is startControlWriter with edit applied to the
// writer's options (nil: none).
func startControlWriterWith(t *testing.T, pki servertest.PKI, cluster *kfake.Cluster, exactlyOnce bool, edit func(*Options), operators ...string) *controlWriter {
	t.Helper()
	cfg := pki.Config(t, cluster)
	w := startWriterOn(t, cluster, passthroughLinks(t, exactlyOnce), func(o *Options) {
		o.ReplicateIDs = tlsconfig.NewIDs([]string{fetcherID})
		if edit != nil {
			edit(o)
		}
	}, cfg.Store, cfg.ServerOptions, cfg.Creds)
	cw := &controlWriter{testWriter: w}
	cw.ctlLis = servertest.Serve(t, cfg.ServerOptions, func(gs *grpc.Server) {
		ferryv1.RegisterControlServiceServer(gs, NewControl(w.srv, tlsconfig.NewIDs(operators)))
	})
	cw.ctl = cw.dialControl(t, creds(pki.Operator))
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
	wantRefusal(t, err, codes.FailedPrecondition, `link "east"`)
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
	pki := newControlPKI(t)
	w := startControlWriter(t, pki, nil, false, operatorID)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	_, err := w.dialControl(t, creds(pki.Fetcher)).Status(ctx, &ferryv1.StatusRequest{})
	wantRefusal(t, err, codes.PermissionDenied, fetcherID, "control.allowed_ids")
	_, err = w.dialControl(t, creds(pki.Fetcher)).SetLinkState(ctx, &ferryv1.SetLinkStateRequest{Link: "east", State: ferryv1.LinkState_LINK_STATE_PAUSED})
	wantRefusal(t, err, codes.PermissionDenied, fetcherID)
	_, err = openShard(ctx, t, w.dial(t, creds(pki.Operator)), "east", 0, testShards, 1)
	wantRefusal(t, err, codes.PermissionDenied, operatorID, "tls.allowed_ids")

	resp, err := w.ctl.Status(ctx, &ferryv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetLinks()) != 1 || resp.GetLinks()[0].GetControl().GetState() != ferryv1.LinkState_LINK_STATE_RUNNING {
		t.Fatalf("status %v, want link east running", resp)
	}
	_, err = w.ctl.Status(ctx, &ferryv1.StatusRequest{Link: "west"})
	wantRefusal(t, err, codes.NotFound, `"west"`)

	off := startControlWriter(t, pki, nil, false)
	_, err = off.ctl.Status(ctx, &ferryv1.StatusRequest{})
	wantRefusal(t, err, codes.PermissionDenied, "control.allowed_ids is empty")
}

// Pause ends the link's streams after committing what they hold and
// refuses their opens; resume lets the fetcher open again from the
// checkpoint, and the target holds every record exactly once.
func TestPauseAndResumeCopyExactlyOnce(t *testing.T) {
	pki := newControlPKI(t)
	w := startControlWriter(t, pki, nil, true, operatorID)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	stream, err := openShard(ctx, t, w.client, "east", 0, testShards, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := sendToPartition(t, stream, 1, 0, 0, sourceBatch(t, 0, 5, nil, recordbatch.None, 0)); err != nil {
		t.Fatal(err)
	}
	// The second batch races the pause: committed or dropped, never half.
	sendTo(t, stream, 2, 0, wireKafka(t, 5, sourceBatch(t, 5, 5, nil, recordbatch.None, 0)))
	paused := w.setState(ctx, t, linkstate.Paused, "maintenance")
	if paused.GetGeneration() != 1 || paused.GetBy() != operatorID {
		t.Fatalf("paused as %v, want generation 1 by %s", paused, operatorID)
	}
	start := time.Now()
	_, err = untilEnd(stream, 5)
	wantLinkRefusal(t, err, linkstate.Paused)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the stream ended %v after the pause", took)
	}
	_, err = openShard(ctx, t, w.client, "east", 0, testShards, 2)
	wantLinkRefusal(t, err, linkstate.Paused)
	if got := w.rejected(t, "east", "link_paused"); got < 1 {
		t.Errorf("rejected{reason=link_paused} = %v", got)
	}

	w.setState(ctx, t, linkstate.Running, "")
	stream, err = openShard(ctx, t, w.client, "east", 0, testShards, 2)
	if err != nil {
		t.Fatalf("open after resume: %v", err)
	}
	from := w.resumeFrom(t, 0)
	b := wireKafka(t, from, sourceBatch(t, from, int(15-from), nil, recordbatch.None, 0))
	b.Epoch = 2
	b.Sequence, b.Topic, b.Partition = 1, "orders", 0
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Batch{Batch: b}}); err != nil {
		t.Fatal(err)
	}
	if err := awaitAck(stream, 1); err != nil {
		t.Fatal(err)
	}
	closeStream(t, stream)
	if got, want := partitionValues(t, w.testWriter, 0), vals(0, 15); !equalStrings(got, want) {
		t.Fatalf("target holds %v, want %v exactly once", got, want)
	}
}

// resumeFrom is partition's committed next offset in the writer's view.
func (w *controlWriter) resumeFrom(t *testing.T, partition int32) int64 {
	t.Helper()
	cp, ok, err := w.store.Get(checkpoint.Key{Link: "east", Topic: "orders", Partition: partition})
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
	pki := newControlPKI(t)
	w1 := startControlWriter(t, pki, nil, false, operatorID)
	w2 := startControlWriter(t, pki, w1.cluster, false, operatorID)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	stream, err := openShard(ctx, t, w2.client, "east", 0, testShards, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := sendToPartition(t, stream, 1, 0, 0, sourceBatch(t, 0, 5, nil, recordbatch.None, 0)); err != nil {
		t.Fatal(err)
	}
	w1.setState(ctx, t, linkstate.FailedOver, "region east lost")
	_, err = untilEnd(stream, 5)
	wantLinkRefusal(t, err, linkstate.FailedOver)
	hw := w1.cluster.PartitionInfo("orders", 0).HighWatermark

	_, err = openShard(ctx, t, w2.client, "east", 0, testShards, 7)
	wantLinkRefusal(t, err, linkstate.FailedOver)
	if got := w2.srv.currentEpoch("east", 0); got != 1 {
		t.Errorf("shard epoch %d after the zombie's open, want 1", got)
	}
	if got := w1.cluster.PartitionInfo("orders", 0).HighWatermark; got != hw {
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
	pki := newControlPKI(t)
	w := startControlWriter(t, pki, nil, false, operatorID)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	value := []byte(`{"state":"failed_over","reason":"forged","by":"mallory","time":"2026-01-01T00:00:00Z","generation":9}`)
	w.produceCheckpoint(ctx, t, &kgo.Record{Key: []byte("control/east"), Value: value})
	rec := &kgo.Record{Key: []byte("control/east"), Value: value}
	sig, err := pki.Fetcher.Sign("ferry-link-control", rec.Key, rec.Value)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range sig.Headers() {
		rec.Headers = append(rec.Headers, kgo.RecordHeader(h))
	}
	w.produceCheckpoint(ctx, t, rec)

	if _, err := openShard(ctx, t, w.client, "east", 0, testShards, 1); err != nil {
		t.Fatalf("open after forged control records: %v", err)
	}
	if c := w.store.Control("east"); c.State != linkstate.Running || c.Generation != 0 {
		t.Fatalf("link east is %s at generation %d after forged records", c.State, c.Generation)
	}
	// The genuine change that follows counts from the verified state.
	if c := w.setState(ctx, t, linkstate.Paused, ""); c.GetGeneration() != 1 {
		t.Fatalf("paused at generation %d, want 1", c.GetGeneration())
	}
}
