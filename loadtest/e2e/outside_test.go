//go:build outside

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/loadtest/harness"
	"github.com/ferry-replicator/ferry/loadtest/toolbin"
	"github.com/ferry-replicator/ferry/pkg/groupsync"
)

// The disaster-recovery runbook checked as a user would, with clients
// outside Go (issue 40 item 8; docs/disaster-recovery.md, "Checked with
// clients outside Go"): the application is Python (confluent-kafka, which
// bundles librdkafka; loadtest/outside/app.py) and every copy is compared
// byte for byte from kcat's dumps. make drill-outside provides both and
// runs this file, which only that target builds (-tags outside).

const (
	outCompact = "t.outside.compact"
	outPlain   = "t.outside.plain"
	outGroup   = "outside-app"
	// outKeyed is how many records of the compacted topic repeat outKeys
	// keys, so the log cleaner removes its head; outUnique follow with
	// keys of their own (the cleaner then leaves the topic alone).
	outKeyed, outKeys, outUnique = 150, 5, 40
	outPlainA                    = 200 // per partition of the plain topic, on A
	outCompactB, outPlainB       = 30, 100
)

// outReport is what the drill writes to $FERRY_OUTSIDE_REPORT.
type outReport struct {
	started                        time.Time
	versions                       map[string]string
	lines                          []string
	compactPresent, compactRemoved int
	firstPresent                   int64
}

func (r *outReport) logf(t *testing.T, format string, args ...any) {
	t.Helper()
	line := fmt.Sprintf(format, args...)
	t.Log(line)
	r.lines = append(r.lines, line)
}

