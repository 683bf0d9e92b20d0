package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/loadtest/harness"
	"github.com/ferry-replicator/ferry/loadtest/kafkabroker"
	"github.com/ferry-replicator/ferry/loadtest/workload"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
)

// The failover drills (issue 23 item 7; docs/disaster-recovery.md,
// "Drills"): an exactly-once link between two Apache Kafka brokers, its
// real fetcher and writer, and ferryctl run as an operator runs it.

const (
	drillTopic      = "t.drill"
	drillTarget     = "src." + drillTopic
	drillPartitions = 4
	drillGroup      = "drill-app"
)

// TestPlannedFailoverOnApacheKafka: a group that committed source offset
// X on every partition, moved by `ferryctl failover --planned` once the
// producers and the consumers stopped, reads on the target every record
// after X exactly once and nothing before it (RPO 0), and the report
// says 0 lost.
func TestPlannedFailoverOnApacheKafka(t *testing.T) {
	ctx := context.Background()
	e, _ := startDrill(t)
	const records = 8000
	e.produce(ctx, workload.Options{Topic: drillTopic, Partitions: drillPartitions, Records: records, ValueBytes: 200, Rate: 4000, Seed: 23})
	src := readValues(ctx, t, e.src, drillTopic)
	if n := len(src[0]) + len(src[1]) + len(src[2]) + len(src[3]); len(src) != drillPartitions || n != records {
		t.Fatalf("the source holds %d records in %d partitions, want %d in %d", n, len(src), records, drillPartitions)
	}
	at := map[int32]int64{}
	for p, vals := range src {
		at[p] = int64(len(vals) / 2)
	}
	commitGroupAt(ctx, t, e.src, drillTopic, at)
	e.waitReporting(ctx)

	start := time.Now()
	var ch ctlChange
	if err := e.ferryctl(ctx, &ch, "failover", "test", "--planned", "--reason", "planned drill", "--timeout", "60s"); err != nil {
		t.Fatal(err)
	}
	if ch.State != "failed_over" {
		t.Fatalf("ferryctl failover --planned left the link %q", ch.State)
	}
	if len(ch.AtRisk) != drillPartitions {
		t.Fatalf("ferryctl failover --planned reported %d partitions, want %d: %+v", len(ch.AtRisk), drillPartitions, ch.AtRisk)
	}
	for _, p := range ch.AtRisk {
		if p.Lag != 0 {
			t.Errorf("planned failover reports %s/%d lost %d (committed %d, source high watermark %d), want 0", p.Topic, p.Partition, p.Lag, p.Committed, p.HW)
		}
	}

	want := map[int32]int{}
	for p, vals := range src {
		want[p] = len(vals) - int(at[p])
	}
	got, first := readGroup(ctx, t, e.dst, drillTarget, want)
	t.Logf("RTO %v: from ferryctl failover --planned to the group's first record on the target", first.Sub(start).Round(10*time.Millisecond))
	for p, vals := range src {
		if err := sameValues(vals[at[p]:], got[p]); err != nil {
			t.Errorf("group %s on target partition %d after source offset %d: %v", drillGroup, p, at[p], err)
		}
	}
	// The group read exactly the records after X; the whole copy holds
	// every source record once, so nothing after them is left to read.
	res := e.verify(ctx, drillTopic)
	recordScenario(t, "", res, first.Sub(start))
	if !res.OK() || res.Produced != records {
		t.Fatalf("copy after a planned failover: %+v", res)
	}
}

