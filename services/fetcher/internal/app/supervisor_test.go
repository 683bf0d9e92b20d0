package app

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ferry-replicator/ferry/pkg/batch"
	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/discovery"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/metrics"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/ownership"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/rawfetch"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/shard"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/writertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// go-metrics, which sarama uses, starts a process-wide meter ticker.
		goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"),
	)
}

// A drain waits for the writer's acknowledgements, which can take up to
// shutdown_timeout; /status and /readyz must answer meanwhile, whatever
// started the drain.
func TestStatusAnswersWhileAShardDrains(t *testing.T) {
	tests := []struct {
		name    string
		trigger func(t *testing.T, admin sarama.ClusterAdmin, cancel context.CancelFunc)
		// after checks the end, with acknowledgements flowing again.
		after func(t *testing.T, sup *supervisor, cancel context.CancelFunc, done <-chan struct{})
	}{
		{
			name:    "shutdown",
			trigger: func(_ *testing.T, _ sarama.ClusterAdmin, cancel context.CancelFunc) { cancel() },
			after: func(t *testing.T, _ *supervisor, _ context.CancelFunc, done <-chan struct{}) {
				writertest.WaitFor(t, 10*time.Second, "the supervisor stopped", func() bool { return closed(done) })
			},
		},
		{
			name: "partitions changed",
			trigger: func(t *testing.T, admin sarama.ClusterAdmin, _ context.CancelFunc) {
				if err := admin.CreateTopic("u", &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false); err != nil {
					t.Fatal(err)
				}
			},
			after: func(t *testing.T, sup *supervisor, cancel context.CancelFunc, done <-chan struct{}) {
				writertest.WaitFor(t, 10*time.Second, "shard 0 restarted with both partitions", func() bool {
					st := sup.status()
					return len(st) == 1 && !st[0].Draining && len(st[0].Partitions) == 2
				})
				cancel()
				writertest.WaitFor(t, 10*time.Second, "the supervisor stopped", func() bool { return closed(done) })
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(cluster.Close)
			writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
			writer.HoldAcks()
			sup, admin := newTestSupervisor(t, cluster.ListenAddrs(), writer.Addr())

			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				_ = sup.run(ctx)
			}()
			t.Cleanup(func() { writer.ReleaseAcks(); cancel(); <-done })

			produce(t, cluster.ListenAddrs(), "t")
			writertest.WaitFor(t, 10*time.Second, "a batch sent and held", func() bool { return writer.Batches() > 0 })
			tt.trigger(t, admin, cancel)
			writertest.WaitFor(t, 10*time.Second, "shard 0 draining in /status", func() bool {
				st, ok := within(2*time.Second, sup.status)
				if !ok {
					t.Fatal("/status blocked while a shard drains")
				}
				return len(st) == 1 && st[0].Draining
			})
			if ready, ok := within(2*time.Second, sup.isReady); !ok || !ready {
				t.Fatalf("/readyz while a shard drains: answered %v, ready %v", ok, ready)
			}
			writer.ReleaseAcks()
			tt.after(t, sup, cancel, done)
		})
	}
}

// newTestSupervisor builds a supervisor over the kfake source at brokers,
// one shard, writing to the test writer at addr.
func newTestSupervisor(t *testing.T, brokers []string, addr string) (*supervisor, sarama.ClusterAdmin) {
	t.Helper()
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_6_0_0
	client, err := sarama.NewClient(brokers, sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	fetchClient, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fetchClient.Close)
	admin, err := sarama.NewClusterAdminFromClient(client) // closed with the client
	if err != nil {
		t.Fatal(err)
	}
	codecs, err := batch.NewCodecs(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(codecs.Close)
	writers := shard.NewWriters([]string{addr}, 1<<20, insecure.NewCredentials())
	t.Cleanup(writers.Close)
	sel, err := discovery.NewSelector([]string{".*"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	set := shard.Settings{
		Link: "l", FetcherID: "f", Codec: ferryv1.Codec_CODEC_NONE,
		BatchMaxBytes: 64 << 10, MaxInflightBytes: 1 << 20,
		StartFrom: sarama.OffsetOldest, OpenTimeout: 5 * time.Second,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		DrainTimeout: time.Minute, // longer than the test: only the acknowledgements end a drain
	}
	deps := shard.Deps{Client: client, Writers: writers, Codecs: codecs,
		RawFetch: rawfetch.New(fetchClient, rawfetch.Options{MaxWait: 50 * time.Millisecond}),
		Metrics:  metrics.New(prometheus.NewRegistry()), Log: log}
	sup := &supervisor{
		id: "f", lister: admin, selector: sel, shards: 1,
		discover: 50 * time.Millisecond, balance: 50 * time.Millisecond,
		owner: ownership.NewLocal(nil), log: log, running: map[int]*running{},
		onOwned: func(int) {},
		newRun: func(l ownership.Lease, topics []discovery.Topic, parts []discovery.Partition) *shard.Runner {
			return shard.NewRunner(set, deps, l.Shard, l.Epoch, l.Lost, topics, parts)
		},
	}
	return sup, admin
}

func produce(t *testing.T, brokers []string, topic string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// within runs fn and reports whether it returned within d. A call that
// does not is left to finish in the background, to be seen by goleak if
// it never does.
func within[T any](d time.Duration, fn func() T) (T, bool) {
	ch := make(chan T, 1)
	go func() { ch <- fn() }()
	select {
	case v := <-ch:
		return v, true
	case <-time.After(d):
		var zero T
		return zero, false
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
