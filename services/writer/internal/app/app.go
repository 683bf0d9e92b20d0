// Package app wires the writer's parts together and runs them until the
// context ends, then shuts down in order: stop taking streams, drain the
// ones open (commit, acknowledge, end), stop gRPC, close Kafka clients.
package app

import (
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/ferry-replicator/ferry/pkg/admin"
	"github.com/ferry-replicator/ferry/pkg/batch"
	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/groupcommit"
	"github.com/ferry-replicator/ferry/pkg/kafkaclient"
	"github.com/ferry-replicator/ferry/pkg/provenance"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/pkg/startup"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
	"github.com/ferry-replicator/ferry/pkg/tracing"
	"github.com/ferry-replicator/ferry/services/writer/internal/checkpoint"
	"github.com/ferry-replicator/ferry/services/writer/internal/config"
	"github.com/ferry-replicator/ferry/services/writer/internal/control"
	"github.com/ferry-replicator/ferry/services/writer/internal/groupstate"
	"github.com/ferry-replicator/ferry/services/writer/internal/heartbeat"
	"github.com/ferry-replicator/ferry/services/writer/internal/metrics"
	"github.com/ferry-replicator/ferry/services/writer/internal/naming"
	"github.com/ferry-replicator/ferry/services/writer/internal/offsetindex"
	"github.com/ferry-replicator/ferry/services/writer/internal/readiness"
	"github.com/ferry-replicator/ferry/services/writer/internal/registration"
	"github.com/ferry-replicator/ferry/services/writer/internal/server"
	"github.com/ferry-replicator/ferry/services/writer/internal/topics"
)

// statusPage renders /status for people at the admin port's / (package
// admin).
//
//go:embed statuspage.html
var statusPage string

// grpcOverhead is room above the largest batch payload for the rest of a
// gRPC message.
const grpcOverhead = 64 << 10

// The target is probed for readiness this often, each probe bounded by
// readyTimeout: a target that fails readyTargetFailures probes in a row
// takes the writer out of Consul's catalog (checked every second) within
// some 10 s; a slower spell leaves it in (readiness.Options).
const (
	readyInterval       = time.Second
	readyTimeout        = 2 * time.Second
	readyTargetFailures = 3
)

// Run runs the writer until ctx ends.
func Run(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	return RunWith(ctx, cfg, log, prometheus.NewRegistry())
}

