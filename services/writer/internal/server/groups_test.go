package server

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/groupsync"
	"github.com/ferry-replicator/ferry/pkg/linkstate"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/services/writer/internal/checkpoint"
	"github.com/ferry-replicator/ferry/services/writer/internal/groupsyncer"
	"github.com/ferry-replicator/ferry/services/writer/internal/translation"
)

// startGroupWriter is a writer over a kfake target that syncs groups:
// its group syncer runs until the test ends. edits edit its options.
func startGroupWriter(t *testing.T, exactlyOnce bool, edits ...func(*Options)) *testWriter {
	t.Helper()
	w := startGroupWriterIdle(t, exactlyOnce, edits...)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); w.srv.RunGroupSync(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return w
}

// startGroupWriterIdle is startGroupWriter whose group syncer does not
// run: the test drives it (syncPending, advance).
func startGroupWriterIdle(t *testing.T, exactlyOnce bool, edits ...func(*Options)) *testWriter {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	return groupWriterOn(t, cluster, exactlyOnce, edits...)
}

// groupWriterOn is startGroupWriterIdle on cluster: another writer of the
// same target, or the same writer started again.
func groupWriterOn(t *testing.T, cluster *kfake.Cluster, exactlyOnce bool, edits ...func(*Options)) *testWriter {
	t.Helper()
	gc := groupCommitterOn(t, cluster)
	return startWriterOn(t, cluster, passthroughLinks(t, exactlyOnce), func(o *Options) {
		o.Groups = gc
		for _, edit := range edits {
			edit(o)
		}
	}, nil, nil, insecure.NewCredentials())
}

// A source group's committed offset lands on the target group translated
// exactly: the target record at the committed target offset is the copy
// of the first source record at or after the source offset (checked by
// value), across transaction markers, aborted records and compaction
// gaps on the source and the writer's own markers on the target, with
// Ferry's marker naming the source offset. Both modes.
func TestGroupOffsetsTranslateExactly(t *testing.T) {
	bothModes(t, func(t *testing.T, exactlyOnce bool) {
		w := startGroupWriter(t, exactlyOnce)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		stream, opened := w.openOrdersFrom(ctx, t, "east", "")
		if !opened.GetGroupOffsets() {
			t.Fatal("the writer's Opened does not say it takes group offsets")
		}
		copyWithGaps(t, stream)
		offsets := map[string]int64{}
		for _, s := range []int64{0, 3, 5, 7, 10, 12, 16, 17, 20, 23, 24, 29} {
			offsets[fmt.Sprintf("g%d", s)] = s
		}
		syncUntil(t, w, stream, offsets, "every group moved", func(g groupsyncer.Status) bool { return standsFor(g, offsets[g.Group]) })
		copied := copiedRecords(ctx, t, w, 0)
		for g, s := range offsets {
			var want copiedRecord
			for _, c := range copied {
				if c.source >= s {
					want = c
					break
				}
			}
			at, md := w.targetGroup(t, g)
			if at != want.target || md != groupsync.Marker(s) {
				t.Errorf("group %s (source %d) on the target at %d %q; want %d (the copy of source %d) %q", g, s, at, md, want.target, want.source, groupsync.Marker(s))
			}
			st, _ := groupOf(w, g)
			if st.RereadRecords == nil || *st.RereadRecords != 0 || st.SyncAge == nil || st.Partitions[0].StandsFor != s {
				t.Errorf("group %s status %+v: want nothing to re-read, standing for %d", g, st, s)
			}
		}
		if got := w.groupMetric(t, "ferry_failover_reread_records", "g12"); got != 0 {
			t.Errorf("ferry_failover_reread_records of g12 %v, want 0", got)
		}
		if got := w.groupMetric(t, "ferry_group_sync_age_seconds", "g12"); got < 0 {
			t.Error("no ferry_group_sync_age_seconds of g12")
		}
	})
}

