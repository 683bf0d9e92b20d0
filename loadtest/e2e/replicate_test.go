package e2e

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/loadtest/harness"
	"github.com/ferry-replicator/ferry/loadtest/workload"
)

func TestReplicatesTopicsKeepingPartitionsKeysHeaders(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.createTopic("t.orders", 3, map[string]*string{"retention.ms": ptr("123456789")})
	e.createTopic("t.payments", 5, nil)
	e.createTopic("other", 1, nil) // not selected by the link
	e.startWriter()
	e.startFetcher(nil)
	e.produce(ctx, workload.Options{Topic: "t.orders", Partitions: 3, Records: 3000, ValueBytes: 300, Seed: 1})
	e.produce(ctx, workload.Options{Topic: "t.payments", Partitions: 5, Records: 2000, ValueBytes: 200, Seed: 2})
	e.produce(ctx, workload.Options{Topic: "other", Partitions: 1, Records: 10, ValueBytes: 10, Seed: 3})
	e.waitFor(ctx, "src.t.orders", 3000)
	e.waitFor(ctx, "src.t.payments", 2000)

	// The verifier compares partition by partition: keys, values, headers
	// and timestamps, in order.
	if res := e.verify(ctx, "t.orders", "t.payments"); !res.OK() || res.Produced != 5000 || res.Replicated != 5000 {
		t.Fatalf("copy not exact: %+v", res)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(e.dst...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	details, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(details["src.t.orders"].Partitions); got != 3 {
		t.Errorf("target src.t.orders has %d partitions, want 3", got)
	}
	if got := len(details["src.t.payments"].Partitions); got != 5 {
		t.Errorf("target src.t.payments has %d partitions, want 5", got)
	}
	if details.Has("src.other") || details.Has("other") {
		t.Errorf("unselected topic was replicated: %v", details.Names())
	}
	cfgs, err := adm.DescribeTopicConfigs(ctx, "src.t.orders")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := cfgs.On("src.t.orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range rc.Configs {
		if c.Key == "retention.ms" && c.MaybeValue() == "123456789" {
			found = true
		}
	}
	if !found {
		t.Errorf("source topic config retention.ms was not copied to the target topic")
	}
}

// The fetcher sends the source's Kafka batches as the broker stores them:
// compressed by the producer (lz4), uncompressed, and transactional with
// aborted transactions between committed ones. The copy must be the same
// record for record.
func TestPassThroughReplicatesRecordForRecord(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.createTopic("t.lz4", 3, nil)
	e.createTopic("t.plain", 2, nil)
	e.createTopic("t.txn", 2, nil)
	e.startWriter()
	e.startFetcher(nil)
	e.produce(ctx, workload.Options{Topic: "t.lz4", Partitions: 3, Records: 3000, ValueBytes: 300, Seed: 1})
	e.produce(ctx, workload.Options{Topic: "t.plain", Partitions: 2, Records: 2000, ValueBytes: 200, Seed: 2,
		ClientOpts: []kgo.Opt{kgo.ProducerBatchCompression(kgo.NoCompression())}})
	txn := e.produce(ctx, workload.Options{Topic: "t.txn", Partitions: 2, Records: 1000, ValueBytes: 100, Seed: 3,
		Transactional: true, TxnRecords: 50, AbortEvery: 3})
	if txn.Aborted() == 0 {
		t.Fatal("the workload aborted nothing; the test would prove less")
	}
	e.waitFor(ctx, "src.t.lz4", 3000)
	e.waitFor(ctx, "src.t.plain", 2000)
	e.waitFor(ctx, "src.t.txn", txn.Produced())

	// The verifier compares partition by partition: keys, values, headers
	// and timestamps, in order.
	want := 5000 + txn.Produced()
	if res := e.verify(ctx, "t.lz4", "t.plain", "t.txn"); !res.OK() || res.Leaked != 0 || res.Produced != want || res.Replicated != want {
		t.Fatalf("copy not exact: %+v", res)
	}
	// Passed through, not re-encoded: a batch compressed at the source
	// travels as it is, so its wire bytes are its bytes.
	series := `{link="test",partition="0",topic="t.lz4"}`
	raw, err := harness.Metric(ctx, e.fetcherAdmin, "ferry_fetcher_bytes_total"+series)
	if err != nil {
		t.Fatal(err)
	}
	wire, err := harness.Metric(ctx, e.fetcherAdmin, "ferry_fetcher_wire_bytes_total"+series)
	if err != nil {
		t.Fatal(err)
	}
	if raw == 0 || wire != raw {
		t.Errorf("t.lz4/0: %v bytes sent as %v on the wire; passed through, they are the same", raw, wire)
	}
}

func TestPicksUpTopicCreatedAfterStart(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.createTopic("t.first", 2, nil)
	e.startWriter()
	e.startFetcher(nil)
	e.produce(ctx, workload.Options{Topic: "t.first", Partitions: 2, Records: 200, ValueBytes: 100, Seed: 1})
	e.waitFor(ctx, "src.t.first", 200)

	e.createTopic("t.late", 4, nil) // discovery runs every second in tests
	e.produce(ctx, workload.Options{Topic: "t.late", Partitions: 4, Records: 400, ValueBytes: 100, Seed: 2})
	e.waitFor(ctx, "src.t.late", 400)
	if res := e.verify(ctx, "t.first", "t.late"); !res.OK() {
		t.Fatalf("copy not exact: %+v", res)
	}
}

func TestAbortedSourceTransactionsAreNotReplicated(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.createTopic("t.txn", 2, nil)
	e.startWriter()
	e.startFetcher(nil)
	p := e.produce(ctx, workload.Options{
		Topic: "t.txn", Partitions: 2, Records: 1000, ValueBytes: 100, Seed: 1,
		Transactional: true, TxnRecords: 50, AbortEvery: 3,
	})
	if p.Aborted() == 0 {
		t.Fatal("the workload aborted nothing; the test would prove nothing")
	}
	e.waitFor(ctx, "src.t.txn", p.Produced())
	// waitFor counts end offsets, markers included, so it can return
	// before the fetcher has read the last aborted transaction: a leak of
	// it shows only once everything the source holds is committed.
	e.waitCaughtUp(ctx, "t.txn")
	res := e.verify(ctx, "t.txn")
	recordScenario(t, "", res, 0)
	if !res.OK() || res.Leaked != 0 || res.Produced != p.Produced() {
		t.Fatalf("aborted=%d committed=%d: %+v", p.Aborted(), p.Produced(), res)
	}
}

// A source topic grown in partitions is grown on the target, and the new
// partitions are copied record for record (a DR copy must hold every
// partition a consumer may fail over to).
func TestGrowsTargetPartitionsWithTheSource(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.createTopic("t.grow", 2, nil)
	e.startWriter()
	e.startFetcher(nil)
	e.produce(ctx, workload.Options{Topic: "t.grow", Partitions: 2, Records: 200, ValueBytes: 100, Seed: 1})
	e.waitFor(ctx, "src.t.grow", 200)

	cl, err := kgo.NewClient(kgo.SeedBrokers(e.src...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if resp, err := kadm.NewClient(cl).CreatePartitions(ctx, 2, "t.grow"); err != nil || resp.Error() != nil {
		t.Fatalf("grow the source: %v %v", err, resp.Error())
	}
	e.produce(ctx, workload.Options{Topic: "t.grow", Partitions: 4, Records: 400, ValueBytes: 100, Seed: 2})
	e.waitFor(ctx, "src.t.grow", 600) // discovery runs every second in tests

	dst, err := kgo.NewClient(kgo.SeedBrokers(e.dst...))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	td, err := kadm.NewClient(dst).ListTopics(ctx, "src.t.grow")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(td["src.t.grow"].Partitions); n != 4 {
		t.Fatalf("target topic has %d partitions, want 4 as the source", n)
	}
	if res := e.verify(ctx, "t.grow"); !res.OK() {
		t.Fatalf("copy not exact: %+v", res)
	}
}
