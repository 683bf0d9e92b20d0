package shard

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ferry-replicator/ferry/pkg/linkstate"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/metrics"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/writertest"
)

// A link an operator pauses stops copying while the shard keeps its lease
// and its writer (no other is tried), shows the state in /status and opens
// again every LinkRetry; once the link runs, copying goes on from the
// checkpoint with nothing skipped. The same holds for failed_over.
func TestPausedLinkWaitsWithItsLease(t *testing.T) {
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
	pref.TakeHeartbeats()
	lost := make(chan struct{})
	r, _, done := startLeasedRunner(t, src, writers, m, func(s *Settings) { s.LinkRetry = 50 * time.Millisecond }, lost, topic)
	src.produce(t, topic, 5)
	writertest.WaitFor(t, 10*time.Second, "5 records committed", func() bool { return committed() == 5 })

	for _, state := range []linkstate.State{linkstate.Paused, linkstate.FailedOver} {
		pref.SetLinkState(state)
		src.produce(t, topic, 5)
		writertest.WaitFor(t, 10*time.Second, "the shard waiting on a "+string(state)+" link", func() bool {
			st := r.Status()
			return st.LinkState == string(state) && !st.Connected
		})
		opens, batches := pref.Opens(), pref.Batches()
		// It keeps asking the same writer, refused at each open.
		writertest.WaitFor(t, 10*time.Second, "opens retried", func() bool { return len(pref.OpenRequests()) > opens+3 })
		if pref.Opens() != opens || pref.Batches() != batches || other.Opens() != 0 {
			t.Fatalf("%s link: opens %d→%d, batches %d→%d, other writer opens %d; want no stream anywhere",
				state, opens, pref.Opens(), batches, pref.Batches(), other.Opens())
		}
		select {
		case <-done:
			t.Fatalf("the runner stopped on a %s link: it must keep its shard", state)
		default:
		}
		if got := testutil.ToFloat64(m.StreamRestarts.WithLabelValues(testLink, "link_"+string(state))); got < 1 {
			t.Errorf("restarts{reason=link_%s} = %v", state, got)
		}

		pref.SetLinkState(linkstate.Running)
		want := committed() + 5
		writertest.WaitFor(t, 10*time.Second, "copying again from the checkpoint", func() bool { return committed() == want })
		if st := r.Status(); st.LinkState != "" || !st.Connected {
			t.Fatalf("status after resume: %+v", st)
		}
	}
	if n, ok := cps.Next(topic, 0); !ok || n != 15 {
		t.Fatalf("checkpoint %d, %v; want 15", n, ok)
	}
	for i, bt := range pref.Received() {
		if i > 0 && bt.GetFirstOffset() < pref.Received()[i-1].GetFirstOffset() {
			t.Fatalf("batch %d starts at %d, before the one sent before it", i, bt.GetFirstOffset())
		}
	}
}
