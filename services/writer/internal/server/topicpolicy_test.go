package server

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/services/writer/internal/checkpoint"
	"github.com/ferry-replicator/ferry/services/writer/internal/naming"
	"github.com/ferry-replicator/ferry/services/writer/internal/server/servertest"
	"github.com/ferry-replicator/ferry/services/writer/internal/topicfilter"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// go-metrics, which sarama uses, starts a process-wide meter ticker.
		goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"),
	)
}

// testWriter is a Server over a kfake target, with a real checkpoint store
// and topic ensurer, served through bufconn (servertest.Start).
type testWriter struct {
	h       *servertest.Writer
	cluster *kfake.Cluster
	reg     *prometheus.Registry
	client  ferryv1.ReplicationServiceClient
	store   *checkpoint.Store
	srv     *Server
}

func startWriter(t *testing.T, links []Link) *testWriter {
	t.Helper()
	return startWriterWith(t, links, func(*ProducerSettings) {})
}

// startWriterWith is startWriter with the shard producers' configuration
// edited.
func startWriterWith(t *testing.T, links []Link, producer func(*ProducerSettings)) *testWriter {
	t.Helper()
	return startWriterOptions(t, links, func(o *Options) { producer(&o.Producer) })
}

// startWriterOptions is startWriter with the server's options edited.
func startWriterOptions(t *testing.T, links []Link, edit func(*Options)) *testWriter {
	t.Helper()
	return startWriterGRPC(t, links, edit, nil, insecure.NewCredentials())
}

// testShards is the shard count of a test link that sets none: every
// partition is in shard 0, so a test of one stream lists any partitions.
// A test of several shards sets links[].shards and lists each shard's
// own (inShard).
const testShards = 1

// withShards is links with n shards each.
func withShards(links []Link, n uint32) []Link {
	links = slices.Clone(links)
	for i := range links {
		links[i].Shards = n
	}
	return links
}

// startWriterGRPC is startWriterOptions with the gRPC server's options
// (TLS) and the test client's credentials.
func startWriterGRPC(t *testing.T, links []Link, edit func(*Options), serverOpts []grpc.ServerOption, creds credentials.TransportCredentials) *testWriter {
	t.Helper()
	return startWriterOn(t, nil, links, edit, nil, serverOpts, creds)
}

// startWriterOn is startWriterGRPC on a given target cluster (nil: one of
// its own), as a writer restarted on the same target is, with the
// checkpoint store's options edited (editStore, nil for none: signing).
func startWriterOn(t *testing.T, cluster *kfake.Cluster, links []Link, edit func(*Options), editStore func(*checkpoint.Options), serverOpts []grpc.ServerOption, creds credentials.TransportCredentials) *testWriter {
	t.Helper()
	links = slices.Clone(links)
	for i := range links {
		if links[i].Shards == 0 {
			links[i].Shards = testShards
		}
	}
	var srv *Server
	h := servertest.Start(t, servertest.Config{Cluster: cluster, Store: editStore, ServerOptions: serverOpts, Creds: creds}, func(tg *servertest.Target) servertest.Server {
		opts := Options{ID: servertest.WriterID, Syncer: tg.Syncer, Target: tg.Kafka, MaxBatchBytes: 1 << 20, MaxPartitions: 1000, MaxStreams: 1000, MaxStreamsPerPeer: 1000, MaxGroupBytes: 1 << 20, MaxBufferedBytes: 64 << 20, Recorder: tg.Recorder,
			Index:    tg.Index,
			Producer: ProducerSettings{Compression: recordbatch.LZ4, MaxMessageBytes: 1 << 20, MergeBelow: 64 << 10, Timeout: 10 * time.Second, TransactionTimeout: 10 * time.Second}}
		edit(&opts)
		srv = New(opts, links, tg.Ensurer, tg.Store, tg.Codecs, tg.Metrics, tg.Log)
		return srv
	})
	return &testWriter{h: h, cluster: h.Cluster, reg: h.Reg, client: h.Client, store: h.Store, srv: srv}
}

