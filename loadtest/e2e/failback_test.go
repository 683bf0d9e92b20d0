package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferry-replicator/ferry/loadtest/harness"
	"github.com/ferry-replicator/ferry/loadtest/workload"
	"github.com/ferry-replicator/ferry/pkg/groupsync"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
)

// The failback round trip (issue 23 items 5 and 7; docs/disaster-recovery.md,
// "Failback" and "Drills"), on two Apache Kafka brokers A and B, with
// identity naming (the topic keeps its name on both sides), exactly-once.

const (
	tripTopic = "t.trip"
	// Each workload starts at its own record index, so its keys
	// ("k-<partition>-<seq>", seq = index / 2) say who produced a record.
	tripA1, tripA1Records     = 0, 2000    // A, before the failover
	tripTail, tripTailRecords = 2000, 300  // A, the stranded tail
	tripB, tripBRecords       = 10000, 800 // B, after the failover
	tripA3, tripA3Records     = 20000, 300 // A, after the failback
	tripSeqTail, tripSeqB     = 1000, 5000 // the first seq of each
	tripSeqA3                 = 10000
)

// origin is who produced the record with key k: A1, tail, B or A3.
func origin(t *testing.T, k string) string {
	t.Helper()
	i := strings.LastIndexByte(k, '-')
	seq, err := strconv.Atoi(k[i+1:])
	if i < 0 || err != nil {
		t.Fatalf("key %q is not a workload's", k)
	}
	switch {
	case seq >= tripSeqA3:
		return "A3"
	case seq >= tripSeqB:
		return "B"
	case seq >= tripSeqTail:
		return "tail"
	}
	return "A1"
}

