package shard

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-replicator/ferry/pkg/budget"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/metrics"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/rawfetch"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/writertest"
)

// Two shards share the fetcher's budget (link.max_buffered_bytes): while
// shard a's batches wait unacknowledged they hold it, and shard b cannot
// fetch; each way the held bytes come back (acknowledged, or a's stream
// ended by a writer killed mid-stream), b copies everything, and when
// both stop the budget is whole again.
func TestShardsShareTheFetchersBudget(t *testing.T) {
	for _, end := range []string{"acknowledged", "writer killed"} {
		t.Run(end, func(t *testing.T) {
			src := newSource(t, "a", "b")
			// One partition's round is the whole budget, so bytes held
			// anywhere stop every other round.
			b := budget.New(rawfetch.DefaultPartitionMaxBytes, nil)
			withBudget := func(d *Deps) { d.Budget = b }

			wa := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
			wa.HoldAcks()
			ma := metrics.New(prometheus.NewRegistry())
			src.produce(t, "a", 20)
			_, stopA, _ := startRunnerDeps(t, src, newWriters(t, wa.Addr()), ma, defaults, withBudget, make(chan struct{}), "a")
			writertest.WaitFor(t, 10*time.Second, "shard a's batches sent", func() bool { return wa.Batches() > 0 })
			if held := b.InUse(); held <= 0 || held > b.Max() {
				t.Fatalf("budget in use %d with a's batches unacknowledged, want between 1 and %d", held, b.Max())
			}

			wb := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
			mb := metrics.New(prometheus.NewRegistry())
			src.produce(t, "b", 30)
			_, stopB, _ := startRunnerDeps(t, src, newWriters(t, wb.Addr()), mb, defaults, withBudget, make(chan struct{}), "b")
			// b's stream opens, and its first round waits for the budget
			// that a holds.
			writertest.WaitFor(t, 10*time.Second, "shard b waiting for the budget", func() bool { return wb.Opens() > 0 && b.Waiting() > 0 })
			if n := wb.Batches(); n != 0 {
				t.Fatalf("shard b sent %d batches while shard a held the whole budget", n)
			}

			if end == "acknowledged" {
				wa.ReleaseAcks()
				writertest.WaitFor(t, 10*time.Second, "every record of a committed", func() bool { return committedOf(ma, "a")() == 20 })
			} else {
				wa.Stop() // a's stream ends with its batches unacknowledged
			}
			writertest.WaitFor(t, 10*time.Second, "every record of b committed", func() bool { return committedOf(mb, "b")() == 30 })
			stopA()
			stopB()
			if held := b.InUse(); held != 0 {
				t.Fatalf("budget in use %d after both shards stopped, want 0", held)
			}
		})
	}
}