// RunWith is Run with its metrics registered on promReg, an empty
// registry: tests of the whole writer (package inprocess) read what it
// registers, also the series no event has created yet.
func RunWith(ctx context.Context, cfg *config.Config, log *slog.Logger, promReg *prometheus.Registry) error {
	promReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(promReg)

	tp, endTracing, err := tracing.Setup(ctx, cfg.Tracing, "ferry-writer")
	if err != nil {
		return err
	}
	defer tracing.Stop(endTracing)
	recent, traceLinks := jaegerLinks(ctx, cfg)
	base, err := cfg.Target.Sarama()
	if err != nil {
		return err
	}
	for _, w := range append(cfg.Target.Warnings("target"), cfg.Warnings()...) {
		log.Warn(w)
	}
	links, err := buildLinks(cfg.Links)
	if err != nil {
		return err
	}
	// The gRPC certificate also signs what the writer records in the
	// target: its producer id entries, which fetchers verify against
	// their writers.tls (pkg/provenance), and its checkpoints, which
	// writers verify against their checkpoints.signers (package
	// checkpoint). Loaded first: a writer that would refuse its own
	// checkpoints must not start.
	var certs *tlsconfig.Source
	if !cfg.TLS.Insecure {
		if certs, err = tlsconfig.NewSource(grpcTLS(cfg), log.With("component", "tls")); err != nil {
			return err
		}
		certs.RegisterMetrics(promReg)
	}
	cpSigner, cpVerifier, err := checkpointTrust(cfg, certs, log)
	if err != nil {
		return err
	}

	// The admin port answers from the start: while the target cannot be
	// reached (a writer started during a broker restart), /healthz is ok
	// and /readyz says what the start waits for, and the steps that need
	// the target are tried again (package startup) instead of ending the
	// process. Readiness and status come from the checker and the server
	// once they exist.
	wait := startup.New(log.With("component", "startup"))
	var readyp atomic.Pointer[readiness.Checker]
	var srvp atomic.Pointer[server.Server]
	adm, err := admin.Listen(cfg.Admin, promReg, admin.Options{
		Ready: func() error {
			if r := readyp.Load(); r != nil {
				return r.Ready()
			}
			return wait.Err()
		},
		Status: func() any {
			if srv := srvp.Load(); srv != nil {
				return map[string]any{"writer": cfg.ID, "links": srv.LinkStates(), "shards": srv.Status(), "failover": srv.Failover(), "groups": srv.Groups(),
					"stopped": srv.Stopped(), "topics": map[string]any{"drift": srv.TopicDrift()}}
			}
			return map[string]any{"writer": cfg.ID, "starting": wait.Err().Error()}
		},
		Page:   statusPage,
		Title:  "Ferry writer",
		Traces: traceLinks,
	}, log)
	if err != nil {
		return err
	}
	grp := startup.Begin(ctx, adm.Run)
	defer grp.Stop()
	g, gctx, notStarted := grp.Group, grp.Ctx, grp.Abort
	const target = "target cluster"
	var store *checkpoint.Store
	if err := wait.Do(gctx, target, kafkaclient.Unreachable, func() (err error) {
		store, err = checkpoint.Open(cfg.Target.BootstrapServers, base, checkpoint.Options{
			Topic: cfg.Checkpoints.Topic, Partitions: cfg.Checkpoints.Partitions,
			ReplicationFactor: cfg.Checkpoints.ReplicationFactor, Writer: cfg.ID,
			Signer: cpSigner, Verifier: cpVerifier, AcceptUnsigned: cfg.Checkpoints.AcceptUnsigned,
			MaxUnverifiedBytes: int64(cfg.Checkpoints.MaxUnverifiedBytes),
			Metrics:            checkpoint.Metrics{Refused: m.CheckpointsRefused, AcceptedUnsigned: m.CheckpointsAcceptedUnsigned},
		}, log.With("component", "checkpoints"))
		return cfg.Target.Explain(gctx, "target.tls", err) // a plaintext client at TLS brokers exits, naming it
	}); err != nil {
		return notStarted(err)
	}
	defer store.Close()
	m.WatchUnsignedCheckpoints(func() float64 { return float64(store.UnsignedLatest()) })
	m.WatchUnverifiedCheckpoints(func() float64 { return float64(store.UnverifiedBytes()) })
	var ens *topics.Ensurer
	if err := wait.Do(gctx, target, kafkaclient.Unreachable, func() (err error) {
		ens, err = topics.New(cfg.Target.BootstrapServers, base, m.TopicsRecreated, log.With("component", "topics"))
		return cfg.Target.Explain(gctx, "target.tls", err)
	}); err != nil {
		return notStarted(err)
	}
	defer ens.Close()
	codecs, err := batch.NewCodecs(int(cfg.MaxBatchBytes))
	if err != nil {
		return notStarted(err)
	}
	defer codecs.Close()
	// Each stream's target producer speaks Kafka's protocol itself, over
	// a franz-go client of its own (services/writer/internal/producer).
	franzOpts, err := cfg.Target.Franz()
	if err != nil {
		return notStarted(err)
	}
	compression, err := recordbatch.ParseCompression(cfg.Producer.Compression)
	if err != nil {
		return notStarted(err) // Validate has checked it
	}
	// Every producer id the writer produces with is recorded in the target
	// first, so links reading this cluster skip what Ferry wrote into it
	// (pkg/provenance). The topic is created like the checkpoint topic.
	if err := wait.Do(gctx, target, kafkaclient.Unreachable, func() error {
		return ens.Ensure(topics.Spec{
			Name: provenance.Topic, Partitions: 1, ReplicationFactor: cfg.Checkpoints.ReplicationFactor, Configs: provenance.Configs,
		})
	}); err != nil {
		return notStarted(fmt.Errorf("producer id topic: %w", err))
	}
	// Each round records where its source offsets landed in the offset
	// index topic (package offsetindex), created like the checkpoint
	// topic; its partition count, as the target has it, places each
	// partition's records, so an existing topic keeps its own.
	index := offsetindex.Topic{Name: cfg.OffsetIndex.Topic, FlushInterval: cfg.OffsetIndex.FlushInterval, Retention: cfg.OffsetIndex.Retention}
	if err := wait.Do(gctx, target, kafkaclient.Unreachable, func() (err error) {
		index.Partitions, err = ens.EnsureOwn(topics.Spec{
			Name: index.Name, Partitions: cfg.OffsetIndex.Partitions, ReplicationFactor: cfg.Checkpoints.ReplicationFactor,
			Configs: offsetindex.Configs(cfg.OffsetIndex.Retention),
		})
		return err
	}); err != nil {
		return notStarted(fmt.Errorf("offset index topic: %w", err))
	}
	var signer provenance.Signer // nil without TLS: entries unsigned
	if certs != nil {
		signer = certs
	}
	recorder, err := provenance.NewRecorder(franzOpts, cfg.ID, signer, cfg.ProducerRegistry.Keys())
	if err != nil {
		return notStarted(err)
	}
	defer recorder.Close()
	beats, err := openHeartbeats(gctx, wait, cfg, ens, franzOpts, links, log.With("component", "heartbeats"))
	if err != nil {
		return notStarted(err)
	}
	defer beats.store.Close()
	// What the writer reads back from these topics decides where shards
	// resume, what other links skip, the offset index and what the
	// failover meter says: whoever else may write them says so.
	groupState, err := openGroupState(gctx, wait, cfg, ens, franzOpts)
	if err != nil {
		return notStarted(err)
	}
	defer groupState.Close()
	cfg.Target.WarnWritable(gctx, log, store.Topic(), provenance.Topic, index.Name, cfg.Heartbeats.Topic, groupState.Topic())
	// Consumer-group offsets the fetchers read are committed to the
	// target's groups through a client of their own, off the streams'
	// (package groupcommit, server's group syncer).
	var groupClient sarama.Client
	if err := wait.Do(gctx, target, kafkaclient.Unreachable, func() (err error) {
		groupClient, err = sarama.NewClient(cfg.Target.BootstrapServers, base)
		return cfg.Target.Explain(gctx, "target.tls", err)
	}); err != nil {
		return notStarted(fmt.Errorf("group commit client: %w", err))
	}
	defer groupClient.Close()
	groups, err := groupcommit.New(groupClient)
	if err != nil {
		return notStarted(err)
	}

	// Existing target topics follow their source's configs, and get
	// their synced ACLs, on a round of their own (links[].config_sync).
	syncer := topics.NewSyncer(ens, m.TopicConfigDrift, log.With("component", "topic-sync"))
	srv := server.New(server.Options{
		ID:     cfg.ID,
		Target: franzOpts,
		Producer: server.ProducerSettings{
			Compression: compression, MaxMessageBytes: int(cfg.Producer.MaxMessageBytes), MergeBelow: int(cfg.Producer.MergeBelow),
			Timeout: cfg.Producer.Timeout, TransactionTimeout: cfg.Producer.TransactionTimeout,
		},
		MaxBatchBytes:     int(cfg.MaxBatchBytes),
		MaxGroupBytes:     int(cfg.MaxGroupBytes),
		MaxBufferedBytes:  int64(cfg.MaxBufferedBytes),
		AckTimeout:        cfg.AckTimeout,
		MaxPartitions:     cfg.MaxPartitions,
		MaxStreams:        cfg.MaxStreams,
		MaxStreamsPerPeer: cfg.MaxStreamsPerPeer,
		OpenRatePerPeer:   cfg.OpenRatePerPeer,
		OpenBurstPerPeer:  cmp.Or(cfg.OpenBurstPerPeer, cfg.MaxStreamsPerPeer),
		Tracer:            tracing.Tracer(tp, "github.com/ferry-replicator/ferry/writer"),
		Recent:            recent,
		Recorder:          recorder,
		Index:             index,
		Heartbeats:        beats.table,
		HeartbeatsTopic:   cfg.Heartbeats.Topic,
		FlushHeartbeats:   beats.store.Flush,
		Groups:            groups,
		GroupState:        groupState,
		GroupStatePersist: cfg.Heartbeats.PersistInterval,
		Syncer:            syncer,
		ReplicateIDs:      replicateIDs(cfg),
	}, links, ens, store, codecs, m, log)
	// The group sync's state from before this start (another writer's or
	// this one's last run), before anything is served: a failover report
	// must not answer with groups missing.
	if err := wait.Do(gctx, target, kafkaclient.Unreachable, func() error {
		lctx, cancel := context.WithTimeout(gctx, time.Minute)
		defer cancel()
		return srv.RestoreGroups(lctx)
	}); err != nil {
		return notStarted(fmt.Errorf("group state: %w", err))
	}

	kp := keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(int(cfg.MaxBatchBytes) + grpcOverhead),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
	if w := cfg.GRPC; w.StreamWindow > 0 {
		opts = append(opts, grpc.InitialWindowSize(int32(w.StreamWindow)), grpc.InitialConnWindowSize(int32(w.ConnWindow)))
	}
	// With tracing on, each stream has an otelgrpc server span, the child
	// of the fetcher's client span (trace context in the stream's metadata).
	opts = append(opts, tracing.ServerOptions(tp)...)
	if cfg.TLS.Insecure {
		log.Warn("INSECURE: the gRPC port serves plaintext without peer authentication (tls.insecure); loopback only")
	} else {
		// TLS credentials plus interceptors: a trusted client with the wrong
		// identity gets PermissionDenied on every call, before any handler.
		opts = append(opts, certs.ServerOptions()...)
		// Connections are recycled so long-lived streams re-handshake (new
		// certificates, fresh identity check); the grace lets a stream end
		// its round, and must be finite or a busy stream never moves.
		kp.MaxConnectionAge, kp.MaxConnectionAgeGrace = certs.MaxConnectionAge(), time.Minute
	}
	opts = append(opts, grpc.KeepaliveParams(kp))
	gs := grpc.NewServer(opts...)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	ferryv1.RegisterReplicationServiceServer(gs, srv)
	// Operators' calls (ferryctl); refused unless control.allowed_ids
	// names the caller.
	ferryv1.RegisterControlServiceServer(gs, control.New(srv, tlsconfig.NewIDs(cfg.Control.AllowedIDs), log.With("component", "control")))
	// One readiness answer for /readyz (Consul, Kubernetes) and gRPC health.
	var ready *readiness.Checker
	if err := wait.Do(gctx, target, kafkaclient.Unreachable, func() (err error) {
		ready, err = readiness.New(readiness.Options{
			Addrs: cfg.Target.BootstrapServers, Sarama: base, Topic: store.Topic(), View: store.Err,
			Health: hs, Services: []string{"", ferryv1.ReplicationService_ServiceDesc.ServiceName},
			Interval: readyInterval, Timeout: readyTimeout, TargetFailures: readyTargetFailures, Log: log.With("component", "readiness"),
		})
		return cfg.Target.Explain(gctx, "target.tls", err)
	}); err != nil {
		return notStarted(err)
	}
	defer ready.Close()
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return notStarted(fmt.Errorf("listen %s: %w", cfg.Listen, err))
	}
	wait.Done()
	readyp.Store(ready)
	srvp.Store(srv)

	var reg *registration.Registration
	if cfg.Registration.Address != "" {
		reg, err = registration.New(cfg.Registration, cfg.ID, lis.Addr().String(), adm.Addr(), log.With("component", "registration"))
		if err != nil {
			lis.Close()
			return notStarted(err)
		}
	}
	// Registration retries until Consul answers and leaves the catalog when
	// the writer stops; the drain waits for it to have left, so fetchers
	// stop choosing this writer before its streams close.
	left := make(chan struct{})
	g.Go(func() error {
		defer close(left)
		if reg != nil {
			reg.Run(gctx)
		}
		return nil
	})
	g.Go(func() error {
		if err := gs.Serve(lis); err != nil {
			return fmt.Errorf("grpc serve: %w", err)
		}
		return nil
	})
	// A checkpoint view that failed for good (its tail lost its position)
	// never serves an open again, so the writer ends, with the error: its
	// orchestrator restarts it, and the new process reads the checkpoint
	// topic from its start. Staying up not ready would look alive forever.
	g.Go(func() error {
		select {
		case <-store.Failed():
			return fmt.Errorf("checkpoint view: %w", store.Err())
		case <-gctx.Done():
			return nil
		}
	})
	g.Go(func() error { ready.Run(gctx); return nil })
	g.Go(func() error { srv.RunGroupSync(gctx); return nil })
	g.Go(func() error { syncer.Run(gctx, cfg.ConfigSyncInterval); return nil })
	// The heartbeats are written until the streams have drained (below),
	// then once more.
	persistCtx, stopPersist := context.WithCancel(context.Background())
	g.Go(func() error { beats.store.Run(persistCtx); return nil })
	if certs != nil {
		g.Go(func() error { certs.Run(gctx); return nil })
		g.Go(func() error { tlsconfig.ReloadOnHangup(gctx, certs, log); return nil })
	}
	g.Go(func() error {
		<-gctx.Done()
		<-left
		hs.Shutdown() // NOT_SERVING for gRPC health checkers
		dctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		if err := srv.Drain(dctx); err != nil {
			log.Warn("drain incomplete", "err", err)
		}
		stopped := make(chan struct{})
		go func() { gs.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-dctx.Done():
			gs.Stop()
			<-stopped
		}
		stopPersist()
		return nil
	})
	log.Info("writer serving", "listen", lis.Addr().String(), "links", len(links))
	return g.Wait()
}

