package heartbeat

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A committed transactional record at the end of the heartbeat topic
// (anyone with Write and a transactional id) does not hold a restarting
// writer's read back: it used to wait, read_uncommitted, for the record
// before the high watermark, where the transaction's marker stands, and
// no restarted writer became ready. The heartbeats before it are read.
func TestLoadPassesATransactionAtTheEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "beats"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seeds := kgo.SeedBrokers(c.ListenAddrs()...)
	k := Key{Link: "east", Topic: "orders", Partition: 0}
	st := State{HighWatermark: 10, LogStart: 0, HeadTimestamp: -1, HeadOffset: -1, ObservedAt: 1, CommittedNext: -1, CommittedTimestamp: -1}
	table := NewTable()
	table.load(k, st)
	store, err := NewStore([]kgo.Opt{seeds}, "beats", table, time.Second, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	table.markDirty(map[Key]State{k: st})
	if err := store.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	txn, err := kgo.NewClient(seeds, kgo.DefaultProduceTopic("beats"), kgo.TransactionalID("someone"))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := txn.ProduceSync(ctx, &kgo.Record{Key: []byte("x"), Value: []byte("y")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}

	restarted := NewTable()
	again, err := NewStore([]kgo.Opt{seeds}, "beats", restarted, time.Second, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	loaded, refused, err := again.Load(ctx, nil)
	if err != nil || loaded != 1 || refused != 1 {
		t.Fatalf("Load: %d loaded, %d refused, %v; want 1, 1 and no error", loaded, refused, err)
	}
	if got, ok := restarted.Get(k); !ok || got.HighWatermark != 10 {
		t.Fatalf("read back %+v, %v; want the heartbeat written", got, ok)
	}
}
