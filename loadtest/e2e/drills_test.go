package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/loadtest/harness"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
)

// The drills of issue 23 item 7 beside the failovers (failover_test.go;
// docs/disaster-recovery.md, "Drills"): consumer-group sync's refusals,
// exact offset translation both ways, and topics kept ready for failover,
// on Apache Kafka. One source and target broker pair and one exactly-once
// link (groups synced every 1 s) serve all three: a broker's start is the
// cost, and make test's budget is tight.

const (
	txnTopic     = "t.txn"
	compactTopic = "t.compact"
	// skipTopic holds, on the source, records a Ferry link from the
	// target copied in: the drill's link leaves them out (skipped
	// batches, as in active-active).
	skipTopic = "t.aa"
	// drillRecords is what each partition of drillTopic holds before the
	// link starts: the groups commit source offsets 100 and 300 of it.
	drillRecords = 400
)

// TestDrillsOnApacheKafka runs, on one link, the group drill (a group
// active on the target is never moved, a group never moves backwards, a
// group ahead of the copy lands at the copied end and moves on), the
// translation drill (ferryctl offsets translate, both ways, at every
// offset of a partition holding transaction markers and aborted records,
// of one compacted before the link copied it, and of one holding batches
// the link skips, copied in by a link back) and the topic drill (a
// source config change applied, a hand change on the target reported as
// drift and left, partitions added on the source added and copied).
func TestDrillsOnApacheKafka(t *testing.T) {
	ctx := context.Background()
	// The source's log cleaner looks for work every 200 ms rather than
	// every 15 s, so the compacted topic has gaps before the link starts.
	brokers := startKafkasWith(t, map[string]string{"log.cleaner.backoff.ms": "200"}, "source", "target")
	e := newEnvOn(t, []string{brokers[0].Addr()}, []string{brokers[1].Addr()})
	e.delivery = "exactly_once"
	e.writerExtra = map[string]any{
		"control":              map[string]any{"allowed_ids": []string{devcerts.SPIFFEID(devcerts.DefaultTrustDomain, "ferryctl")}},
		"config_sync_interval": "1s",
	}
	e.createTopic(drillTopic, drillPartitions, nil)
	e.createTopic(txnTopic, 1, nil)
	e.createTopic(compactTopic, 1, map[string]*string{"cleanup.policy": ptr("compact"), "segment.ms": ptr("100"),
		"min.cleanable.dirty.ratio": ptr("0.01"), "min.compaction.lag.ms": ptr("0")})
	e.createTopic(skipTopic, 1, nil)
	// The link back, target to source, identity naming, copies the
	// target's skipTopic into the source's (docs/architecture.md, "Loops
	// and chains").
	back := newEnvOn(t, e.dst, e.src)
	back.naming, back.prefix, back.delivery = "identity", "", "exactly_once"
	back.createTopic(skipTopic, 1, nil)
	shareCerts(t, e, back) // the link's fetcher verifies the entries of the link back's writer
	for p := range int32(drillPartitions) {
		produceTo(ctx, t, e.src, drillTopic, p, drillRecords, "a")
	}
	txn := produceTransactions(ctx, t, e.src, txnTopic, 0, 5)
	compacted := produceCompacted(ctx, t, e.src)
	skipped := produceLog(ctx, t, e.src, skipTopic, "aa-local-1", 10)
	e.startWriter()
	e.startFetcher(map[string]any{"groups": map[string]any{"interval": "1s"}, "discovery_interval": "2s"})
	back.startWriter()
	back.startFetcher(nil)
	// The other half of the transactions is copied while the link runs,
	// in rounds of their own.
	more := produceTransactions(ctx, t, e.src, txnTopic, 5, 5)
	maps.Copy(txn.offsets, more.offsets)
	maps.Copy(txn.aborted, more.aborted)
	copiedBack(ctx, t, e, skipped)
	maps.Copy(skipped.offsets, produceLog(ctx, t, e.src, skipTopic, "aa-local-2", 10).offsets)

	start := time.Now()
	drillTranslation(ctx, t, e, txnTopic, txn)
	drillTranslation(ctx, t, e, compactTopic, compacted)
	drillTranslation(ctx, t, e, skipTopic, skipped)
	if n, err := harness.Metric(ctx, e.fetcherAdmin, "ferry_fetcher_replicated_skipped_records_total"); err != nil || n < 10 {
		t.Errorf("the link's fetcher left out %v records (%v), want at least the 10 the link back copied in", n, err)
	}
	t.Logf("translation drill: %v", time.Since(start).Round(100*time.Millisecond))
	start = time.Now()
	drillActiveGroup(ctx, t, e)
	drillBackwardsGroup(ctx, t, e)
	drillAheadGroup(ctx, t, e)
	t.Logf("group drill: %v", time.Since(start).Round(100*time.Millisecond))
	start = time.Now()
	drillTopicConfigs(ctx, t, e)
	drillPartitionGrowth(ctx, t, e)
	t.Logf("topic drill: %v", time.Since(start).Round(100*time.Millisecond))
}

