// Package app wires the fetcher's parts together and runs them until the
// context ends, then drains every shard (stop reading, wait for the writers'
// acknowledgements, close the streams) before closing the source clients.
package app

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ferry-replicator/ferry/pkg/admin"
	"github.com/ferry-replicator/ferry/pkg/batch"
	"github.com/ferry-replicator/ferry/pkg/budget"
	"github.com/ferry-replicator/ferry/pkg/kafkaclient"
	"github.com/ferry-replicator/ferry/pkg/provenance"
	"github.com/ferry-replicator/ferry/pkg/startup"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
	"github.com/ferry-replicator/ferry/pkg/tracing"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/catalog"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/config"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/discovery"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/groups"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/metrics"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/ownership"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/rawfetch"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/shard"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/sourcewatch"
)

// statusPage renders /status for people at the admin port's / (package
// admin).
//
//go:embed statuspage.html
var statusPage string

// Run runs the fetcher until ctx ends.
func Run(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	return RunWith(ctx, cfg, log, prometheus.NewRegistry())
}

// RunWith is Run with its metrics registered on reg, an empty registry:
// tests of the whole fetcher (package inprocess) read what it registers,
// also the series no event has created yet.
func RunWith(ctx context.Context, cfg *config.Config, log *slog.Logger, reg *prometheus.Registry) error {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(reg)
	metrics.RegisterLinkShards(reg, cfg.Link.Name, cfg.Link.Shards)

	tp, endTracing, err := tracing.Setup(ctx, cfg.Tracing, "ferry-fetcher", tracing.LinkName(cfg.Link.Name))
	if err != nil {
		return err
	}
	defer tracing.Stop(endTracing)
	recent, traceLinks := jaegerLinks(ctx, cfg)
	sc, err := cfg.Source.Sarama()
	if err != nil {
		return err
	}
	for _, w := range append(cfg.Deprecations(), cfg.Source.Warnings("source")...) {
		log.Warn(w)
	}
	// The admin port answers from the start: while the source cannot be
	// reached (a fetcher started during a broker restart), /healthz is ok
	// and /readyz says what the start waits for, and the source client is
	// tried again (package startup) instead of ending the process.
	wait := startup.New(log.With("component", "startup"))
	var supp atomic.Pointer[supervisor]
	adm, err := admin.Listen(cfg.Admin, reg, admin.Options{
		Ready: func() error {
			sup := supp.Load()
			if sup == nil {
				return wait.Err()
			}
			if !sup.isReady() {
				return errors.New("source not discovered yet")
			}
			return nil
		},
		Status: func() any {
			if sup := supp.Load(); sup != nil {
				return map[string]any{"fetcher": cfg.ID, "link": cfg.Link.Name, "shards": sup.status()}
			}
			return map[string]any{"fetcher": cfg.ID, "link": cfg.Link.Name, "starting": wait.Err().Error()}
		},
		Page:   statusPage,
		Title:  "Ferry fetcher",
		Traces: traceLinks,
	}, log)
	if err != nil {
		return err
	}
	grp := startup.Begin(ctx, adm.Run)
	defer grp.Stop()
	g, gctx, notStarted := grp.Group, grp.Ctx, grp.Abort
	var client sarama.Client
	if err := wait.Do(gctx, "source cluster", kafkaclient.Unreachable, func() (err error) {
		client, err = sarama.NewClient(cfg.Source.BootstrapServers, sc)
		return cfg.Source.Explain(gctx, "source.tls", err) // a plaintext client at TLS brokers exits, naming it
	}); err != nil {
		return notStarted(fmt.Errorf("source client: %w", err))
	}
	// The writer records it with each producer id it copies with, so that
	// links reading its target tell a chain from a loop (pkg/provenance).
	var sourceCluster string
	if err := wait.Do(gctx, "source cluster id", kafkaclient.Unreachable, func() (err error) {
		sourceCluster, err = clusterID(gctx, cfg)
		return err
	}); err != nil {
		return notStarted(fmt.Errorf("source cluster id: %w", err))
	}
	if sourceCluster == "" {
		log.Warn("the source reports no Kafka cluster id: what this link writes is copied on by every link reading its target, back to the source too")
	}
	if cfg.Link.SkipReplicated {
		// The registry decides which source batches are not copied:
		// whoever else may write it says so.
		cfg.Source.WarnWritable(gctx, log, provenance.Topic)
	}
	defer client.Close()
	// The admin shares the client, which the deferred Close above releases.
	lister, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return notStarted(fmt.Errorf("source admin: %w", err))
	}
	sel, err := discovery.NewSelector(cfg.Link.Topics.Include, cfg.Link.Topics.Exclude)
	if err != nil {
		return notStarted(err)
	}
	codecs, err := batch.NewCodecs(int(cfg.Writers.MaxMessageBytes))
	if err != nil {
		return notStarted(err)
	}
	defer codecs.Close()
	codec, _ := batch.ParseCodec(cfg.Link.Codec) // checked by Validate
	creds := insecure.NewCredentials()
	var certs *tlsconfig.Source
	if cfg.Writers.TLS.Insecure {
		log.Warn("INSECURE: writer connections are plaintext without peer authentication (writers.tls.insecure); loopback only")
	} else {
		if certs, err = tlsconfig.NewSource(cfg.Writers.TLS, log.With("component", "tls")); err != nil {
			return notStarted(err)
		}
		creds = credentials.NewTLS(certs.ClientTLS())
		certs.RegisterMetrics(reg)
	}
	// A failed writer's connection is retried within the reconnect backoff
	// bounds (gRPC's own default grows to two minutes), so its shards return
	// to it soon after it recovers. With tracing on, each stream has an
	// otelgrpc client span, and its trace context crosses to the writer in
	// the stream's metadata.
	dial := append([]grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
		Backoff: backoff.Config{BaseDelay: cfg.Writers.MinBackoff, Multiplier: 1.6, Jitter: 0.2, MaxDelay: cfg.Writers.MaxBackoff},
		// gRPC's default, which a zero here would replace with the backoff.
		MinConnectTimeout: 20 * time.Second,
	})}, tracing.DialOptions(tp)...)
	writers := shard.NewWriters(cfg.Writers.Addresses, int(cfg.Writers.MaxMessageBytes), creds, dial...)
	defer writers.Close()

	startFrom := sarama.OffsetOldest
	if cfg.Link.StartFrom == "latest" {
		startFrom = sarama.OffsetNewest
	}
	set := shard.Settings{
		Link: cfg.Link.Name, FetcherID: cfg.ID, Codec: codec, StartFrom: startFrom,
		BatchMaxBytes: int(cfg.Link.Batch.MaxBytes), MaxInflightBytes: int(cfg.Link.MaxInflightBytes),
		OpenTimeout: cfg.Writers.OpenTimeout, MinBackoff: cfg.Writers.MinBackoff, MaxBackoff: cfg.Writers.MaxBackoff,
		DrainTimeout: cfg.ShutdownTimeout, SkipOnDataLoss: cfg.Link.OnDataLoss == "skip",
		MaxMessageBytes: int(cfg.Writers.MaxMessageBytes), SourceCluster: sourceCluster,
		HeartbeatInterval: cfg.Link.Heartbeat.Interval,
	}
	deps := shard.Deps{Client: client, Writers: writers, Codecs: codecs, Metrics: m, Log: log.With("link", cfg.Link.Name),
		Tracer: tracing.Tracer(tp, "github.com/ferry-replicator/ferry/fetcher"), Recent: recent,
		Budget: budget.New(int64(cfg.Link.MaxBufferedBytes), func(n int64) { m.BufferedBytes.Set(float64(n)) })}
	raw, err := newRawFetcher(cfg)
	if err != nil {
		return notStarted(err)
	}
	// Deferred before the shards run, so it runs after they drain.
	defer raw.Close()
	deps.RawFetch = raw.Fetcher
	// One read of the source's offsets for the process, shared by its
	// shards: three ListOffsets requests per leader and interval, however
	// many shards run here.
	deps.Source = sourcewatch.New(raw.Fetcher, cfg.Link.Heartbeat.Interval, log.With("component", "source-offsets"))
	if cfg.Link.SkipReplicated {
		opts, err := cfg.Source.Franz()
		if err != nil {
			return notStarted(fmt.Errorf("source: %w", err))
		}
		// Entries are taken only when signed by a writer this fetcher
		// admits (writers.tls); without TLS (loopback) none can be checked.
		var verifier provenance.Verifier
		if certs != nil {
			verifier = certs
		} else {
			log.Warn("producer id entries are taken unverified: writers.tls.insecure leaves no CA to check their signatures against")
		}
		view, err := provenance.NewView(opts, verifier, log.With("component", "provenance"))
		if err != nil {
			return notStarted(err)
		}
		defer view.Close() // deferred before the shards run: after they drain
		deps.Provenance = view
		metrics.RegisterRegistryRefused(reg, view.Refused)
		metrics.RegisterRegistryForgotten(reg, view.Forgotten)
		log.Info("batches Ferry writers produced into the source are not copied (link.skip_replicated)")
	}
	var poller *groups.Poller
	// Registered with group sync off too, where they stay 0.
	groupMetrics := groups.NewMetrics(reg)
	if gc := cfg.Link.Groups; gc.Enabled {
		// One read of the source's groups for the process, shared by its
		// shards: each sends the offsets of its own partitions.
		reader, err := groups.NewReader(lister, client, groups.Options{Include: gc.Include, Exclude: gc.Exclude, Max: gc.Max})
		if err != nil {
			return notStarted(err)
		}
		copied := func(p groups.Partition) bool { return sel.Match(p.Topic) }
		poller = groups.NewPoller(reader, gc.Interval, copied, log.With("component", "groups"), groupMetrics)
		deps.Groups = poller
	}
	var owner ownership.Owner = ownership.NewLocal(cfg.Link.OwnedShards)
	var consul *ownership.Consul
	balance := cfg.Link.DiscoveryInterval
	// Registered under local ownership too, where they stay 0: a dashboard
	// or alert naming them reads 0 rather than no data (docs/metrics.md).
	leaseMetrics := ownership.NewMetrics(reg)
	if cfg.Lease.Address != "" {
		consul, err = ownership.NewConsul(cfg.Lease, cfg.Link.Name, cfg.ID, leaseMetrics, log)
		if err != nil {
			return notStarted(err)
		}
		owner, balance = consul, cfg.Lease.BalanceInterval
	}
	sup := &supervisor{
		id: cfg.ID, lister: lister, selector: sel, shards: cfg.Link.Shards, acls: aclLister(cfg, lister),
		discover: cfg.Link.DiscoveryInterval, balance: balance,
		owner: owner, log: log, running: map[int]*running{},
		onOwned: func(n int) { m.ShardsOwned.Set(float64(n)) },
		newRun: func(l ownership.Lease, topics []discovery.Topic, parts []discovery.Partition) *shard.Runner {
			return shard.NewRunner(set, deps, l.Shard, l.Epoch, l.Lost, topics, parts)
		},
	}
	wait.Done()
	supp.Store(sup)
	if certs != nil {
		g.Go(func() error { certs.Run(gctx); return nil })
		g.Go(func() error { tlsconfig.ReloadOnHangup(gctx, certs, log); return nil })
	}
	g.Go(func() error { deps.Source.Run(gctx); return nil })
	if poller != nil {
		g.Go(func() error { poller.Run(gctx); return nil })
	}
	if cfg.Writers.Consul.Address != "" {
		g.Go(func() error {
			return catalog.Watch(gctx, cfg.Writers.Consul, writers.SetAddresses, log.With("component", "writer-discovery"))
		})
	}
	// The lease session must outlive the supervisor, whose shards drain and
	// release their leases before the session ends.
	leaseCtx, endLeases := context.WithCancel(context.Background())
	leaseDone := make(chan error, 1)
	if consul != nil {
		go func() { leaseDone <- consul.Run(leaseCtx) }()
	} else {
		leaseDone <- nil
	}
	g.Go(func() error {
		err := sup.run(gctx)
		endLeases()
		return errors.Join(err, <-leaseDone)
	})
	log.Info("fetcher running", "link", cfg.Link.Name, "writers", cfg.Writers.Addresses)
	return g.Wait()
}