// jaegerLinks are the status page's links into the Jaeger UI
// (tracing.ui_url) and the ring of recent batch traces they list; none
// without a UI, and then no round takes the ring's lock.
func jaegerLinks(ctx context.Context, cfg *config.Config) (*tracing.RecentTraces, admin.TraceLinks) {
	if cfg.Tracing.UIURL == "" {
		return nil, admin.TraceLinks{}
	}
	recent := &tracing.RecentTraces{}
	return recent, admin.TraceLinks{UI: cfg.Tracing.UIURL, Service: tracing.ServiceName(ctx, cfg.Tracing, "ferry-writer"), Recent: recent.IDs}
}

// checkpointTrust returns what signs the writer's checkpoint records and
// what verifies those it reads (both nil with tls.insecure, which has no
// key), after checking that the writer's own signature verifies: a writer
// whose checkpoints.signers do not admit its own certificate would stop
// every partition it opens.
func checkpointTrust(cfg *config.Config, certs *tlsconfig.Source, log *slog.Logger) (checkpoint.Signer, checkpoint.Verifier, error) {
	if certs == nil {
		log.Warn("INSECURE: checkpoints are written unsigned and read unverified (tls.insecure): whoever can produce to " +
			cfg.Checkpoints.Topic + " can move a partition's resume point")
		return nil, nil, nil
	}
	sg := cfg.Checkpoints.Signers
	ids := sg.AllowedIDs
	if len(ids) == 0 {
		ids = certs.OwnIdentities()
	}
	caFile := cmp.Or(sg.CAFile, cfg.TLS.CAFile)
	verifier, err := tlsconfig.NewVerifier(certs, caFile, ids)
	if err == nil {
		err = checkpoint.CheckSigners(certs, verifier)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoints.signers (ca_file %s, allowed_ids %v) do not admit this writer's own certificate (tls.cert_file %s), "+
			"so every partition it opens would stop as checkpoint_unverified: %w", caFile, ids, cfg.TLS.CertFile, err)
	}
	if cfg.Checkpoints.AcceptUnsigned {
		log.Warn("checkpoints.accept_unsigned is on: unsigned checkpoints (of writers older than signing) are taken; turn it off once upgraded (docs/operations.md)")
	}
	return certs, verifier, nil
}