// TestUnplannedFailoverOnApacheKafka loses the source region while the
// target lags (behind after the writer was frozen while producers wrote):
// the source broker
// and the fetcher are killed, `ferryctl failover` is run from the target
// side alone, and the loss it reports per partition (the committed next
// offset to the last heartbeat's high watermark) must be exactly the
// source records below that high watermark the target lacks. A fetcher
// started again afterwards must write nothing: the writers refuse it.
func TestUnplannedFailoverOnApacheKafka(t *testing.T) {
	ctx := context.Background()
	e, brokers := startDrill(t)
	stopProducing := e.produceUntilStopped(workload.Options{Topic: drillTopic, Partitions: drillPartitions, Records: 1_000_000, ValueBytes: 200, Rate: 5000, Seed: 24})
	e.waitReporting(ctx)
	commitGroupAt(ctx, t, e.src, drillTopic, map[int32]int64{0: 100, 1: 100, 2: 100, 3: 100})

	// Frozen, the writer takes nothing while the source grows: the
	// fetcher, blocked on the stream, falls behind the source. Once the
	// writer runs again, the fetcher's heartbeats carry the source's high
	// watermark far ahead of what is copied; the region is lost while the
	// writer's meter shows that lag.
	if err := e.writer.Pause(); err != nil {
		t.Fatal(err)
	}
	grown := sum(e.sourceEnds(ctx, drillTopic)) + 15000
	waitUntil(t, time.Minute, "the source to grow by 15000 records while the writer is frozen", func() error {
		if n := sum(e.sourceEnds(ctx, drillTopic)); n < grown {
			return fmt.Errorf("source holds %d, want %d", n, grown)
		}
		return nil
	})
	if err := e.writer.Resume(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, time.Minute, "the writer's failover meter to show the target lagging", func() error {
		n, err := harness.Metric(ctx, e.writerAdmin, "ferry_failover_exposure_records")
		if err == nil && n < 1000 {
			err = fmt.Errorf("%v records at risk", n)
		}
		return err
	})
	var wg sync.WaitGroup
	wg.Go(brokers[0].Kill)
	wg.Go(e.fetcher.Kill)
	wg.Wait()
	stopProducing()
	// The writer reads what the stream held, then its end: the report is
	// read once no stream is left.
	waitUntil(t, time.Minute, "the writer to end the dead fetcher's streams", func() error {
		n, err := harness.Metric(ctx, e.writerAdmin, "ferry_writer_streams_active")
		if err == nil && n != 0 {
			err = fmt.Errorf("%v streams active", n)
		}
		return err
	})

	start := time.Now()
	var ch ctlChange
	// The drill's subject is the loss report: a group left without a
	// target position (partial, exit 4) is logged, not failed.
	partial, err := e.ferryctlPartial(ctx, &ch, "failover", "test", "--unplanned", "--yes", "--reason", "unplanned drill: source region lost")
	if err != nil {
		t.Fatal(err)
	}
	if partial != "" {
		t.Logf("ferryctl failover --unplanned: %s", partial)
	}
	if ch.State != "failed_over" {
		t.Fatalf("ferryctl failover left the link %q", ch.State)
	}
	_, first := readGroup(ctx, t, e.dst, drillTarget, map[int32]int{0: 1})
	t.Logf("RTO %v: from ferryctl failover to the group's first record on the target", first.Sub(start).Round(10*time.Millisecond))

	// The source comes back only to be read.
	rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := brokers[0].Restart(rctx); err != nil {
		t.Fatalf("restart the source to read what it held: %v", err)
	}
	checkReportedLoss(ctx, t, e, ch)

	// A zombie fetcher: its opens are refused, it writes nothing.
	before := e.targetEnds(ctx)
	restarted := time.Now()
	if err := e.fetcher.Restart(); err != nil {
		t.Fatal(err)
	}
	// Ten seconds is the window a zombie has to write: three refused
	// opens of each shard (the fetcher retries every 3 s).
	waitUntil(t, time.Minute, "the restarted fetcher's shards refused as failed_over, 10 s after its start", func() error {
		shards, ok := statusShards(e.fetcherAdmin)
		if !ok || len(shards) == 0 {
			return fmt.Errorf("no shards in the fetcher's /status yet")
		}
		for _, s := range shards {
			if s.LinkState != "failed_over" {
				return fmt.Errorf("shard %d: link_state %q", s.Shard, s.LinkState)
			}
		}
		if d := time.Since(restarted); d < 10*time.Second {
			return fmt.Errorf("only %v since the fetcher started", d)
		}
		return nil
	})
	if after := e.targetEnds(ctx); !equalEnds(before, after) {
		t.Fatalf("a fetcher started after the failover wrote to the target: end offsets %v, then %v", before, after)
	}
}

