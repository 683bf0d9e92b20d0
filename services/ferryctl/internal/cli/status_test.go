package cli

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/ferry-replicator/ferry/pkg/batch"
	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/linkstate"
	"github.com/ferry-replicator/ferry/pkg/shards"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
	"github.com/ferry-replicator/ferry/services/writer/inprocess"
)

// ferryctl status shows the partition a writer refused for good (a
// record above producer.max_message_bytes), in text and in JSON, and
// calls the link unhealthy for it (exit 3): that partition copies
// nothing.
func TestStatusShowsStoppedPartition(t *testing.T) {
	tg := startTarget(t, func(o *inprocess.Options) { o.MaxMessageBytes = 100_000 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tg.stopOrders(ctx, t)

	rep := tg.status(t)
	l := rep.Links[0]
	if len(l.Stopped) != 1 {
		t.Fatalf("status shows stopped partitions %+v, want orders/0", l.Stopped)
	}
	if s := l.Stopped[0]; s.Topic != "orders" || s.Partition != 0 || s.Reason != "record_too_large" ||
		s.Writer != tg.writers[0].Addr || !strings.Contains(s.Error, "offset 7") || s.Since == nil {
		t.Errorf("stopped partition %+v, want orders/0 record_too_large at offset 7 on %s", s, tg.writers[0].Addr)
	}
	if rep.Healthy || !contains(l.Problems, "orders/0 is stopped (record_too_large) on writer "+tg.writers[0].Addr) {
		t.Errorf("problems %q, want orders/0 stopped among them", l.Problems)
	}
	code, out, errOut := tg.run(t, "ferryctl", "status", "east")
	if code != exitUnhealthy || !strings.Contains(errOut, "orders/0 is stopped (record_too_large)") {
		t.Errorf("status exited %d (%s), want %d naming orders/0", code, errOut, exitUnhealthy)
	}
	if !strings.Contains(out, "STOPPED") || !strings.Contains(out, "orders/0") || !strings.Contains(out, "record_too_large") {
		t.Errorf("status text lacks the stopped partition:\n%s", out)
	}
}

// A stopped partition alone makes a running link unhealthy, with every
// shard streaming and every heartbeat fresh; a paused link's is reported
// but is not a problem (nothing copies while paused).
func TestStoppedPartitionIsAProblem(t *testing.T) {
	l := LinkReport{
		Name: "east", State: linkstate.Running,
		Shards:  []ShardReport{{Shard: 0, Active: true}},
		Stopped: []StoppedReport{{Topic: "orders", Partition: 3, Reason: "target_refused", Writer: "w1:9000"}},
	}
	if got := problems(l, time.Minute, time.Minute); len(got) != 1 || got[0] != "orders/3 is stopped (target_refused) on writer w1:9000: it copies nothing until an operator acts" {
		t.Errorf("problems = %q", got)
	}
	l.State = linkstate.Paused
	if got := problems(l, time.Minute, time.Minute); len(got) != 0 {
		t.Errorf("problems of a paused link = %q", got)
	}
	var out bytes.Buffer
	printStatus(&out, Report{Links: []LinkReport{l}})
	if !strings.Contains(out.String(), "orders/3") || !strings.Contains(out.String(), "target_refused") {
		t.Errorf("status text lacks the stopped partition:\n%s", out.String())
	}
}

func contains(ss []string, sub string) bool {
	for _, s := range ss {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// stopOrders opens shard 1 (orders/0) on the first writer as its fetcher
// would and sends a batch whose record at offset 7 is above the writers'
// producer.max_message_bytes: the writer refuses it for good and ends the
// stream, stopping the partition.
func (tg target) stopOrders(ctx context.Context, t *testing.T) {
	t.Helper()
	stream, codecs := tg.openOrders(ctx, t)
	var enc batch.Encoder
	enc.Append(7, time.Now().UnixMilli(), []byte("big"), bytes.Repeat([]byte("x"), 150_000), nil)
	b := codecs.Seal(&enc, ferryv1.Codec_CODEC_NONE)
	b.Sequence, b.Epoch, b.Topic, b.Partition = 1, 1, "orders", 0
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Batch{Batch: b}}); err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return // refused: the stream ended
		}
		if resp.GetAck() != nil {
			t.Fatal("the record above producer.max_message_bytes was acknowledged")
		}
	}
}