// jaegerLinks are the status page's links into the Jaeger UI
// (tracing.ui_url) and the ring of recent batch traces they list; none
// without a UI, and then no batch takes the ring's lock.
func jaegerLinks(ctx context.Context, cfg *config.Config) (*tracing.RecentTraces, admin.TraceLinks) {
	if cfg.Tracing.UIURL == "" {
		return nil, admin.TraceLinks{}
	}
	recent := &tracing.RecentTraces{}
	return recent, admin.TraceLinks{
		UI:      cfg.Tracing.UIURL,
		Service: tracing.ServiceName(ctx, cfg.Tracing, "ferry-fetcher", tracing.LinkName(cfg.Link.Name)),
		Recent:  recent.IDs,
	}
}

// rawFetcher is the shards' Fetcher of the source and the client it owns.
type rawFetcher struct {
	*rawfetch.Fetcher
	cl *kgo.Client
}

func (f rawFetcher) Close() { f.cl.Close() }

// clusterID asks the source for its Kafka cluster id, on a short-lived
// client of its own (sarama's client, which the shards share, does not
// keep it).
func clusterID(ctx context.Context, cfg *config.Config) (string, error) {
	opts, err := cfg.Source.Franz()
	if err != nil {
		return "", fmt.Errorf("source: %w", err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return "", fmt.Errorf("source client: %w", err)
	}
	defer cl.Close()
	return provenance.ClusterID(ctx, cl)
}

// newRawFetcher builds one Fetcher for every shard (it is safe for
// concurrent use) on a franz-go client of the source, with the per-
// partition fetch size link.fetch_max_bytes.
func newRawFetcher(cfg *config.Config) (rawFetcher, error) {
	opts, err := cfg.Source.Franz()
	if err != nil {
		return rawFetcher{}, fmt.Errorf("source: %w", err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return rawFetcher{}, fmt.Errorf("source fetch client: %w", err)
	}
	f := rawfetch.New(cl, rawfetch.Options{MaxWait: 100 * time.Millisecond, PartitionMaxBytes: int32(cfg.Link.FetchMaxBytes)})
	return rawFetcher{Fetcher: f, cl: cl}, nil
}

// aclLister lists the source's topic ACLs for the writers when
// link.sync_acls is on; nil otherwise.
func aclLister(cfg *config.Config, admin sarama.ClusterAdmin) discovery.ACLLister {
	if !cfg.Link.SyncACLs {
		return nil
	}
	return admin
}