// A group ahead of the copy lands at the copied end, standing for the
// committed next source offset; what it read past the copy is not counted
// as re-read (a failover now loses it) until the copy passes it; then it
// moves on to its exact position as the data arrives, without waiting for
// the next read of the source group.
func TestGroupAheadOfTheCopyLandsAtTheEnd(t *testing.T) {
	bothModes(t, func(t *testing.T, exactlyOnce bool) {
		w := startGroupWriter(t, exactlyOnce)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		stream, _ := w.openOrdersFrom(ctx, t, "east", "")
		copyWithGaps(t, stream) // committed up to source 30
		ahead := map[string]int64{"ahead": 35}
		syncUntil(t, w, stream, ahead, "moved to the copied end", func(g groupsyncer.Status) bool { return standsFor(g, 30) })
		copied := copiedRecords(ctx, t, w, 0)
		end := copied[len(copied)-1].target + 1
		if at, md := w.targetGroup(t, "ahead"); at != end || md != groupsync.Marker(30) {
			t.Fatalf("group ahead of the copy at %d %q, want the copied end %d %q", at, md, end, groupsync.Marker(30))
		}
		// What it read past the copy (30..34) would be lost in a failover
		// now, not read again: the re-read stops at the committed end.
		if st, _ := groupOf(w, "ahead"); st.RereadRecords == nil || *st.RereadRecords != 0 || st.Partitions[0].SourceOffset != 35 {
			t.Fatalf("status %+v: want 0 records to re-read (35 read on the source, the target holds and stands for 30)", st)
		}
		if got := w.groupMetric(t, "ferry_failover_reread_records", "ahead"); got != 0 {
			t.Errorf("ferry_failover_reread_records %v, want 0", got)
		}
		// Copied past it (committed end 40), and no new read of the source
		// group sent: the group follows the copy to where it had read.
		mustSend(t, stream, 4, 0, 30, sourceBatch(t, 30, 10, nil, recordbatch.None, 0))
		waitFor(t, "the group moved on to 35 with the copy", func() bool {
			st, _ := groupOf(w, "ahead")
			return standsFor(st, 35) && st.RereadRecords != nil && *st.RereadRecords == 0
		})
		var want int64 = -1
		for _, c := range copiedRecords(ctx, t, w, 0) {
			if c.source == 35 {
				want = c.target
			}
		}
		if at, md := w.targetGroup(t, "ahead"); at != want || md != groupsync.Marker(35) {
			t.Fatalf("group at %d %q after the copy passed it, want %d (the copy of source 35)", at, md, want)
		}
	})
}

// A failed-over link's groups stay where the failover found them: data
// committed before the failover that the group had not followed yet (a
// round that ended between two of the syncer's advances) does not move
// them after it, so the failover report's positions hold. The syncer is
// driven by hand to place the failover between the commit and the advance.
func TestFailedOverLinkGroupsAreNotFollowed(t *testing.T) {
	w, g, stream, ctx := idleSyncerOverCopy(t)
	// A group behind the copy translates on what the stream committed,
	// as the advances below do after the failover (which ends the
	// stream, and with it any index read not begun).
	waitFor(t, "the group at the copied end, and one behind moved", func() bool {
		if err := stream.Send(groupOffsets(map[string]int64{"ahead": 35, "behind": 17})); err != nil {
			t.Fatalf("send group offsets: %v", err)
		}
		g.SyncQueued()
		ahead, _ := groupOf(w, "ahead")
		behind, _ := groupOf(w, "behind")
		return standsFor(ahead, 30) && standsFor(behind, 17)
	})
	mustSend(t, stream, 4, 0, 30, sourceBatch(t, 30, 10, nil, recordbatch.None, 0))
	if _, err := w.srv.store.SetControl(ctx, "east", checkpoint.Control{State: linkstate.FailedOver, Reason: "test", Time: time.Now()}, 0); err != nil {
		t.Fatal(err)
	}
	g.Advance()
	g.SyncQueued()
	if _, md := w.targetGroup(t, "ahead"); md != groupsync.Marker(30) {
		t.Fatalf("group of a failed-over link moved (%q), want it left standing for 30", md)
	}
	// Running again, the same advance moves it on: the check above could fail.
	if _, err := w.srv.store.SetControl(ctx, "east", checkpoint.Control{State: linkstate.Running, Time: time.Now()}, 0); err != nil {
		t.Fatal(err)
	}
	g.Advance()
	g.SyncQueued()
	if _, md := w.targetGroup(t, "ahead"); md != groupsync.Marker(35) {
		t.Fatalf("group of a running link at %q after the copy passed it, want it moved on to stand for 35", md)
	}
}

