package control

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc/codes"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/groupsync"
	"github.com/ferry-replicator/ferry/services/writer/internal/server/servertest"
)

const (
	exact        = ferryv1.TranslateOutcome_TRANSLATE_OUTCOME_EXACT
	beyondCopied = ferryv1.TranslateOutcome_TRANSLATE_OUTCOME_BEYOND_COPIED
	beforeIndex  = ferryv1.TranslateOutcome_TRANSLATE_OUTCOME_BEFORE_INDEX
	noIndex      = ferryv1.TranslateOutcome_TRANSLATE_OUTCOME_NO_INDEX
)

// translateOffset asks w's ControlService for one offset of topic/partition.
func (w *controlWriter) translateOffset(ctx context.Context, t *testing.T, topic string, partition int32, offset int64, reverse bool) *ferryv1.OffsetTranslation {
	t.Helper()
	resp, err := w.ctl.Translate(ctx, &ferryv1.TranslateRequest{Link: "east", Query: &ferryv1.TranslateRequest_Offset{
		Offset: &ferryv1.OffsetQuery{Topic: topic, Partition: partition, Offset: offset, Reverse: reverse}}})
	if err != nil {
		t.Fatalf("translate %s/%d offset %d (reverse %v): %v", topic, partition, offset, reverse, err)
	}
	return resp.GetOffset()
}

// indexStart is where the index of orders/0 starts: its first source
// offset and the first target offset it answers for.
type indexStart struct{ source, target int64 }

// checkTranslate asks w to translate every source offset of orders/0 up
// to end and every target offset up to the high watermark, and checks
// each answer against what a read_committed consumer of the target reads
// (copied): forward, the target offset of the first copied record at or
// after the source offset; reverse, the source offset of the first copied
// record at or after the target offset; past the last copied record, the
// copied end, beyond_copied; before the index's start, before_index
// naming it.
func checkTranslate(ctx context.Context, t *testing.T, w *controlWriter, copied []servertest.CopiedRecord, end int64, start indexStart) {
	t.Helper()
	last := copied[len(copied)-1]
	for s := int64(0); s < end; s++ {
		got := w.translateOffset(ctx, t, "orders", 0, s, false)
		want := &ferryv1.OffsetTranslation{Topic: "orders", TargetTopic: "orders", Offset: s, Outcome: beyondCopied, Translated: last.Target + 1}
		for _, c := range copied {
			if c.Source >= s {
				want.Outcome, want.Translated = exact, c.Target
				break
			}
		}
		if s < start.source {
			want.Outcome, want.Translated, want.IndexStart = beforeIndex, 0, start.source
		}
		if !sameTranslation(got, want) {
			t.Errorf("source %d: answered %v, want %v (target: %v)", s, got, want, copied)
		}
	}
	hw := w.Cluster.PartitionInfo("orders", 0).HighWatermark
	for tgt := int64(0); tgt <= hw; tgt++ {
		got := w.translateOffset(ctx, t, "orders", 0, tgt, true)
		want := &ferryv1.OffsetTranslation{Topic: "orders", TargetTopic: "orders", Offset: tgt, Reverse: true, Outcome: beyondCopied, Translated: last.Source + 1}
		for _, c := range copied {
			if c.Target >= tgt {
				want.Outcome, want.Translated = exact, c.Source
				break
			}
		}
		if tgt < start.target {
			want.Outcome, want.Translated, want.IndexStart = beforeIndex, 0, start.target
		}
		if !sameTranslation(got, want) {
			t.Errorf("target %d: answered %v, want %v (target: %v)", tgt, got, want, copied)
		}
	}
}

func sameTranslation(got, want *ferryv1.OffsetTranslation) bool {
	return got.GetTopic() == want.GetTopic() && got.GetTargetTopic() == want.GetTargetTopic() && got.GetPartition() == want.GetPartition() &&
		got.GetOffset() == want.GetOffset() && got.GetReverse() == want.GetReverse() && got.GetOutcome() == want.GetOutcome() &&
		got.GetTranslated() == want.GetTranslated() && got.GetIndexStart() == want.GetIndexStart() && got.GetRefusedRecords() == 0
}

// twoControlWriters copies orders/0 with gaps (copyWithGaps: compaction's
// survivors, a transaction's marker, an aborted transaction) through the
// first of two writers of one target and closes the stream: the fetcher
// is gone. It returns both writers and what the target holds.
func twoControlWriters(ctx context.Context, t *testing.T, exactlyOnce bool) (owner, other *controlWriter, copied []servertest.CopiedRecord) {
	t.Helper()
	pki := servertest.NewPKI(t)
	owner = startControlWriter(t, pki, nil, exactlyOnce, servertest.OperatorID)
	other = startControlWriter(t, pki, owner.Cluster, exactlyOnce, servertest.OperatorID)
	stream, err := servertest.OpenShard(ctx, t, owner.Client, "east", 0, testShards, 1)
	if err != nil {
		t.Fatal(err)
	}
	servertest.CopyWithGaps(t, stream)
	servertest.CloseStream(t, stream)
	return owner, other, servertest.CopiedRecords(ctx, t, owner.Cluster, 0)
}

