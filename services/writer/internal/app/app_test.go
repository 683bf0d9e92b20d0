package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pkgconfig "github.com/ferry-replicator/ferry/pkg/config"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
	"github.com/ferry-replicator/ferry/services/writer/internal/checkpoint"
	"github.com/ferry-replicator/ferry/services/writer/internal/config"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// go-metrics, which sarama uses, starts a process-wide meter ticker.
		goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"),
	)
}

// freeAddr returns a loopback address nothing listens on now. Run binds
// its own listeners and does not report their addresses, so the test picks
// them.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// The whole writer, on a kfake target: /readyz and the gRPC health service
// turn not ready while the target drops every metadata request, and ready
// again when it answers.
func TestReadinessFollowsTheTarget(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	target := cluster.ListenAddrs()[0]

	cfg := config.Defaults()
	cfg.ID = "w1"
	cfg.Listen, cfg.Admin.Listen = freeAddr(t), freeAddr(t)
	cfg.TLS.Insecure = true
	cfg.Target.BootstrapServers = []string{target}
	cfg.Links = []config.Link{{Name: "east", Naming: "prefix", Prefix: "east."}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- Run(ctx, &cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	defer func() {
		cancel()
		if err := <-runErr; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()

	conn, err := grpc.NewClient(cfg.Listen, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	// wait polls until /readyz and gRPC health both say ready, or both say
	// not ready with a /readyz body containing want.
	wait := func(ready bool, want string) {
		t.Helper()
		var code int
		var body string
		var st healthpb.HealthCheckResponse_ServingStatus
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			code, body, st = 0, "", healthpb.HealthCheckResponse_UNKNOWN
			if resp, err := http.Get("http://" + cfg.Admin.Listen + "/readyz"); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				code, body = resp.StatusCode, string(b)
			}
			cctx, ccancel := context.WithTimeout(ctx, time.Second)
			if hr, err := hc.Check(cctx, &healthpb.HealthCheckRequest{}); err == nil {
				st = hr.GetStatus()
			}
			ccancel()
			if ready && code == http.StatusOK && st == healthpb.HealthCheckResponse_SERVING {
				return
			}
			if !ready && code == http.StatusServiceUnavailable && strings.Contains(body, want) && st == healthpb.HealthCheckResponse_NOT_SERVING {
				return
			}
		}
		t.Fatalf("want ready=%v (body containing %q); last /readyz %d %q, gRPC health %v", ready, want, code, body, st)
	}

	wait(true, "")
	var down atomic.Bool
	down.Store(true)
	cluster.ControlKey(kmsg.Metadata.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if down.Load() {
			return nil, errors.New("injected: connection dropped"), true
		}
		return nil, nil, false
	})
	wait(false, "target cluster "+target+" unreachable")
	down.Store(false)
	wait(true, "")
}

// A checkpoint view that loses its position for good (the checkpoint
// topic deleted and created again, shorter, under its tail) ends the
// writer with an error naming it, so its orchestrator restarts it: staying
// up, never ready, would pass every liveness check.
func TestFailedCheckpointViewEndsTheWriter(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, config.Defaults().Checkpoints.Topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	cfg := config.Defaults()
	cfg.ID = "w1"
	cfg.Listen, cfg.Admin.Listen = freeAddr(t), freeAddr(t)
	cfg.TLS.Insecure = true
	cfg.Target.BootstrapServers = cluster.ListenAddrs()
	cfg.Links = []config.Link{{Name: "east", Naming: "prefix", Prefix: "east."}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topic := cfg.Checkpoints.Topic
	for i := range 3 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("east/t/" + string(rune('0'+i))), Value: []byte(`{}`)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// The tail has read the three records once it fetches from offset 3.
	caughtUp := make(chan struct{})
	var once sync.Once
	cluster.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		for _, rt := range req.(*kmsg.FetchRequest).Topics {
			for _, rp := range rt.Partitions {
				if rp.FetchOffset >= 3 {
					once.Do(func() { close(caughtUp) })
				}
			}
		}
		return nil, nil, false
	})
	runErr := make(chan error, 1)
	go func() { runErr <- Run(context.Background(), &cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	select {
	case <-caughtUp:
	case <-ctx.Done():
		t.Fatal("the checkpoint tail never read the topic")
	}
	// Deleted and created again: the tail's next fetch, at 3, is beyond the
	// new end.
	dreq := kmsg.NewPtrDeleteTopicsRequest()
	dreq.TopicNames = []string{topic}
	dt := kmsg.NewDeleteTopicsRequestTopic()
	dt.Topic = &topic
	dreq.Topics = append(dreq.Topics, dt)
	if _, err := dreq.RequestWith(ctx, cl); err != nil {
		t.Fatal(err)
	}
	creq := kmsg.NewPtrCreateTopicsRequest()
	ct := kmsg.NewCreateTopicsRequestTopic()
	ct.Topic, ct.NumPartitions, ct.ReplicationFactor = topic, 1, 1
	creq.Topics = append(creq.Topics, ct)
	if _, err := creq.RequestWith(ctx, cl); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-runErr:
		if err == nil || !strings.Contains(err.Error(), "checkpoint view") {
			t.Fatalf("Run = %v, want the checkpoint view's failure", err)
		}
	case <-ctx.Done():
		t.Fatal("the writer still runs a minute after its checkpoint topic was recreated under its tail")
	}
}

// A writer started while its target is down waits for it: /healthz
// answers, /readyz says what the start waits for, and once the target
// listens the writer becomes ready, without a restart. A stop while it
// waits is a clean exit.
func TestTargetDownAtStartIsWaitedFor(t *testing.T) {
	target := freeAddr(t)
	_, portText, _ := net.SplitHostPort(target)
	port, err := strconv.Atoi(portText)
	if err != nil {
		t.Fatal(err)
	}
	start := func(t *testing.T) (*config.Config, context.CancelFunc, chan error) {
		cfg := config.Defaults()
		cfg.ID = "w1"
		cfg.Listen, cfg.Admin.Listen = freeAddr(t), freeAddr(t)
		cfg.TLS.Insecure = true
		cfg.Target.BootstrapServers = []string{target}
		cfg.Links = []config.Link{{Name: "east", Naming: "prefix", Prefix: "east."}}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		runErr := make(chan error, 1)
		go func() { runErr <- Run(ctx, &cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
		return &cfg, cancel, runErr
	}
	get := func(addr, path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor := func(t *testing.T, what string, ok func() bool, last func() string) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if ok() {
				return
			}
		}
		t.Fatalf("%s: never; last %s", what, last())
	}
	waiting := func(t *testing.T, cfg *config.Config) {
		t.Helper()
		var code int
		var body string
		waitFor(t, "/readyz names the target it waits for", func() bool {
			code, body = get(cfg.Admin.Listen, "/readyz")
			return code == http.StatusServiceUnavailable && strings.Contains(body, "waiting for the target cluster")
		}, func() string { return fmt.Sprintf("/readyz %d %q", code, body) })
		if code, body := get(cfg.Admin.Listen, "/healthz"); code != http.StatusOK {
			t.Fatalf("/healthz %d %q while the start waits, want 200", code, body)
		}
	}

	t.Run("stopped while waiting", func(t *testing.T) {
		cfg, cancel, runErr := start(t)
		waiting(t, cfg)
		cancel()
		if err := <-runErr; err != nil {
			t.Fatalf("Run = %v, want a clean stop", err)
		}
	})
	t.Run("target comes up", func(t *testing.T) {
		cfg, cancel, runErr := start(t)
		defer func() {
			cancel()
			if err := <-runErr; err != nil {
				t.Errorf("Run = %v", err)
			}
		}()
		waiting(t, cfg)
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port))
		if err != nil {
			t.Fatal(err)
		}
		defer cluster.Close()
		var code int
		var body string
		waitFor(t, "ready once the target listens", func() bool {
			code, body = get(cfg.Admin.Listen, "/readyz")
			return code == http.StatusOK
		}, func() string { return fmt.Sprintf("/readyz %d %q", code, body) })
	})
}