// A group with a live member on the target is never moved: the broker
// refuses Ferry's commit, and /status says active.
func TestActiveGroupIsNotMoved(t *testing.T) {
	w := startGroupWriter(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream, _ := w.openOrdersFrom(ctx, t, "east", "")
	copyWithGaps(t, stream)
	member, err := kgo.NewClient(kgo.SeedBrokers(w.cluster.ListenAddrs()...), kgo.ConsumerGroup("live"), kgo.ConsumeTopics("orders"),
		kgo.DisableAutoCommit(), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	// Polled until it has joined and been assigned orders/0: a member.
	for len(member.PollRecords(ctx, 1).Records()) == 0 {
		if ctx.Err() != nil {
			t.Fatal("the member read nothing")
		}
	}
	syncUntil(t, w, stream, map[string]int64{"live": 12}, "active", func(g groupsyncer.Status) bool { return g.Outcome == "active" })
	if at, _ := w.targetGroup(t, "live"); at != -1 {
		t.Fatalf("active group moved to %d", at)
	}
}

// A group someone else committed on the target is left alone: owned.
func TestGroupCommittedOnTheTargetIsOwned(t *testing.T) {
	w := startGroupWriter(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream, _ := w.openOrdersFrom(ctx, t, "east", "")
	copyWithGaps(t, stream)
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: "orders", Partition: 0, At: 2, LeaderEpoch: -1, Metadata: "mine"})
	if _, err := kadm.NewClient(cl).CommitOffsets(ctx, "theirs", os); err != nil {
		t.Fatal(err)
	}
	syncUntil(t, w, stream, map[string]int64{"theirs": 24}, "owned", func(g groupsyncer.Status) bool { return g.Outcome == "owned" })
	if at, md := w.targetGroup(t, "theirs"); at != 2 || md != "mine" {
		t.Fatalf("group committed by another client moved to %d %q", at, md)
	}
}

// A group never moves backwards: rewound on the source, it stays where it
// was on the target, and /status shows the partition behind.
func TestRewoundGroupStays(t *testing.T) {
	w := startGroupWriter(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream, _ := w.openOrdersFrom(ctx, t, "east", "")
	copyWithGaps(t, stream)
	syncUntil(t, w, stream, map[string]int64{"app": 24}, "moved", func(g groupsyncer.Status) bool { return standsFor(g, 24) })
	at, md := w.targetGroup(t, "app")
	syncUntil(t, w, stream, map[string]int64{"app": 12}, "left behind", func(g groupsyncer.Status) bool {
		return g.Outcome == "unchanged" && g.Partitions[0].Note == groupsyncer.NoteBehind && g.Partitions[0].SourceOffset == 12 && g.Partitions[0].StandsFor == 24
	})
	if at2, md2 := w.targetGroup(t, "app"); at2 != at || md2 != md {
		t.Fatalf("rewound group moved from %d %q to %d %q", at, md, at2, md2)
	}
}

// A new stream of the shard reads the offset index (once a group behind
// the end needs it): a group committed on what an earlier stream copied
// translates exactly. With
// flushes an hour apart, the entry that translates it was never written
// to the index topic: the stream takes it from the checkpoint.
func TestIndexReadByANewStreamTranslates(t *testing.T) {
	for _, flush := range []time.Duration{0, time.Hour} {
		t.Run(fmt.Sprintf("flush %v", flush), func(t *testing.T) {
			w := startGroupWriter(t, true, func(o *Options) { o.Index.FlushInterval = flush })
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			stream, _ := w.openOrdersFrom(ctx, t, "east", "")
			copyWithGaps(t, stream)
			closeStream(t, stream)
			stream, _ = w.openOrdersFrom(ctx, t, "east", "")
			syncUntil(t, w, stream, map[string]int64{"old": 17}, "moved", func(g groupsyncer.Status) bool { return standsFor(g, 17) })
			expectAtCopyOf18(ctx, t, w, "old")
		})
	}
}

// The index topic is read only once a group needs it: groups at or past
// the committed end translate from the checkpoint alone, and a group on
// what the stream itself committed from its index entries in memory; the
// shard reads no index for them. The first group behind what the stream
// holds (here on a new stream, whose checkpoint carries no entry: every
// round was flushed) has it read, and then translates exactly.
func TestIndexReadOnlyForAGroupBehindTheEnd(t *testing.T) {
	w := startGroupWriter(t, true, func(o *Options) { o.Index.FlushInterval = 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	reads := 0 // ListOffsets naming the index topic: each load's first request
	w.cluster.ControlKey(kmsg.ListOffsets.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		w.cluster.KeepControl()
		for _, rt := range req.(*kmsg.ListOffsetsRequest).Topics {
			if rt.Topic == indexTopic {
				mu.Lock()
				reads++
				mu.Unlock()
			}
		}
		return nil, nil, false
	})
	read := func() int {
		mu.Lock()
		defer mu.Unlock()
		return reads
	}
	stream, _ := w.openOrdersFrom(ctx, t, "east", "")
	copyWithGaps(t, stream) // committed up to source 30
	syncUntil(t, w, stream, map[string]int64{"caught-up": 30, "ahead": 35}, "both at the copied end", func(g groupsyncer.Status) bool { return standsFor(g, 30) })
	syncUntil(t, w, stream, map[string]int64{"recent": 17}, "moved", func(g groupsyncer.Status) bool { return standsFor(g, 17) })
	if n := read(); n != 0 {
		t.Fatalf("the index topic was read %d times for groups at the end or on what the stream copied, want never", n)
	}
	expectAtCopyOf18(ctx, t, w, "recent")

	closeStream(t, stream)
	stream, _ = w.openOrdersFrom(ctx, t, "east", "")
	syncUntil(t, w, stream, map[string]int64{"behind": 17}, "moved", func(g groupsyncer.Status) bool { return standsFor(g, 17) })
	if n := read(); n == 0 {
		t.Fatal("a group behind what the new stream holds translated without the index topic read")
	}
	expectAtCopyOf18(ctx, t, w, "behind")
}

// expectAtCopyOf18 fails unless group stands on the target at the copy of
// source offset 18, where copyWithGaps's source offset 17 (compacted
// away) translates.
func expectAtCopyOf18(ctx context.Context, t *testing.T, w *testWriter, group string) {
	t.Helper()
	var want int64 = -1
	for _, c := range copiedRecords(ctx, t, w, 0) {
		if c.source == 18 {
			want = c.target
		}
	}
	if at, _ := w.targetGroup(t, group); at != want {
		t.Fatalf("group %s at %d, want %d (the copy of source 18)", group, at, want)
	}
}

// A GroupOffsets message is checked whole; a bad one ends the stream
// naming the field, and nothing of it is synced.
func TestInvalidGroupOffsetsAreRefused(t *testing.T) {
	one := func(g string, topic string, p int32, o int64) []*ferryv1.GroupOffset {
		return []*ferryv1.GroupOffset{{Group: g, Partitions: []*ferryv1.GroupPartitionOffset{{Topic: topic, Partition: p, Offset: o}}}}
	}
	many := make([]*ferryv1.GroupOffset, 0, groupsync.MaxEntries+1)
	for i := range groupsync.MaxEntries + 1 {
		many = append(many, one(fmt.Sprintf("g%d", i), "orders", 0, 1)...)
	}
	twice := append(one("a", "orders", 0, 1), one("a", "orders", 0, 2)...)
	for _, tc := range []struct {
		name   string
		epoch  uint64
		groups []*ferryv1.GroupOffset
		code   codes.Code
		says   string
	}{
		{"partition not in the open", 1, one("a", "orders", 1, 5), codes.InvalidArgument, "group_offsets.groups[0].partitions[0]: orders/1 is not in shard 0"},
		{"negative offset", 1, one("a", "orders", 0, -1), codes.InvalidArgument, "group_offsets.groups[0].partitions[0].offset -1 is negative"},
		{"empty group id", 1, one("", "orders", 0, 1), codes.InvalidArgument, "group_offsets.groups[0].group: empty group id"},
		{"control character", 1, one("a\nb", "orders", 0, 1), codes.InvalidArgument, "control character"},
		{"group twice", 1, twice, codes.InvalidArgument, `group_offsets.groups[1]: group "a" listed twice`},
		{"too many", 1, many, codes.InvalidArgument, "10001 offsets in one message"},
		{"another epoch", 2, one("a", "orders", 0, 1), codes.FailedPrecondition, "group offsets epoch 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := startGroupWriter(t, false)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			stream, _ := w.openOrdersFrom(ctx, t, "east", "")
			m := &ferryv1.GroupOffsets{Epoch: tc.epoch, ReadAt: time.Now().UnixMilli(), Groups: tc.groups}
			if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_GroupOffsets{GroupOffsets: m}}); err != nil {
				t.Fatal(err)
			}
			_, err := stream.Recv()
			wantRefusal(t, err, tc.code, tc.says)
			if got := w.srv.Groups(); len(got) != 0 {
				t.Errorf("a refused message was kept: %+v", got)
			}
			if tc.code == codes.InvalidArgument && w.rejected(t, "east", "bad_group_offsets") != 1 {
				t.Error("refusal not counted as bad_group_offsets")
			}
		})
	}
}