// dial connects another client to the writer, with creds; the connection
// closes when the test ends, before the writer drains.
func (w *testWriter) dial(t *testing.T, creds credentials.TransportCredentials) ferryv1.ReplicationServiceClient {
	t.Helper()
	return w.h.Dial(t, creds)
}

// open sends an Open of one partition of each topic and returns the
// writer's first answer: an Opened, or the status the stream ended with.
func (w *testWriter) open(t *testing.T, link string, topicNames ...string) (*ferryv1.Opened, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := w.client.Replicate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	open := &ferryv1.Open{Link: link, Shard: 0, Epoch: 1, Fetcher: "f1"}
	for _, name := range topicNames {
		open.Topics = append(open.Topics, &ferryv1.TopicSpec{Name: name, PartitionCount: 1})
		open.Partitions = append(open.Partitions, &ferryv1.TopicPartition{Topic: name, Partition: 0})
	}
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Open{Open: open}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	// End the stream as a fetcher closing the shard does, and wait for the
	// writer to end it, so the session is gone before the next case.
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := stream.Recv(); err != nil {
			break
		}
	}
	return resp.GetOpened(), nil
}

// openOrders opens shard 1 of link over partition 0 of topic orders and
// waits for the writer's Opened.
func (w *testWriter) openOrders(ctx context.Context, t *testing.T, link string) ferryv1.ReplicationService_ReplicateClient {
	t.Helper()
	stream, _ := w.openOrdersFrom(ctx, t, link, "")
	return stream
}

// openOrdersFrom is openOrders from the source cluster whose Kafka cluster
// id is source; it returns the writer's Opened too.
func (w *testWriter) openOrdersFrom(ctx context.Context, t *testing.T, link, source string) (ferryv1.ReplicationService_ReplicateClient, *ferryv1.Opened) {
	t.Helper()
	return servertest.OpenOrdersFrom(ctx, t, w.client, link, source)
}