// sourceLog is what a drill's producer wrote to a one-partition topic:
// each value's source offset, and the values of aborted transactions;
// skipped holds the values a link from the target copied in, which the
// drill's link leaves out.
type sourceLog struct {
	offsets map[string]int64
	aborted map[string]bool
	skipped map[string]bool
}

// produceLog writes n records with values "<prefix>-<i>" to partition 0
// of topic.
func produceLog(ctx context.Context, t *testing.T, addrs []string, topic, prefix string, n int) sourceLog {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Value: fmt.Appendf(nil, "%s-%d", prefix, i)})
	}
	res := cl.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
	log := sourceLog{offsets: map[string]int64{}, aborted: map[string]bool{}, skipped: map[string]bool{}}
	for _, r := range res {
		log.offsets[string(r.Record.Value)] = r.Record.Offset
	}
	return log
}

// copiedBack produces 10 records to skipTopic on the target and waits
// until the link back has copied them into the source's, between what
// the source's own producers wrote: they are src.skipped.
func copiedBack(ctx context.Context, t *testing.T, e *env, src sourceLog) {
	t.Helper()
	for _, v := range produceTo(ctx, t, e.dst, skipTopic, 0, 10, "aa-remote") {
		src.skipped[string(v)] = true
	}
	waitUntil(t, 2*time.Minute, "the link back to copy 10 records into the source's "+skipTopic, func() error {
		n := 0
		readCommitted(ctx, t, e.src, skipTopic, func(r *kgo.Record) {
			if src.skipped[string(r.Value)] {
				n++
			}
		})
		if n != len(src.skipped) {
			return fmt.Errorf("%d of %d copied", n, len(src.skipped))
		}
		return nil
	})
}

// produceTo writes n records with values "<prefix>-<p>-<i>" to partition
// p of topic and returns their values in offset order.
func produceTo(ctx context.Context, t *testing.T, addrs []string, topic string, p int32, n int, prefix string) [][]byte {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	var vals [][]byte
	for i := range n {
		v := fmt.Appendf(nil, "%s-%d-%d", prefix, p, i)
		recs = append(recs, &kgo.Record{Partition: p, Key: v, Value: v})
		vals = append(vals, v)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce to %s/%d: %v", topic, p, err)
	}
	return vals
}

// produceTransactions writes transactions number from to from+n-1 to
// partition 0 of topic, of 2 to 4 records each, aborting every third
// (number%3 == 1): the partition holds markers and aborted records.
func produceTransactions(ctx context.Context, t *testing.T, addrs []string, topic string, from, n int) sourceLog {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionalID("drill-txn"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	log := sourceLog{offsets: map[string]int64{}, aborted: map[string]bool{}}
	for i := from; i < from+n; i++ {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for j := range 2 + i%3 {
			recs = append(recs, &kgo.Record{Value: fmt.Appendf(nil, "txn-%d-%d", i, j)})
		}
		res := cl.ProduceSync(ctx, recs...)
		if err := res.FirstErr(); err != nil {
			t.Fatalf("produce transaction %d: %v", i, err)
		}
		abort := i%3 == 1
		for _, r := range res {
			log.offsets[string(r.Record.Value)] = r.Record.Offset
			log.aborted[string(r.Record.Value)] = abort
		}
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(!abort)); err != nil {
			t.Fatalf("end transaction %d: %v", i, err)
		}
	}
	return log
}

