package shard

import (
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ferry-replicator/ferry/pkg/batch"
	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/discovery"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/metrics"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/rawfetch"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// go-metrics, which sarama uses, starts a process-wide meter ticker.
		goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"),
	)
}

const testLink = "l"

// source is a kfake cluster with the fetcher's clients on it.
type source struct {
	cluster  *kfake.Cluster
	addrs    []string
	client   sarama.Client
	producer *kgo.Client
}

func newSource(t *testing.T, topics ...string) *source {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topics...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_6_0_0
	client, err := sarama.NewClient(c.ListenAddrs(), sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	producer, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(producer.Close)
	return &source{cluster: c, addrs: c.ListenAddrs(), client: client, producer: producer}
}

// rawFetcher is a Fetcher of the source, closed when the test
// ends, its client built with opts.
func (s *source) rawFetcher(t *testing.T, opts ...kgo.Opt) *rawfetch.Fetcher {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(s.addrs...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return rawfetch.New(cl, rawfetch.Options{MaxWait: 50 * time.Millisecond})
}

// produce appends n records to partition 0 of topic.
func (s *source) produce(t *testing.T, topic string, n int) {
	t.Helper()
	s.produceSized(t, topic, n, 0)
}

// produceSized appends n records of size bytes (0: a few) to partition 0.
// The bytes are random: the producer compresses its batches, and the
// fetcher sends them as they are, so only an incompressible record is as
// large in its batch as its size says.
func (s *source) produceSized(t *testing.T, topic string, n, size int) {
	t.Helper()
	for i := range n {
		v := []byte("v" + strconv.Itoa(i))
		if size > 0 {
			r := make([]byte, size)
			_, _ = rand.Read(r) // never fails (crypto/rand)
			v = append(v, r...)
		}
		r := &kgo.Record{Topic: topic, Value: v}
		if err := s.producer.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

func testLog() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// newWriters connects to test writers in plaintext, reconnecting quickly
// so that a writer coming back is seen within the test's patience.
func newWriters(t *testing.T, addrs ...string) *Writers {
	t.Helper()
	w := NewWriters(addrs, 1<<20, insecure.NewCredentials(),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: 5 * time.Second,
		}))
	t.Cleanup(w.Close)
	return w
}

// startRunner runs shard 0 over partition 0 of topic until the test ends,
// or until the returned stop is called.
func startRunner(t *testing.T, src *source, w *Writers, m *metrics.Metrics, topic string) (stop func()) {
	t.Helper()
	_, stop = startRunnerOn(t, src, w, m, func(*Settings) {}, topic)
	return stop
}

// startRunnerOn runs shard 0 over partition 0 of each topic, with the
// settings edited, and returns the runner too.
func startRunnerOn(t *testing.T, src *source, w *Writers, m *metrics.Metrics, edit func(*Settings), topics ...string) (r *Runner, stop func()) {
	t.Helper()
	r, stop, _ = startLeasedRunner(t, src, w, m, edit, make(chan struct{}), topics...)
	return r, stop
}

// startLeasedRunner is startRunnerOn with the lease's lost channel given;
// done is closed when Run returns.
func startLeasedRunner(t *testing.T, src *source, w *Writers, m *metrics.Metrics, edit func(*Settings), lost chan struct{}, topics ...string) (r *Runner, stop func(), done <-chan struct{}) {
	t.Helper()
	return startRunnerDeps(t, src, w, m, edit, func(*Deps) {}, lost, topics...)
}

// startRunnerDeps is startLeasedRunner with the dependencies edited too.
// The runner reads through a Fetcher of its own.
func startRunnerDeps(t *testing.T, src *source, w *Writers, m *metrics.Metrics, edit func(*Settings), editDeps func(*Deps), lost chan struct{}, topics ...string) (r *Runner, stop func(), done <-chan struct{}) {
	t.Helper()
	codecs, err := batch.NewCodecs(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(codecs.Close)
	set := Settings{
		Link: testLink, FetcherID: "f", Codec: ferryv1.Codec_CODEC_NONE,
		BatchMaxBytes: 64 << 10, MaxInflightBytes: 1 << 20,
		StartFrom: sarama.OffsetOldest, OpenTimeout: 5 * time.Second,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		DrainTimeout: 10 * time.Second, HeartbeatInterval: 20 * time.Millisecond,
	}
	edit(&set)
	deps := Deps{Client: src.client, RawFetch: src.rawFetcher(t), Writers: w, Codecs: codecs, Metrics: m, Log: testLog()}
	editDeps(&deps)
	var ts []discovery.Topic
	var ps []discovery.Partition
	for _, topic := range topics {
		// The topic's id, as discovery gives it to the runner.
		ts = append(ts, discovery.Topic{Name: topic, Partitions: 1, ID: src.topicID(t, topic)})
		ps = append(ps, discovery.Partition{Topic: topic, Partition: 0})
	}
	r = NewRunner(set, deps, 0, 1, lost, ts, ps)
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		r.Run(ctx)
	}()
	stop = func() { cancel(); <-ended }
	t.Cleanup(stop)
	return r, stop, ended
}
