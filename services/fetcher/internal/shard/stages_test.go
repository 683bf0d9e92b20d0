package shard

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/pkg/stages"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/metrics"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/writertest"
)

// The fetch stage is observed once per wire batch, from the newest source
// timestamp of its records to the fetch that read them: records created a
// minute ago are a minute old when fetched. Each batch carries its fetch
// time for the writer's transit stage.
func TestFetchStageObservedPerBatch(t *testing.T) {
	const topic = "t"
	src := newSource(t, topic)
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())

	created := time.Now().Add(-time.Minute)
	recs := numbered(topic, 0, 5)
	for _, r := range recs {
		r.Timestamp = created
	}
	produceBatch(t, src.batchProducer(t, kgo.ProducerLinger(0)), recs)
	before := time.Now()
	startRunner(t, src, newWriters(t, writer.Addr()), m, topic)
	writertest.WaitFor(t, 10*time.Second, "5 records committed", func() bool { return committedOf(m, topic)() == 5 })
	after := time.Now()

	count, sum := stageHistogram(t, reg, stages.Fetch)
	batches := 0
	for _, b := range writer.Received() {
		if b.GetRecordCount() == 0 {
			continue
		}
		batches++
		at := time.UnixMicro(b.GetFetchedUnixMicros())
		if at.Before(before.Add(-time.Millisecond)) || at.After(after) {
			t.Errorf("batch %d stamped fetched at %v, want within [%v, %v]", b.GetSequence(), at, before, after)
		}
	}
	if count != uint64(batches) || batches == 0 {
		t.Fatalf("fetch stage observed %d times for %d batches of records, want once per batch", count, batches)
	}
	// Kafka keeps timestamps in milliseconds: the records' is created cut
	// to the millisecond, up to 1 ms older than created.
	stamped := created.Truncate(time.Millisecond)
	if lo, hi := before.Sub(stamped).Seconds(), after.Sub(stamped).Seconds(); sum/float64(count) < lo || sum/float64(count) > hi {
		t.Errorf("fetch stage mean %.3fs, want within [%.3f, %.3f]s (records created a minute before the fetch)", sum/float64(count), lo, hi)
	}
}

// stageHistogram is the count and sum of the stage's series of the test
// link in reg.
func stageHistogram(t *testing.T, reg *prometheus.Registry, stage string) (count uint64, sum float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "ferry_replication_stage_seconds" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["link"] == testLink && labels["stage"] == stage {
				return mt.GetHistogram().GetSampleCount(), mt.GetHistogram().GetSampleSum()
			}
		}
	}
	return 0, 0
}