// produceCompacted writes records one at a time to the compacted
// compactTopic (segment.ms 100) until the log cleaner has removed at
// least 8 of them, the first among them: a third of the keys (not the
// first three's) are written once and stay, the rest are four keys
// written again and again. The source log then starts at 0 while its
// first record is further on: a group committed in that cleaned head
// must translate (the offset index starts where the copy started: it
// used to start at the first copied batch, and every offset before it
// answered before_index). Records are paced 20 ms apart so segments roll
// and become cleanable; the loop ends on what the source shows, not
// after a time.
func produceCompacted(ctx context.Context, t *testing.T, addrs []string) sourceLog {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(compactTopic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	log := sourceLog{offsets: map[string]int64{}, aborted: map[string]bool{}}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		key := "k-" + strconv.Itoa(i%4)
		if i%3 == 0 && i >= 3 {
			key = "u-" + strconv.Itoa(i)
		}
		r := &kgo.Record{Key: []byte(key), Value: fmt.Appendf(nil, "c-%d", i)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce to %s: %v", compactTopic, err)
		}
		log.offsets[string(r.Value)] = r.Offset
		if i%10 == 9 {
			held, first := 0, int64(-1)
			readCommitted(ctx, t, addrs, compactTopic, func(r *kgo.Record) {
				if held == 0 {
					first = r.Offset
				}
				held++
			})
			if removed := i + 1 - held; removed >= 8 && first > 0 {
				t.Logf("%s: the log cleaner removed %d of %d records before the link started, offsets 0 to %d among them", compactTopic, removed, i+1, first-1)
				return log
			}
		}
		if i > 2000 {
			t.Fatalf("%s: the log cleaner removed fewer than 8 of %d records", compactTopic, i+1)
		}
		<-tick.C
	}
}

// copiedRecord is one record copied: its source and target offsets.
type copiedRecord struct{ src, dst int64 }

// drillTranslation checks `ferryctl offsets translate` at every source
// offset of partition 0 of topic and, --reverse, at every target offset,
// against what reading the source and the target (read_committed) says:
// a source offset S stands on the target at the target offset of the
// first copied record at or after S, a target offset T stands for the
// source offset of the first copied record at or after T; past the last
// copied record, the copied end (beyond_copied).
func drillTranslation(ctx context.Context, t *testing.T, e *env, topic string, src sourceLog) {
	t.Helper()
	e.waitCaughtUp(ctx, topic)
	copied := copiedRecords(ctx, t, e, topic, src)
	srcEnd, dstEnd := endOffsets(ctx, t, e.src, topic)[0], endOffsets(ctx, t, e.dst, e.prefix+topic)[0]
	gaps := (copied[len(copied)-1].src + 1 - copied[0].src) - int64(len(copied))
	if gaps == 0 {
		t.Fatalf("%s: the copied records' source offsets have no gaps: no marker, aborted or compacted record to translate across", topic)
	}
	t.Logf("%s: %d records copied; %d source offsets of 0 to %d hold no copied record, %d target offsets of 0 to %d hold none",
		topic, len(copied), srcEnd-int64(len(copied)), srcEnd, dstEnd-int64(len(copied)), dstEnd)

	type query struct {
		offset  int64
		reverse bool
		outcome string
		want    int64
	}
	var queries []query
	for s := int64(0); s <= srcEnd; s++ {
		outcome, want := expectTranslation(copied, s, false)
		queries = append(queries, query{s, false, outcome, want})
	}
	for d := int64(0); d <= dstEnd; d++ {
		outcome, want := expectTranslation(copied, d, true)
		queries = append(queries, query{d, true, outcome, want})
	}
	// Each ferryctl run is a process, a TLS handshake and the writer's read
	// of the index partition: several at a time (the writer answers two at
	// once, the rest wait there).
	began := time.Now()
	var mu sync.Mutex
	var wrong []string
	work := make(chan query)
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for q := range work {
				args := []string{"offsets", "translate", "--link", "test", "--topic", topic, "--partition", "0", "--offset", strconv.FormatInt(q.offset, 10)}
				if q.reverse {
					args = append(args, "--reverse")
				}
				var tr struct {
					Outcome    string `json:"outcome"`
					Translated *int64 `json:"translated"`
				}
				err := e.ferryctl(ctx, &tr, args...)
				got := ""
				switch {
				case err != nil:
					got = err.Error()
				case tr.Translated == nil:
					got = tr.Outcome
				default:
					got = fmt.Sprintf("%s %d", tr.Outcome, *tr.Translated)
				}
				if want := fmt.Sprintf("%s %d", q.outcome, q.want); got != want {
					mu.Lock()
					wrong = append(wrong, fmt.Sprintf("offset %d reverse=%v: ferryctl says %s, want %s", q.offset, q.reverse, got, want))
					mu.Unlock()
				}
			}
		})
	}
	for _, q := range queries {
		work <- q
	}
	close(work)
	wg.Wait()
	t.Logf("%s: %d ferryctl offsets translate runs in %v", topic, len(queries), time.Since(began).Round(100*time.Millisecond))
	sort.Strings(wrong)
	if len(wrong) > 0 {
		t.Errorf("%s: %d of %d translations wrong: %v", topic, len(wrong), len(queries), wrong[:min(len(wrong), 10)])
	}
}

