package readiness

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/test/bufconn"

	"github.com/ferry-replicator/ferry/pkg/admin"
	"github.com/ferry-replicator/ferry/pkg/kafkaclient"
	"github.com/ferry-replicator/ferry/services/writer/internal/checkpoint"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// go-metrics, which sarama uses, starts a process-wide meter ticker.
		goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"),
	)
}

const cpTopic = "__ferry_checkpoints"

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// env is a checker over a real checkpoint store on a kfake target, with
// /readyz served by the admin server and gRPC health over bufconn, as the
// writer wires them.
type env struct {
	cluster *kfake.Cluster
	addr    string
	readyz  string
	health  healthpb.HealthClient
	chk     *Checker
}

func newCluster(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(1, cpTopic)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func start(t *testing.T) *env { return startWith(t, 0) }

// startWith is start with Options.TargetFailures set to failures.
func startWith(t *testing.T, failures int) *env {
	t.Helper()
	c := newCluster(t)
	e := &env{cluster: c, addr: c.ListenAddrs()[0]}
	kc := kafkaclient.Defaults("ferry-test")
	kc.BootstrapServers = c.ListenAddrs()
	base, err := kc.Sarama()
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.Open(kc.BootstrapServers, base, checkpoint.Options{Topic: cpTopic, Partitions: 1, ReplicationFactor: -1, Writer: "w"}, discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)

	hs := health.NewServer()
	chk, err := New(Options{
		Addrs: kc.BootstrapServers, Sarama: base, Topic: cpTopic, View: store.Err,
		Health: hs, Services: []string{"", "ferry.v1.ReplicationService"},
		Interval: 50 * time.Millisecond, Timeout: time.Second, TargetFailures: failures, Log: discard,
	})
	e.chk = chk
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { chk.Close() })
	adm, err := admin.Listen(admin.Config{Listen: "127.0.0.1:0"}, prometheus.NewRegistry(), admin.Options{Ready: chk.Ready}, discard)
	if err != nil {
		t.Fatal(err)
	}
	e.readyz = "http://" + adm.Addr() + "/readyz"

	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	e.health = healthpb.NewHealthClient(conn)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 3)
	go func() { chk.Run(ctx); done <- struct{}{} }()
	go func() { _ = adm.Run(ctx); done <- struct{}{} }()
	go func() { _ = gs.Serve(lis); done <- struct{}{} }()
	t.Cleanup(func() {
		conn.Close()
		cancel()
		gs.Stop()
		for range 3 {
			<-done
		}
	})
	return e
}

// state is what a health checker sees: /readyz's code and body, and the
// gRPC health status of the replication service.
func (e *env) state(t *testing.T) (int, string, healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	resp, err := http.Get(e.readyz)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hr, err := e.health.Check(ctx, &healthpb.HealthCheckRequest{Service: "ferry.v1.ReplicationService"})
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body), hr.GetStatus()
}

// waitState polls until /readyz and gRPC health agree on ready (or not
// ready, with a body containing want).
func (e *env) waitState(t *testing.T, ready bool, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body, st := e.state(t)
		ok := code == http.StatusOK && st == healthpb.HealthCheckResponse_SERVING
		if !ready {
			ok = code == http.StatusServiceUnavailable && st == healthpb.HealthCheckResponse_NOT_SERVING && strings.Contains(body, want)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("want ready=%v (body containing %q); /readyz %d %q, gRPC health %v", ready, want, code, body, st)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, with the deadline above
	}
}

func TestReadinessFollowsTargetAndCheckpointView(t *testing.T) {
	tests := []struct {
		name string
		// fail breaks the writer's dependencies; it returns how to mend
		// them, or nil when nothing can (a failed view needs a restart).
		fail func(t *testing.T, e *env) (heal func())
		want func(e *env) string
	}{
		{
			name: "target drops every metadata request",
			fail: func(t *testing.T, e *env) func() {
				var down atomic.Bool
				down.Store(true)
				e.cluster.ControlKey(kmsg.Metadata.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
					e.cluster.KeepControl()
					if down.Load() {
						return nil, errors.New("injected: connection dropped"), true // closes the connection
					}
					return nil, nil, false
				})
				return func() { down.Store(false) }
			},
			want: func(e *env) string { return "target cluster " + e.addr + " unreachable" },
		},
		{
			name: "target cluster gone, then back on the same address",
			fail: func(t *testing.T, e *env) func() {
				e.cluster.Close()
				return func() {
					_, port, _ := net.SplitHostPort(e.addr)
					p, _ := strconv.Atoi(port)
					newCluster(t, kfake.Ports(p))
				}
			},
			want: func(e *env) string { return "target cluster " + e.addr + " unreachable" },
		},
		{
			name: "checkpoint tail loses its position",
			fail: func(t *testing.T, e *env) func() {
				e.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: cpTopic, Err: kerr.OffsetOutOfRange, Count: -1})
				return nil
			},
			want: func(*env) string { return "checkpoint view failed: tail checkpoint partition 0" },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := start(t)
			e.waitState(t, true, "")
			heal := tt.fail(t, e)
			e.waitState(t, false, tt.want(e))
			if heal == nil {
				return
			}
			heal()
			e.waitState(t, true, "")
		})
	}
}

// A target that fails fewer probes in a row than TargetFailures leaves a
// ready writer ready (a slow spell of the target, alike for every writer,
// must not empty the catalog); one that keeps failing takes it out.
func TestTargetFailuresBelowTheThresholdKeepTheWriterReady(t *testing.T) {
	e := startWith(t, 3)
	e.waitState(t, true, "")
	var failing atomic.Int32 // metadata requests still to drop
	var passed atomic.Int64  // metadata requests let through
	e.cluster.ControlKey(kmsg.Metadata.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		if failing.Add(-1) >= 0 {
			return nil, errors.New("injected: connection dropped"), true
		}
		passed.Add(1)
		return nil, nil, false
	})
	// Readiness changes stay for at least a probe interval (50 ms): a
	// poll every millisecond sees any.
	for round := range 5 {
		p := passed.Load()
		failing.Store(2)
		for failing.Load() > 0 || passed.Load() == p {
			if err := e.chk.Ready(); err != nil {
				t.Fatalf("round %d: not ready after fewer than 3 failed probes: %v", round, err)
			}
			time.Sleep(time.Millisecond)
		}
	}
	failing.Store(1 << 30)
	e.waitState(t, false, "target cluster "+e.addr+" unreachable")
	failing.Store(0)
	e.waitState(t, true, "")
}

// Before the first check the writer is not ready, on both endpoints.
func TestNotReadyBeforeFirstCheck(t *testing.T) {
	hs := health.NewServer()
	base, err := kafkaclient.Defaults("ferry-test").Sarama()
	if err != nil {
		t.Fatal(err)
	}
	chk, err := New(Options{Addrs: []string{"127.0.0.1:1"}, Sarama: base, Topic: cpTopic, View: func() error { return nil },
		Health: hs, Services: []string{""}, Interval: time.Second, Timeout: time.Second, Log: discard})
	if err != nil {
		t.Fatal(err)
	}
	defer chk.Close()
	if err := chk.Ready(); !errors.Is(err, errNotChecked) {
		t.Errorf("Ready = %v, want %v", err, errNotChecked)
	}
	hr, err := hs.Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("gRPC health = %v, %v; want NOT_SERVING", hr.GetStatus(), err)
	}
}
