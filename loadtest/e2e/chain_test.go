package e2e

import (
	"context"
	"testing"

	"github.com/ferry-replicator/ferry/loadtest/harness"
	"github.com/ferry-replicator/ferry/loadtest/workload"
)

// TestRealKafkaChainCarriesOn runs links A→B and B→C at once on three
// Apache Kafka brokers, identity naming, link.skip_replicated on (the
// default) on both. What A→B writes into B came from A, not from B→C's
// target C, so B→C copies it on: C ends with every record produced on A,
// each once, and B→C's fetcher leaves nothing out.
func TestRealKafkaChainCarriesOn(t *testing.T) {
	ctx := context.Background()
	var addrs [3][]string
	for i, b := range startKafkas(t, "a", "b", "c") {
		addrs[i] = []string{b.Addr()}
	}
	const topic, partitions, records = "t.orders", 3, 3000
	ab, bc := newEnvOn(t, addrs[0], addrs[1]), newEnvOn(t, addrs[1], addrs[2])
	shareCerts(t, ab, bc) // B→C verifies A→B's signed entries: it copies them as copied from A, not as unverified
	for _, e := range []*env{ab, bc} {
		e.naming, e.prefix = "identity", ""
		e.createTopic(topic, partitions, nil)
		e.startWriter()
		e.startFetcher(nil)
	}
	ab.produce(ctx, workload.Options{Topic: topic, Partitions: partitions, Records: records, ValueBytes: 200, Rate: 3000, Seed: 21})
	bc.waitFor(ctx, topic, records)

	want := committedRecords(ctx, t, addrs[0], topic)
	got := committedRecords(ctx, t, addrs[2], topic)
	total, dups := 0, 0
	for d, n := range got {
		total += n
		dups += n - 1
		if want[d] == 0 {
			t.Errorf("C holds a record A never had: %s", d)
		}
	}
	if len(want) != records || total != records || dups != 0 || len(got) != len(want) {
		t.Errorf("C holds %d records (%d distinct, %d duplicates), want each of the %d produced on A (%d distinct) once", total, len(got), dups, records, len(want))
	}
	skipped, err := harness.Metric(ctx, bc.fetcherAdmin, "ferry_fetcher_replicated_skipped_records_total")
	if err != nil {
		t.Fatal(err)
	}
	if skipped != 0 {
		t.Errorf("B→C's fetcher left out %v records, want none: they came from A", skipped)
	}
}