// copiedRecords pairs each committed record of the target's copy of
// partition 0 of topic with the source offset its value was produced at,
// and checks the copy: nothing aborted or unknown, order kept, and every
// record the source holds now copied.
func copiedRecords(ctx context.Context, t *testing.T, e *env, topic string, src sourceLog) []copiedRecord {
	t.Helper()
	var copied []copiedRecord
	at := map[int64]bool{}
	readCommitted(ctx, t, e.dst, e.prefix+topic, func(r *kgo.Record) {
		s, ok := src.offsets[string(r.Value)]
		if !ok || src.aborted[string(r.Value)] {
			t.Fatalf("%s: the target holds %q at %d: not a committed source record (aborted %v)", topic, r.Value, r.Offset, src.aborted[string(r.Value)])
		}
		if n := len(copied); n > 0 && s <= copied[n-1].src {
			t.Fatalf("%s: target offset %d holds source offset %d, after source offset %d", topic, r.Offset, s, copied[n-1].src)
		}
		copied = append(copied, copiedRecord{s, r.Offset})
		at[s] = true
	})
	readCommitted(ctx, t, e.src, topic, func(r *kgo.Record) {
		if src.skipped[string(r.Value)] {
			return // not in offsets: on the target it would have failed above
		}
		if src.offsets[string(r.Value)] != r.Offset || !at[r.Offset] {
			t.Fatalf("%s: source record %q at %d is not on the target", topic, r.Value, r.Offset)
		}
	})
	if len(copied) == 0 {
		t.Fatalf("%s: nothing copied", topic)
	}
	return copied
}

// expectTranslation is where offset o (a target offset when reverse)
// stands on the other side: the offset of the first copied record at or
// after it, or past the last one the copied end.
func expectTranslation(copied []copiedRecord, o int64, reverse bool) (outcome string, at int64) {
	from, to := func(c copiedRecord) int64 { return c.src }, func(c copiedRecord) int64 { return c.dst }
	if reverse {
		from, to = to, from
	}
	i := sort.Search(len(copied), func(i int) bool { return from(copied[i]) >= o })
	if i == len(copied) {
		return "beyond_copied", to(copied[len(copied)-1]) + 1
	}
	return "exact", to(copied[i])
}

// drillGroupStatus is a group in the writer's /status.
type drillGroupStatus struct {
	Group      string `json:"group"`
	Outcome    string `json:"outcome"`
	Partitions []struct {
		Partition    int32  `json:"partition"`
		SourceOffset int64  `json:"source_offset"`
		TargetOffset int64  `json:"target_offset"`
		StandsFor    int64  `json:"target_stands_for_source_offset"`
		Note         string `json:"note"`
	} `json:"partitions"`
}

