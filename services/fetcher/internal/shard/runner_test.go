package shard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ferry-replicator/ferry/pkg/refusal"
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

// A record no writer or target takes stops its partition loudly (metric,
// /status naming topic, partition, offset and size or Kafka's error), and
// the shard's other partition keeps flowing: whether the writer refuses it
// (its target's limit, or the target's brokers refusing it for good) or
// the fetcher finds it above writers.max_message_bytes itself.
func TestRecordTooLargeStopsOnlyItsPartition(t *testing.T) {
	tests := []struct {
		name            string
		writerLimit     int    // the test writer refuses batches above this
		refuseAs        string // with this refusal reason
		maxMessageBytes int    // Settings.MaxMessageBytes
		wantReason      string
		wantSetting     string
	}{
		{"refused by the writer", 5_000, "", 0, ReasonRecordTooLarge, "the test writer's limit"},
		{"above writers.max_message_bytes", 0, "", 5_000, ReasonRecordTooLarge, "writers.max_message_bytes"},
		{"refused by the target's brokers", 5_000, refusal.TargetRefused, 0, ReasonTargetRefused, "INVALID_RECORD"},
		{"a batch too large to rebuild", 5_000, refusal.BatchTooLarge, 0, ReasonBatchTooLarge, "max_batch_bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := newSource(t, "ok", "big")
			m := metrics.New(prometheus.NewRegistry())
			committed := func(topic string) float64 {
				return testutil.ToFloat64(m.Committed.WithLabelValues(testLink, topic, "0"))
			}
			writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
			writer.RefuseBatchesAbove(tt.writerLimit)
			writer.RefuseAs(tt.refuseAs)
			r, _ := startRunnerOn(t, src, newWriters(t, writer.Addr()), m, func(s *Settings) { s.MaxMessageBytes = tt.maxMessageBytes }, "ok", "big")

			src.produce(t, "big", 3)
			writertest.WaitFor(t, 10*time.Second, "3 small records of big committed", func() bool { return committed("big") == 3 })
			src.produceSized(t, "big", 1, 20_000) // offset 3
			src.produce(t, "big", 2)
			writertest.WaitFor(t, 10*time.Second, "big/0 stopped", func() bool {
				return testutil.ToFloat64(m.PartitionStops.WithLabelValues(testLink, "big", "0", tt.wantReason)) == 1
			})
			stopped := r.Status().Partitions["big/0"].Stopped
			wants := []string{tt.wantReason, "big/0 offset 3", tt.wantSetting}
			if tt.wantReason == ReasonRecordTooLarge {
				wants = append(wants, "20") // its size, 20,0xx bytes
			}
			for _, want := range wants {
				if !strings.Contains(stopped, want) {
					t.Errorf("/status says %q, want it to name %q", stopped, want)
				}
			}
			// The other partition flows, and the stopped one stays where it
			// stopped: nothing past the record is copied, nothing skipped.
			src.produce(t, "ok", 20)
			writertest.WaitFor(t, 10*time.Second, "20 records of ok committed", func() bool { return committed("ok") == 20 })
			src.produce(t, "ok", 5)
			writertest.WaitFor(t, 10*time.Second, "25 records of ok committed", func() bool { return committed("ok") == 25 })
			if got := committed("big"); got != 3 {
				t.Fatalf("big/0 committed to %v, want 3 (stopped before the large record at offset 3)", got)
			}
			if n := testutil.ToFloat64(m.PartitionStops.WithLabelValues(testLink, "big", "0", tt.wantReason)); n != 1 {
				t.Errorf("big/0 stopped %v times, want once", n)
			}
		})
	}
}

// A lost lease shows in the status at once and stops the runner without a
// drain: Run returns, so nothing more is sent.
func TestLostLeaseStopsTheRunnerAtOnce(t *testing.T) {
	const topic = "t"
	src := newSource(t, topic)
	m := metrics.New(prometheus.NewRegistry())
	committed := func() float64 { return testutil.ToFloat64(m.Committed.WithLabelValues(testLink, topic, "0")) }
	writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
	lost := make(chan struct{})
	r, _, done := startLeasedRunner(t, src, newWriters(t, writer.Addr()), m, func(*Settings) {}, lost, topic)
	src.produce(t, topic, 10)
	writertest.WaitFor(t, 10*time.Second, "10 records committed", func() bool { return committed() == 10 })
	if r.Status().LeaseLost {
		t.Fatal("status shows the lease lost before it was")
	}

	close(lost)
	if !r.Status().LeaseLost {
		t.Error("status does not show the lease lost at once")
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the runner did not stop within 10s of losing its lease")
	}
}

// A writer that cannot verify a partition's checkpoint refuses the open
// naming it (checkpoint_unverified): the fetcher stops that partition
// loudly, once, and opens the shard again without it, so the shard's
// other partition copies. Sent again, the stopped partition would be
// refused at every open, and the shard would copy nothing.
func TestUnverifiedCheckpointStopsOnlyItsPartition(t *testing.T) {
	src := newSource(t, "ok", "forged")
	m := metrics.New(prometheus.NewRegistry())
	writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
	writer.RefuseCheckpointOf("forged", 0)
	r, _ := startRunnerOn(t, src, newWriters(t, writer.Addr()), m, func(*Settings) {}, "ok", "forged")
	stops := func() float64 {
		return testutil.ToFloat64(m.PartitionStops.WithLabelValues(testLink, "forged", "0", ReasonCheckpointUnverified))
	}
	writertest.WaitFor(t, 10*time.Second, "forged/0 stopped as checkpoint_unverified", func() bool { return stops() == 1 })
	src.produce(t, "ok", 20)
	src.produce(t, "forged", 5)
	writertest.WaitFor(t, 10*time.Second, "20 records of ok committed", func() bool {
		return testutil.ToFloat64(m.Committed.WithLabelValues(testLink, "ok", "0")) == 20
	})
	if n := stops(); n != 1 {
		t.Errorf("forged/0 stopped %v times, want once", n)
	}
	if s := r.Status().Partitions["forged/0"].Stopped; !strings.Contains(s, ReasonCheckpointUnverified) || !strings.Contains(s, "offset 42") {
		t.Errorf("/status says %q, want checkpoint_unverified naming the checkpoint's offset", s)
	}
	opens := writer.OpenRequests()
	for _, p := range opens[len(opens)-1].GetPartitions() {
		if p.GetTopic() == "forged" {
			t.Errorf("the last open names the stopped partition %v", p)
		}
	}
}