func mustFilter(t *testing.T, include, exclude []string) topicfilter.Filter {
	t.Helper()
	f, err := topicfilter.Parse(include, exclude)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestOpenRefusesTopics(t *testing.T) {
	prefix, err := naming.Parse("prefix", "__ferry.")
	if err != nil {
		t.Fatal(err)
	}
	all := mustFilter(t, []string{".*"}, []string{}) // reserved names are refused even so
	links := []Link{
		{Name: "east", Topics: mustFilter(t, topicfilter.DefaultInclude, topicfilter.DefaultExclude)},
		{Name: "open", Topics: all},
		{Name: "orders-only", Topics: mustFilter(t, []string{`orders(\..*)?`}, topicfilter.DefaultExclude)},
		{Name: "ferry-prefixed", Naming: prefix, Topics: all},
	}
	w := startWriter(t, links)

	tests := []struct {
		name, link string
		topics     []string
		want       []string // parts of the refusal; none: accepted
	}{
		{"checkpoint topic by name", "open", []string{cpTopic}, []string{`link "open"`, `topic "ferry-state"`, "the writer's checkpoint topic"}},
		{"offset index topic by name", "open", []string{indexTopic}, []string{`topic "ferry-index"`, "the writer's offset index topic"}},
		{"ferry prefix", "open", []string{"__ferry_checkpoints"}, []string{`topic "__ferry_checkpoints"`, "reserved for Ferry"}},
		{"consumer offsets", "open", []string{"__consumer_offsets"}, []string{`topic "__consumer_offsets"`, "a Kafka internal topic"}},
		{"transaction state", "open", []string{"__transaction_state"}, []string{"a Kafka internal topic"}},
		{"target name is checked, not the source", "ferry-prefixed", []string{"orders"},
			[]string{`link "ferry-prefixed"`, `topic "orders"`, `target topic "__ferry.orders"`, "reserved for Ferry"}},
		{"default exclude", "east", []string{"app.internal"}, []string{`link "east"`, "topics.exclude `.*[\\-\\.]internal`"}},
		{"default exclude of underscores", "east", []string{"__private"}, []string{"topics.exclude `__.*`"}},
		{"outside include", "orders-only", []string{"payments"}, []string{`link "orders-only"`, `topic "payments"`, "no topics.include"}},
		{"one bad topic refuses the open", "east", []string{"orders", "__ferry_x"}, []string{`topic "__ferry_x"`}},
		{"allowed", "orders-only", []string{"orders.eu"}, nil},
		{"allowed by defaults", "east", []string{"orders"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := func(name string) string {
				if tt.link == "ferry-prefixed" {
					return "__ferry." + name
				}
				return name
			}
			existed := map[string]bool{}
			for _, name := range tt.topics {
				existed[name] = w.cluster.TopicInfo(target(name)) != nil
			}
			cpHW := w.cluster.PartitionInfo(cpTopic, 0).HighWatermark
			before := w.rejected(t, tt.link, "topic_refused")

			opened, err := w.open(t, tt.link, tt.topics...)

			if tt.want == nil {
				if err != nil {
					t.Fatalf("open refused: %v", err)
				}
				if opened.GetWriter() != "w1" || len(opened.GetResume()) != len(tt.topics) {
					t.Fatalf("Opened = %v", opened)
				}
				for _, name := range tt.topics {
					if w.cluster.TopicInfo(target(name)) == nil {
						t.Errorf("target topic %s not created", target(name))
					}
				}
				return
			}
			if status.Code(err) != codes.PermissionDenied {
				t.Fatalf("open answered %v (%v), want PermissionDenied", status.Code(err), err)
			}
			for _, part := range tt.want {
				if !strings.Contains(status.Convert(err).Message(), part) {
					t.Errorf("refusal %q does not say %q", status.Convert(err).Message(), part)
				}
			}
			if got := w.rejected(t, tt.link, "topic_refused") - before; got != 1 {
				t.Errorf("rejected{reason=topic_refused} grew by %v, want 1", got)
			}
			// Refused before anything is written: no target topic created,
			// not even for the open's allowed topics, and no checkpoint
			// barrier produced.
			for _, name := range tt.topics {
				if !existed[name] && w.cluster.TopicInfo(target(name)) != nil {
					t.Errorf("target topic %s created by a refused open", target(name))
				}
			}
			if hw := w.cluster.PartitionInfo(cpTopic, 0).HighWatermark; hw != cpHW {
				t.Errorf("checkpoint topic high watermark %d -> %d: a refused open wrote to it", cpHW, hw)
			}
		})
	}
}

// Checking an Open's topics is enough: a batch of a topic the Open did not
// name is refused however it names it, before anything reaches the target.
func TestBatchOfATopicOutsideTheOpenIsRefused(t *testing.T) {
	w := startWriter(t, []Link{{Name: "east", Topics: mustFilter(t, topicfilter.DefaultInclude, topicfilter.DefaultExclude)}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream := w.openOrders(ctx, t, "east")
	cpHW := w.cluster.PartitionInfo(cpTopic, 0).HighWatermark
	b := &ferryv1.Batch{Sequence: 1, Epoch: 1, Topic: cpTopic, Partition: 0, FirstOffset: 0, LastOffset: 0}
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Batch{Batch: b}}); err != nil {
		t.Fatal(err)
	}
	var recvErr error
	for recvErr == nil {
		_, recvErr = stream.Recv()
	}
	if status.Code(recvErr) != codes.FailedPrecondition || !strings.Contains(recvErr.Error(), "not in shard") {
		t.Fatalf("batch answered %v, want FailedPrecondition: not in shard", recvErr)
	}
	if hw := w.cluster.PartitionInfo(cpTopic, 0).HighWatermark; hw != cpHW {
		t.Errorf("checkpoint topic high watermark %d -> %d after a refused batch", cpHW, hw)
	}
}