// openOrders opens shard 1 (orders/0) of link east on the first writer as
// its fetcher would, with the fetcher's certificate; the stream and the
// codecs to seal its batches end with the test.
func (tg target) openOrders(ctx context.Context, t *testing.T) (ferryv1.ReplicationService_ReplicateClient, *batch.Codecs) {
	t.Helper()
	src, err := tlsconfig.NewSource(tlsconfig.Config{
		CertFile: filepath.Join(tg.dir, "fetcher.pem"), KeyFile: filepath.Join(tg.dir, "fetcher-key.pem"), CAFile: filepath.Join(tg.dir, "ca.pem"),
		AllowedIDs: []string{devcerts.SPIFFEID(devcerts.DefaultTrustDomain, "writer")},
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(tg.writers[0].Addr, grpc.WithTransportCredentials(credentials.NewTLS(src.ClientTLS())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	stream, err := ferryv1.NewReplicationServiceClient(conn).Replicate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	open := &ferryv1.Open{Link: "east", Shard: uint32(shards.Of("orders", 0, shards.Default)), Epoch: 1, Fetcher: "f",
		Topics:     []*ferryv1.TopicSpec{{Name: "orders", PartitionCount: 1}},
		Partitions: []*ferryv1.TopicPartition{{Topic: "orders", Partition: 0}}}
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Open{Open: open}}); err != nil {
		t.Fatal(err)
	}
	if resp, err := stream.Recv(); err != nil || resp.GetOpened() == nil {
		t.Fatalf("open answered %v, %v", resp, err)
	}
	codecs, err := batch.NewCodecs(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(codecs.Close)
	return stream, codecs
}

// The writers' index gaps (source topics the offset index cannot cover
// whole) are merged once per topic, sorted, and printed, as a warning: a
// link with one stays healthy.
func TestStatusNamesIndexGaps(t *testing.T) {
	gap := func(topic, reason string) *ferryv1.LinkIndexGap {
		return &ferryv1.LinkIndexGap{Topic: topic, Reason: reason}
	}
	answer := func(gaps ...*ferryv1.LinkIndexGap) *ferryv1.StatusResponse {
		return &ferryv1.StatusResponse{Links: []*ferryv1.LinkStatus{{Name: "east", Control: &ferryv1.LinkControl{State: ferryv1.LinkState_LINK_STATE_RUNNING}, IndexGaps: gaps}}}
	}
	links := merge([]*ferryv1.StatusResponse{
		answer(gap("orders", "compacted: the source keeps a key's last record for ever")),
		answer(gap("audit", "retention.ms -1: no time limit"), gap("orders", "compacted: the source keeps a key's last record for ever")),
	}, []string{"w1", "w2"})
	got := links[0].IndexGaps
	if len(got) != 2 || got[0].Topic != "audit" || got[1].Topic != "orders" || !strings.Contains(got[0].Reason, "no time limit") {
		t.Fatalf("merged index gaps %+v, want audit and orders once each", got)
	}
	if p := problems(links[0], time.Minute, time.Minute); len(p) != 0 {
		t.Errorf("index gaps made the link unhealthy: %v", p)
	}
	var out bytes.Buffer
	printStatus(&out, Report{Links: links, Healthy: true})
	if !strings.Contains(out.String(), "INDEX GAP: audit: retention.ms -1") || !strings.Contains(out.String(), "INDEX GAP: orders: compacted") {
		t.Errorf("status printed:\n%s\nwant both index gaps named", out.String())
	}
}