// startDrill starts the two brokers and the exactly-once link between
// them, with ferryctl allowed on the writer and groups synced every 1 s.
func startDrill(t *testing.T) (*env, []*kafkabroker.Broker) {
	t.Helper()
	brokers := startKafkas(t, "source", "target")
	e := newEnvOn(t, []string{brokers[0].Addr()}, []string{brokers[1].Addr()})
	e.delivery = "exactly_once"
	e.writerExtra = map[string]any{"control": map[string]any{
		"allowed_ids": []string{devcerts.SPIFFEID(devcerts.DefaultTrustDomain, "ferryctl")},
	}}
	e.createTopic(drillTopic, drillPartitions, nil)
	e.startWriter()
	e.startFetcher(map[string]any{"groups": map[string]any{"interval": "1s"}})
	return e, brokers
}

// ctlChange is the part of `ferryctl failover -o json` the drills read.
type ctlChange struct {
	State  string `json:"state"`
	AtRisk []struct {
		Topic     string `json:"topic"`
		Partition int32  `json:"partition"`
		Committed int64  `json:"committed_next_offset"`
		HW        int64  `json:"source_high_watermark"`
		Lag       int64  `json:"lag_records"`
	} `json:"at_risk"`
	// Warning is what resume of a failed_over link says it copies over.
	Warning string `json:"warning"`
}

// ferryctl runs the ferryctl binary against the env's writer with the
// operator's development certificate, and decodes its JSON output into
// out. An exit other than 0 is an error.
func (e *env) ferryctl(ctx context.Context, out any, args ...string) error {
	partial, err := e.ferryctlPartial(ctx, out, args...)
	if err == nil && partial != "" {
		err = fmt.Errorf("ferryctl %v exited %d (partial): %s", args[:2], exitPartial, partial)
	}
	return err
}

// exitPartial is ferryctl's exit code for an outcome done but not whole:
// its report is on stdout, what is missing in its JSON error on stderr.
const exitPartial = 4

// ferryctlPartial is ferryctl, taking exit 4 (partial) as an answer too:
// out is decoded, and what ferryctl said is missing is returned.
func (e *env) ferryctlPartial(ctx context.Context, out any, args ...string) (partial string, err error) {
	certDir, err := harness.Certs(e.dir)
	if err != nil {
		return "", err
	}
	args = append(args, "-o", "json", "--writer", e.writerAddr,
		"--writer-id", devcerts.SPIFFEID(devcerts.DefaultTrustDomain, "writer"),
		"--cert", filepath.Join(certDir, "ferryctl.pem"), "--key", filepath.Join(certDir, "ferryctl-key.pem"),
		"--ca", filepath.Join(certDir, "ca.pem"))
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "ferryctl"), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != exitPartial {
			return "", fmt.Errorf("ferryctl %v: %w\n%s%s", args[:2], err, stderr.String(), stdout.String())
		}
		// The JSON error is stderr's last line.
		var f struct {
			Error string `json:"error"`
		}
		lines := bytes.Split(bytes.TrimSpace(stderr.Bytes()), []byte("\n"))
		if err := json.Unmarshal(lines[len(lines)-1], &f); err != nil || f.Error == "" {
			return "", fmt.Errorf("ferryctl %v exited %d without its JSON error: %q", args[:2], exitPartial, stderr.String())
		}
		partial = f.Error
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		return "", fmt.Errorf("ferryctl %v output %q: %w", args[:2], stdout.String(), err)
	}
	return partial, nil
}

// waitReporting waits until a planned failover's dry run accepts the
// link: the writer holds a fresh heartbeat of every partition (runbook
// step 2).
func (e *env) waitReporting(ctx context.Context) {
	e.t.Helper()
	waitUntil(e.t, time.Minute, "the source side to report (ferryctl failover --planned --dry-run)", func() error {
		var ch ctlChange
		if err := e.ferryctl(ctx, &ch, "failover", "test", "--planned", "--dry-run"); err != nil {
			return err
		}
		if len(ch.AtRisk) != drillPartitions {
			return fmt.Errorf("heartbeats of %d partitions, want %d", len(ch.AtRisk), drillPartitions)
		}
		return nil
	})
}

