package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/pkg/stages"
)

// The writer observes two stages of ferry_replication_stage_seconds once
// per batch: transit, from the fetch time the fetcher stamped on the batch
// to its receipt (a batch fetched two seconds ago arrives two seconds
// old), and commit, from its receipt to its acknowledgement by the target
// (or, exactly-once, its transaction's commit). A batch from a fetcher
// older than the stamp has no transit observation rather than one of
// fifty-six years.
func TestStagesObservedPerBatch(t *testing.T) {
	for _, exactlyOnce := range []bool{false, true} {
		t.Run(fmt.Sprintf("exactly-once %v", exactlyOnce), func(t *testing.T) {
			w := startWriter(t, passthroughLinks(t, exactlyOnce))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			stream := w.openOrders(ctx, t, "east")
			start := time.Now()
			stamped := wireKafka(t, 0, sourceBatch(t, 0, 5, nil, recordbatch.None, 0))
			stamped.FetchedUnixMicros = start.Add(-2 * time.Second).UnixMicro()
			if _, err := sendWire(t, stream, 1, stamped); err != nil {
				t.Fatalf("stream ended: %v", err)
			}
			old := wireKafka(t, 5, sourceBatch(t, 5, 5, nil, recordbatch.None, 0)) // no stamp: an older fetcher
			if _, err := sendWire(t, stream, 2, old); err != nil {
				t.Fatalf("stream ended: %v", err)
			}
			elapsed := time.Since(start).Seconds()

			if n, sum := w.stage(t, stages.Transit); n != 1 || sum < 2 || sum > 2+elapsed {
				t.Errorf("transit: %d observations summing to %.3fs, want 1 (the stamped batch only) within [2, %.3f]s", n, sum, 2+elapsed)
			}
			if n, sum := w.stage(t, stages.Commit); n != 2 || sum < 0 || sum > 2*elapsed {
				t.Errorf("commit: %d observations summing to %.3fs, want 2 within [0, %.3f]s", n, sum, 2*elapsed)
			}
		})
	}
}

// stage is the count and sum of link east's series of the stage.
func (w *testWriter) stage(t *testing.T, stage string) (count uint64, sum float64) {
	t.Helper()
	mfs, err := w.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "ferry_replication_stage_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["link"] == "east" && labels["stage"] == stage {
				return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			}
		}
	}
	return 0, 0
}