// grpcTLS is the gRPC port's TLS: its handshake and interceptors admit the
// fetchers of tls.allowed_ids and the operators of control.allowed_ids;
// each service then admits only its own (replicateIDs, control.Service).
func grpcTLS(cfg *config.Config) tlsconfig.Config {
	t := cfg.TLS
	t.AllowedIDs = append(slices.Clone(t.AllowedIDs), cfg.Control.AllowedIDs...)
	return t
}

// replicateIDs are the only peers that may call Replicate: tls.allowed_ids,
// checked only when operators are admitted too (with none, the
// interceptors admit no one else).
func replicateIDs(cfg *config.Config) tlsconfig.IDs {
	if cfg.TLS.Insecure || len(cfg.Control.AllowedIDs) == 0 {
		return tlsconfig.IDs{}
	}
	return tlsconfig.NewIDs(cfg.TLS.AllowedIDs)
}

// heartbeats are the heartbeat table and its store.
type heartbeats struct {
	table *heartbeat.Table
	store *heartbeat.Store
}

// openHeartbeats creates the heartbeat topic if missing and reads it back
// (bounded by its end at start), so the failover meter answers after a
// restart with the source gone. Records of other links are left out.
func openHeartbeats(ctx context.Context, wait *startup.Waiter, cfg *config.Config, ens *topics.Ensurer, opts []kgo.Opt, links []server.Link, log *slog.Logger) (heartbeats, error) {
	const target = "target cluster"
	if err := wait.Do(ctx, target, kafkaclient.Unreachable, func() error {
		return ens.Ensure(topics.Spec{
			Name: cfg.Heartbeats.Topic, Partitions: cfg.Checkpoints.Partitions, ReplicationFactor: cfg.Checkpoints.ReplicationFactor, Configs: heartbeat.Configs,
		})
	}); err != nil {
		return heartbeats{}, fmt.Errorf("heartbeat topic: %w", err)
	}
	table := heartbeat.NewTable()
	store, err := heartbeat.NewStore(opts, cfg.Heartbeats.Topic, table, cfg.Heartbeats.PersistInterval, log)
	if err != nil {
		return heartbeats{}, err
	}
	names := map[string]bool{}
	for _, l := range links {
		names[l.Name] = true
	}
	if err := wait.Do(ctx, target, kafkaclient.Unreachable, func() error {
		lctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		loaded, refused, err := store.Load(lctx, names)
		if err == nil {
			log.Info("heartbeats read back", "partitions", loaded, "refused", refused)
		}
		return err
	}); err != nil {
		store.Close()
		return heartbeats{}, err
	}
	return heartbeats{table: table, store: store}, nil
}