// produceUntilStopped produces o in the background; the returned func
// stops it (its source may be dead) and waits for it.
func (e *env) produceUntilStopped(o workload.Options) func() {
	e.t.Helper()
	p, err := workload.NewProducer(e.src, o)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.Run(ctx) // ends with the context, or the source's loss
	}()
	stop := func() {
		cancel()
		<-done
		p.Close()
	}
	e.t.Cleanup(sync.OnceFunc(stop))
	return sync.OnceFunc(stop)
}

// commitGroupAt runs drillGroup on the source as a consumer: it reads each
// partition of topic up to at[p], commits at[p] and leaves.
func commitGroupAt(ctx context.Context, t *testing.T, addrs []string, topic string, at map[int32]int64) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup(drillGroup), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	last := map[int32]*kgo.Record{}
	for len(last) < len(at) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("group %s did not reach %v on the source: %v", drillGroup, at, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset == at[r.Partition]-1 {
				last[r.Partition] = r
			}
		})
	}
	var recs []*kgo.Record
	for _, r := range last {
		recs = append(recs, r)
	}
	if err := cl.CommitRecords(ctx, recs...); err != nil {
		t.Fatalf("group %s commit on the source: %v", drillGroup, err)
	}
}

// readGroup runs drillGroup on topic as a consumer, read_committed, until
// it has read want[p] records of each partition named, and returns their
// values per partition and when the first came.
func readGroup(ctx context.Context, t *testing.T, addrs []string, topic string, want map[int32]int) (map[int32][][]byte, time.Time) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup(drillGroup), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	got := map[int32][][]byte{}
	var first time.Time
	done := func() bool {
		for p, n := range want {
			if len(got[p]) < n {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("group %s on the target: %v after reading %v, want %v records", drillGroup, ctx.Err(), counts(got), want)
		}
		if first.IsZero() && fs.NumRecords() > 0 {
			first = time.Now()
		}
		fs.EachRecord(func(r *kgo.Record) { got[r.Partition] = append(got[r.Partition], r.Value) })
	}
	return got, first
}

// readValues is every committed record value of topic, per partition in
// offset order: a plain producer's topic, so index i is offset i.
func readValues(ctx context.Context, t *testing.T, addrs []string, topic string) map[int32][][]byte {
	t.Helper()
	out := map[int32][][]byte{}
	readCommitted(ctx, t, addrs, topic, func(r *kgo.Record) {
		if int64(len(out[r.Partition])) != r.Offset {
			t.Fatalf("%s/%d: record at offset %d after %d records: not a plain producer's log", topic, r.Partition, r.Offset, len(out[r.Partition]))
		}
		out[r.Partition] = append(out[r.Partition], r.Value)
	})
	return out
}

// stableOffsets are topic's last stable offsets once they reach its high
// watermarks, or as they are after 15 s (a transaction left open, which
// its timeout ends). A writer acknowledges a round once its transaction's
// commit is logged, and the coordinator writes the commit markers just
// after: read at once, the last stable offset can still stand before the
// round's records (TestDrillsOnApacheKafka saw it once).
func stableOffsets(ctx context.Context, adm *kadm.Client, topic string) (kadm.ListedOffsets, error) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		stable, err := adm.ListCommittedOffsets(ctx, topic)
		if err == nil {
			err = stable.Error()
		}
		if err != nil {
			return nil, err
		}
		high, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = high.Error()
		}
		if err != nil {
			return nil, err
		}
		settled := true
		stable.Each(func(o kadm.ListedOffset) {
			if h, ok := high.Lookup(topic, o.Partition); !ok || h.Offset != o.Offset {
				settled = false
			}
		})
		if settled || time.Now().After(deadline) {
			return stable, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// readCommitted calls f with every committed data record of topic, read
// read_committed up to each partition's last stable offset once it settles
// (stableOffsets). The transaction markers are read too (KeepControlRecords), so a
// partition whose committed end is a marker, or aborted records before
// it, is known to be read to its end: no quiet period is guessed.
func readCommitted(ctx context.Context, t *testing.T, addrs []string, topic string, f func(*kgo.Record)) {
	t.Helper()
	adm, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	ends, err := stableOffsets(ctx, kadm.NewClient(adm), topic)
	adm.Close()
	if err != nil {
		t.Fatalf("last stable offsets of %s: %v", topic, err)
	}
	left := map[int32]int64{}
	from := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition], from[o.Partition] = o.Offset, kgo.NewOffset().AtStart()
		}
	})
	if len(left) == 0 {
		return
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s: %v with partitions left to their last stable offsets %v", topic, ctx.Err(), left)
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("read %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := left[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() {
				f(r)
			}
			if r.Offset+1 >= end {
				delete(left, r.Partition)
			}
		})
	}
}