// TestOutsideGoRoundTrip: region A's application, Python, writes a
// compacted topic whose head the cleaner removed and a plain topic of two
// partitions, and its group reads part of each and commits; Ferry copies
// A→B and syncs the group. Region A's fetcher is lost; the operator fails
// over unplanned with the runbook's command; the group reads on B from
// where it stood, producers write on B, every writer of B is killed and
// restarted; the failback runbook (steps 1 to 3, --move-groups) takes the
// group back to A, where it reads the rest. The group reads every record
// once over the trip, and kcat finds each copy byte for byte the same as
// its original (key, value, headers, timestamp).
func TestOutsideGoRoundTrip(t *testing.T) {
	ctx := context.Background()
	rep := &outReport{started: time.Now()}
	app, kcat := outsideTools(t, rep)
	if path := os.Getenv("FERRY_OUTSIDE_REPORT"); path != "" {
		t.Cleanup(func() { rep.write(t, path) })
	}

	// The cleaner looks for work every 200 ms (not 15 s), so the
	// compacted topic's head is gone before the link starts.
	brokers := startKafkasWith(t, map[string]string{"log.cleaner.backoff.ms": "200"}, "a", "b")
	a, b := []string{brokers[0].Addr()}, []string{brokers[1].Addr()}
	fwd, rev := tripLink(t, a, b), tripLink(t, b, a)
	shareCerts(t, fwd, rev)
	fwd.createTopic(outCompact, 1, map[string]*string{"cleanup.policy": ptr("compact"), "segment.ms": ptr("100"),
		"min.cleanable.dirty.ratio": ptr("0.01"), "min.compaction.lag.ms": ptr("0")})
	fwd.createTopic(outPlain, 2, nil)

	// A's application writes, paced 20 ms apart on the compacted topic so
	// its segments roll (segment.ms 100) and become cleanable.
	app.produce(t, a[0], outCompact, 0, 0, outKeyed, "A", outKeys, 20)
	app.produce(t, a[0], outCompact, 0, outKeyed, outUnique, "A", 0, 20)
	for p := range int32(2) {
		app.produce(t, a[0], outPlain, p, 0, outPlainA, "A", 0, 0)
	}
	// Cleaned: every repeated key held once, so nothing more can go, and
	// the log starts at 0 with its first records gone.
	var onA map[string][]kcatRecord
	waitUntil(t, 2*time.Minute, "the cleaner to leave one record of each repeated key on A", func() error {
		d, err := kcat.dump(a[0], outCompact, 1)
		if err != nil {
			return err
		}
		keyed := 0
		for _, r := range d[outCompact+"/0"] {
			if strings.HasPrefix(r.key, "k-") {
				keyed++
			}
		}
		if keyed != outKeys {
			return fmt.Errorf("%d records of the %d repeated keys", keyed, outKeys)
		}
		onA = d
		return nil
	})
	compactA := onA[outCompact+"/0"]
	start, err := kcat.logStart(a[0], outCompact, 0)
	if err != nil {
		t.Fatal(err)
	}
	rep.compactPresent, rep.compactRemoved, rep.firstPresent = len(compactA), outKeyed+outUnique-len(compactA), compactA[0].offset
	if start != 0 || compactA[0].offset == 0 {
		t.Fatalf("%s on A: log start %d, first record at %d; want start 0 and the first records cleaned away", outCompact, start, compactA[0].offset)
	}
	rep.logf(t, "A: %s holds %d of %d records (log start %d, first present offset %d); %s holds %d per partition",
		outCompact, len(compactA), outKeyed+outUnique, start, compactA[0].offset, outPlain, outPlainA)
	plainA, err := kcat.dump(a[0], outPlain, 2)
	if err != nil {
		t.Fatal(err)
	}
	fromA := map[string][]kcatRecord{outCompact + "/0": compactA}
	for tp, rs := range plainA {
		fromA[tp] = rs
	}

	// Ferry copies A→B and syncs the group.
	fwd.startWriter()
	fwd.startFetcher(map[string]any{"groups": map[string]any{"interval": "1s"}})
	waitUntil(t, 2*time.Minute, "B to hold A's records byte for byte", func() error { return sameCopy(kcat, b[0], "A", fromA) })
	rep.logf(t, "A→B: B holds every record of A byte for byte (key, value, headers, timestamp; kcat)")

	// Runbook, unplanned step 4's translation: offset 0 of the compacted
	// topic, cleaned away before the copy, stands at B's first record.
	var tr struct {
		Outcome    string `json:"outcome"`
		Translated *int64 `json:"translated"`
	}
	if err := fwd.ferryctl(ctx, &tr, "offsets", "translate", "--link", "test", "--topic", outCompact, "--partition", "0", "--offset", "0"); err != nil {
		t.Fatalf("ferryctl offsets translate of %s/0 offset 0: %v", outCompact, err)
	}
	onB, err := kcat.dump(b[0], outCompact, 1)
	if err != nil {
		t.Fatal(err)
	}
	if first := onB[outCompact+"/0"][0].offset; tr.Outcome != "exact" || tr.Translated == nil || *tr.Translated != first {
		t.Errorf("offsets translate %s/0 offset 0: %s at %v, want exact at B's first record %d", outCompact, tr.Outcome, tr.Translated, first)
	} else {
		rep.logf(t, "ferryctl offsets translate %s/0 offset 0: exact, B offset %d", outCompact, first)
	}

	// The group reads part of each partition on A and commits; the sync
	// carries it to B.
	read := map[string][]appRecord{}
	r1 := app.consume(t, a[0], map[string]int{outCompact + "/0": 20, outPlain + "/0": 70, outPlain + "/1": 130}, read)
	waitUntil(t, 2*time.Minute, "the group synced to B", func() error { return outMarkers(ctx, b, r1) })
	rep.logf(t, "group %s on A read %s records and committed source offsets %s; synced to B", outGroup, countRead(read), perPartition(r1, func(o int64) int { return int(o) }))

	// Region A lost: its fetcher dies (the broker stays, for the
	// failback). The runbook's unplanned failover: the dry run, then the
	// command with --yes, which the runbook gives a script (no terminal
	// answers its question).
	fwd.fetcher.Kill()
	var dry, fo outFailover
	if err := fwd.ferryctl(ctx, &dry, "failover", "test", "--unplanned", "--dry-run"); err != nil {
		t.Fatalf("the runbook's unplanned dry run: %v", err)
	}
	if dg := dry.group(t, outGroup); dg.Reread == nil || *dg.Reread != 0 {
		t.Errorf("failover --dry-run reports group %s re-reading %v, want 0", outGroup, dg.Reread)
	}
	if err := fwd.ferryctl(ctx, &fo, "failover", "test", "--unplanned", "--yes", "--reason", "region A lost (outside-Go drill)"); err != nil {
		t.Fatalf("the runbook's unplanned failover: %v", err)
	}
	if fo.State != "failed_over" {
		t.Fatalf("failover left the link %q", fo.State)
	}
	for _, p := range fo.AtRisk {
		if p.Lag != 0 {
			t.Errorf("failover reports %s/%d losing %d records; everything was copied", p.Topic, p.Partition, p.Lag)
		}
	}
	g := fo.group(t, outGroup)
	if g.Reread == nil || *g.Reread != 0 || len(g.Uncounted) != 0 {
		t.Errorf("failover reports group %s re-reading %v (uncounted %v), want 0: its last commit was synced", outGroup, g.Reread, g.Uncounted)
	}
	rep.logf(t, "ferryctl failover test --unplanned --yes: exit 0, state %s, %d partitions at risk with 0 lag, group re-read %v", fo.State, len(fo.AtRisk), deref(g.Reread))

	// The group resumes on B; B's producers write; it reads some of those.
	app.consume(t, b[0], map[string]int{outCompact + "/0": -1, outPlain + "/0": 50, outPlain + "/1": -1}, read)
	checkPrefixes(t, read, fromA, map[string]int{outCompact + "/0": len(compactA), outPlain + "/0": 120, outPlain + "/1": outPlainA})
	app.produce(t, b[0], outCompact, 0, 1000, outCompactB, "B", 0, 0)
	for p := range int32(2) {
		app.produce(t, b[0], outPlain, p, 1000, outPlainB, "B", 0, 0)
	}
	app.consume(t, b[0], map[string]int{outCompact + "/0": 10, outPlain + "/1": 30}, read)
	rep.logf(t, "group %s on B: read so far %s; B's producers wrote %d (compacted) and %d per plain partition", outGroup, countRead(read), outCompactB, outPlainB)

	// Every writer of B killed and restarted between failover and failback.
	fwd.writer.Kill()
	if err := fwd.writer.Restart(); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	err = harness.WaitReady(rctx, fwd.writerAdmin)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	rep.logf(t, "B's writer killed (SIGKILL) and restarted")

	// Failback step 1, dry run first: no tail (A took nothing after the
	// copy), and the reverse link starts where B's producers began.
	onB, err = kcat.dump(b[0], outCompact, 1)
	if err == nil {
		var plainB map[string][]kcatRecord
		plainB, err = kcat.dump(b[0], outPlain, 2)
		for tp, rs := range plainB {
			onB[tp] = rs
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	rev.startWriter()
	cfg := filepath.Join(fwd.dir, "fetcher.yaml")
	reverse := []string{"--source-config", cfg, "--reverse-link", "test", "--reverse-writer", rev.writerAddr}
	var fbDry, fb outFailback
	if err := fwd.ferryctl(ctx, &fbDry, append([]string{"failback", "test", "--dry-run"}, reverse...)...); err != nil {
		t.Fatal(err)
	}
	if err := fwd.ferryctl(ctx, &fb, append([]string{"failback", "test"}, reverse...)...); err != nil {
		t.Fatalf("the runbook's failback step 1: %v", err)
	}
	for _, r := range []outFailback{fbDry, fb} {
		if len(r.Partitions) != 3 {
			t.Fatalf("failback reported %d partitions, want 3: %+v", len(r.Partitions), r.Partitions)
		}
		for _, p := range r.Partitions {
			// TARGET_START is the copied end: the offset after A's last
			// record on B (its transaction's marker may stand there),
			// with no record between it and B's producers' first.
			tp := fmt.Sprintf("%s/%d", p.Topic, p.Partition)
			firstB := slices.IndexFunc(onB[tp], func(r kcatRecord) bool { return r.origin() == "B" })
			if p.StrandedTo != p.StrandedFrom || p.StrandedRecords == nil || *p.StrandedRecords != 0 {
				t.Errorf("failback %s: stranded [%d, %d) %v records, want none", tp, p.StrandedFrom, p.StrandedTo, p.StrandedRecords)
			}
			if firstB < 1 || p.TargetStart != onB[tp][firstB-1].offset+1 || onB[tp][firstB].offset < p.TargetStart {
				t.Errorf("failback %s: TARGET_START %d, want the offset after A's last record on B, at or before B's first own record", tp, p.TargetStart)
			}
			if !r.DryRun && (p.ReverseCheckpoint == nil || *p.ReverseCheckpoint != p.TargetStart) {
				t.Errorf("failback %s: reverse checkpoint %v, want TARGET_START %d", tp, p.ReverseCheckpoint, p.TargetStart)
			}
		}
	}
	rep.logf(t, "ferryctl failback test --source-config ... --reverse-link test --reverse-writer ...: exit 0, no stranded tail, reverse link set at TARGET_START")

	// Step 2: the reverse link copies B's records into A.
	rev.startFetcher(map[string]any{"groups": map[string]any{"interval": "1s"}})
	fromB := map[string][]kcatRecord{}
	for tp, rs := range onB {
		for _, r := range rs {
			if r.origin() == "B" {
				fromB[tp] = append(fromB[tp], r)
			}
		}
	}
	waitUntil(t, 2*time.Minute, "A to hold B's records byte for byte", func() error { return sameCopy(kcat, a[0], "B", fromB) })
	rep.logf(t, "B→A: A holds every record of B's producers byte for byte")

	// Step 3: groups back (dry run first), then the reverse link's
	// planned failover, which may name only the exact partition.
	var mgDry, mg outFailback
	if err := fwd.ferryctl(ctx, &mgDry, "failback", "test", "--source-config", cfg, "--move-groups", "--dry-run"); err != nil {
		t.Fatal(err)
	}
	if err := fwd.ferryctl(ctx, &mg, "failback", "test", "--source-config", cfg, "--move-groups"); err != nil {
		t.Fatalf("the runbook's failback --move-groups: %v", err)
	}
	if p := mg.group(t, outGroup, outPlain, 0); p.Carry != "exact" || p.Action != "moved" || p.SourceOffset == nil || *p.SourceOffset != 120 {
		t.Errorf("--move-groups: %s/0 %+v, want exact, moved to A's offset 120", outPlain, p)
	}
	for _, tp := range []struct {
		topic string
		p     int32
	}{{outCompact, 0}, {outPlain, 1}} {
		if p := mg.group(t, outGroup, tp.topic, tp.p); p.Carry != "reverse_link" {
			t.Errorf("--move-groups: %s/%d %+v, want the reverse link's", tp.topic, tp.p, p)
		}
	}
	if len(mg.Groups) != 1 || !mg.Groups[0].HandedBack {
		t.Errorf("--move-groups did not hand %s back: %+v", outGroup, mg.Groups)
	}
	var ch ctlChange
	partial, err := rev.ferryctlPartial(ctx, &ch, "failover", "test", "--planned", "--reason", "back to A (outside-Go drill)")
	if err != nil {
		t.Fatalf("the runbook's planned failover of the reverse link: %v", err)
	}
	if partial != "" && (!strings.Contains(partial, outPlain+"/0 (before_index)") || strings.Contains(partial, outPlain+"/1") || strings.Contains(partial, outCompact)) {
		t.Errorf("the reverse link's planned failover was partial for more than %s/0: %s", outPlain, partial)
	}
	rep.logf(t, "ferryctl failback --move-groups: exit 0, %s/0 exact moved to 120, the others the reverse link's, handed back; reverse planned failover: %s",
		outPlain, either(partial == "", "exit 0", "exit 4 naming "+partial))

	// The group reads the rest on A: over the trip every record of A's
	// log once, nothing else, and as kcat sees it.
	app.consume(t, a[0], map[string]int{outCompact + "/0": -1, outPlain + "/0": -1, outPlain + "/1": -1}, read)
	final, err := kcat.dump(a[0], outCompact, 1)
	if err == nil {
		var plain map[string][]kcatRecord
		plain, err = kcat.dump(a[0], outPlain, 2)
		for tp, rs := range plain {
			final[tp] = rs
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	for tp, log := range final {
		checkReadOnce(t, tp, read[tp], log)
	}
	rep.logf(t, "group %s read %s records over the trip: each record of A's final log once, nothing else (A holds %s)", outGroup, countRead(read), countDump(final))

	// Step 4: region A's fetcher back and the link resumed (no --force:
	// failback moved every checkpoint); A→B copies only what A's
	// producers write now.
	if err := fwd.fetcher.Restart(); err != nil {
		t.Fatal(err)
	}
	app.produce(t, a[0], outCompact, 0, 2000, outCompactB, "A3", 0, 0)
	for p := range int32(2) {
		app.produce(t, a[0], outPlain, p, 2000, outPlainB, "A3", 0, 0)
	}
	if err := fwd.ferryctl(ctx, &ch, "resume", "test", "--reason", "A is the source again (outside-Go drill)"); err != nil {
		t.Fatalf("the runbook's failback step 4: %v", err)
	}
	fromA3 := map[string][]kcatRecord{}
	for _, topic := range []struct {
		name  string
		parts int32
	}{{outCompact, 1}, {outPlain, 2}} {
		d, err := kcat.dump(a[0], topic.name, topic.parts)
		if err != nil {
			t.Fatal(err)
		}
		for tp, rs := range d {
			for _, r := range rs {
				if r.origin() == "A3" {
					fromA3[tp] = append(fromA3[tp], r)
				}
			}
		}
	}
	waitUntil(t, 2*time.Minute, "B to hold A's new records byte for byte", func() error { return sameCopy(kcat, b[0], "A3", fromA3) })
	// Nothing looped or came twice: B holds A's first records and its
	// own once each, as they were.
	if err := sameCopy(kcat, b[0], "A", fromA); err != nil {
		t.Errorf("B after the resume: %v", err)
	}
	if err := sameCopy(kcat, b[0], "B", fromB); err != nil {
		t.Errorf("B after the resume: %v", err)
	}
	rep.logf(t, "ferryctl resume test (no --force: failback moved every checkpoint): exit 0; B holds A's new records byte for byte, and A's first and its own records once each")
}

// outsideTools provides the Python application and kcat
// (tools/outside/build.sh, run by make drill-outside) and records their
// versions.
func outsideTools(t *testing.T, rep *outReport) (outApp, outKcat) {
	t.Helper()
	python, err := toolbin.Path("outside", "FERRY_OUTSIDE_PYTHON")
	if err != nil {
		t.Fatalf("the Python venv with confluent-kafka (make drill-outside provides it): %v", err)
	}
	bin, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat (Debian's package; make drill-outside installs it): %v", err)
	}
	script, err := filepath.Abs(filepath.Join("..", "outside", "app.py"))
	if err != nil {
		t.Fatal(err)
	}
	rep.versions = map[string]string{}
	out, err := exec.Command(python, "-c", "import confluent_kafka as c; print(c.__version__, c.libversion()[0])").Output()
	if f := strings.Fields(string(out)); err != nil || len(f) != 2 {
		t.Fatalf("confluent-kafka's version: %v %q", err, out)
	} else {
		rep.versions["confluent-kafka"], rep.versions["librdkafka (confluent-kafka's)"] = f[0], f[1]
	}
	out, _ = exec.Command(bin, "-V").CombinedOutput()
	if m := regexp.MustCompile(`Version (\S+) .*librdkafka (\S+)`).FindSubmatch(out); m != nil {
		rep.versions["kcat"], rep.versions["librdkafka (kcat's)"] = string(m[1]), string(m[2])
	}
	pom, _ := os.ReadFile(filepath.Join("..", "kafka", "pom.xml"))
	if m := regexp.MustCompile(`<kafka.version>(.*)</kafka.version>`).FindSubmatch(pom); m != nil {
		rep.versions["Apache Kafka"] = string(m[1])
	}
	return outApp{python: python, script: script}, outKcat{bin: bin}
}

// outApp runs loadtest/outside/app.py.
type outApp struct{ python, script string }

func (o outApp) run(t *testing.T, args ...string) []byte {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(o.python, append([]string{o.script}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("app.py %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes()
}

// produce writes n records from index first to topic/p at addr.
func (o outApp) produce(t *testing.T, addr, topic string, p int32, first, n int, origin string, keyMod, intervalMS int) {
	t.Helper()
	o.run(t, "produce", "--bootstrap", addr, "--topic", topic, "--partition", strconv.Itoa(int(p)),
		"--first", strconv.Itoa(first), "--count", strconv.Itoa(n), "--origin", origin,
		"--key-mod", strconv.Itoa(keyMod), "--interval-ms", strconv.Itoa(intervalMS))
}

// appRecord is a record the application's consumer took.
type appRecord struct {
	Topic     string     `json:"topic"`
	Partition int32      `json:"partition"`
	Offset    int64      `json:"offset"`
	Key       string     `json:"key"`
	Value     string     `json:"value"`
	Timestamp int64      `json:"timestamp"`
	Headers   [][]string `json:"headers"`
}

// consume runs the group at addr taking take["topic/p"] records of each
// partition, adds what it took to read and returns what it committed.
func (o outApp) consume(t *testing.T, addr string, take map[string]int, read map[string][]appRecord) map[string]int64 {
	t.Helper()
	args := []string{"consume", "--bootstrap", addr, "--group", outGroup, "--topics", outCompact + "," + outPlain}
	for tp, n := range take {
		i := strings.LastIndexByte(tp, '/')
		args = append(args, "--take", fmt.Sprintf("%s:%s=%d", tp[:i], tp[i+1:], n))
	}
	out := o.run(t, args...)
	committed := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var line struct {
			appRecord
			Committed []struct {
				Topic     string `json:"topic"`
				Partition int32  `json:"partition"`
				Offset    int64  `json:"offset"`
			} `json:"committed"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("app.py consume printed %q: %v", sc.Text(), err)
		}
		for _, c := range line.Committed {
			committed[fmt.Sprintf("%s/%d", c.Topic, c.Partition)] = c.Offset
		}
		if line.Topic != "" {
			tp := fmt.Sprintf("%s/%d", line.Topic, line.Partition)
			read[tp] = append(read[tp], line.appRecord)
		}
	}
	return committed
}

// outKcat runs kcat.
type outKcat struct{ bin string }

// kcatRecord is a record as kcat printed it; line is all but its offset:
// timestamp, key length, key, value length, value and headers.
type kcatRecord struct {
	offset     int64
	key, value string
	line       string
}

// origin is the application's origin of the record: the value's first
// field (app.py).
func (r kcatRecord) origin() string { o, _, _ := strings.Cut(r.value, "|"); return o }

// dump reads every partition of topic at addr to its end, read_committed
// (librdkafka's default), into records keyed "topic/partition".
func (k outKcat) dump(addr, topic string, partitions int32) (map[string][]kcatRecord, error) {
	out := map[string][]kcatRecord{}
	for p := range partitions {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(k.bin, "-b", addr, "-C", "-t", topic, "-p", strconv.Itoa(int(p)), "-o", "beginning", "-e", "-q",
			"-f", `%o\t%T\t%K\t%k\t%S\t%s\t%h\n`)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("kcat %s/%d at %s: %w: %s", topic, p, addr, err, stderr.String())
		}
		tp := fmt.Sprintf("%s/%d", topic, p)
		for line := range strings.SplitSeq(strings.TrimSuffix(stdout.String(), "\n"), "\n") {
			if line == "" {
				continue
			}
			f := strings.Split(line, "\t")
			if len(f) != 7 {
				return nil, fmt.Errorf("kcat %s: line %q has %d fields, want 7", tp, line, len(f))
			}
			o, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("kcat %s: offset in %q: %w", tp, line, err)
			}
			_, rest, _ := strings.Cut(line, "\t")
			out[tp] = append(out[tp], kcatRecord{offset: o, key: f[3], value: f[5], line: rest})
		}
	}
	return out, nil
}

// logStart is the log start offset of topic/p at addr (kcat -Q at
// timestamp -2, Kafka's "earliest").
func (k outKcat) logStart(addr, topic string, p int32) (int64, error) {
	out, err := exec.Command(k.bin, "-b", addr, "-Q", "-t", fmt.Sprintf("%s:%d:-2", topic, p)).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("kcat -Q %s/%d: %w: %s", topic, p, err, out)
	}
	f := strings.Fields(string(out))
	if len(f) < 2 || f[len(f)-2] != "offset" {
		return 0, fmt.Errorf("kcat -Q %s/%d printed %q", topic, p, out)
	}
	return strconv.ParseInt(f[len(f)-1], 10, 64)
}

// sameCopy says how far the records of origin at addr are from want, per
// partition, in order and byte for byte (all but the offsets).
func sameCopy(k outKcat, addr, origin string, want map[string][]kcatRecord) error {
	for _, topic := range []string{outCompact, outPlain} {
		parts := int32(1)
		if topic == outPlain {
			parts = 2
		}
		d, err := k.dump(addr, topic, parts)
		if err != nil {
			return err
		}
		for p := range parts {
			tp := fmt.Sprintf("%s/%d", topic, p)
			var got []string
			for _, r := range d[tp] {
				if r.origin() == origin {
					got = append(got, r.line)
				}
			}
			var exp []string
			for _, r := range want[tp] {
				exp = append(exp, r.line)
			}
			if !slices.Equal(got, exp) {
				i := 0
				for i < min(len(got), len(exp)) && got[i] == exp[i] {
					i++
				}
				return fmt.Errorf("%s: %d records of %s, want %d; first difference at record %d", tp, len(got), origin, len(exp), i)
			}
		}
	}
	return nil
}

// outMarkers says how far the group on the cluster at addrs is from
// Ferry's commits of the source offsets committed.
func outMarkers(ctx context.Context, addrs []string, committed map[string]int64) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return err
	}
	defer cl.Close()
	offs, err := kadm.NewClient(cl).FetchOffsets(ctx, outGroup)
	if err != nil {
		return err
	}
	for tp, s := range committed {
		i := strings.LastIndexByte(tp, '/')
		p, _ := strconv.Atoi(tp[i+1:])
		o, ok := offs.Lookup(tp[:i], int32(p))
		if !ok || o.Metadata != groupsync.Marker(s) {
			return fmt.Errorf("%s: %+v, want Ferry's marker of %d", tp, o, s)
		}
	}
	return nil
}

// checkPrefixes checks that the group read, per partition, exactly the
// first n[tp] records of A's log, in order, each once.
func checkPrefixes(t *testing.T, read map[string][]appRecord, fromA map[string][]kcatRecord, n map[string]int) {
	t.Helper()
	for tp, want := range n {
		var got, exp []string
		for _, r := range read[tp] {
			got = append(got, r.Key+"|"+r.Value)
		}
		for _, r := range fromA[tp][:want] {
			exp = append(exp, r.key+"|"+r.value)
		}
		if !slices.Equal(got, exp) {
			t.Errorf("%s: the group read %d records on A and B, want A's first %d in order, once", tp, len(got), want)
		}
	}
}

// checkReadOnce checks that the group read each record of log once and
// nothing else, with the timestamp and headers kcat shows.
func checkReadOnce(t *testing.T, tp string, read []appRecord, log []kcatRecord) {
	t.Helper()
	seen := map[string]int{}
	byKV := map[string]kcatRecord{}
	for _, r := range log {
		byKV[r.key+"|"+r.value] = r
	}
	for _, r := range read {
		kv := r.Key + "|" + r.Value
		seen[kv]++
		k, ok := byKV[kv]
		if !ok {
			t.Errorf("%s: the group read %q, which A's log does not hold", tp, kv)
			continue
		}
		var hs []string
		for _, h := range r.Headers {
			hs = append(hs, h[0]+"="+h[1])
		}
		if f := strings.Split(k.line, "\t"); f[0] != strconv.FormatInt(r.Timestamp, 10) || f[5] != strings.Join(hs, ",") {
			t.Errorf("%s: %q read with timestamp %d and headers %v; kcat shows %s and %s", tp, kv, r.Timestamp, hs, f[0], f[5])
		}
	}
	missing, twice := 0, 0
	for _, r := range log {
		switch seen[r.key+"|"+r.value] {
		case 0:
			missing++
		case 1:
		default:
			twice++
		}
	}
	if missing != 0 || twice != 0 {
		t.Errorf("%s: of A's %d records the group never read %d and read %d more than once", tp, len(log), missing, twice)
	}
}

// countRead and countDump print records per partition, for the report.
func countRead(read map[string][]appRecord) string {
	return perPartition(read, func(rs []appRecord) int { return len(rs) })
}

func countDump(d map[string][]kcatRecord) string {
	return perPartition(d, func(rs []kcatRecord) int { return len(rs) })
}

func perPartition[V any](m map[string]V, n func(V) int) string {
	var parts []string
	for _, tp := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", tp, n(m[tp])))
	}
	return strings.Join(parts, ", ")
}

// outFailover is the part of `ferryctl failover -o json` the drill reads.
type outFailover struct {
	State  string `json:"state"`
	AtRisk []struct {
		Topic     string `json:"topic"`
		Partition int32  `json:"partition"`
		Lag       int64  `json:"lag_records"`
	} `json:"at_risk"`
	Groups []outFailoverGroup `json:"groups"`
}

type outFailoverGroup struct {
	Group     string            `json:"group"`
	Reread    *int64            `json:"failover_reread_records"`
	Uncounted []json.RawMessage `json:"reread_uncounted"`
}

func (r outFailover) group(t *testing.T, name string) outFailoverGroup {
	t.Helper()
	for _, g := range r.Groups {
		if g.Group == name {
			return g
		}
	}
	t.Fatalf("failover reported no group %s: %+v", name, r.Groups)
	return outFailoverGroup{}
}

// outFailback is the part of `ferryctl failback -o json` the drill reads.
type outFailback struct {
	DryRun     bool `json:"dry_run"`
	Partitions []struct {
		Topic             string `json:"topic"`
		Partition         int32  `json:"partition"`
		StrandedFrom      int64  `json:"stranded_from"`
		StrandedTo        int64  `json:"stranded_to"`
		StrandedRecords   *int64 `json:"stranded_records"`
		TargetStart       int64  `json:"target_start"`
		ReverseCheckpoint *int64 `json:"reverse_checkpoint"`
	} `json:"partitions"`
	Groups []struct {
		Group      string              `json:"group"`
		HandedBack bool                `json:"handed_back"`
		Partitions []outGroupPartition `json:"partitions"`
	} `json:"groups"`
}

type outGroupPartition struct {
	Topic        string `json:"topic"`
	Partition    int32  `json:"partition"`
	SourceOffset *int64 `json:"source_offset"`
	Carry        string `json:"carry"`
	Action       string `json:"action"`
	Why          string `json:"why"`
}

func (r outFailback) group(t *testing.T, group, topic string, p int32) outGroupPartition {
	t.Helper()
	for _, g := range r.Groups {
		for _, gp := range g.Partitions {
			if g.Group == group && gp.Topic == topic && gp.Partition == p {
				return gp
			}
		}
	}
	t.Fatalf("failback reported no %s %s/%d: %+v", group, topic, p, r.Groups)
	return outGroupPartition{}
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

func either(ok bool, yes, no string) string {
	if ok {
		return yes
	}
	return no
}

// write puts the run's report at path: versions, what ran, the counts and
// the outcome.
func (r *outReport) write(t *testing.T, path string) {
	var b strings.Builder
	outcome := "PASS"
	if t.Failed() {
		outcome = "FAIL"
	}
	fmt.Fprintf(&b, "# Disaster-recovery runbook with clients outside Go: %s\n\n", outcome)
	fmt.Fprintf(&b, "Run %s by `make drill-outside` (TestOutsideGoRoundTrip, loadtest/e2e/outside_test.go), %v.\n\n",
		r.started.UTC().Format("2006-01-02 15:04 MST"), time.Since(r.started).Round(time.Second))
	fmt.Fprintf(&b, "Application: loadtest/outside/app.py (Python, confluent-kafka). Copies compared byte for byte with kcat's dumps. "+
		"Two Apache Kafka brokers (A source, B target), Ferry's fetcher and writer processes as loadtest/e2e starts them, exactly-once, identity naming.\n\n")
	b.WriteString("ferryctl ran with the runbook's flags as docs/disaster-recovery.md writes them (`--yes` where the runbook gives it to a script), " +
		"plus `-o json` and the connection flags every command takes (`--writer`, `--writer-id`, `--cert`, `--key`, `--ca`).\n\n")
	b.WriteString("## Versions\n\n")
	keys := make([]string, 0, len(r.versions))
	for k := range r.versions {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "- %s: %s\n", k, r.versions[k])
	}
	b.WriteString("\n## What ran\n\n")
	for _, l := range r.lines {
		fmt.Fprintf(&b, "- %s\n", l)
	}
	if t.Failed() {
		b.WriteString("\nThe test failed: its output (go test -v) says at which step and why.\n")
	}
	err := os.MkdirAll(filepath.Dir(path), 0o755)
	if err == nil {
		err = os.WriteFile(path, []byte(b.String()), 0o644)
	}
	if err != nil {
		t.Errorf("report: %v", err)
	}
}
