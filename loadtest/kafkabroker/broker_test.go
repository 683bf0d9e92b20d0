package kafkabroker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/loadtest/procgroup"
)

// TestRealKafka runs two real brokers and checks what Ferry's tests and
// benchmark rely on. It fails, never skips, when java, mvn or the jars are
// missing: a green run must mean real Kafka was exercised. Only the
// MirrorMaker step is skipped in -short mode, because it is the slow one.
func TestRealKafka(t *testing.T) {
	east, west := startPair(t)

	t.Run("produce", func(t *testing.T) {
		ctx := timeout(t, 30*time.Second)
		createTopic(t, ctx, east, "orders", 3)
		produce(t, ctx, east, "orders", 300)
		if n := endOffsetSum(t, ctx, east, "orders"); n != 300 {
			t.Fatalf("end offsets of orders add up to %d, want 300", n)
		}
		got := consume(t, ctx, east.Addr(), "orders", 300)
		if len(got) != 300 {
			t.Fatalf("consumed %d records, want 300", len(got))
		}
	})

	t.Run("transactions", func(t *testing.T) {
		ctx := timeout(t, 60*time.Second)
		createTopic(t, ctx, east, "txn", 1)
		cl, err := kgo.NewClient(
			kgo.SeedBrokers(east.Addr()),
			kgo.DefaultProduceTopic("txn"),
			kgo.TransactionalID("kafkabroker-test"),
		)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		// committed, aborted, committed: a read_committed reader must see the
		// two committed batches and nothing of the aborted one between them.
		for _, batch := range []struct {
			prefix string
			commit kgo.TransactionEndTry
		}{{"committed-1", kgo.TryCommit}, {"aborted", kgo.TryAbort}, {"committed-2", kgo.TryCommit}} {
			if err := cl.BeginTransaction(); err != nil {
				t.Fatalf("begin %s: %v", batch.prefix, err)
			}
			for i := range 50 {
				rec := &kgo.Record{Value: fmt.Appendf(nil, "%s-%d", batch.prefix, i)}
				if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
					t.Fatalf("produce %s: %v", batch.prefix, err)
				}
			}
			if err := cl.EndTransaction(ctx, batch.commit); err != nil {
				t.Fatalf("end %s: %v", batch.prefix, err)
			}
		}
		got := consume(t, ctx, east.Addr(), "txn", 100, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
		for i, r := range got {
			want := fmt.Sprintf("committed-%d-%d", 1+i/50, i%50)
			if string(r.Value) != want {
				t.Fatalf("record %d is %q, want %q", i, r.Value, want)
			}
		}
		// The aborted records and the commit markers are in the log all the same.
		if n := endOffsetSum(t, ctx, east, "txn"); n <= 150 {
			t.Fatalf("end offset of txn is %d, want > 150 (150 records + markers)", n)
		}
	})

	t.Run("pause", func(t *testing.T) {
		ctx := timeout(t, 30*time.Second)
		adm := admin(t, west)
		if err := west.Pause(); err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := adm.ListTopics(short)
		cancel()
		if resumeErr := west.Resume(); resumeErr != nil {
			t.Fatal(resumeErr)
		}
		if err == nil {
			t.Fatal("a paused broker answered a request")
		}
		if _, err := adm.ListTopics(ctx); err != nil {
			t.Fatalf("after resume: %v", err)
		}
	})

	t.Run("kill and restart", func(t *testing.T) {
		ctx := timeout(t, 90*time.Second)
		oldPID := east.PID()
		east.Kill()
		if east.Running() {
			t.Fatal("broker still running after Kill")
		}
		start := time.Now()
		if err := east.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("restart after kill took %s", time.Since(start).Round(time.Millisecond))
		if east.PID() == oldPID {
			t.Fatalf("same pid %d after restart", oldPID)
		}
		if got := consume(t, ctx, east.Addr(), "orders", 300); len(got) != 300 {
			t.Fatalf("after restart consumed %d records, want 300", len(got))
		}
	})

	t.Run("mirrormaker", func(t *testing.T) {
		if testing.Short() {
			t.Skip("MirrorMaker 2 takes 20-60 s to start replicating; skipped in -short mode")
		}
		ctx := timeout(t, 150*time.Second)
		start := time.Now()
		mm, err := StartMirrorMaker(ctx, MM2Options{
			SourceAlias: "east",
			TargetAlias: "west",
			SourceAddr:  east.Addr(),
			TargetAddr:  west.Addr(),
			Topics:      "orders",
			Dir:         t.TempDir(),
			Heap:        "512m",
		})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := mm.Stop(); err != nil {
				t.Error(err)
			}
		}()
		if mm.PID() <= 0 {
			t.Fatalf("bad pid %d", mm.PID())
		}
		adm := admin(t, west)
		deadline := time.Now().Add(120 * time.Second)
		for {
			n, err := endOffsets(ctx, adm, "east.orders")
			if err == nil && n == 300 {
				break
			}
			if exitErr := mm.ExitError(); exitErr != nil {
				t.Fatal(exitErr)
			}
			if time.Now().After(deadline) {
				t.Fatalf("west has %d records in east.orders after 120 s (last error %v); end of %s:\n%s",
					n, err, mm.LogPath(), procgroup.LogTail(mm.LogPath(), 30))
			}
			time.Sleep(time.Second)
		}
		t.Logf("MirrorMaker 2 replicated 300 records in %s", time.Since(start).Round(time.Millisecond))
		got := consume(t, ctx, west.Addr(), "east.orders", 300)
		if len(got) != 300 {
			t.Fatalf("consumed %d mirrored records, want 300", len(got))
		}
	})
}