// writerStatus is the part of the writer's /status the drills read.
type writerStatus struct {
	Groups []drillGroupStatus `json:"groups"`
	Topics struct {
		Drift []struct {
			Link   string `json:"link"`
			Topic  string `json:"topic"`
			Config string `json:"config"`
			Target string `json:"target"`
		} `json:"drift"`
	} `json:"topics"`
}

func (e *env) writerStatus() (writerStatus, error) {
	var st writerStatus
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + e.writerAdmin + "/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// groupStatus is group's entry in the writer's /status.
func (e *env) groupStatus(group string) (drillGroupStatus, error) {
	st, err := e.writerStatus()
	if err != nil {
		return drillGroupStatus{}, err
	}
	for _, g := range st.Groups {
		if g.Group == group {
			return g, nil
		}
	}
	return drillGroupStatus{}, fmt.Errorf("group %s not in the writer's /status", group)
}

// waitGroup waits until the writer's /status shows group with every
// partition of at its source offset and ok says the rest is as wanted.
func (e *env) waitGroup(group string, at map[int32]int64, what string, ok func(drillGroupStatus) error) drillGroupStatus {
	e.t.Helper()
	var g drillGroupStatus
	waitUntil(e.t, 2*time.Minute, fmt.Sprintf("group %s: %s", group, what), func() (err error) {
		if g, err = e.groupStatus(group); err != nil {
			return err
		}
		seen := map[int32]int64{}
		for _, p := range g.Partitions {
			seen[p.Partition] = p.SourceOffset
		}
		for p, o := range at {
			if seen[p] != o {
				return fmt.Errorf("source offsets read %v, want %v (outcome %s)", seen, at, g.Outcome)
			}
		}
		return ok(g)
	})
	return g
}

// commitOffsets commits group's offsets of topic on the cluster at addrs
// as an administrator does (no member).
func commitOffsets(ctx context.Context, t *testing.T, addrs []string, group, topic string, at map[int32]int64) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	offs := kadm.Offsets{}
	for p, o := range at {
		offs.Add(kadm.Offset{Topic: topic, Partition: p, At: o, LeaderEpoch: -1})
	}
	resp, err := kadm.NewClient(cl).CommitOffsets(ctx, group, offs)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("commit group %s at %v: %v", group, at, err)
	}
}

// committed is group's committed offset of each partition of topic on the
// cluster at addrs.
func committed(ctx context.Context, t *testing.T, addrs []string, group, topic string) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("offsets of group %s: %v", group, err)
	}
	out := map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic {
			out[o.Partition] = o.At
		}
	})
	return out
}

func allPartitions(o int64) map[int32]int64 {
	out := map[int32]int64{}
	for p := range int32(drillPartitions) {
		out[p] = o
	}
	return out
}

// drillActiveGroup: a group with a member on the target, joined and
// polling, is never moved while its source commits move on. While the
// last commit on the target is Ferry's, the broker refuses Ferry's next
// (outcome active); once the member commits, Ferry leaves the group for
// good (outcome owned). Either way the target keeps its offsets.
func drillActiveGroup(ctx context.Context, t *testing.T, e *env) {
	t.Helper()
	const group = "drill-active"
	commitOffsets(ctx, t, e.src, group, drillTopic, allPartitions(100))
	e.waitGroup(group, allPartitions(100), "synced at source offset 100", standsFor(100))
	synced := committed(ctx, t, e.dst, group, drillTarget)
	member := join(ctx, t, e.dst, group, drillTarget, 10)
	defer member.leave()

	commitOffsets(ctx, t, e.src, group, drillTopic, allPartitions(300))
	e.waitGroup(group, allPartitions(300), "a sync of source offset 300 refused as active", func(g drillGroupStatus) error {
		if g.Outcome != "active" {
			return fmt.Errorf("outcome %s; committed on the target %v, Ferry's last sync %v", g.Outcome, committed(ctx, t, e.dst, group, drillTarget), synced)
		}
		return nil
	})
	if got := committed(ctx, t, e.dst, group, drillTarget); !equalEnds(got, synced) || len(got) != drillPartitions {
		t.Errorf("group %s with a member on the target moved: committed %v, Ferry's sync before the member joined %v", group, got, synced)
	}
	series := `ferry_group_sync_total{link="test",outcome="active"}`
	if n, err := harness.Metric(ctx, e.writerAdmin, series); err != nil || n < 1 {
		t.Errorf("%s = %v (%v), want at least 1", series, n, err)
	}

	memberCommitted := member.commit(ctx, t)
	commitOffsets(ctx, t, e.src, group, drillTopic, allPartitions(350))
	e.waitGroup(group, allPartitions(350), "a sync of source offset 350 left as owned by the member", func(g drillGroupStatus) error {
		if g.Outcome != "owned" {
			return fmt.Errorf("outcome %s; committed on the target %v, the member committed %v", g.Outcome, committed(ctx, t, e.dst, group, drillTarget), memberCommitted)
		}
		return nil
	})
	if got := committed(ctx, t, e.dst, group, drillTarget); !equalEnds(got, memberCommitted) {
		t.Errorf("group %s whose member committed on the target moved: committed %v, the member committed %v", group, got, memberCommitted)
	}
}

