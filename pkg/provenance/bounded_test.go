package provenance

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Loop prevention does not decay: every at-least-once open records a new
// producer id, and after many more opens than a View keeps ids, the id
// of a writer that opens now is still known as Ferry's, to a fetcher
// running through the opens and to one started after them, and so is
// the id each shard produces with now. Keyed by stream, the registry's
// keys are the streams, not the opens: compaction keeps the topic to one
// record per writer, link and shard (and a week of older ones).
func TestNewWritersIDsOutliveTheBound(t *testing.T) {
	for name, keys := range map[string]Keys{"by stream": KeyByStream, "by id": KeyByID} {
		t.Run(name, func(t *testing.T) { testNewWritersIDsOutliveTheBound(t, keys) })
	}
}

func testNewWritersIDsOutliveTheBound(t *testing.T, keys Keys) {
	_, opts := fake(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createTopic(ctx, t, opts)
	const bound, opens, shards = 8, 40, 3
	running := newView(t, opts)
	running.maxEntries = bound
	recorder := func(writer string) *Recorder {
		r, err := NewRecorder(opts, writer, nil, keys)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		return r
	}
	a := recorder("writer-a")
	for i := range opens {
		id := int64(1000 + i)
		if err := a.Record(ctx, id, "east", uint32(i%shards), "A"); err != nil {
			t.Fatal(err)
		}
		if got, err := running.Origins(ctx, []int64{id}, "A"); err != nil || got[id] != CopiedFrom {
			t.Fatalf("open %d: id %d is %v (%v) to a running fetcher, want copied from A", i, id, got[id], err)
		}
	}
	b := recorder("writer-b")
	if err := b.Record(ctx, 5000, "east", 0, "A"); err != nil {
		t.Fatal(err)
	}
	restarted := newView(t, opts)
	restarted.maxEntries = bound
	for name, v := range map[string]*View{"running": running, "restarted": restarted} {
		// The new writer's, and each of writer-a's shards' current one.
		ids := []int64{5000, 1000 + opens - 1, 1000 + opens - 2, 1000 + opens - 3}
		got, err := v.Origins(ctx, ids, "A")
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if got[id] != CopiedFrom {
				t.Errorf("%s fetcher: id %d after %d opens is %v, want copied from A", name, id, opens, got[id])
			}
		}
		if got, _ := v.Origins(ctx, []int64{1000}, "A"); got[1000] != NotCopied {
			t.Errorf("%s fetcher: the first open's id is %v, want forgotten past the bound", name, got[1000])
		}
		if n := v.Forgotten(); n != opens+1-bound {
			t.Errorf("%s fetcher forgot %d ids, want %d", name, n, opens+1-bound)
		}
		if n := v.Refused(); n != 0 {
			t.Errorf("%s fetcher refused %d records, want none", name, n)
		}
	}

	// What compaction keeps: one record per key.
	cl, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(Topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[string]bool{}
	for n := 0; n < opens+1; {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Key)] = true; n++ })
	}
	want := shards + 1 // one per writer and shard
	if keys == KeyByID {
		want = opens + 1 // one per open
	}
	if len(seen) != want {
		t.Errorf("%d opens wrote %d keys, want %d: %v", opens+1, len(seen), want, seen)
	}
}
