package topicscan

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Scan returns what the topic holds committed when it begins, and ends:
// a committed transaction's marker at the end (which held a
// read_uncommitted reader waiting for the offset before the high
// watermark for ever), an aborted transaction's records (left out) and a
// transaction still open at the end (past the last stable offset: not
// waited for) do not hold it.
func TestScanReadsToTheLastStableOffset(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "state"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seeds := kgo.SeedBrokers(c.ListenAddrs()...)
	plain, err := kgo.NewClient(seeds, kgo.DefaultProduceTopic("state"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	txn := func(id string) *kgo.Client {
		cl, err := kgo.NewClient(seeds, kgo.DefaultProduceTopic("state"), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionalID(id))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	produce := func(cl *kgo.Client, p int32, v string) {
		t.Helper()
		if err := cl.ProduceSync(ctx, &kgo.Record{Partition: p, Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	inTxn := func(cl *kgo.Client, p int32, v string, end *kgo.TransactionEndTry) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		produce(cl, p, v)
		if end != nil { // nil: left open
			if err := cl.EndTransaction(ctx, *end); err != nil {
				t.Fatal(err)
			}
		}
	}
	commit, abort := kgo.TryCommit, kgo.TryAbort
	produce(plain, 0, "a")
	inTxn(txn("t1"), 0, "b", &commit) // partition 0 ends on a commit marker
	produce(plain, 1, "c")
	inTxn(txn("t2"), 1, "aborted", &abort)
	produce(plain, 1, "d")
	open := txn("t3")
	inTxn(open, 1, "open", nil)

	got := map[int32][]string{}
	if err := Scan(ctx, []kgo.Opt{seeds}, "state", nil, func(r *kgo.Record) { got[r.Partition] = append(got[r.Partition], string(r.Value)) }); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "b"}; !slices.Equal(got[0], want) {
		t.Errorf("partition 0: %q, want %q", got[0], want)
	}
	if want := []string{"c", "d"}; !slices.Equal(got[1], want) {
		t.Errorf("partition 1: %q, want %q", got[1], want)
	}
	if err := open.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
}