// openGroupState creates the group state topic if missing and returns
// its store; the server reads it back (Server.RestoreGroups) before it
// serves.
func openGroupState(ctx context.Context, wait *startup.Waiter, cfg *config.Config, ens *topics.Ensurer, opts []kgo.Opt) (*groupstate.Store, error) {
	if err := wait.Do(ctx, "target cluster", kafkaclient.Unreachable, func() error {
		return ens.Ensure(topics.Spec{
			Name: cfg.GroupState.Topic, Partitions: cfg.Checkpoints.Partitions, ReplicationFactor: cfg.Checkpoints.ReplicationFactor, Configs: groupstate.Configs,
		})
	}); err != nil {
		return nil, fmt.Errorf("group state topic: %w", err)
	}
	return groupstate.NewStore(opts, cfg.GroupState.Topic)
}

func buildLinks(cfgs []config.Link) ([]server.Link, error) {
	var out []server.Link
	for _, l := range cfgs {
		policy, err := naming.Parse(l.Naming, l.Prefix)
		if err != nil {
			return nil, fmt.Errorf("link %s: %w", l.Name, err)
		}
		link := server.Link{
			Name: l.Name, Naming: policy, ReplicationFactor: l.ReplicationFactor, ExactlyOnce: l.Delivery == "exactly_once",
			Topics: l.TopicFilter(), Shards: uint32(l.Shards), AllowedIDs: tlsconfig.NewIDs(l.AllowedIDs),
		}
		link.ConfigSync, link.SyncACLs = topics.ConfigSync(l.ConfigSync), l.SyncACLs // checked by Validate
		link.Configs = topics.ConfigCopy{Allow: set(l.ConfigAllow), MinRetentionMs: l.MinRetention.Milliseconds(), MinRetentionBytes: int64(l.MinRetentionBytes)}
		link.PlatformTopics = set(l.PlatformTopics)
		out = append(out, link)
	}
	return out, nil
}

func set(keys []string) map[string]bool {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
}