// TestFailbackRoundTripOnApacheKafka: link A→B copies while group G reads
// and commits on A; the link is paused and A takes more (the stranded
// tail), then fails over unplanned; producers write on B and G reads on
// B; failback reports the tail exactly (offsets and records), moves the
// checkpoints and sets the reverse link B→A's start at TARGET_START
// through its writer, before it runs; the reverse link drains; G's
// consumer stops, failback --move-groups moves its exact partition back
// and hands the other to the reverse link, whose planned failover syncs
// it; G reads on A. Over the whole trip G reads every record once, the
// tail only on its exact partition (where it stands before the tail on A)
// and never on the other; nothing loops; and the resumed link copies only
// what A's producers write afterwards.
func TestFailbackRoundTripOnApacheKafka(t *testing.T) {
	ctx := context.Background()
	brokers := startKafkas(t, "a", "b")
	a, b := []string{brokers[0].Addr()}, []string{brokers[1].Addr()}
	fwd, rev := tripLink(t, a, b), tripLink(t, b, a)
	shareCerts(t, fwd, rev) // each fetcher verifies the other link's writer's registry entries
	fwd.createTopic(tripTopic, 2, nil)
	// The forward writer's persist interval never comes round in the
	// test: what it knows of G after its restart below was written
	// because the failover's report showed it.
	fwd.writerExtra["heartbeats"] = map[string]any{"persist_interval": "10m"}
	fwd.startWriter()
	fwd.startFetcher(map[string]any{"groups": map[string]any{"interval": "1s"}})

	// A→B copies; G reads and commits on A, and is synced to B.
	produceTrip(ctx, t, a, tripA1, tripA1Records)
	waitKeys(t, b, "B to hold A's first records", func(k map[int32][]string) error { return count(t, k, "A1", tripA1Records) })
	readA1 := tripRead(ctx, t, a, map[int32]int{0: 300, 1: 600})
	waitUntil(t, 2*time.Minute, "G synced to B", func() error { return groupMarkers(ctx, b, map[int32]int64{0: 300, 1: 600}) })

	// The stranded tail: A takes records the paused link never copies.
	var ch ctlChange
	if err := fwd.ferryctl(ctx, &ch, "pause", "test", "--reason", "round trip: strand a tail"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, time.Minute, "the fetcher refused as paused", func() error { return shardsIn(fwd, "paused") })
	produceTrip(ctx, t, a, tripTail, tripTailRecords)
	if err := fwd.ferryctl(ctx, &ch, "failover", "test", "--unplanned", "--yes", "--reason", "round trip: region A lost"); err != nil {
		t.Fatal(err)
	}

	// B takes over: producers write there, G reads partition 0 a little
	// (still within what was copied) and partition 1 to its end.
	produceTrip(ctx, t, b, tripB, tripBRecords)
	readB := tripRead(ctx, t, b, map[int32]int{0: 200, 1: -1})

	// The link's writer (every writer of B) is killed and restarted
	// between the failover and the failback: what its group sync knew
	// is read back from __ferry_groups, so failback --move-groups below
	// still finds G (it found no group, and moved none, before).
	fwd.writer.Kill()
	if err := fwd.writer.Restart(); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	err := harness.WaitReady(rctx, fwd.writerAdmin)
	cancel()
	if err != nil {
		t.Fatal(err)
	}

	// Failback steps 1 and 2: the tail, exactly, as A and B tell it
	// apart, and the reverse link's start, where B's writes began, set
	// through its writer (in A) before its fetcher starts.
	rev.startWriter()
	cfg := filepath.Join(fwd.dir, "fetcher.yaml")
	reverse := []string{"--source-config", cfg, "--reverse-link", "test", "--reverse-writer", rev.writerAddr}
	var dry, fb tripFailback
	if err := fwd.ferryctl(ctx, &dry, append([]string{"failback", "test", "--dry-run"}, reverse...)...); err != nil {
		t.Fatal(err)
	}
	if err := fwd.ferryctl(ctx, &fb, append([]string{"failback", "test"}, reverse...)...); err != nil {
		t.Fatal(err)
	}
	onA, onB := logKeys(ctx, t, a), logKeys(ctx, t, b)
	for _, rep := range []tripFailback{dry, fb} {
		checkStranded(t, rep, onA, onB)
	}
	for _, p := range fb.Partitions {
		if p.ReverseCheckpoint == nil || *p.ReverseCheckpoint != p.TargetStart || p.TargetStart < 0 {
			t.Errorf("partition %d: the reverse link's checkpoint set at %v, want TARGET_START %d", p.Partition, p.ReverseCheckpoint, p.TargetStart)
		}
	}

	rev.startFetcher(map[string]any{"groups": map[string]any{"interval": "1s"}})
	waitKeys(t, a, "A to hold B's records", func(k map[int32][]string) error { return count(t, k, "B", tripBRecords) })

	// Step 3, G's consumer stopped on B: groups back, then the reverse
	// link's last sync.
	var mg tripFailback
	if err := fwd.ferryctl(ctx, &mg, "failback", "test", "--source-config", cfg, "--move-groups"); err != nil {
		t.Fatal(err)
	}
	g0, g1 := mg.group(t, drillGroup, 0), mg.group(t, drillGroup, 1)
	if g0.Carry != "exact" || g0.Action != "moved" || g0.SourceOffset == nil || *g0.SourceOffset != 500 {
		t.Errorf("--move-groups: G's partition 0 %+v, want exact, moved to source offset 500", g0)
	}
	if g1.Carry != "reverse_link" || !strings.Contains(g1.Why, "marked") {
		t.Errorf("--move-groups: G's partition 1 %+v, want the reverse link's, marked", g1)
	}
	if len(mg.Groups) != 1 || !mg.Groups[0].HandedBack {
		t.Errorf("--move-groups did not hand G back to the forward link's group sync on B: %+v", mg.Groups)
	}
	// G's exact partition 0 is before the reverse link's offset index
	// (--move-groups moved it on A): the failover leaves it without a
	// position from the reverse link, and may say so (partial, naming it
	// alone).
	partial, err := rev.ferryctlPartial(ctx, &ch, "failover", "test", "--planned", "--reason", "round trip: back to A", "--timeout", "90s")
	if err != nil {
		t.Fatal(err)
	}
	if partial != "" && (!strings.Contains(partial, tripTopic+"/0 (before_index)") || strings.Contains(partial, tripTopic+"/1")) {
		t.Errorf("the reverse link's planned failover was partial for more than G's exact partition 0: %s", partial)
	}
	readA2 := tripRead(ctx, t, a, map[int32]int{0: -1, 1: -1})

	// Every record G read, read once; what it never read is exactly
	// partition 1's tail.
	onA = logKeys(ctx, t, a)
	read := map[int32]map[string]int{}
	for _, r := range []map[int32][]string{readA1, readB, readA2} {
		for p, ks := range r {
			if read[p] == nil {
				read[p] = map[string]int{}
			}
			for _, k := range ks {
				read[p][k]++
			}
		}
	}
	for p := range int32(2) {
		unread := map[string]int{}
		for _, k := range onA[p] {
			if read[p][k] == 0 {
				unread[origin(t, k)]++
			}
		}
		for k, n := range read[p] {
			if n != 1 {
				t.Errorf("G read %s/%d %s %d times", tripTopic, p, k, n)
			}
		}
		want := map[string]int{}
		if p == 1 {
			want["tail"] = tripTailRecords / 2
		}
		if fmt.Sprint(unread) != fmt.Sprint(want) {
			t.Errorf("partition %d: G never read %v of what A holds, want %v", p, unread, want)
		}
	}
	// Nothing looped: A holds B's records once; B nothing of the tail.
	checkOnce(t, "A", onA, map[string]int{"A1": tripA1Records, "tail": tripTailRecords, "B": tripBRecords})
	checkOnce(t, "B", logKeys(ctx, t, b), map[string]int{"A1": tripA1Records, "B": tripBRecords})

	// Step 4: the original direction copies only what A takes from now on.
	produceTrip(ctx, t, a, tripA3, tripA3Records)
	// Failed over, but failback moved every checkpoint past the copy:
	// resume needs no --force and warns of no stranded tail.
	if err := fwd.ferryctl(ctx, &ch, "resume", "test", "--reason", "round trip: A is the source again"); err != nil {
		t.Fatal(err)
	}
	if ch.Warning != "" {
		t.Errorf("resume after failback warned: %s", ch.Warning)
	}
	waitKeys(t, b, "B to hold A's new records", func(k map[int32][]string) error { return count(t, k, "A3", tripA3Records) })
	fwd.waitCaughtUp(ctx, tripTopic) // the stranded tail, before A3, is behind it
	checkOnce(t, "B", logKeys(ctx, t, b), map[string]int{"A1": tripA1Records, "B": tripBRecords, "A3": tripA3Records})

	// The trip leaves the sync working: G, whose consumers committed on
	// B during the failover (which the sync leaves alone), was handed
	// back by --move-groups, so A→B syncs it again from where it stands
	// on A now (it read A to its end before A3).
	onAG := committed(ctx, t, a, drillGroup, tripTopic)
	if len(onAG) != 2 {
		t.Fatalf("G's offsets on A: %v, want both partitions", onAG)
	}
	waitUntil(t, 2*time.Minute, "G synced to B again", func() error { return groupMarkers(ctx, b, onAG) })
}