// checkReportedLoss compares, per partition, the loss ferryctl reported
// with what the target lacks of the source records below the reported
// high watermark: exactly the offsets [committed, high watermark).
func checkReportedLoss(ctx context.Context, t *testing.T, e *env, ch ctlChange) {
	t.Helper()
	src := readValues(ctx, t, e.src, drillTopic)
	onTarget := map[int32]map[string]bool{}
	readCommitted(ctx, t, e.dst, drillTarget, func(r *kgo.Record) {
		if onTarget[r.Partition] == nil {
			onTarget[r.Partition] = map[string]bool{}
		}
		onTarget[r.Partition][string(r.Value)] = true
	})
	if len(ch.AtRisk) != drillPartitions {
		t.Fatalf("ferryctl failover reported %d partitions, want %d: %+v", len(ch.AtRisk), drillPartitions, ch.AtRisk)
	}
	var reported int64
	for _, rep := range ch.AtRisk {
		vals := src[rep.Partition]
		if rep.HW > int64(len(vals)) {
			t.Errorf("partition %d: reported high watermark %d, the source holds %d records", rep.Partition, rep.HW, len(vals))
			continue
		}
		var lacked []int64
		for o, v := range vals[:rep.HW] {
			if !onTarget[rep.Partition][string(v)] {
				lacked = append(lacked, int64(o))
			}
		}
		reported += rep.Lag
		t.Logf("partition %d: reported lost %d (committed %d, heartbeat high watermark %d, source end %d); the target lacks %d below it",
			rep.Partition, rep.Lag, rep.Committed, rep.HW, len(vals), len(lacked))
		// A partition whose last heartbeat is older than its last
		// commits (the fetcher read on past the heartbeat's high
		// watermark) reports 0, not a negative loss.
		if rep.Lag != max(0, rep.HW-rep.Committed) || int64(len(lacked)) != rep.Lag || (len(lacked) > 0 && lacked[0] != rep.Committed) {
			t.Errorf("partition %d: ferryctl reported %d lost from offset %d, the target lacks %d source records below %d (first %v)",
				rep.Partition, rep.Lag, rep.Committed, len(lacked), rep.HW, lacked[:min(len(lacked), 1)])
		}
	}
	if reported == 0 {
		t.Fatal("ferryctl reported nothing lost: the target did not lag when the region was lost, the drill proved nothing")
	}
}

// targetEnds is the end offset of each partition of the drill's target
// topic.
func (e *env) targetEnds(ctx context.Context) map[int32]int64 {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.dst...))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, drillTarget)
	if err != nil {
		e.t.Fatalf("target end offsets: %v", err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

func equalEnds(a, b map[int32]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for p, o := range a {
		if b[p] != o {
			return false
		}
	}
	return true
}

// sameValues says where got differs from want, nil when equal.
func sameValues(want, got [][]byte) error {
	for i := range min(len(want), len(got)) {
		if !bytes.Equal(want[i], got[i]) {
			return fmt.Errorf("record %d differs: got %.60q, want %.60q", i, got[i], want[i])
		}
	}
	if len(want) != len(got) {
		return fmt.Errorf("read %d records, want %d", len(got), len(want))
	}
	return nil
}

func counts(m map[int32][][]byte) map[int32]int {
	out := map[int32]int{}
	for p, v := range m {
		out[p] = len(v)
	}
	return out
}

func sum(m map[int32]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// waitUntil polls cond until it returns nil, failing t after limit with
// what it waited for and cond's last answer.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %v", limit, what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
