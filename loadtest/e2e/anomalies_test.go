package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/loadtest/harness"
	"github.com/ferry-replicator/ferry/loadtest/workload"
)

// Source anomalies must stop the partition loudly, never skip silently;
// link.on_data_loss: skip goes on and counts what it skipped.

func (e *env) sourceAdmin() (*kadm.Client, func()) {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.src...))
	if err != nil {
		e.t.Fatal(err)
	}
	return kadm.NewClient(cl), cl.Close
}

// waitMetric polls a fetcher metric until it reaches want.
func (e *env) waitMetric(name string, want float64) float64 {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, _ := harness.Metric(context.Background(), e.fetcherAdmin, name)
		if v >= want {
			return v
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s = %v, want at least %v", name, v, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitSourceTopicGone waits until the source no longer lists topic, so
// that creating it again makes a new topic rather than failing as a
// duplicate of one still being deleted.
func (e *env) waitSourceTopicGone(ctx context.Context, adm *kadm.Client, topic string) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		topics, err := adm.ListTopics(ctx, topic)
		if err == nil && !topics.Has(topic) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("source still lists %s 30s after its deletion (err %v)", topic, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestRetentionBeyondCheckpointStopsThePartition(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.createTopic("t.ret", 1, nil)
	e.startWriter()
	e.startFetcher(nil)
	e.produce(ctx, workload.Options{Topic: "t.ret", Partitions: 1, Records: 100, ValueBytes: 50, Seed: 1})
	e.waitFor(ctx, "src.t.ret", 100)
	if err := e.fetcher.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	// While the fetcher is away, 200 more records arrive and retention
	// removes everything below offset 250: records 100..249 are lost to it.
	e.produce(ctx, workload.Options{Topic: "t.ret", Partitions: 1, Records: 200, ValueBytes: 50, Seed: 2})
	adm, done := e.sourceAdmin()
	defer done()
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: "t.ret", Partition: 0, At: 250})
	if _, err := adm.DeleteRecords(ctx, offs); err != nil {
		t.Fatalf("delete records: %v", err)
	}
	if err := e.fetcher.Restart(); err != nil {
		t.Fatal(err)
	}
	e.waitMetric("ferry_data_loss_events_total", 1)
	// A window for a wrong copy to show: the stop is an absence, and no
	// event marks the moment a partition that went on would have copied.
	time.Sleep(2 * time.Second)
	// Count records, not end offsets: exactly-once leaves transaction markers.
	if n := e.verifyOnce(ctx, "t.ret").Replicated; n != 100 {
		t.Fatalf("a stopped partition went on: the target holds %d records, want the 100 from before", n)
	}

	// The operator accepts the loss: skip, counted.
	if err := e.fetcher.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	e.startFetcher(map[string]any{"on_data_loss": "skip"})
	e.waitFor(ctx, "src.t.ret", 150)
	if skipped := e.waitMetric("ferry_skipped_records_total", 150); skipped != 150 {
		t.Fatalf("ferry_skipped_records_total = %v, want 150", skipped)
	}
}

func TestRecreatedTopicStopsThePartition(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.createTopic("t.re", 1, nil)
	e.startWriter()
	e.startFetcher(nil)
	e.produce(ctx, workload.Options{Topic: "t.re", Partitions: 1, Records: 50, ValueBytes: 50, Seed: 1})
	e.waitFor(ctx, "src.t.re", 50)
	if err := e.fetcher.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	adm, done := e.sourceAdmin()
	defer done()
	if _, err := adm.DeleteTopics(ctx, "t.re"); err != nil {
		t.Fatal(err)
	}
	e.waitSourceTopicGone(ctx, adm, "t.re")
	e.createTopic("t.re", 1, nil)
	// More records than before, so the checkpoint (50) is inside the new
	// log: only the topic ID tells the topics apart.
	e.produce(ctx, workload.Options{Topic: "t.re", Partitions: 1, Records: 80, ValueBytes: 50, Seed: 3})
	if err := e.fetcher.Restart(); err != nil {
		t.Fatal(err)
	}
	e.waitMetric("ferry_data_loss_events_total", 1)
	time.Sleep(2 * time.Second) // a window for a wrong copy to show, as above
	if n := e.verifyOnce(ctx, "t.re").Replicated; n != 50 {
		t.Fatalf("records of the recreated topic were appended after the old ones: target holds %d, want 50", n)
	}
}