// tripLink is a link between two Apache Kafka brokers, identity naming,
// exactly-once, ferryctl allowed on its writer.
func tripLink(t *testing.T, src, dst []string) *env {
	e := newEnvOn(t, src, dst)
	e.naming, e.prefix, e.delivery = "identity", "", "exactly_once"
	e.writerExtra = map[string]any{"control": map[string]any{
		"allowed_ids": []string{devcerts.SPIFFEID(devcerts.DefaultTrustDomain, "ferryctl")},
	}}
	return e
}

// produceTrip writes n records of the trip workload starting at index
// start to the cluster at addrs.
func produceTrip(ctx context.Context, t *testing.T, addrs []string, start, n int) {
	t.Helper()
	p, err := workload.NewProducer(addrs, workload.Options{Topic: tripTopic, Partitions: 2, Records: n, ValueBytes: 100, Seed: uint64(start), Start: start})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Run(ctx); err != nil {
		t.Fatalf("produce %d records from %d: %v", n, start, err)
	}
}

// logKeys is the key of every committed data record of the trip topic at
// addrs, per partition in offset order.
func logKeys(ctx context.Context, t *testing.T, addrs []string) map[int32][]string {
	t.Helper()
	out := map[int32][]string{}
	readCommitted(ctx, t, addrs, tripTopic, func(r *kgo.Record) { out[r.Partition] = append(out[r.Partition], string(r.Key)) })
	return out
}

