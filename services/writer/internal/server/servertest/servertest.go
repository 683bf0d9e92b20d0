// Package servertest is the writer's stream under test, for the tests of
// package server and of the packages over it (package control): a real
// writer of a kfake target cluster, built of what the writer's app builds
// it of (checkpoint store, topic ensurer, provenance recorder, offset
// index topic, topic syncer), served over gRPC on a bufconn listener, and
// the fetcher's side of its stream (open a shard, send source batches,
// wait for acknowledgements) with readers of what the target holds.
//
// It does not import package server, whose own tests use it: Start takes
// a function that builds the server from the Target, so each caller sets
// the server's options and links itself.
package servertest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/ferry-replicator/ferry/pkg/batch"
	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/kafkaclient"
	"github.com/ferry-replicator/ferry/pkg/provenance"
	"github.com/ferry-replicator/ferry/services/writer/internal/checkpoint"
	"github.com/ferry-replicator/ferry/services/writer/internal/metrics"
	"github.com/ferry-replicator/ferry/services/writer/internal/offsetindex"
	"github.com/ferry-replicator/ferry/services/writer/internal/topics"
)

// CheckpointTopic does not start with __ferry, so refusing it shows the
// checkpoint topic is reserved by name, not only by the prefix.
const CheckpointTopic = "ferry-state"

// IndexTopic, likewise, shows the offset index topic is reserved by name.
const IndexTopic = "ferry-index"

// WriterID is the test writers' Options.ID, and the writer their
// checkpoints name.
const WriterID = "w1"

// SyncInterval is the test writers' topic sync round.
const SyncInterval = 50 * time.Millisecond

// Target is a kfake target cluster and what a writer of it is built of,
// each closed when the test ends.
type Target struct {
	Cluster *kfake.Cluster
	// Kafka are the target's client options (its seeds).
	Kafka   []kgo.Opt
	Reg     *prometheus.Registry
	Metrics *metrics.Metrics
	Store   *checkpoint.Store
	Ensurer *topics.Ensurer
	// Recorder records the writer's producer ids (provenance.Topic, made).
	Recorder *provenance.Recorder
	Codecs   *batch.Codecs
	// Syncer runs a round every SyncInterval, as the app runs it.
	Syncer *topics.Syncer
	// Index is the offset index topic, IndexTopic, made.
	Index offsetindex.Topic
	Log   *slog.Logger
}

// Config is where Start's writer runs and how it is reached; the zero
// Config is a writer of a target of its own, in plaintext.
type Config struct {
	// Cluster is the target; nil: a cluster of its own. A writer started
	// on another's cluster is another writer of the same target, or the
	// same writer restarted.
	Cluster *kfake.Cluster
	// Store edits the checkpoint store's options (signing); nil: none.
	Store func(*checkpoint.Options)
	// ServerOptions are the gRPC server's (TLS).
	ServerOptions []grpc.ServerOption
	// Creds are Writer.Client's; nil: plaintext.
	Creds credentials.TransportCredentials
}

// Server is the writer's replication service as Start serves it
// (*server.Server).
type Server interface {
	ferryv1.ReplicationServiceServer
	// Drain ends the streams; Start drains the server when the test ends.
	Drain(context.Context) error
}

// Writer is a writer Start serves.
type Writer struct {
	*Target
	// Client is a client of the writer with Config.Creds.
	Client ferryv1.ReplicationServiceClient
	lis    *bufconn.Listener
	conns  []*grpc.ClientConn // closed before the server drains
}

// Start builds the Target cfg names, the writer of it (build), and serves
// the writer over bufconn until the test ends, then drains it.
func Start(t *testing.T, cfg Config, build func(*Target) Server) *Writer {
	t.Helper()
	tg := newTarget(t, cfg)
	srv := build(tg)
	w := &Writer{Target: tg}
	w.lis = Serve(t, cfg.ServerOptions, func(gs *grpc.Server) { ferryv1.RegisterReplicationServiceServer(gs, srv) })
	t.Cleanup(func() {
		for _, c := range w.conns {
			c.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Drain(ctx); err != nil {
			t.Error(err)
		}
	})
	creds := cfg.Creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	w.Client = w.Dial(t, creds)
	return w
}

// newTarget is the Target cfg names.
func newTarget(t *testing.T, cfg Config) *Target {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cluster := cfg.Cluster
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
	storeOpts := checkpoint.Options{Topic: CheckpointTopic, Partitions: 1, ReplicationFactor: -1, Writer: WriterID}
	if cfg.Store != nil {
		cfg.Store(&storeOpts)
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
	indexParts, err := ens.EnsureOwn(topics.Spec{Name: IndexTopic, Partitions: 1, ReplicationFactor: -1, Configs: offsetindex.Configs(offsetindex.DefaultRetention)})
	if err != nil {
		t.Fatal(err)
	}
	recorder, err := provenance.NewRecorder([]kgo.Opt{kgo.SeedBrokers(addrs...)}, WriterID, nil, provenance.KeyByStream)
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
	go func() { syncer.Run(syncCtx, SyncInterval); close(syncDone) }()
	t.Cleanup(func() { stopSync(); <-syncDone })
	return &Target{
		Cluster: cluster, Kafka: []kgo.Opt{kgo.SeedBrokers(addrs...)}, Reg: reg, Metrics: m, Store: store, Ensurer: ens,
		Recorder: recorder, Codecs: codecs, Syncer: syncer, Index: offsetindex.Topic{Name: IndexTopic, Partitions: indexParts}, Log: log,
	}
}

// Serve serves what register registers over a bufconn listener until the
// test ends, with the gRPC server's options opts.
func Serve(t *testing.T, opts []grpc.ServerOption, register func(*grpc.Server)) *bufconn.Listener {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer(opts...)
	register(gs)
	served := make(chan struct{})
	go func() { _ = gs.Serve(lis); close(served) }()
	t.Cleanup(func() { gs.Stop(); <-served })
	return lis
}

// Conn connects to what Serve serves on lis, with creds and opts; the
// connection closes when the test ends.
func Conn(t *testing.T, lis *bufconn.Listener, creds credentials.TransportCredentials, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn := dial(t, lis, creds, opts...)
	t.Cleanup(func() { conn.Close() })
	return conn
}

func dial(t *testing.T, lis *bufconn.Listener, creds credentials.TransportCredentials, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	opts = append([]grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(creds),
	}, opts...)
	conn, err := grpc.NewClient("passthrough:///bufnet", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// Dial connects another client to the writer, with creds and opts; the
// connection closes when the test ends, before the writer drains.
func (w *Writer) Dial(t *testing.T, creds credentials.TransportCredentials, opts ...grpc.DialOption) ferryv1.ReplicationServiceClient {
	t.Helper()
	conn := dial(t, w.lis, creds, opts...)
	w.conns = append(w.conns, conn)
	return ferryv1.NewReplicationServiceClient(conn)
}

// Rejected is ferry_writer_rejected_total of the link and reason.
func (w *Writer) Rejected(t *testing.T, link, reason string) float64 {
	t.Helper()
	mfs, err := w.Reg.Gather()
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

// ProduceCheckpoint writes rec to the checkpoint topic as anyone allowed
// to produce to it can, waits until the writer's view has read it, and
// returns its offset.
func (w *Writer) ProduceCheckpoint(ctx context.Context, t *testing.T, rec *kgo.Record) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.Cluster.ListenAddrs()...), kgo.DefaultProduceTopic(CheckpointTopic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rec.Topic, rec.Partition = CheckpointTopic, 0
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := w.Store.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	return rec.Offset
}