// standsFor is a waitGroup condition: every partition's target position
// stands for source offset o.
func standsFor(o int64) func(drillGroupStatus) error {
	return func(g drillGroupStatus) error {
		for _, p := range g.Partitions {
			if p.StandsFor != o {
				return fmt.Errorf("outcome %s, partition %d stands for %d", g.Outcome, p.Partition, p.StandsFor)
			}
		}
		return nil
	}
}

// groupMember is a real consumer in a group, joined and polling.
type groupMember struct {
	cl    *kgo.Client
	nth   map[int32]*kgo.Record
	leave func()
}

// join joins group on topic of the cluster at addrs as a consumer that
// commits nothing by itself, reads n records of every partition from the
// group's position and keeps polling, a member, until leave is called.
func join(ctx context.Context, t *testing.T, addrs []string, group, topic string, n int) *groupMember {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	m := &groupMember{cl: cl, nth: map[int32]*kgo.Record{}}
	seen := map[int32]int{}
	for len(m.nth) < drillPartitions {
		fs := cl.PollFetches(rctx)
		if rctx.Err() != nil {
			cl.Close()
			t.Fatalf("group %s member on the target: %v after reading %v", group, rctx.Err(), seen)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if seen[r.Partition]++; seen[r.Partition] == n {
				m.nth[r.Partition] = r
			}
		})
	}
	pctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for pctx.Err() == nil {
			cl.PollFetches(pctx) // read on, committing nothing
		}
	}()
	m.leave = sync.OnceFunc(func() {
		stop()
		<-done
		cl.Close()
	})
	t.Cleanup(m.leave)
	return m
}

// commit commits, as the member, the n-th record read of each partition
// and returns the offsets committed.
func (m *groupMember) commit(ctx context.Context, t *testing.T) map[int32]int64 {
	t.Helper()
	var recs []*kgo.Record
	out := map[int32]int64{}
	for p, r := range m.nth {
		recs = append(recs, r)
		out[p] = r.Offset + 1
	}
	if err := m.cl.CommitRecords(ctx, recs...); err != nil {
		t.Fatalf("member commit on the target: %v", err)
	}
	return out
}

// drillBackwardsGroup: a group synced at source offset 300 and then
// rewound to 100 on the source stays at 300's position on the target,
// noted behind.
func drillBackwardsGroup(ctx context.Context, t *testing.T, e *env) {
	t.Helper()
	const group = "drill-back"
	commitOffsets(ctx, t, e.src, group, drillTopic, allPartitions(300))
	e.waitGroup(group, allPartitions(300), "synced at source offset 300", standsFor(300))
	before := committed(ctx, t, e.dst, group, drillTarget)
	commitOffsets(ctx, t, e.src, group, drillTopic, allPartitions(100))
	e.waitGroup(group, allPartitions(100), "the rewind to 100 read and noted behind", func(g drillGroupStatus) error {
		for _, p := range g.Partitions {
			if p.Note != "behind" {
				return fmt.Errorf("outcome %s, partition %d note %q", g.Outcome, p.Partition, p.Note)
			}
		}
		return nil
	})
	if got := committed(ctx, t, e.dst, group, drillTarget); !equalEnds(got, before) || len(got) != drillPartitions {
		t.Errorf("group %s rewound on the source moved on the target: %v, before the rewind %v", group, got, before)
	}
}

