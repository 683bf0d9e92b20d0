package provenance

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func cluster(t *testing.T) []kgo.Opt {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
}

// The view settles each producer id once: an id nobody recorded is not
// Ferry's, one a writer recorded is, whichever writer recorded it; settled
// ids, and the -1 of producers without one, cost no read.
func TestViewTellsRecordedIDsFromTheRest(t *testing.T) {
	opts := cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := NewView(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()

	// No writer has written here: the topic does not exist.
	got, err := v.Ferry(ctx, []int64{5, -1})
	if err != nil || got[5] || got[-1] {
		t.Fatalf("before any record: %v, %v; want neither Ferry's", got, err)
	}

	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 2, 1, map[string]*string{"cleanup.policy": ptr("compact")}, Topic); err != nil {
		t.Fatal(err)
	}
	a, err := NewRecorder(opts, "writer-a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := NewRecorder(opts, "writer-b")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, id := range []int64{7, 7, 9} { // 7 twice: recorded once
		if err := a.Record(ctx, id, "east"); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Record(ctx, 12, "west"); err != nil {
		t.Fatal(err)
	}

	got, err = v.Ferry(ctx, []int64{7, 12, 5, 40, -1})
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[int64]bool{7: true, 12: true, 5: false, 40: false, -1: false} {
		if got[id] != want {
			t.Errorf("id %d: Ferry's %v, want %v", id, got[id], want)
		}
	}
	reads := v.Reads()
	if got, _ := v.Ferry(ctx, []int64{7, 12, 5, 40, -1}); !got[7] || got[40] {
		t.Errorf("settled ids answered %v", got)
	}
	if v.Reads() != reads {
		t.Errorf("settled ids read the topic again (%d reads, then %d)", reads, v.Reads())
	}

	// A new id recorded later is read on its first sight, from where the
	// last read stopped.
	if err := b.Record(ctx, 13, "west"); err != nil {
		t.Fatal(err)
	}
	if got, err := v.Ferry(ctx, []int64{13}); err != nil || !got[13] {
		t.Fatalf("id 13 after its record: %v, %v", got, err)
	}

	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, Topic)
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != 4 { // 7, 9, 12, 13
		t.Errorf("%s holds %d records, want 4 (an id recorded once per process)", Topic, total)
	}
}

func ptr[T any](v T) *T { return &v }