// startPair starts two brokers at once (they share 2 cores, but JVM start-up
// is mostly waiting for class loading and the KRaft election) and stops them
// when the test ends.
func startPair(t *testing.T) (east, west *Broker) {
	t.Helper()
	ctx := timeout(t, 120*time.Second)
	type result struct {
		b   *Broker
		err error
	}
	opts := []Options{
		{Name: "east", DataDir: t.TempDir()}, // Restart after Kill needs a kept dir
		{Name: "west"},                       // temporary dir, removed by Stop
	}
	results := make(chan result, len(opts))
	start := time.Now()
	for _, o := range opts {
		go func() {
			b, err := Start(ctx, o)
			results <- result{b, err}
		}()
	}
	var brokers []*Broker
	var errs []error
	for range opts {
		r := <-results
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		brokers = append(brokers, r.b)
		t.Cleanup(func() {
			if err := r.b.Stop(); err != nil {
				t.Error(err)
			}
		})
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Logf("two brokers ready in %s", time.Since(start).Round(time.Millisecond))
	for _, b := range brokers {
		t.Logf("%s pid %d, log %s", b, b.PID(), b.LogPath())
		if strings.HasPrefix(b.String(), "east") {
			east = b
		} else {
			west = b
		}
	}
	return east, west
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func admin(t *testing.T, b *Broker) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

func createTopic(t *testing.T, ctx context.Context, b *Broker, topic string, partitions int32) {
	t.Helper()
	resp, err := admin(t, b).CreateTopic(ctx, partitions, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

func produce(t *testing.T, ctx context.Context, b *Broker, topic string, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

// consume reads topic from the start, without a group, until it has n
// records or ctx ends.
func consume(t *testing.T, ctx context.Context, addr, topic string, n int, opts ...kgo.Opt) []*kgo.Record {
	t.Helper()
	opts = append([]kgo.Opt{
		kgo.SeedBrokers(addr),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}, opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []*kgo.Record
	for len(got) < n {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consume %s: got %d of %d records: %v", topic, len(got), n, ctx.Err())
		}
		if err := fetches.Err(); err != nil {
			t.Fatalf("consume %s: %v", topic, err)
		}
		got = append(got, fetches.Records()...)
	}
	return got
}

func endOffsetSum(t *testing.T, ctx context.Context, b *Broker, topic string) int64 {
	t.Helper()
	n, err := endOffsets(ctx, admin(t, b), topic)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func endOffsets(ctx context.Context, adm *kadm.Client, topic string) (int64, error) {
	offs, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	if err := offs.Error(); err != nil {
		return 0, err
	}
	var sum int64
	offs.Each(func(o kadm.ListedOffset) { sum += o.Offset })
	return sum, nil
}