// Translate answers every source offset and every target offset exactly,
// as the target shows, on the writer that copied the partition and on one
// that never served its shard, with the fetcher gone; offsets before the
// index, once its first record is pruned, answer before_index with where
// it starts; a partition without an index answers no_index.
func TestTranslateEveryOffsetOnEveryWriter(t *testing.T) {
	servertest.BothModes(t, func(t *testing.T, exactlyOnce bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()
		owner, other, copied := twoControlWriters(ctx, t, exactlyOnce)
		for name, w := range map[string]*controlWriter{"owner": owner, "other writer": other} {
			t.Run(name, func(t *testing.T) { checkTranslate(ctx, t, w, copied, 32, indexStart{}) })
		}
		if got := other.translateOffset(ctx, t, "orders", 0, 1_000_000, false); got.GetOutcome() != beyondCopied || got.GetTranslated() != copied[len(copied)-1].Target+1 {
			t.Errorf("far beyond the copy: %v, want beyond_copied at the copied end", got)
		}
		if got := other.translateOffset(ctx, t, "payments", 3, 0, false); got.GetOutcome() != noIndex {
			t.Errorf("a partition never copied: %v, want no_index", got)
		}

		// Retention prunes the first round's index record: the index
		// starts at the second round (source 16), and on the target after
		// the first round's last copied record.
		pruneFirstIndexRecord(ctx, t, owner)
		start := indexStart{source: 16}
		for _, c := range copied {
			if c.Source < 16 {
				start.target = c.Target + 1
			}
		}
		checkTranslate(ctx, t, other, copied, 32, start)
	})
}

// pruneFirstIndexRecord deletes the index topic's records before its
// second data record, as retention would.
func pruneFirstIndexRecord(ctx context.Context, t *testing.T, w *controlWriter) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.Cluster.ListenAddrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{servertest.IndexTopic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var offsets []int64
	for len(offsets) < 2 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading the index topic: %v", ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) { offsets = append(offsets, r.Offset) })
	}
	var to kadm.Offsets
	to.Add(kadm.Offset{Topic: servertest.IndexTopic, Partition: 0, At: offsets[1]})
	resp, err := kadm.NewClient(cl).DeleteRecords(ctx, to)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("prune the index topic before %d: %v", offsets[1], err)
	}
}

// The group form reads the group's committed offsets on the target: an
// offset Ferry's group sync committed stands for the source offset its
// marker names; one a consumer committed on the target is translated back
// through the index, exactly; a group with no offsets answers none.
func TestTranslateGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, w, copied := twoControlWriters(ctx, t, true)
	synced, moved := copied[3], copied[len(copied)-2]
	servertest.CommitOnTarget(ctx, t, w.Cluster, "synced", synced.Target, groupsync.Marker(synced.Source))
	servertest.CommitOnTarget(ctx, t, w.Cluster, "moved", moved.Target, "consumer metadata")

	for _, tc := range []struct {
		group   string
		ferry   bool
		target  int64
		source  int64
		outcome ferryv1.TranslateOutcome
		meta    string
	}{
		{"synced", true, synced.Target, synced.Source, exact, ""},
		{"moved", false, moved.Target, moved.Source, exact, "consumer metadata"},
	} {
		resp, err := w.ctl.Translate(ctx, &ferryv1.TranslateRequest{Link: "east", Query: &ferryv1.TranslateRequest_Group{Group: tc.group}})
		if err != nil {
			t.Fatalf("group %s: %v", tc.group, err)
		}
		g := resp.GetGroup()
		if g.GetGroup() != tc.group || len(g.GetPartitions()) != 1 {
			t.Fatalf("group %s answered %v, want orders/0", tc.group, g)
		}
		p := g.GetPartitions()[0]
		if p.GetTopic() != "orders" || p.GetTargetTopic() != "orders" || p.GetPartition() != 0 || p.GetTargetOffset() != tc.target ||
			p.GetFerry() != tc.ferry || p.GetSourceOffset() != tc.source || p.GetOutcome() != tc.outcome || p.GetMetadata() != tc.meta {
			t.Errorf("group %s answered %v; want target %d standing for source %d (ferry %v, %v)", tc.group, p, tc.target, tc.source, tc.ferry, tc.outcome)
		}
	}
	resp, err := w.ctl.Translate(ctx, &ferryv1.TranslateRequest{Link: "east", Query: &ferryv1.TranslateRequest_Group{Group: "absent"}})
	if err != nil || len(resp.GetGroup().GetPartitions()) != 0 {
		t.Fatalf("a group with no offsets: %v, %v; want no partitions", resp, err)
	}
}

// Translate is refused to callers outside control.allowed_ids, for links
// the writer does not serve, and for queries it cannot answer.
func TestTranslateRefusals(t *testing.T) {
	pki := servertest.NewPKI(t)
	w := startControlWriter(t, pki, nil, false, servertest.OperatorID)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	offset := func(topic string, partition int32, offset int64) *ferryv1.TranslateRequest_Offset {
		return &ferryv1.TranslateRequest_Offset{Offset: &ferryv1.OffsetQuery{Topic: topic, Partition: partition, Offset: offset}}
	}
	_, err := w.dialControl(t, servertest.Creds(pki.Fetcher)).Translate(ctx, &ferryv1.TranslateRequest{Link: "east", Query: offset("orders", 0, 0)})
	servertest.WantRefusal(t, err, codes.PermissionDenied, "control.allowed_ids")
	_, err = w.ctl.Translate(ctx, &ferryv1.TranslateRequest{Link: "west", Query: offset("orders", 0, 0)})
	servertest.WantRefusal(t, err, codes.NotFound, `"west"`)
	for name, req := range map[string]*ferryv1.TranslateRequest{
		"no query":           {Link: "east"},
		"no topic":           {Link: "east", Query: offset("", 0, 0)},
		"negative partition": {Link: "east", Query: offset("orders", -1, 0)},
		"negative offset":    {Link: "east", Query: offset("orders", 0, -5)},
		"empty group":        {Link: "east", Query: &ferryv1.TranslateRequest_Group{Group: ""}},
	} {
		_, err := w.ctl.Translate(ctx, req)
		t.Run(name, func(t *testing.T) { servertest.WantRefusal(t, err, codes.InvalidArgument) })
	}
}