// drillAheadGroup: a group committed on the source past what is copied
// (past the source's end, the simplest way to be ahead of the copy) lands
// at the copied end, not beyond, and moves on as data arrives, to the
// target offset of its source offset once that is copied.
func drillAheadGroup(ctx context.Context, t *testing.T, e *env) {
	t.Helper()
	const group = "drill-ahead"
	e.waitCaughtUp(ctx, drillTopic)
	end := e.sourceEnds(ctx, drillTopic)[0]
	ahead := end + 50
	commitOffsets(ctx, t, e.src, group, drillTopic, map[int32]int64{0: ahead})
	copiedEnd := lastTargetOffset(ctx, t, e, 0) + 1
	e.waitGroup(group, map[int32]int64{0: ahead}, "at the copied end", func(g drillGroupStatus) error {
		got := committed(ctx, t, e.dst, group, drillTarget)
		if o, ok := got[0]; ok && o > copiedEnd {
			t.Fatalf("group %s ahead of the copy committed at target offset %d, beyond the copied end %d", group, o, copiedEnd)
		}
		if got[0] != copiedEnd {
			return fmt.Errorf("committed on the target %v, want partition 0 at the copied end %d", got, copiedEnd)
		}
		return nil
	})
	vals := produceTo(ctx, t, e.src, drillTopic, 0, 100, "ahead")
	e.waitCaughtUp(ctx, drillTopic)
	// Source offset ahead holds vals[ahead-end]: its target offset is
	// where the group belongs now.
	want := int64(-1)
	readCommitted(ctx, t, e.dst, drillTarget, func(r *kgo.Record) {
		if r.Partition == 0 && string(r.Value) == string(vals[ahead-end]) {
			want = r.Offset
		}
	})
	if want < 0 {
		t.Fatalf("the target lacks %q", vals[ahead-end])
	}
	e.waitGroup(group, map[int32]int64{0: ahead}, "moved on to the copy of its source offset", func(g drillGroupStatus) error {
		if got := committed(ctx, t, e.dst, group, drillTarget); got[0] != want {
			return fmt.Errorf("outcome %s, committed on the target %v, want partition 0 at %d (copied end before the data came: %d)", g.Outcome, got, want, copiedEnd)
		}
		return nil
	})
}

// lastTargetOffset is the offset of the last committed record of
// partition p of the drill's target topic.
func lastTargetOffset(ctx context.Context, t *testing.T, e *env, p int32) int64 {
	t.Helper()
	last := int64(-1)
	readCommitted(ctx, t, e.dst, drillTarget, func(r *kgo.Record) {
		if r.Partition == p {
			last = r.Offset
		}
	})
	return last
}

// topicConfig is config key of topic on the cluster at addrs, "" when
// unset.
func topicConfig(ctx context.Context, t *testing.T, addrs []string, topic, key string) string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rcs, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatalf("configs of %s: %v", topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		t.Fatalf("configs of %s: %v", topic, err)
	}
	for _, c := range rc.Configs {
		if c.Key == key {
			return c.MaybeValue()
		}
	}
	return ""
}

// setTopicConfig sets config key of topic on the cluster at addrs.
func setTopicConfig(ctx context.Context, t *testing.T, addrs []string, topic, key, value string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: key, Value: &value}}, topic)
	if err == nil {
		_, err = resp.On(topic, nil)
	}
	if err == nil {
		for _, r := range resp {
			err = r.Err
		}
	}
	if err != nil {
		t.Fatalf("set %s of %s to %s: %v", key, topic, value, err)
	}
}