// A writer whose target speaks TLS while its settings do not (target.tls
// left off) exits at start naming the setting, instead of waiting for ever
// as for a target that is down: the brokers close plaintext connections,
// which alone looks like a broker restarting.
func TestPlaintextClientAtATLSTargetExits(t *testing.T) {
	now := time.Now()
	ca, err := devcerts.NewCA("kafka test CA", now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(devcerts.LeafOptions{IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(&tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	cfg := config.Defaults()
	cfg.ID = "w1"
	cfg.Listen, cfg.Admin.Listen = freeAddr(t), freeAddr(t)
	cfg.TLS.Insecure = true
	cfg.Target.BootstrapServers = cluster.ListenAddrs()
	cfg.Target.DialTimeout = 5 * time.Second
	cfg.Links = []config.Link{{Name: "east", Naming: "prefix", Prefix: "east."}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = Run(ctx, &cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if ctx.Err() != nil {
		t.Fatal("the writer still waited a minute for a target whose brokers speak TLS")
	}
	if err == nil || !strings.Contains(err.Error(), "target.tls.enabled is false") {
		t.Fatalf("Run = %v, want an error naming target.tls", err)
	}
}

// A writer whose checkpoints.signers would not admit its own signature
// (another CA, identities that are not its own) would stop every
// partition it opens as checkpoint_unverified: it refuses to start,
// naming the settings, before it touches the target. The defaults (its
// own identity under tls.ca_file) admit it.
func TestSignersThatRefuseTheWritersOwnSignatureStopTheStart(t *testing.T) {
	dir := t.TempDir()
	if _, err := devcerts.WriteDir(dir, devcerts.Options{Validity: time.Hour}); err != nil {
		t.Fatal(err)
	}
	otherDir := t.TempDir()
	if _, err := devcerts.WriteDir(otherDir, devcerts.Options{Validity: time.Hour}); err != nil {
		t.Fatal(err)
	}
	fetcher := devcerts.SPIFFEID(devcerts.DefaultTrustDomain, "fetcher")
	for _, tc := range []struct {
		name    string
		signers config.Signers
		want    string
	}{
		{"defaults", config.Signers{}, ""},
		{"identities of fetchers", config.Signers{AllowedIDs: []string{fetcher}}, "identity not in allowed_ids"},
		{"another CA", config.Signers{CAFile: filepath.Join(otherDir, "ca.pem")}, "not trusted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Defaults()
			cfg.ID = "w1"
			cfg.Listen, cfg.Admin.Listen = freeAddr(t), freeAddr(t)
			cfg.TLS.CertFile, cfg.TLS.KeyFile = filepath.Join(dir, "writer.pem"), filepath.Join(dir, "writer-key.pem")
			cfg.TLS.CAFile, cfg.TLS.AllowedIDs = filepath.Join(dir, "ca.pem"), []string{fetcher}
			cfg.Checkpoints.Signers = tc.signers
			cfg.Target.BootstrapServers = []string{freeAddr(t)}
			cfg.Links = []config.Link{{Name: "east", Naming: "prefix", Prefix: "east."}}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			certs, err := tlsconfig.NewSource(cfg.TLS, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = checkpointTrust(&cfg, certs, slog.New(slog.DiscardHandler))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("default signers: %v", err)
				}
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err = Run(ctx, &cfg, slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), "checkpoints.signers") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %v, want a refusal naming checkpoints.signers and %q", err, tc.want)
			}
		})
	}
}

// `ferry-writer checkpoint forget` writes the tombstone of a partition's
// checkpoint signed with the writer's key, which every writer's view
// takes (an unsigned one they ignore).
func TestCheckpointForgetCommand(t *testing.T) {
	dir := t.TempDir()
	if _, err := devcerts.WriteDir(dir, devcerts.Options{Validity: time.Hour}); err != nil {
		t.Fatal(err)
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	file := filepath.Join(dir, "writer.yaml")
	yaml := fmt.Sprintf("id: w1\ntarget: {bootstrap_servers: [%q]}\n"+
		"tls: {cert_file: %q, key_file: %q, ca_file: %q, allowed_ids: [%q]}\n"+
		"links: [{name: east, naming: prefix, prefix: 'east.'}]\n",
		cluster.ListenAddrs()[0], filepath.Join(dir, "writer.pem"), filepath.Join(dir, "writer-key.pem"), filepath.Join(dir, "ca.pem"),
		devcerts.SPIFFEID(devcerts.DefaultTrustDomain, "fetcher"))
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Defaults()
	if err := pkgconfig.Load(&cfg, file, nil, "FERRY_WRITER_", nil); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	certs, err := tlsconfig.NewSource(cfg.TLS, log)
	if err != nil {
		t.Fatal(err)
	}
	signer, verifier, err := checkpointTrust(&cfg, certs, log)
	if err != nil {
		t.Fatal(err)
	}
	base, err := cfg.Target.Sarama()
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.Open(cfg.Target.BootstrapServers, base, checkpoint.Options{Topic: cfg.Checkpoints.Topic, Partitions: 1,
		ReplicationFactor: -1, Writer: "w1", Signer: signer, Verifier: verifier}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	k := checkpoint.Key{Link: "east", Topic: "orders", Partition: 0}
	rec, err := store.Record(k, checkpoint.Checkpoint{NextSourceOffset: 42, TargetOffset: 40, Writer: "w1", Time: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kr := &kgo.Record{Topic: cfg.Checkpoints.Topic, Partition: rec.Partition, Key: rec.Key, Value: rec.Value}
	for _, h := range rec.Headers {
		kr.Headers = append(kr.Headers, kgo.RecordHeader(h))
	}
	if err := cl.ProduceSync(ctx, kr).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := store.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if cp, ok, err := store.Get(k); !ok || err != nil || cp.NextSourceOffset != 42 {
		t.Fatalf("before the forget: %+v, %v, %v", cp, ok, err)
	}

	var out strings.Builder
	args := []string{"forget", "--config", file, "--link", "east", "--topic", "orders", "--partition", "0"}
	if code := checkpointCommand(args, nil, &out, noBridge); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "forgot the checkpoint of east/orders/0 (next source offset 42") {
		t.Errorf("the command says:\n%s", out.String())
	}
	if err := store.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if cp, ok, err := store.Get(k); ok || err != nil {
		t.Fatalf("after the forget, another writer's view: %+v, %v, %v; want none", cp, ok, err)
	}
	if code := checkpointCommand([]string{"forget", "--config", file, "--link", "west", "--topic", "orders", "--partition", "0"}, nil, &out, noBridge); code != 2 {
		t.Errorf("a link not configured: exit %d, want 2", code)
	}

	// set moves a partition forward, signed.
	args = []string{"set", "--config", file, "--link", "east", "--topic", "orders", "--partition", "0", "--next-offset", "50"}
	if code := checkpointCommand(args, nil, &out, noBridge); code != 0 {
		t.Fatalf("set: exit %d:\n%s", code, out.String())
	}
	if err := store.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if cp, ok, err := store.Get(k); !ok || err != nil || cp.NextSourceOffset != 50 {
		t.Fatalf("after set: %+v, %v, %v; want 50", cp, ok, err)
	}

	// sign signs a legacy (unsigned) checkpoint again, under
	// accept_unsigned: then writers without accept_unsigned take it.
	legacy := checkpoint.Key{Link: "east", Topic: "orders", Partition: 1}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: cfg.Checkpoints.Topic, Partition: 0, Key: []byte(legacy.String()),
		Value: []byte(`{"next_source_offset":7,"target_offset":7,"writer":"old"}`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	env := []string{"FERRY_WRITER_CHECKPOINTS_ACCEPT_UNSIGNED=true"}
	if code := checkpointCommand([]string{"sign", "--config", file}, env, &out, noBridge); code != 0 {
		t.Fatalf("sign: exit %d:\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "signed 1 of 1") {
		t.Errorf("sign says:\n%s", out.String())
	}
	if err := store.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if cp, ok, err := store.Get(legacy); !ok || err != nil || cp.NextSourceOffset != 7 {
		t.Fatalf("after sign, a strict writer's view: %+v, %v, %v; want the legacy checkpoint at 7", cp, ok, err)
	}
}

func noBridge(*slog.Logger) {}
