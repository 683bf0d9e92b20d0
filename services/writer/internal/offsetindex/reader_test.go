package offsetindex

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The Reader keeps the committed records of its key only: an aborted
// transaction's, another key's, and a value that does not decode
// (counted) are left out, and a read whose partition ends with a marker
// ends.
func TestReaderReadsCommittedRecordsOfItsKey(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "idx"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	seeds := kgo.SeedBrokers(cluster.ListenAddrs()...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := Key{Link: "east", Topic: "orders", Partition: 0}
	b := Key{Link: "east", Topic: "orders", Partition: 1}
	for p := int32(1); PartitionOf(b, 3) != PartitionOf(a, 3); p++ {
		b.Partition = p // another key of a's index partition
	}
	part := PartitionOf(a, 3)

	prod, err := kgo.NewClient(seeds, kgo.TransactionalID("t"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	record := func(k Key, e Entry) *kgo.Record {
		v, err := e.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		return &kgo.Record{Topic: "idx", Partition: part, Key: []byte(k.String()), Value: v}
	}
	txn := func(commit kgo.TransactionEndTry, recs ...*kgo.Record) {
		t.Helper()
		if err := prod.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := prod.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	txn(kgo.TryCommit, record(a, Entry{From: 0, Next: 10, TargetBefore: -1, Runs: []Run{{0, 1, 10}}}),
		record(b, Entry{From: 0, Next: 5, TargetBefore: -1, Runs: []Run{{0, 0, 5}}}))
	txn(kgo.TryAbort, record(a, Entry{From: 10, Next: 20, TargetBefore: 11, Runs: []Run{{10, 12, 10}}}))
	txn(kgo.TryCommit, &kgo.Record{Topic: "idx", Partition: part, Key: []byte(a.String()), Value: []byte{Version, 0x80}},
		record(a, Entry{From: 10, Next: 20, TargetBefore: 11, Runs: []Run{{10, 25, 10}}}))

	r, err := NewReader([]kgo.Opt{seeds}, "idx")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	x, err := r.Load(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if x.Runs() != 2 || x.Refused() != 1 {
		t.Errorf("%d runs, %d refused; want 2 runs (the aborted record left out) and 1 refused", x.Runs(), x.Refused())
	}
	for s, want := range map[int64]Position{0: {Offset: 1}, 10: {Offset: 25}, 19: {Offset: 34}, 20: {Offset: 35, End: true}} {
		if got, err := r.Translate(ctx, a, s); err != nil || got != want {
			t.Errorf("Translate(%d) = %+v, %v; want %+v", s, got, err, want)
		}
	}
	if got, err := r.TranslateBack(ctx, a, 12); err != nil || got != (Position{Offset: 10}) {
		t.Errorf("TranslateBack(12), in the aborted round's range, = %+v, %v; want 10", got, err)
	}
	if _, err := r.Translate(ctx, Key{Link: "west", Topic: "orders", Partition: 0}, 0); !errors.Is(err, ErrNotIndexed) {
		t.Errorf("a key without records: %v, want ErrNotIndexed", err)
	}
}