// waitKeys polls the trip topic at addrs until ok holds of its keys.
func waitKeys(t *testing.T, addrs []string, what string, ok func(map[int32][]string) error) {
	t.Helper()
	waitUntil(t, 2*time.Minute, what, func() error { return ok(logKeys(context.Background(), t, addrs)) })
}

// count says how far the keys of origin o are from n.
func count(t *testing.T, keys map[int32][]string, o string, n int) error {
	got := 0
	for _, ks := range keys {
		for _, k := range ks {
			if origin(t, k) == o {
				got++
			}
		}
	}
	if got != n {
		return fmt.Errorf("%d records of %s, want %d", got, o, n)
	}
	return nil
}

// checkOnce checks that the cluster holds each record of each origin in
// want once, want[o] of them, and nothing of any other origin.
func checkOnce(t *testing.T, side string, keys map[int32][]string, want map[string]int) {
	t.Helper()
	got, seen := map[string]int{}, map[string]int{}
	for p, ks := range keys {
		for _, k := range ks {
			got[origin(t, k)]++
			if seen[fmt.Sprint(p, k)]++; seen[fmt.Sprint(p, k)] == 2 {
				t.Errorf("%s holds %s/%d %s twice", side, tripTopic, p, k)
			}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s holds %v records by origin, want %v", side, got, want)
	}
}

// tripRead runs drillGroup on the trip topic at addrs as a consumer,
// read_committed, from its committed position (the start when none): it
// takes n[p] records of partition p (-1: up to the last stable offset as
// it is when called), commits the position after the last record it took,
// and leaves. It returns the keys taken.
func tripRead(ctx context.Context, t *testing.T, addrs []string, n map[int32]int) map[int32][]string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup(drillGroup), kgo.ConsumeTopics(tripTopic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListCommittedOffsets(ctx, tripTopic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatalf("last stable offsets: %v", err)
	}
	pos := map[int32]int64{}
	if os, err := adm.FetchOffsets(ctx, drillGroup); err == nil {
		os.Each(func(o kadm.OffsetResponse) {
			if o.Topic == tripTopic && o.At >= 0 {
				pos[o.Partition] = o.At
			}
		})
	}
	got := map[int32][]string{}
	done := func(p int32) bool {
		if n[p] < 0 {
			end, _ := ends.Lookup(tripTopic, p)
			return pos[p] >= end.Offset
		}
		return len(got[p]) >= n[p]
	}
	all := func() bool {
		for p := range n {
			if !done(p) {
				return false
			}
		}
		return true
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for !all() {
		fs := cl.PollFetches(rctx)
		if rctx.Err() != nil {
			t.Fatalf("G at %v read %v records, want %v", addrs, counts2(got), n)
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("G read partition %d: %v", p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if _, ok := n[r.Partition]; !ok || done(r.Partition) {
				return // past what this read takes: read again next time
			}
			pos[r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() {
				got[r.Partition] = append(got[r.Partition], string(r.Key))
			}
		})
	}
	commit := map[string]map[int32]kgo.EpochOffset{tripTopic: {}}
	for p := range n {
		commit[tripTopic][p] = kgo.EpochOffset{Epoch: -1, Offset: pos[p]}
	}
	var cerr error
	cl.CommitOffsetsSync(rctx, commit, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		cerr = err
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				if e := kerr.ErrorForCode(rp.ErrorCode); e != nil && cerr == nil {
					cerr = e
				}
			}
		}
	})
	if cerr != nil {
		t.Fatalf("G commit %v: %v", pos, cerr)
	}
	return got
}

func counts2(m map[int32][]string) map[int32]int {
	out := map[int32]int{}
	for p, v := range m {
		out[p] = len(v)
	}
	return out
}

