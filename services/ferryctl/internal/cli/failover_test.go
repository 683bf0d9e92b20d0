package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/pkg/linkstate"
	fetcher "github.com/ferry-replicator/ferry/services/fetcher/inprocess"
)

// replication is link east copying topic "orders" (3 partitions) from a
// kfake source through a whole fetcher to two whole writers on a kfake
// target.
type replication struct {
	target
	source      *kfake.Cluster
	fetcher     *fetcher.Fetcher
	fetcherOpts fetcher.Options
}

func startReplication(t *testing.T) replication {
	t.Helper()
	src, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	r := replication{target: startTarget(t), source: src}
	var addrs []string
	for _, w := range r.writers {
		addrs = append(addrs, w.Addr)
	}
	r.fetcherOpts = fetcher.Options{ID: "f1", Link: "east", Source: src.ListenAddrs(), Writers: addrs,
		CertDir: r.dir, Topics: []string{"orders"}, GroupsInterval: time.Second, HeartbeatInterval: 200 * time.Millisecond}
	r.fetcher = fetcher.Start(t, r.fetcherOpts)
	return r
}

func kclient(t *testing.T, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produce writes n records to partitions 0 and 1 of orders (2 stays
// empty), values naming them uniquely.
func produce(t *testing.T, cl *kgo.Client, batch, n int) {
	t.Helper()
	for p := int32(0); p < 2; p++ {
		for i := 0; i < n; i++ {
			r := &kgo.Record{Topic: "orders", Partition: p, Value: []byte(fmt.Sprintf("p%d-b%d-%d", p, batch, i))}
			if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// commitGroup commits offsets for group on c, as a consumer that stopped.
func commitGroup(t *testing.T, c *kfake.Cluster, group, topic string, offsets map[int32]int64) {
	t.Helper()
	var os kadm.Offsets
	for p, o := range offsets {
		os.Add(kadm.Offset{Topic: topic, Partition: p, At: o, LeaderEpoch: -1})
	}
	resp, err := kadm.NewClient(kclient(t, c)).CommitOffsets(context.Background(), group, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("commit %s: %v", group, err)
	}
}

// values reads every committed record of topic's partition p on c, by
// offset, until it holds want of them.
func values(t *testing.T, c *kfake.Cluster, topic string, p int32, want int) map[int64]string {
	t.Helper()
	cl := kclient(t, c, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	out := map[int64]string{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s/%d: %d records read, want %d", topic, p, len(out), want)
		}
		fs.EachRecord(func(r *kgo.Record) { out[r.Offset] = string(r.Value) })
	}
	return out
}

// waitStatus polls status until ok holds of the link's report.
func (tg target) waitStatus(t *testing.T, what string, ok func(LinkReport) bool) LinkReport {
	t.Helper()
	var l LinkReport
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if l = tg.status(t).Links[0]; ok(l) {
			return l
		}
	}
	t.Fatalf("never %s; last status %+v", what, l)
	return l
}

// syncBuffer is a buffer one goroutine writes while another reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// waitText polls b until it holds s.
func waitText(t *testing.T, b *syncBuffer, s string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if strings.Contains(b.String(), s) {
			return
		}
	}
	t.Fatalf("never %q in %q", s, b.String())
}

// A planned failover started while the target lacks records the source
// holds waits for them, and then for a group sync read after the drain:
// the fetcher is stopped and records are produced, the command starts (it
// waits, saying for what), and only then does the fetcher come back, its
// first group read before the group's last commit, which lands once the
// command says the drain is done (a failover at the drain, or at the
// start, would leave the group where it was). It ends with the target
// holding every source record, the selected group at the exact translated
// position of its last source offset (0 re-read), the link failed_over
// and 0 lost; --groups leaves the other group out of the report.
func TestPlannedFailover(t *testing.T) {
	r := startReplication(t)
	src := kclient(t, r.source)
	produce(t, src, 0, 40)
	commitGroup(t, r.source, "app", "orders", map[int32]int64{0: 17, 1: 33, 2: 0})
	commitGroup(t, r.source, "other", "orders", map[int32]int64{0: 5, 1: 5})
	r.waitStatus(t, "both groups synced and heartbeats on both partitions", func(l LinkReport) bool {
		return len(l.Partitions) == 3 && len(l.Groups) == 2 && l.Groups[0].Reread != nil && *l.Groups[0].Reread == 0
	})
	r.fetcher.Stop()
	for b := 1; b <= 5; b++ {
		produce(t, src, b, 30)
	}

	var out, errOut syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- RunContext(context.Background(), r.argv("ferryctl", "failover", "east", "--planned", "--groups", "app",
			"--stale-after", "5m", "--timeout", "90s", "-o", "json"), nil, nil, &out, &errOut)
	}()
	waitText(t, &errOut, "drain: waiting for 3: orders/0: a heartbeat read after the wait began")
	// Its group reads 5 s apart: the first, at its start, sees the group
	// before its last commit; the next comes well after the drain.
	r.fetcherOpts.GroupsInterval = 5 * time.Second
	r.fetcher = fetcher.Start(t, r.fetcherOpts)
	waitText(t, &errOut, "drain done")
	want := map[int32]int64{0: 150, 1: 170, 2: 0}
	commitGroup(t, r.source, "app", "orders", want) // the consumers' last commits, then they stop
	if c := <-code; c != exitOK {
		t.Fatalf("failover --planned exited %d: %s%s", c, out.String(), errOut.String())
	}
	var ch Change
	if err := json.Unmarshal([]byte(out.String()), &ch); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if ch.State != linkstate.FailedOver || !ch.Planned || len(ch.Pending) != 0 {
		t.Fatalf("planned failover answered %+v, want failed_over read back by both writers", ch)
	}
	ends, err := kadm.NewClient(src).ListEndOffsets(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.AtRisk) != 3 {
		t.Fatalf("report of %d partitions, want 3: %+v", len(ch.AtRisk), ch.AtRisk)
	}
	for _, p := range ch.AtRisk {
		// Heartbeats every 200 ms: each partition has an append rate, and
		// the tail estimated after the last heartbeat is that rate times
		// its age (none on the empty partition).
		if p.SourceAppendRate == nil || p.AfterHeartbeat == nil || *p.AfterHeartbeat < 0 || *p.AfterHeartbeat > int64(math.Ceil(*p.SourceAppendRate*(p.HeartbeatAge+1))) {
			t.Errorf("orders/%d: append rate %v, after-heartbeat estimate %v, heartbeat %.1fs old: want a rate and at most rate × age", p.Partition, p.SourceAppendRate, p.AfterHeartbeat, p.HeartbeatAge)
		}
		end, _ := ends.Lookup("orders", p.Partition)
		if end.Offset == 0 && p.LagRecords == 0 && p.SourceHighWatermark == 0 {
			if p.SourceAppendRate != nil && (*p.SourceAppendRate != 0 || *p.AfterHeartbeat != 0) {
				t.Errorf("orders/2, empty: append rate %v, estimate %v, want 0", *p.SourceAppendRate, *p.AfterHeartbeat)
			}
			continue // orders/2: empty, nothing to commit
		}
		if p.LagRecords != 0 || p.Committed != end.Offset || p.SourceHighWatermark != end.Offset {
			t.Errorf("orders/%d: reported %+v, want 0 lost, committed = source high watermark = %d", p.Partition, p, end.Offset)
		}
	}
	if l := r.status(t).Links[0]; l.State != linkstate.FailedOver {
		t.Fatalf("link %s after a planned failover", l.State)
	}

	// The target holds every source record, and app stands, on the
	// target, at the copy of the record at its source offset; on the
	// empty partition it has no position (nothing to translate to).
	if len(ch.Groups) != 1 || ch.Groups[0].Group != "app" || ch.Groups[0].Reread == nil || *ch.Groups[0].Reread != 0 {
		t.Fatalf("groups reported %+v, want app alone with 0 re-read", ch.Groups)
	}
	onTarget, err := kadm.NewClient(kclient(t, r.cluster)).FetchOffsets(context.Background(), "app")
	if err != nil {
		t.Fatal(err)
	}
	for p := int32(0); p < 2; p++ {
		end, _ := ends.Lookup("orders", p)
		source := values(t, r.source, "orders", p, int(end.Offset))
		copied := values(t, r.cluster, "east.orders", p, int(end.Offset))
		if len(copied) != len(source) {
			t.Errorf("orders/%d: %d records on the target, %d on the source", p, len(copied), len(source))
		}
		at := int64(-1)
		for off, v := range copied {
			if v == source[want[p]] {
				at = off
			}
		}
		gp := ch.Groups[0].Partitions[p]
		if gp.StandsFor != want[p] || gp.SourceOffset != want[p] || gp.TargetOffset != at || at < 0 {
			t.Errorf("app orders/%d reported %+v, want target %d standing for %d", p, gp, at, want[p])
		}
		if o, ok := onTarget.Lookup("east.orders", p); !ok || o.At != at {
			t.Errorf("app on the target at %+v, want %d", o, at)
		}
	}
	if ps := ch.Groups[0].Partitions; len(ps) != 3 || ps[2].TargetOffset != -1 || ps[2].Note != "not_copied" {
		t.Errorf("app orders/2 (empty) reported %+v, want no position, not_copied", ch.Groups[0].Partitions)
	}
}

// With the source side silent (the fetcher gone, heartbeats older than
// --stale-after), a planned failover refuses, naming the stale partitions
// and the unplanned form, and changes nothing; the unplanned form's dry
// run and failover report each selected group's target position, what it
// stands for and its re-read count, text and -o json.
func TestPlannedRefusesStaleAndUnplannedReportsGroups(t *testing.T) {
	r := startReplication(t)
	produce(t, kclient(t, r.source), 0, 40)
	commitGroup(t, r.source, "app", "orders", map[int32]int64{0: 17, 1: 33})
	commitGroup(t, r.source, "other", "orders", map[int32]int64{0: 5, 1: 5})
	r.waitStatus(t, "both groups synced where they stand", func(l LinkReport) bool {
		return len(l.Partitions) == 3 && len(l.Groups) == 2 && l.Groups[0].Reread != nil && *l.Groups[0].Reread == 0 &&
			len(l.Groups[0].Partitions) >= 2 && l.Groups[0].Partitions[0].StandsFor == 17 && l.Groups[0].Partitions[1].StandsFor == 33
	})
	r.fetcher.Stop()
	r.waitStatus(t, "every heartbeat older than 1s", func(l LinkReport) bool {
		for _, p := range l.Partitions {
			if p.HeartbeatAge <= 1 {
				return false
			}
		}
		return true
	})

	code, out, errOut := r.run(t, "ferryctl", "failover", "east", "--planned", "--stale-after", "1s")
	if code != exitFailed || !strings.Contains(errOut, "orders/0") || !strings.Contains(errOut, "orders/2") || !strings.Contains(errOut, "unplanned form") {
		t.Fatalf("planned failover with stale heartbeats exited %d: %s%s", code, out, errOut)
	}
	if l := r.status(t).Links[0]; l.State != linkstate.Running || l.Generation != 0 {
		t.Fatalf("a refused planned failover changed the link: %+v", l)
	}
	if code, _, errOut = r.run(t, "ferryctl", "failover", "east", "--unplanned", "--groups", "("); code != exitUsage || !strings.Contains(errOut, "--groups") {
		t.Fatalf("failover --groups ( exited %d: %s", code, errOut)
	}

	code, out, errOut = r.run(t, "ferryctl", "failover", "east", "--unplanned", "--dry-run")
	if code != exitOK || !strings.Contains(out, "DRY RUN") || !strings.Contains(out, "STANDS_FOR_SOURCE") || !strings.Contains(out, "other") {
		t.Fatalf("failover --dry-run exited %d: %s%s", code, out, errOut)
	}
	code, out, errOut = r.run(t, "ferryctl", "failover", "east", "--unplanned", "--yes", "--groups", "ap.", "--reason", "region lost", "-o", "json")
	if code != exitOK {
		t.Fatalf("failover exited %d: %s", code, errOut)
	}
	var ch Change
	if err := json.Unmarshal([]byte(out), &ch); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if ch.State != linkstate.FailedOver || ch.Planned || len(ch.Groups) != 1 || ch.Groups[0].Group != "app" ||
		ch.Groups[0].Reread == nil || *ch.Groups[0].Reread != 0 {
		t.Fatalf("failover answered %+v, want failed_over with app alone, 0 re-read", ch)
	}
	onTarget, err := kadm.NewClient(kclient(t, r.cluster)).FetchOffsets(context.Background(), "app")
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{17, 33} {
		gp := ch.Groups[0].Partitions[i]
		o, _ := onTarget.Lookup("east.orders", int32(i))
		if gp.StandsFor != want || gp.SourceOffset != want || gp.TargetOffset != o.At || o.At < want {
			t.Errorf("app orders/%d reported %+v; on the target at %d", i, gp, o.At)
		}
	}
}

// A planned failover that cannot finish (its group is someone else's on
// the target, so group sync never moves it) fails at --timeout naming what
// it waited for, and leaves the link running.
func TestPlannedFailoverTimeoutLeavesLinkRunning(t *testing.T) {
	r := startReplication(t)
	produce(t, kclient(t, r.source), 0, 10)
	r.waitStatus(t, "orders copied", func(l LinkReport) bool {
		return len(l.Partitions) == 3 && l.Partitions[0].Committed == 10
	})
	commitGroup(t, r.cluster, "app", "east.orders", map[int32]int64{0: 3}) // a consumer's own commit on the target
	commitGroup(t, r.source, "app", "orders", map[int32]int64{0: 7})
	r.waitStatus(t, "app found owned", func(l LinkReport) bool { return len(l.Groups) == 1 && l.Groups[0].Outcome == "owned" })

	code, out, errOut := r.run(t, "ferryctl", "failover", "east", "--planned", "--timeout", "5s")
	if code != exitFailed || !strings.Contains(errOut, "timed out after 5s waiting for group app orders/0") ||
		!strings.Contains(errOut, "owned") || !strings.Contains(errOut, "still running") {
		t.Fatalf("planned failover exited %d: %s%s", code, out, errOut)
	}
	if l := r.status(t).Links[0]; l.State != linkstate.Running || l.Generation != 0 {
		t.Fatalf("a planned failover that timed out changed the link: %+v", l)
	}
}

// A planned failover proves nothing is lost only with every writer's
// answer: a writer named that does not answer (it may hold a shard's
// stream and heartbeats) keeps the drain waiting, named, until --timeout,
// and the link stays running; the same failover without it finishes.
func TestPlannedFailoverWaitsForEveryWriter(t *testing.T) {
	r := startReplication(t)
	produce(t, kclient(t, r.source), 0, 10)
	r.waitStatus(t, "orders copied", func(l LinkReport) bool {
		return len(l.Partitions) == 3 && l.Partitions[0].Committed == 10 && l.Partitions[1].Committed == 10
	})
	code, out, errOut := r.run(t, "ferryctl", "failover", "east", "--planned", "--writer", "127.0.0.1:1", "--timeout", "5s")
	if code != exitFailed || !strings.Contains(errOut, "waiting for writer 127.0.0.1:1 to answer") || !strings.Contains(errOut, "still running") {
		t.Fatalf("planned failover with a writer not answering exited %d: %s%s", code, out, errOut)
	}
	if l := r.status(t).Links[0]; l.State != linkstate.Running || l.Generation != 0 {
		t.Fatalf("a planned failover that waited for a writer changed the link: %+v", l)
	}
	if code, out, errOut := r.run(t, "ferryctl", "failover", "east", "--planned", "--timeout", "60s"); code != exitOK {
		t.Fatalf("planned failover with every writer answering exited %d: %s%s", code, out, errOut)
	}
}

// A planned failover does not wait for a group partition whose source
// position is before the offset index (the link started after it: here
// the source's log start moved past it before the first copy; in the
// failback round trip, the reverse link started at TARGET_START, below
// which a group moved back by failback --move-groups stands): no sync of
// this link can ever move it. It reports it, noted before_index, and
// fails over once the other partitions are synced: partial (exit 4),
// naming the partition left without a target position.
func TestPlannedFailoverDoesNotWaitForGroupsBeforeTheIndex(t *testing.T) {
	r := startReplication(t)
	r.fetcher.Stop()
	src := kclient(t, r.source)
	produce(t, src, 0, 40)
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: "orders", Partition: 0, At: 20})
	if _, err := kadm.NewClient(src).DeleteRecords(context.Background(), del); err != nil {
		t.Fatal(err)
	}
	commitGroup(t, r.source, "app", "orders", map[int32]int64{0: 5, 1: 30})
	r.fetcher = fetcher.Start(t, r.fetcherOpts)
	r.waitStatus(t, "orders copied, app's orders/1 synced and its orders/0 before the index", func(l LinkReport) bool {
		return len(l.Partitions) == 3 && l.Partitions[0].Committed == 40 && l.Partitions[1].Committed == 40 &&
			len(l.Groups) == 1 && len(l.Groups[0].Partitions) >= 2 &&
			l.Groups[0].Partitions[0].Note == outcomeBeforeIndex && l.Groups[0].Partitions[1].StandsFor == 30
	})
	code, out, errOut := r.run(t, "ferryctl", "failover", "east", "--planned", "--stale-after", "5m", "--timeout", "30s", "-o", "json")
	if code != exitPartial || !strings.Contains(errOut, "group app has no target position from Ferry on orders/0 (before_index)") {
		t.Fatalf("failover --planned exited %d: %s%s", code, out, errOut)
	}
	var ch Change
	if err := json.Unmarshal([]byte(out), &ch); err != nil || ch.State != linkstate.FailedOver || len(ch.Groups) != 1 ||
		ch.Groups[0].Partitions[0].Note != outcomeBeforeIndex || ch.Groups[0].Partitions[1].StandsFor != 30 {
		t.Fatalf("failover --planned answered %+v (%v), want failed_over with app's orders/0 before the index", ch, err)
	}
}