// waitTargetConfig waits until the drill's target topic has key = value.
func (e *env) waitTargetConfig(ctx context.Context, key, value string) {
	e.t.Helper()
	waitUntil(e.t, 2*time.Minute, fmt.Sprintf("%s %s=%s on the target", drillTarget, key, value), func() error {
		if got := topicConfig(ctx, e.t, e.dst, drillTarget, key); got != value {
			return fmt.Errorf("%s=%q", key, got)
		}
		return nil
	})
}

// drillTopicConfigs: a source config change reaches the target; a hand
// change on the target is reported as drift (/status and metric) and
// left as it is while the source's next change is applied.
func drillTopicConfigs(ctx context.Context, t *testing.T, e *env) {
	t.Helper()
	setTopicConfig(ctx, t, e.src, drillTopic, "retention.ms", "7200000")
	e.waitTargetConfig(ctx, "retention.ms", "7200000")

	const handValue = "2000000"
	setTopicConfig(ctx, t, e.dst, drillTarget, "max.message.bytes", handValue)
	series := fmt.Sprintf(`ferry_topic_config_drift{config="max.message.bytes",link="test",topic="%s"}`, drillTarget)
	waitUntil(t, 2*time.Minute, "the hand change reported as drift", func() error {
		st, err := e.writerStatus()
		if err != nil {
			return err
		}
		found := false
		for _, d := range st.Topics.Drift {
			found = found || (d.Link == "test" && d.Topic == drillTarget && d.Config == "max.message.bytes" && d.Target == handValue)
		}
		if !found {
			return fmt.Errorf("/status topics.drift %+v", st.Topics.Drift)
		}
		if n, err := harness.Metric(ctx, e.writerAdmin, series); err != nil || n != 1 {
			return fmt.Errorf("%s = %v (%v)", series, n, err)
		}
		return nil
	})
	// The source's next change is applied (the writer reopened the
	// shards and compared the topic again); the hand change stays.
	setTopicConfig(ctx, t, e.src, drillTopic, "retention.ms", "10800000")
	e.waitTargetConfig(ctx, "retention.ms", "10800000")
	if got := topicConfig(ctx, t, e.dst, drillTarget, "max.message.bytes"); got != handValue {
		t.Errorf("max.message.bytes changed by hand on the target to %s was overwritten: %s", handValue, got)
	}
	if n, err := harness.Metric(ctx, e.writerAdmin, series); err != nil || n != 1 {
		t.Errorf("after the source's next change: %s = %v (%v), want 1", series, n, err)
	}
}

// drillPartitionGrowth: two partitions added to the source topic are
// added to the target topic and the records produced to them copied; the
// whole topic then holds on the target exactly what the source holds.
func drillPartitionGrowth(ctx context.Context, t *testing.T, e *env) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.src...))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := kadm.NewClient(cl).CreatePartitions(ctx, 2, drillTopic)
	cl.Close()
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("add 2 partitions to %s: %v", drillTopic, err)
	}
	for p := int32(drillPartitions); p < drillPartitions+2; p++ {
		produceTo(ctx, t, e.src, drillTopic, p, 50, "grown")
	}
	waitUntil(t, 2*time.Minute, "the target topic grown to 6 partitions", func() error {
		if n := len(e.targetEnds(ctx)); n != drillPartitions+2 {
			return fmt.Errorf("%s has %d partitions", drillTarget, n)
		}
		return nil
	})
	e.waitCaughtUp(ctx, drillTopic)
	src := readValues(ctx, t, e.src, drillTopic)
	dst := map[int32][][]byte{}
	readCommitted(ctx, t, e.dst, drillTarget, func(r *kgo.Record) { dst[r.Partition] = append(dst[r.Partition], r.Value) })
	if len(src) != drillPartitions+2 {
		t.Fatalf("the source holds records in %d partitions, want %d", len(src), drillPartitions+2)
	}
	for p, vals := range src {
		if err := sameValues(vals, dst[p]); err != nil {
			t.Errorf("%s partition %d on the target: %v", drillTarget, p, err)
		}
	}
}

// endOffsets is the end offset of each partition of topic on the cluster
// at addrs.
func endOffsets(ctx context.Context, t *testing.T, addrs []string, topic string) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatalf("end offsets of %s: %v", topic, err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}
