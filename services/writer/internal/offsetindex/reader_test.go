package offsetindex

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
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

// LoadAll answers for each key what Load answers for it alone (trimmed
// with keep as Trim would), reading each index partition from its start
// once for all its keys: Load per key reads the partition once per key.
func TestLoadAllReadsEachIndexPartitionOnce(t *testing.T) {
	const parts = 3
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, "idx"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	var mu sync.Mutex
	fromStart := map[int32]int{} // fetches of an index partition at offset 0
	cluster.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		for _, tp := range req.(*kmsg.FetchRequest).Topics {
			for _, p := range tp.Partitions {
				if p.FetchOffset == 0 {
					fromStart[p.Partition]++
				}
			}
		}
		return nil, nil, false
	})
	reads := func() map[int32]int {
		mu.Lock()
		defer mu.Unlock()
		out := maps.Clone(fromStart)
		clear(fromStart)
		return out
	}
	seeds := kgo.SeedBrokers(cluster.ListenAddrs()...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Eight source partitions over the three index partitions, each copied
	// in rounds with gaps on both sides (compaction, markers), some rounds
	// aborted, a record that does not decode, all interleaved.
	prod, err := kgo.NewClient(seeds, kgo.TransactionalID("t"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var keys []Key
	for p := range int32(8) {
		keys = append(keys, Key{Link: "east", Topic: "orders", Partition: p})
	}
	next := make([]int64, len(keys))   // source offset after each key's last round
	target := make([]int64, len(keys)) // target offset after it, -1: none
	for i := range target {
		target[i] = -1
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 60 {
		if err := prod.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for i, k := range keys {
			if rng.IntN(3) == 0 {
				continue
			}
			e := Entry{From: next[i], TargetBefore: target[i]}
			s, tg := next[i], max(target[i], 0)
			for range 1 + rng.IntN(3) {
				s += int64(rng.IntN(3))
				n := 1 + int64(rng.IntN(5))
				e.Add(s, tg, n)
				s, tg = s+n, tg+n+int64(rng.IntN(2))
			}
			e.Next = s + int64(rng.IntN(2))
			v, err := e.Append(nil)
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, &kgo.Record{Topic: "idx", Partition: PartitionOf(k, parts), Key: []byte(k.String()), Value: v})
			if round%17 == 5 && i == 2 {
				recs = append(recs, &kgo.Record{Topic: "idx", Partition: PartitionOf(k, parts), Key: []byte(k.String()), Value: []byte{Version, 0x80}})
			}
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		commit := round%7 != 3
		if err := prod.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
		if !commit {
			continue
		}
		for _, rec := range recs {
			for i, k := range keys {
				if string(rec.Key) != k.String() {
					continue
				}
				if e, err := Decode(rec.Value); err == nil {
					next[i], target[i] = e.Next, e.TargetEnd()
				}
			}
		}
	}

	r, err := NewReader([]kgo.Opt{seeds}, "idx")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	asked := append(slices.Clone(keys), keys[0], Key{Link: "west", Topic: "orders", Partition: 0}) // a key twice, a key without records
	alone := map[Key]*Index{}
	for _, k := range asked {
		if alone[k], err = r.Load(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	for p, n := range reads() {
		if n < 2 {
			t.Fatalf("Load per key read index partition %d from its start %d times: the count cannot tell one pass from one per key", p, n)
		}
	}
	for _, keep := range []int{0, 4} {
		all, err := r.LoadAll(ctx, asked, keep)
		if err != nil {
			t.Fatal(err)
		}
		for p, n := range reads() {
			if n != 1 {
				t.Errorf("LoadAll (keep %d) read index partition %d from its start %d times, want once", keep, p, n)
			}
		}
		if len(all) != len(keys)+1 {
			t.Errorf("LoadAll answered %d keys, want %d", len(all), len(keys)+1)
		}
		for k, x := range all {
			want := *alone[k]
			want.runs = slices.Clone(want.runs)
			if keep > 0 {
				want.Trim(keep)
			}
			if x.Runs() != want.Runs() || x.Refused() != want.Refused() || x.Start() != want.Start() {
				t.Errorf("keep %d, %s: %d runs, %d refused, start %d; Load: %d, %d, %d", keep, k, x.Runs(), x.Refused(), x.Start(), want.Runs(), want.Refused(), want.Start())
			}
			for s := range int64(400) {
				got, gerr := x.Translate(s)
				w, werr := want.Translate(s)
				if got != w || fmt.Sprint(gerr) != fmt.Sprint(werr) {
					t.Fatalf("keep %d, %s: Translate(%d) = %+v, %v; Load's = %+v, %v", keep, k, s, got, gerr, w, werr)
				}
				got, gerr = x.TranslateBack(s)
				w, werr = want.TranslateBack(s)
				if got != w || fmt.Sprint(gerr) != fmt.Sprint(werr) {
					t.Fatalf("keep %d, %s: TranslateBack(%d) = %+v, %v; Load's = %+v, %v", keep, k, s, got, gerr, w, werr)
				}
			}
		}
	}
	// TranslateAll answers offsets as Load's indexes do, in one pass.
	asks := map[Key][]int64{}
	for i, k := range asked {
		for range 1 + i%4 {
			asks[k] = append(asks[k], rng.Int64N(max(next[i%len(keys)], 1)+3))
		}
	}
	answers, err := r.TranslateAll(ctx, asks, nil)
	if err != nil {
		t.Fatal(err)
	}
	for p, n := range reads() {
		if n != 1 {
			t.Errorf("TranslateAll read index partition %d from its start %d times, want once", p, n)
		}
	}
	for k, offsets := range asks {
		for _, s := range offsets {
			got, ok := answers[k][s]
			w, werr := alone[k].Translate(s)
			if !ok || got.Position != w || fmt.Sprint(got.Err) != fmt.Sprint(werr) {
				t.Errorf("TranslateAll %s %d = %+v (answered %v); Load's = %+v, %v", k, s, got, ok, w, werr)
			}
		}
	}
}

// BenchmarkLoadShard loads the indexes of a shard's 8 source partitions,
// 2,000 index records each, all in the one index partition (the default):
// per key (Load, as group sync did before LoadAll) and in one pass
// (LoadAll), which reads the partition once instead of 8 times
// (TestLoadAllReadsEachIndexPartitionOnce).
func BenchmarkLoadShard(b *testing.B) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "idx"))
	if err != nil {
		b.Fatal(err)
	}
	defer cluster.Close()
	seeds := kgo.SeedBrokers(cluster.ListenAddrs()...)
	ctx := context.Background()
	prod, err := kgo.NewClient(seeds, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		b.Fatal(err)
	}
	defer prod.Close()
	const perKey = 2000
	var keys []Key
	for p := range int32(8) {
		keys = append(keys, Key{Link: "east", Topic: "orders", Partition: p})
	}
	var recs []*kgo.Record
	for round := range int64(perKey) {
		for _, k := range keys {
			e := Entry{From: round * 100, Next: (round + 1) * 100, TargetBefore: round*101 - 1, Runs: []Run{{round * 100, round * 101, 100}}}
			if round == 0 {
				e.TargetBefore = -1
			}
			v, err := e.Append(nil)
			if err != nil {
				b.Fatal(err)
			}
			recs = append(recs, &kgo.Record{Topic: "idx", Key: []byte(k.String()), Value: v})
		}
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		b.Fatal(err)
	}
	r, err := NewReader([]kgo.Opt{seeds}, "idx")
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	check := func(xs map[Key]*Index) {
		for _, k := range keys {
			if x := xs[k]; x == nil || x.Runs() != perKey {
				b.Fatalf("%s: %v runs, want %d", k, x.Runs(), perKey)
			}
		}
	}
	b.Run("per-key", func(b *testing.B) {
		for b.Loop() {
			xs := map[Key]*Index{}
			for _, k := range keys {
				if xs[k], err = r.Load(ctx, k); err != nil {
					b.Fatal(err)
				}
			}
			check(xs)
		}
	})
	b.Run("all", func(b *testing.B) {
		for b.Loop() {
			xs, err := r.LoadAll(ctx, keys, 0)
			if err != nil {
				b.Fatal(err)
			}
			check(xs)
		}
	})
}

// TranslateAll reads a key from the landmark below its oldest ask: for a
// recent offset, a few records rather than the partition; an offset the
// records from there do not reach back to (a landmark of a record that
// did not land) is answered from the log start. Every answer is the
// whole index's, over a copy with rounds sent again.
func TestTranslateAllReadsFromTheLandmark(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "idx"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	seeds := kgo.SeedBrokers(cluster.ListenAddrs()...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prod, err := kgo.NewClient(seeds, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	k := Key{Link: "east", Topic: "orders", Partition: 0}
	other := Key{Link: "east", Topic: "orders", Partition: 1}
	rng := rand.New(rand.NewPCG(7, 7))
	entries := resent(rng, 3000, true)
	whole := NewIndex()
	var marks []Landmark
	var starts []int64 // index-topic offset of each entry's record
	for _, e := range entries {
		whole.Add(e)
		v, err := e.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		ov, err := (Entry{From: 0, Next: 1, TargetBefore: -1, Runs: []Run{{0, 0, 1}}}).Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		res := prod.ProduceSync(ctx, &kgo.Record{Topic: "idx", Key: []byte(k.String()), Value: v},
			&kgo.Record{Topic: "idx", Key: []byte(other.String()), Value: ov})
		if err := res.FirstErr(); err != nil {
			t.Fatal(err)
		}
		marks = Mark(marks, Landmark{Source: e.From, Offset: res[0].Record.Offset})
		starts = append(starts, res[0].Record.Offset)
	}
	r, err := NewReader([]kgo.Opt{seeds}, "idx")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	check := func(asks []int64, marks []Landmark) int64 {
		t.Helper()
		before := r.RecordsRead()
		answers, err := r.TranslateAll(ctx, map[Key][]int64{k: asks}, map[Key][]Landmark{k: marks})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range asks {
			want, werr := whole.Translate(s)
			if got := answers[k][s]; got.Position != want || fmt.Sprint(got.Err) != fmt.Sprint(werr) {
				t.Fatalf("TranslateAll(%d) = %+v, %v; the whole index: %+v, %v", s, got.Position, got.Err, want, werr)
			}
		}
		return r.RecordsRead() - before
	}
	total := int64(len(entries))
	// A recent offset: a few records read.
	last := entries[len(entries)-1]
	if n := check([]int64{last.From}, marks); n > 8 {
		t.Errorf("the last round's offset read %d of the key's %d records, want a few", n, total)
	}
	// Every offset, from old to recent, as the whole index answers it.
	for s := int64(0); s < 3010; s += 37 {
		check([]int64{s}, marks)
	}
	// Without landmarks the whole partition is read.
	if n := check([]int64{last.From}, nil); n != total {
		t.Errorf("without landmarks %d records read, want all %d", n, total)
	}
	// A landmark whose record is not the key's (it did not land): the
	// records from there start past the offset, which the log start
	// answers.
	bad := []Landmark{{Source: 0, Offset: starts[len(starts)-1] + 1}}
	if n := check([]int64{5}, bad); n != total {
		t.Errorf("a landmark past the offset's record: %d records read, want %d (the read from the log start)", n, total)
	}
}