// A writer without a group committer says so in its Opened, so fetchers
// send it no group offsets.
func TestWriterWithoutGroupSyncSaysSo(t *testing.T) {
	w := startWriter(t, passthroughLinks(t, false))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, opened := w.openOrdersFrom(ctx, t, "east", "")
	if opened.GetGroupOffsets() {
		t.Fatal("a writer that syncs no groups says it takes group offsets")
	}
}

// groupMetric is the writer's gauge name for link east and group, -1 when
// absent.
func (w *testWriter) groupMetric(t *testing.T, name, group string) float64 {
	t.Helper()
	mfs, err := w.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["link"] == "east" && labels["group"] == group {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// A group partition whose first translation found the shard's index
// loading gets its position once the load is done, from the syncer's own
// advance: not only at the fetcher's next read of the group, which an
// unplanned failover in between never sees (the partition would have no
// position on the target). The group, behind what a new stream holds
// (every round flushed: its checkpoint carries no entry), is sent once;
// only advances follow.
func TestLoadingIndexIsTranslatedOnceLoaded(t *testing.T) {
	w, g, stream, ctx := idleSyncerOverCopy(t, func(o *Options) { o.Index.FlushInterval = 0 })
	closeStream(t, stream)
	stream, _ = w.openOrdersFrom(ctx, t, "east", "")
	sendWhileLoading(t, w, g, stream)
	positionedByAdvance(ctx, t, w, g, "the group positioned without another read of it")
}

// sendWhileLoading sends group "behind" at 17 on stream, a new stream of
// a shard whose copy reached source 30, and waits for its first sync to
// find the shard's index loading.
func sendWhileLoading(t *testing.T, w *testWriter, g *groupsyncer.Syncer, stream ferryv1.ReplicationService_ReplicateClient) {
	t.Helper()
	if err := stream.Send(groupOffsets(map[string]int64{"behind": 17})); err != nil {
		t.Fatalf("send group offsets: %v", err)
	}
	waitFor(t, "the group's first sync, its index loading", func() bool {
		g.SyncQueued()
		st, ok := groupOf(w, "behind")
		return ok && len(st.Partitions) == 1 && st.Partitions[0].Note == translation.NotLoading
	})
}

// positionedByAdvance waits, the syncer advancing with no new read of
// the group, until "behind" stands for 17, and checks it lands at the
// copy of 18.
func positionedByAdvance(ctx context.Context, t *testing.T, w *testWriter, g *groupsyncer.Syncer, what string) {
	t.Helper()
	waitFor(t, what, func() bool {
		g.Advance()
		g.SyncQueued()
		st, _ := groupOf(w, "behind")
		return standsFor(st, 17)
	})
	expectAtCopyOf18(ctx, t, w, "behind")
}

// idleSyncerOverCopy is a writer (edits edit its options) whose group
// syncer the test drives, and a stream of link east that copied orders/0
// up to source 30 (copyWithGaps); ctx ends with the test.
func idleSyncerOverCopy(t *testing.T, edits ...func(*Options)) (*testWriter, *groupsyncer.Syncer, ferryv1.ReplicationService_ReplicateClient, context.Context) {
	t.Helper()
	w := startGroupWriterIdle(t, false, edits...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	stream, _ := w.openOrdersFrom(ctx, t, "east", "")
	copyWithGaps(t, stream)
	return w, w.srv.groups, stream, ctx
}

// A region loss ends the streams while a shard's index load may still
// run (slowed by the faults before it): the load carries on without its
// stream, so the group partitions it was needed for get their position
// before the failover rather than none (the region-loss soak found some
// in 9 of 10 runs, counted apart as reread_uncounted).
func TestIndexLoadOutlivesItsStream(t *testing.T) {
	w, g, stream, ctx := idleSyncerOverCopy(t, func(o *Options) { o.Index.FlushInterval = 0 })
	closeStream(t, stream)
	// The load's first request waits until the stream is gone.
	released := make(chan struct{})
	var once sync.Once
	w.cluster.ControlKey(int16(kmsg.ListOffsets), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		w.cluster.KeepControl()
		for _, tp := range kreq.(*kmsg.ListOffsetsRequest).Topics {
			if tp.Topic == indexTopic {
				once.Do(func() { w.cluster.SleepControl(func() { <-released }) })
			}
		}
		return nil, nil, false
	})
	stream, _ = w.openOrdersFrom(ctx, t, "east", "")
	sendWhileLoading(t, w, g, stream)
	closeStream(t, stream)
	waitFor(t, "the stream's end on the writer", func() bool { return testutil.ToFloat64(w.srv.metrics.Streams) == 0 })
	close(released)
	positionedByAdvance(ctx, t, w, g, "the group positioned by the load its stream started")
}

// A drain that runs out of time, a stream still committing, stops the
// index loads all the same: each holds a Kafka client, and the writer may
// go on (an embedded writer, a test) long after its drain gave up.
func TestDrainPastItsDeadlineStopsIndexLoads(t *testing.T) {
	w, g, stream, ctx := idleSyncerOverCopy(t, func(o *Options) { o.Index.FlushInterval = 0 })
	closeStream(t, stream)
	released := make(chan struct{})
	t.Cleanup(func() { close(released) }) // before the writer's own drain
	// Flags, not sync.Once: a control function blocked on a Once's
	// mutex would stall kfake's loop.
	var holdProduce, loadHeld, produceHeld atomic.Bool
	producing := make(chan struct{})
	w.cluster.ControlKey(int16(kmsg.ListOffsets), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		w.cluster.KeepControl()
		for _, tp := range kreq.(*kmsg.ListOffsetsRequest).Topics {
			if tp.Topic == indexTopic {
				if loadHeld.CompareAndSwap(false, true) {
					w.cluster.SleepControl(func() { <-released })
				}
			}
		}
		return nil, nil, false
	})
	w.cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		w.cluster.KeepControl()
		if holdProduce.Load() {
			if produceHeld.CompareAndSwap(false, true) {
				close(producing)
			}
			w.cluster.SleepControl(func() { <-released })
		}
		return nil, nil, false
	})
	stream, _ = w.openOrdersFrom(ctx, t, "east", "")
	sendWhileLoading(t, w, g, stream)
	// A round whose produce does not return keeps the stream from ending.
	holdProduce.Store(true)
	b := wireKafka(t, 30, sourceBatch(t, 30, 3, nil, recordbatch.None, 0))
	b.Sequence, b.Epoch, b.Topic, b.Partition = 1, 1, "orders", 0
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Batch{Batch: b}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-producing:
	case <-ctx.Done():
		t.Fatal("the batch was never produced")
	}
	dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if err := w.srv.Drain(dctx); err == nil {
		t.Fatal("the drain ended although a stream's round could not commit")
	}
	loadsDone := make(chan struct{})
	go func() { w.srv.loads.Wait(); close(loadsDone) }()
	select {
	case <-loadsDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the index load still runs 10 s after the drain gave up")
	}
}
