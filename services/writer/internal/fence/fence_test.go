package fence

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/ferry-replicator/ferry/services/writer/internal/producer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestAbortEndsAnOpenTransactionAndFencesItsProducer leaves a transaction
// open on two partitions, checks that CheckClosed sees it, aborts it with
// Abort, and checks that its records never become visible and that its
// producer can no longer commit.
func TestAbortEndsAnOpenTransactionAndFencesItsProducer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "data", "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const id = "ferry-test-7"
	zombie, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID(id),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer zombie.Close()
	if err := zombie.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for p := range int32(2) {
		if err := zombie.ProduceSync(ctx, &kgo.Record{Topic: "data", Partition: p, Value: []byte("left open")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	cl, err := producer.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	id64, _, err := zombie.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	data := Partitions{"data": {0, 1}}
	if err := CheckClosed(ctx, cl.Client, data, id64); !errors.Is(err, ErrStillOpen) {
		t.Fatalf("CheckClosed with a transaction open = %v, want ErrStillOpen", err)
	}

	// Another application's transaction open on the same partitions is
	// not the shard's: it holds the stable offset back, and CheckClosed
	// passes it by.
	other, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("some-application"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := other.ProduceSync(ctx, &kgo.Record{Topic: "data", Partition: 1, Value: []byte("the application's")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	if err := Abort(ctx, cl, id, time.Minute, Partitions{"data": {0, 1}, "checkpoints": {0, 1}}); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	// The abort's markers are written before the coordinator lets the id's
	// next producer start; wait for that as the writer's producer does.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := CheckClosed(ctx, cl.Client, data, id64)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrStillOpen) || time.Now().After(deadline) {
			t.Fatalf("CheckClosed after Abort: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	if err := CheckClosed(ctx, cl.Client, data, otherID(ctx, t, other)); !errors.Is(err, ErrStillOpen) {
		t.Fatalf("CheckClosed of the application's producer = %v, want ErrStillOpen (the check must see a transaction that is there)", err)
	}
	if err := other.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}

	if err := zombie.EndTransaction(ctx, kgo.TryCommit); err == nil {
		t.Fatal("the fenced producer committed")
	} else if !errors.Is(err, kerr.ProducerFenced) && !errors.Is(err, kerr.InvalidProducerEpoch) && !errors.Is(err, kerr.InvalidTxnState) {
		t.Logf("fenced producer's commit failed with %v", err)
	}

	reader, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("data"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	defer pcancel()
	fs := reader.PollFetches(pctx)
	if n := fs.NumRecords(); n != 0 {
		t.Fatalf("read_committed sees %d records of the aborted transaction", n)
	}
}

func otherID(ctx context.Context, t *testing.T, cl *kgo.Client) int64 {
	t.Helper()
	id, _, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
