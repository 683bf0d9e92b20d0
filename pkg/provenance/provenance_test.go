package provenance

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func cluster(t *testing.T) []kgo.Opt {
	_, opts := fake(t)
	return opts
}

func fake(t *testing.T, opts ...kfake.Opt) (*kfake.Cluster, []kgo.Opt) {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
}

// createTopic creates the registry topic with one partition and returns a
// client producing to it.
func createTopic(ctx context.Context, t *testing.T, opts []kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic(Topic))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": ptr("compact")}, Topic); err != nil {
		t.Fatal(err)
	}
	return cl
}

func newView(t *testing.T, opts []kgo.Opt) *View {
	t.Helper()
	v, err := NewView(opts, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	return v
}

func newRecorder(t *testing.T, opts []kgo.Opt, writer string) *Recorder {
	t.Helper()
	r, err := NewRecorder(opts, writer, nil, KeyByStream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// A read of the registry that cannot finish (its partition's leader gone:
// every ListOffsets and Fetch swallowed) fails within the View's bound,
// for its caller and those waiting on it, and meanwhile callers asking
// only about settled ids are answered at once.
func TestStalledReadFailsInBoundAndBlocksNoSettledID(t *testing.T) {
	c, opts := fake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	createTopic(ctx, t, opts)
	rec := newRecorder(t, opts, "w")
	if err := rec.Record(ctx, 7, "east", 0, "A"); err != nil {
		t.Fatal(err)
	}
	v := newView(t, opts)
	v.timeout = 2 * time.Second
	if got, err := v.Origins(ctx, []int64{7}, "A"); err != nil || got[7] != CopiedFrom {
		t.Fatalf("id 7: %v, %v", got, err)
	}
	if err := rec.Record(ctx, 9, "east", 0, "A"); err != nil {
		t.Fatal(err)
	}
	stalled := make(chan struct{}, 1)
	for _, k := range []kmsg.Key{kmsg.Fetch, kmsg.ListOffsets} {
		c.ControlKey(int16(k), func(kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			select {
			case stalled <- struct{}{}:
			default:
			}
			return nil, nil, true // no answer: the client waits
		})
	}

	start := time.Now()
	errs := make(chan error, 2)
	for range 2 { // one reads, the other waits on its read
		go func() {
			_, err := v.Origins(ctx, []int64{9}, "A")
			errs <- err
		}()
	}
	<-stalled
	settledCtx, settledCancel := context.WithTimeout(ctx, time.Second)
	defer settledCancel()
	if got, err := v.Origins(settledCtx, []int64{7, -1}, "A"); err != nil || got[7] != CopiedFrom {
		t.Errorf("settled id 7 while a read is stalled: %v, %v; want an answer at once", got, err)
	}
	for range 2 {
		err := <-errs
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("stalled read: %v, want the bound's deadline", err)
		}
	}
	if took := time.Since(start); took > v.timeout+5*time.Second {
		t.Errorf("stalled read failed after %v, bound %v", took, v.timeout)
	}
}

// A View takes the first valid entry of each id: a later record of the
// key cannot rewrite it, and records out of bounds (oversized strings or
// value, a key that is not the entry's stream or id, not JSON) are
// refused. Past the View's bound the oldest entry that is no stream's
// newest is forgotten. The Recorder refuses oversized strings too.
func TestFirstValidEntryWinsWithinBounds(t *testing.T) {
	_, opts := fake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw := createTopic(ctx, t, opts)
	rec := newRecorder(t, opts, "w")
	if err := rec.Record(ctx, 7, "east", 0, "A"); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", MaxField+1)
	if err := rec.Record(ctx, 8, long, 0, "A"); err == nil {
		t.Error("the recorder wrote a link name above MaxField")
	}
	produce := func(key, value string) {
		t.Helper()
		if err := raw.ProduceSync(ctx, &kgo.Record{Key: []byte(key), Value: []byte(value)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce("7", `{"producer_id":7,"source_cluster":"C","link":"forged","writer":"x"}`)                          // a rewrite
	produce("8", `{"producer_id":8,"source_cluster":"A","link":"`+long+`","writer":"x"}`)                        // oversized
	produce("10", `{"producer_id":11,"source_cluster":"A","link":"l","writer":"x"}`)                             // key not the id
	produce("12", `{"producer_id":12,"source_cluster":"A","link":"l","writer":"`+strings.Repeat("y", 5000)+`"}`) // oversized value
	produce("13", `not json`)
	produce("x/l/1", `{"producer_id":17,"source_cluster":"A","link":"l","shard":2,"writer":"x"}`)     // key not the stream
	produce("x/a/b/1", `{"producer_id":18,"source_cluster":"A","link":"a/b","shard":1,"writer":"x"}`) // a slash in the link
	produce("14", `{"producer_id":14,"link":"old","writer":"x"}`)                                     // an old writer's: no source cluster
	produce("15", `{"producer_id":15,"source_cluster":"A","link":"l","writer":"x"}`)
	produce("16", `{"producer_id":16,"source_cluster":"A","link":"l","writer":"x"}`) // past the bound: 14 is forgotten

	v := newView(t, opts)
	v.maxEntries = 3 // 7 (its stream's newest), 15, 16
	got, err := v.Origins(ctx, []int64{7, 8, 11, 12, 14, 15, 16, 17, 18}, "A")
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]Origin{7: CopiedFrom, 8: NotCopied, 11: NotCopied, 12: NotCopied, 14: NotCopied, 15: CopiedFrom, 16: CopiedFrom, 17: NotCopied, 18: NotCopied}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("id %d: origin %v, want %v", id, got[id], w)
		}
	}
	if n := v.Refused(); n != 7 { // the rewrite of 7, 8, 10, 12, 13, x/l/1, x/a/b/1
		t.Errorf("%d records refused, want 7", n)
	}
	if n := v.Forgotten(); n != 1 { // 14
		t.Errorf("%d ids forgotten, want 1", n)
	}
}

// The view settles each producer id once: an id nobody recorded is not
// Ferry's, one a writer recorded is, whichever writer recorded it; settled
// ids, and the -1 of producers without one, cost no read.
func TestViewTellsRecordedIDsFromTheRest(t *testing.T) {
	opts := cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := NewView(opts, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()

	// No writer has written here: the topic does not exist.
	got, err := v.Origins(ctx, []int64{5, -1}, "A")
	if err != nil || got[5] != NotCopied || got[-1] != NotCopied {
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
	a, err := NewRecorder(opts, "writer-a", nil, KeyByID) // the old format, read beside the new
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := NewRecorder(opts, "writer-b", nil, KeyByStream)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, id := range []int64{7, 7, 9} { // 7 twice: recorded once
		if err := a.Record(ctx, id, "east", 0, "A"); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Record(ctx, 12, "west", 0, "C"); err != nil {
		t.Fatal(err)
	}

	got, err = v.Origins(ctx, []int64{7, 12, 5, 40, -1}, "A")
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[int64]Origin{7: CopiedFrom, 12: CopiedFromOther, 5: NotCopied, 40: NotCopied, -1: NotCopied} {
		if got[id] != want {
			t.Errorf("id %d: origin %v, want %v", id, got[id], want)
		}
	}
	reads := v.Reads()
	if got, _ := v.Origins(ctx, []int64{7, 12, 5, 40, -1}, "C"); got[7] != CopiedFromOther || got[12] != CopiedFrom || got[40] != NotCopied {
		t.Errorf("settled ids answered %v", got)
	}
	if v.Reads() != reads {
		t.Errorf("settled ids read the topic again (%d reads, then %d)", reads, v.Reads())
	}

	// A new id recorded later is read on its first sight, from where the
	// last read stopped.
	if err := b.Record(ctx, 13, "west", 0, "C"); err != nil {
		t.Fatal(err)
	}
	if got, err := v.Origins(ctx, []int64{13}, "C"); err != nil || got[13] != CopiedFrom {
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

// A committed transactional record in the registry (anyone with Write and
// a transactional id) holds no read: the view reads committed, to the
// last stable offset, and passes the marker at the end. It used to wait,
// read_uncommitted, for the record before the end, where the marker
// stands: every read timed out and every session meeting an unfamiliar
// producer id failed.
func TestTransactionInTheRegistryHoldsNoRead(t *testing.T) {
	opts := cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	createTopic(ctx, t, opts)
	rec := newRecorder(t, opts, "writer-a")
	if err := rec.Record(ctx, 7, "east", 0, "A"); err != nil {
		t.Fatal(err)
	}
	txn, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic(Topic), kgo.TransactionalID("someone"))...)
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
	v := newView(t, opts)
	v.timeout = 5 * time.Second
	got, err := v.Origins(ctx, []int64{7, 8}, "A")
	if err != nil || got[7] != CopiedFrom || got[8] != NotCopied {
		t.Fatalf("origins %v, %v; want 7 copied from A and 8 not copied", got, err)
	}
	// A writer records its id before it writes: the next read, past the
	// marker, finds it.
	if err := rec.Record(ctx, 9, "east", 0, "A"); err != nil {
		t.Fatal(err)
	}
	if got, err := v.Origins(ctx, []int64{9}, "A"); err != nil || got[9] != CopiedFrom {
		t.Fatalf("after 9 was recorded: %v, %v; want it copied from A", got, err)
	}
}
