package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

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
	cfg.Links = []config.Link{{Name: "east"}}
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