// groupMarkers says how far G on the cluster at addrs is from Ferry's
// commits of the source offsets want.
func groupMarkers(ctx context.Context, addrs []string, want map[int32]int64) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return err
	}
	defer cl.Close()
	os, err := kadm.NewClient(cl).FetchOffsets(ctx, drillGroup)
	if err != nil {
		return err
	}
	for p, s := range want {
		o, ok := os.Lookup(tripTopic, p)
		if !ok || o.Metadata != groupsync.Marker(s) {
			return fmt.Errorf("partition %d: %+v, want Ferry's marker of %d", p, o, s)
		}
	}
	return nil
}

// shardsIn says how far the env's fetcher is from every shard refused as
// state.
func shardsIn(e *env, state string) error {
	shards, ok := statusShards(e.fetcherAdmin)
	if !ok || len(shards) == 0 {
		return fmt.Errorf("no shards in the fetcher's /status")
	}
	for _, s := range shards {
		if s.LinkState != state {
			return fmt.Errorf("shard %d: link_state %q", s.Shard, s.LinkState)
		}
	}
	return nil
}

// tripFailback is the part of `ferryctl failback -o json` the drill reads.
type tripFailback struct {
	Partitions []struct {
		Partition    int32 `json:"partition"`
		Committed    int64 `json:"committed_next_offset"`
		SourceEnd    int64 `json:"source_end_offset"`
		StrandedFrom int64 `json:"stranded_from"`
		StrandedTo   int64 `json:"stranded_to"`
		TargetStart  int64 `json:"target_start"`
		// StrandedRecords counts the tail read_committed; the reverse
		// link's checkpoint is set at TargetStart.
		StrandedRecords   *int64 `json:"stranded_records"`
		ReverseCheckpoint *int64 `json:"reverse_checkpoint"`
	} `json:"partitions"`
	Groups []struct {
		Group      string             `json:"group"`
		Partitions []tripGroupPartion `json:"partitions"`
		HandedBack bool               `json:"handed_back"`
	} `json:"groups"`
}

type tripGroupPartion struct {
	Partition    int32  `json:"partition"`
	TargetOffset int64  `json:"target_offset"`
	SourceOffset *int64 `json:"source_offset"`
	Carry        string `json:"carry"`
	Action       string `json:"action"`
	Why          string `json:"why"`
}

func (r tripFailback) group(t *testing.T, group string, p int32) tripGroupPartion {
	t.Helper()
	for _, g := range r.Groups {
		for _, gp := range g.Partitions {
			if g.Group == group && gp.Partition == p {
				return gp
			}
		}
	}
	t.Fatalf("failback reported no %s partition %d: %+v", group, p, r.Groups)
	return tripGroupPartion{}
}

// checkStranded compares the reported tail of each partition with A's log
// and with what B holds of it: [what B holds, A's end).
func checkStranded(t *testing.T, rep tripFailback, onA, onB map[int32][]string) {
	t.Helper()
	if len(rep.Partitions) != 2 {
		t.Fatalf("failback reported %d partitions, want 2: %+v", len(rep.Partitions), rep.Partitions)
	}
	for _, p := range rep.Partitions {
		var copied []string
		for _, k := range onB[p.Partition] {
			if o := origin(t, k); o != "B" {
				copied = append(copied, k)
			}
		}
		a := onA[p.Partition]
		held := int64(len(copied))
		if fmt.Sprint(copied) != fmt.Sprint(a[:min(len(a), len(copied))]) {
			t.Errorf("partition %d: B holds A's records out of order or others", p.Partition)
		}
		if p.StrandedFrom != held || p.StrandedTo != int64(len(a)) || p.StrandedTo-p.StrandedFrom != tripTailRecords/2 {
			t.Errorf("partition %d: reported stranded [%d, %d), B holds A's [0, %d) and A ends at %d (tail of %d)",
				p.Partition, p.StrandedFrom, p.StrandedTo, held, len(a), tripTailRecords/2)
		}
		if tail := int64(len(a)) - min(held, int64(len(a))); p.StrandedRecords == nil || *p.StrandedRecords != tail || tail != tripTailRecords/2 {
			t.Errorf("partition %d: reported %v stranded records, A holds %d past what B holds (tail of %d)", p.Partition, p.StrandedRecords, tail, tripTailRecords/2)
		}
	}
}
