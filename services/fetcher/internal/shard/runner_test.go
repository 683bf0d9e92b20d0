package shard

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ferry-replicator/ferry/services/fetcher/internal/metrics"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/writertest"
)

// The restart reason is the gRPC code in snake case, through wrapping, and
// other for errors without one.
func TestRestartReason(t *testing.T) {
	for err, want := range map[error]string{
		status.Error(codes.PermissionDenied, "not in allowed_ids"):                           "permission_denied",
		fmt.Errorf("open stream: %w", status.Error(codes.Unavailable, "connection refused")): "unavailable",
		status.Error(codes.FailedPrecondition, "epoch fenced"):                               "failed_precondition",
		status.Error(codes.Unknown, "?"):                                                     "other",
		errors.New("source: broker gone"):                                                    "other",
		fmt.Errorf("no answer within 2m0s: %w", context.DeadlineExceeded):                    "deadline_exceeded",
	} {
		if got := restartReason(err); got != want {
			t.Errorf("restartReason(%v) = %q, want %q", err, got, want)
		}
	}
}

// With the writer down nothing is acknowledged, yet the lag must follow
// the source's high watermark; and once the runner stops, the shard's
// gauges must go, since another fetcher may follow the shard now, and what
// was never acknowledged must leave the inflight gauge.
func TestLagRisesWhileNothingIsAcknowledged(t *testing.T) {
	const topic = "t"
	src := newSource(t, topic)
	m := metrics.New(prometheus.NewRegistry())
	lag := func() float64 { return testutil.ToFloat64(m.LagRecords.WithLabelValues(testLink, topic, "0")) }
	committed := func() float64 { return testutil.ToFloat64(m.Committed.WithLabelValues(testLink, topic, "0")) }

	writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
	stop := startRunner(t, src, newWriters(t, writer.Addr()), m, topic)
	src.produce(t, topic, 10)
	writertest.WaitFor(t, 10*time.Second, "10 records committed", func() bool { return committed() == 10 && lag() == 0 })

	// The writer takes a batch, then dies without acknowledging it.
	writer.HoldAcks()
	before := writer.Batches()
	src.produce(t, topic, 25)
	writertest.WaitFor(t, 10*time.Second, "a batch sent and held", func() bool { return writer.Batches() > before })
	writer.Stop()
	writertest.WaitFor(t, 10*time.Second, "lag of 25 with the writer down", func() bool { return lag() == 25 })
	if got := committed(); got != 10 {
		t.Fatalf("committed offset %v with the writer down, want 10", got)
	}

	stop()
	if n := testutil.CollectAndCount(m.LagRecords); n != 0 {
		t.Errorf("%d lag series left after the shard stopped", n)
	}
	if n := testutil.CollectAndCount(m.Committed); n != 0 {
		t.Errorf("%d committed-offset series left after the shard stopped", n)
	}
	if v := testutil.ToFloat64(m.InflightBytes); v != 0 {
		t.Errorf("inflight bytes %v after the shard stopped, want 0", v)
	}
}

// A shard moved off its failed writer goes back to it once it is healthy
// again, gently (the stream on the stand-in is drained and closed), and
// goes on from where it was.
func TestShardReturnsToRecoveredWriter(t *testing.T) {
	const topic = "t"
	src := newSource(t, topic)
	m := metrics.New(prometheus.NewRegistry())
	committed := func() float64 { return testutil.ToFloat64(m.Committed.WithLabelValues(testLink, topic, "0")) }
	cps := writertest.NewCheckpoints()
	a := writertest.Start(t, "127.0.0.1:0", cps)
	b := writertest.Start(t, "127.0.0.1:0", cps)
	writers := newWriters(t, a.Addr(), b.Addr())
	pref, other := a, b
	if writers.Preferred(testLink, 0) == b.Addr() {
		pref, other = b, a
	}
	startRunner(t, src, writers, m, topic)
	src.produce(t, topic, 5)
	writertest.WaitFor(t, 10*time.Second, "5 records committed on the preferred writer", func() bool {
		return committed() == 5 && pref.Batches() > 0
	})

	addr := pref.Addr()
	pref.Stop()
	src.produce(t, topic, 5)
	writertest.WaitFor(t, 10*time.Second, "10 records committed on the other writer", func() bool {
		return committed() == 10 && other.Batches() > 0
	})

	back := writertest.Start(t, addr, cps)
	writertest.WaitFor(t, 10*time.Second, "the shard back on its preferred writer", func() bool { return back.Opens() > 0 })
	if other.Closed() == 0 {
		t.Error("the stream on the other writer was not drained and closed")
	}
	src.produce(t, topic, 5)
	writertest.WaitFor(t, 10*time.Second, "15 records committed on the preferred writer", func() bool {
		return committed() == 15 && back.Batches() > 0
	})
}
