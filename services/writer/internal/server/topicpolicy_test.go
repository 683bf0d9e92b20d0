package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/ferry-replicator/ferry/pkg/batch"
	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/kafkaclient"
	"github.com/ferry-replicator/ferry/pkg/provenance"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/pkg/shards"
	"github.com/ferry-replicator/ferry/services/writer/internal/checkpoint"
	"github.com/ferry-replicator/ferry/services/writer/internal/metrics"
	"github.com/ferry-replicator/ferry/services/writer/internal/naming"
	"github.com/ferry-replicator/ferry/services/writer/internal/offsetindex"
	"github.com/ferry-replicator/ferry/services/writer/internal/topicfilter"
	"github.com/ferry-replicator/ferry/services/writer/internal/topics"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// go-metrics, which sarama uses, starts a process-wide meter ticker.
		goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"),
	)
}

// cpTopic does not start with __ferry, so refusing it shows the checkpoint
// topic is reserved by name, not only by the prefix.
const cpTopic = "ferry-state"

// indexTopic, likewise, shows the offset index topic is reserved by name.
const indexTopic = "ferry-index"

// testWriter is a Server over a kfake target, with a real checkpoint store
// and topic ensurer, served through bufconn.
type testWriter struct {
	cluster *kfake.Cluster
	reg     *prometheus.Registry
	client  ferryv1.ReplicationServiceClient
	store   *checkpoint.Store
	srv     *Server
	lis     *bufconn.Listener
	conns   []*grpc.ClientConn // closed before the server drains
}

// rejected is ferry_writer_rejected_total of the link and reason.
func (w *testWriter) rejected(t *testing.T, link, reason string) float64 {
	t.Helper()
	mfs, err := w.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "ferry_writer_rejected_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["link"] == link && labels["reason"] == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
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

// testSyncInterval is the test writers' topic sync round.
const testSyncInterval = 50 * time.Millisecond

// testShards is the shard count of a test link that sets none: every
// partition is in shard 0, so a test of one stream lists any partitions.
// A test of several shards sets links[].shards and lists each shard's
// own (inShard).
const testShards = 1

// inShard is the first partition of topic in shard when the link has n
// shards (shards.Of, as the fetchers place them).
func inShard(topic string, shard, n uint32) int32 {
	for p := int32(0); ; p++ {
		if shards.Of(topic, p, int(n)) == int(shard) {
			return p
		}
	}
}

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
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if cluster == nil {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		cluster = c
	}
	addrs := cluster.ListenAddrs()
	kc := kafkaclient.Defaults("ferry-test")
	base, err := kc.Sarama()
	if err != nil {
		t.Fatal(err)
	}
	storeOpts := checkpoint.Options{Topic: cpTopic, Partitions: 1, ReplicationFactor: -1, Writer: "w1"}
	if editStore != nil {
		editStore(&storeOpts)
	}
	store, err := checkpoint.Open(addrs, base, storeOpts, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	ens, err := topics.New(addrs, base, m.TopicsRecreated, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ens.Close() })
	if err := ens.Ensure(topics.Spec{Name: provenance.Topic, Partitions: 1, ReplicationFactor: -1, Configs: provenance.Configs}); err != nil {
		t.Fatal(err)
	}
	indexParts, err := ens.EnsureOwn(topics.Spec{Name: indexTopic, Partitions: 1, ReplicationFactor: -1, Configs: offsetindex.Configs(offsetindex.DefaultRetention)})
	if err != nil {
		t.Fatal(err)
	}
	recorder, err := provenance.NewRecorder([]kgo.Opt{kgo.SeedBrokers(addrs...)}, "w1", nil, provenance.KeyByStream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(recorder.Close)
	codecs, err := batch.NewCodecs(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(codecs.Close)
	// The syncer runs as the writer's app runs it, each round short.
	syncer := topics.NewSyncer(ens, m.TopicConfigDrift, log)
	syncCtx, stopSync := context.WithCancel(context.Background())
	syncDone := make(chan struct{})
	go func() { syncer.Run(syncCtx, testSyncInterval); close(syncDone) }()
	t.Cleanup(func() { stopSync(); <-syncDone })
	opts := Options{ID: "w1", Syncer: syncer, Target: []kgo.Opt{kgo.SeedBrokers(addrs...)}, MaxBatchBytes: 1 << 20, MaxPartitions: 1000, MaxStreams: 1000, MaxStreamsPerPeer: 1000, MaxGroupBytes: 1 << 20, MaxBufferedBytes: 64 << 20, Recorder: recorder,
		Index:    offsetindex.Topic{Name: indexTopic, Partitions: indexParts},
		Producer: ProducerSettings{Compression: recordbatch.LZ4, MaxMessageBytes: 1 << 20, MergeBelow: 64 << 10, Timeout: 10 * time.Second, TransactionTimeout: 10 * time.Second}}
	edit(&opts)
	srv := New(opts, links, ens, store, codecs, m, log)

	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer(serverOpts...)
	ferryv1.RegisterReplicationServiceServer(gs, srv)
	served := make(chan struct{})
	go func() { _ = gs.Serve(lis); close(served) }()
	w := &testWriter{cluster: cluster, reg: reg, store: store, srv: srv, lis: lis}
	w.client = w.dial(t, creds)
	t.Cleanup(func() {
		for _, c := range w.conns {
			c.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Drain(ctx); err != nil {
			t.Error(err)
		}
		gs.Stop()
		<-served
	})
	return w
}

// dial connects another client to the writer, with creds; the connection
// closes when the test ends, before the writer drains.
func (w *testWriter) dial(t *testing.T, creds credentials.TransportCredentials) ferryv1.ReplicationServiceClient {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return w.lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	w.conns = append(w.conns, conn)
	return ferryv1.NewReplicationServiceClient(conn)
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
	stream, err := w.client.Replicate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	open := &ferryv1.Open{Link: link, Shard: 0, Epoch: 1, Fetcher: "f1", SourceClusterId: source,
		Topics:     []*ferryv1.TopicSpec{{Name: "orders", PartitionCount: 1}},
		Partitions: []*ferryv1.TopicPartition{{Topic: "orders", Partition: 0}}}
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Open{Open: open}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil || resp.GetOpened() == nil {
		t.Fatalf("open answered %v, %v; want Opened", resp, err)
	}
	return stream, resp.GetOpened()
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
