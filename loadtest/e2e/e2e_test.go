// Package e2e runs the real ferry-fetcher and ferry-writer binaries against
// in-process Kafka clusters (kfake) and checks what lands in the target.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/ferry-replicator/ferry/loadtest/harness"
	"github.com/ferry-replicator/ferry/loadtest/kafkabroker"
	"github.com/ferry-replicator/ferry/loadtest/verify"
	"github.com/ferry-replicator/ferry/loadtest/workload"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ferry-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	err = harness.Build(ctx, dir, raceEnabled)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	if err := writeScenarioReport(); err != nil {
		fmt.Fprintln(os.Stderr, "scenario report:", err)
		code = 1
	}
	if code == 0 {
		// kfake's cluster loop, and the links of a stopped in-process
		// toxiproxy (TestDroppedConnections), which v2.5.0 leaves blocked
		// on its internal channels until their peers' connections close:
		// the test tools' goroutines, not Ferry's.
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/twmb/franz-go/pkg/kfake.(*Cluster).run"),
			goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run"),
			goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).read")); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// env is one link under test: two clusters, a writer and a fetcher.
type env struct {
	t               *testing.T
	dir             string
	src, dst        []string // source and target bootstrap addresses
	writer, fetcher *harness.Process
	writerAddr      string
	writerAdmin     string
	fetcherAdmin    string
	prefix          string
	naming          string // the writer link's naming policy; "" is prefix
	delivery        string // the writer link's delivery mode; "" is the default
	// writerExtra and fetcherExtra are added at the top of the configs.
	writerExtra, fetcherExtra map[string]any
	// srcOpts and dstOpts are added to the test's own Kafka clients of each
	// cluster: TLS for brokers requiring client certificates.
	srcOpts, dstOpts []kgo.Opt
	// dstCluster is the in-process target (newEnv), for injecting a broker
	// fault at the exact request with ControlKey; nil on real Kafka.
	dstCluster *kfake.Cluster
}

// newEnv runs the link between two in-process kfake clusters.
func newEnv(t *testing.T) *env {
	t.Helper()
	var clusters []*kfake.Cluster
	for range 2 {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		clusters = append(clusters, c)
	}
	e := newEnvOn(t, clusters[0].ListenAddrs(), clusters[1].ListenAddrs())
	e.dstCluster = clusters[1]
	return e
}

// newEnvOn runs the link between two running clusters.
func newEnvOn(t *testing.T, src, dst []string) *env {
	t.Helper()
	e := &env{t: t, dir: keptDir(t, "processes"), prefix: "src.", src: src, dst: dst}
	var err error
	for _, a := range []*string{&e.writerAddr, &e.writerAdmin, &e.fetcherAdmin} {
		if *a, err = harness.FreeAddr(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(e.dumpLogsOnFailure)
	return e
}

// startKafkas starts one Apache Kafka broker per name, each a cluster of
// its own with its data in a kept folder (kafka-<name>), stopped when the
// test ends. They start at once: a JVM's start is mostly waiting, and
// the tests that join make test have a tight budget.
func startKafkas(t *testing.T, names ...string) []*kafkabroker.Broker {
	t.Helper()
	return startKafkasWith(t, nil, names...)
}

// startKafkasWith is startKafkas with extra server properties for every
// broker.
func startKafkasWith(t *testing.T, props map[string]string, names ...string) []*kafkabroker.Broker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	brokers := make([]*kafkabroker.Broker, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		dir := keptDir(t, "kafka-"+name)
		wg.Go(func() { brokers[i], errs[i] = kafkabroker.Start(ctx, kafkabroker.Options{DataDir: dir, Props: props}) })
	}
	wg.Wait()
	for i, b := range brokers {
		if b != nil {
			t.Cleanup(func() { _ = b.Stop() })
		}
		if errs[i] != nil {
			t.Fatalf("start Apache Kafka %s: %v", names[i], errs[i])
		}
	}
	return brokers
}

// shareCerts gives every env the first one's development CA and
// certificates, as one trust domain across regions: a fetcher verifies the
// producer id entries written into its source by the writers of the links
// into that cluster against its own writers.tls (pkg/provenance), so links
// under different CAs would refuse each other's entries and copy back.
func shareCerts(t *testing.T, envs ...*env) {
	t.Helper()
	from, err := harness.Certs(envs[0].dir)
	if err != nil {
		t.Fatal(err)
	}
	files, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range envs[1:] {
		to := filepath.Join(e.dir, "certs")
		if err := os.MkdirAll(to, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			data, err := os.ReadFile(filepath.Join(from, f.Name()))
			if err == nil {
				err = os.WriteFile(filepath.Join(to, f.Name()), data, 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}

// dumpLogsOnFailure fails the test if the race detector reported in a
// process, and puts the end of each process log in the test output when the
// test failed; the whole logs stay in e.dir (keptDir).
func (e *env) dumpLogsOnFailure() {
	checkCrashes(e.t, e.writer, e.fetcher)
	if !e.t.Failed() {
		return
	}
	for _, p := range []*harness.Process{e.writer, e.fetcher} {
		if p == nil {
			continue
		}
		data, _ := os.ReadFile(p.LogPath)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		e.t.Logf("--- last lines of %s (whole log: %s) ---\n%s", p.Name, p.LogPath, strings.Join(lines[max(0, len(lines)-25):], "\n"))
	}
}

// checkCrashes fails t with the first race report, panic or fatal runtime
// error in the log of any of ps.
func checkCrashes(t *testing.T, ps ...*harness.Process) {
	t.Helper()
	for _, p := range ps {
		if p == nil {
			continue
		}
		if r := p.Crashes(); r != "" {
			t.Errorf("%s crashed (log %s):\n%s", p.Name, p.LogPath, r)
		}
	}
}

// keptDir returns a new folder for a test's files (process logs, broker
// data) that is removed when the test passes and kept, and named in the
// test's output, when it fails: a failed run's evidence (Kafka's own log
// segments, the writer's log) outlives it. The folders live under
// $FERRY_TEST_ARTIFACTS, or ferry-test-artifacts in the temporary folder.
func keptDir(t *testing.T, name string) string {
	t.Helper()
	root := os.Getenv("FERRY_TEST_ARTIFACTS")
	if root == "" {
		root = filepath.Join(os.TempDir(), "ferry-test-artifacts")
	}
	safe := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(root, safe+"-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs after the cleanups that stop the
	// processes using the folder.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kept for inspection: %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return dir
}

func (e *env) startWriter() {
	e.t.Helper()
	link := map[string]any{"name": "test", "naming": "prefix", "prefix": e.prefix}
	if e.naming == "identity" {
		link = map[string]any{"name": "test", "naming": "identity", "topics": map[string]any{"include": []string{`t\..*`}}}
	}
	if e.delivery != "" {
		link["delivery"] = e.delivery
	}
	wcfg := harness.WriterConfig("writer-1", e.writerAddr, e.writerAdmin, e.dst, link)
	for k, v := range e.writerExtra {
		wcfg[k] = v
	}
	w, err := harness.Start(e.dir, filepath.Join(binDir, "ferry-writer"), "writer", wcfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.writer = w
	e.t.Cleanup(func() { e.stop(w) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := harness.WaitReady(ctx, e.writerAdmin); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) startFetcher(extra map[string]any) {
	e.t.Helper()
	cfg := harness.FetcherConfig("fetcher-1", e.fetcherAdmin, "test", e.src, []string{e.writerAddr}, `t\..*`)
	for k, v := range extra {
		cfg["link"].(map[string]any)[k] = v
	}
	for k, v := range e.fetcherExtra {
		cfg[k] = v
	}
	f, err := harness.Start(e.dir, filepath.Join(binDir, "ferry-fetcher"), "fetcher", cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.fetcher = f
	e.t.Cleanup(func() { e.stop(f) })
}

func (e *env) stop(p *harness.Process) {
	select {
	case <-p.Done():
	default:
		if err := p.Stop(30 * time.Second); err != nil {
			e.t.Errorf("%s: %v (log %s)", p.Name, err, p.LogPath)
		}
	}
}

func (e *env) createTopic(name string, partitions int32, configs map[string]*string) {
	e.t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(e.src...)}, e.srcOpts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), partitions, 1, configs, name); err != nil {
		e.t.Fatalf("create %s: %v", name, err)
	}
}

func (e *env) produce(ctx context.Context, o workload.Options) *workload.Producer {
	e.t.Helper()
	o.ClientOpts = append(o.ClientOpts, e.srcOpts...)
	p, err := workload.NewProducer(e.src, o)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(p.Close)
	if err := p.Run(ctx); err != nil {
		e.t.Fatalf("produce %s: %v", o.Topic, err)
	}
	return p
}

// targetCount is the number of records in a target topic (its end offsets).
func (e *env) targetCount(ctx context.Context, topic string) int64 {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(e.dst...)}, e.dstOpts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return 0
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			n += o.Offset
		}
	})
	return n
}

// targetRecords counts the records a topic of the target holds, aborted
// ones included (read_uncommitted), transaction markers not: the end
// offsets count markers, which every exactly-once open writes (an abort of
// what earlier producers of the shard left open).
func (e *env) targetRecords(ctx context.Context, topic string) int64 {
	e.t.Helper()
	var n int64
	readTopic(ctx, e.t, e.dst, e.dstOpts, topic, kgo.ReadUncommitted(), func(*kgo.Record) { n++ })
	return n
}

// readTopic calls f with each record of topic on the cluster at addrs, read
// with isolation from the start to the end offsets it has when called.
func readTopic(ctx context.Context, t *testing.T, addrs []string, opts []kgo.Opt, topic string, isolation kgo.IsolationLevel, f func(*kgo.Record)) {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	cl.Close()
	if err != nil {
		t.Fatalf("end offsets of %s: %v", topic, err)
	}
	want := map[int32]kgo.Offset{}
	remaining := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset > 0 {
			want[o.Partition] = kgo.NewOffset().AtStart()
			remaining[o.Partition] = o.Offset
		}
	})
	if len(want) == 0 {
		return
	}
	// Transaction markers are kept (and not passed to f), so a partition
	// ending in one is known to be read to its end.
	rc, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: want}),
		kgo.FetchIsolationLevel(isolation), kgo.KeepControlRecords()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	// Done when every partition is read to its end offset; or, once
	// something was read, when it stays quiet for 4 s (aborted records
	// read_committed skips at a partition's end, or a transaction still
	// open below it). Nothing read yet is not quiet, for 30 s: a busy
	// machine's first fetch can take seconds.
	seen, giveUp := false, time.Now().Add(30*time.Second)
	for quiet := 0; len(remaining) > 0 && quiet < 8 && ctx.Err() == nil && (seen || time.Now().Before(giveUp)); {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := rc.PollFetches(pctx)
		cancel()
		if fs.NumRecords() == 0 {
			if seen {
				quiet++
			}
			continue
		}
		seen, quiet = true, 0
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				f(r)
			}
			if r.Offset+1 >= remaining[r.Partition] {
				delete(remaining, r.Partition)
			}
		})
	}
}

// waitFor polls until the target holds at least want records in topic.
func (e *env) waitFor(ctx context.Context, topic string, want int64) {
	e.t.Helper()
	deadline := time.Now().Add(3 * time.Minute) // generous: CI machines are shared
	for {
		got := e.targetCount(ctx, topic)
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			// e.dir holds every process log, the fleet's too (its
			// members are not e.writer and e.fetcher).
			e.t.Fatalf("target %s holds %d records after 3m, want %d; logs in %s", topic, got, want, e.dir)
		}
		for _, p := range []*harness.Process{e.writer, e.fetcher} {
			if p == nil {
				continue
			}
			select {
			case <-p.Done():
				e.t.Fatalf("%s exited: %v (log %s)", p.Name, p.Err(), p.LogPath)
			default:
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitGrowth waits until the target topic holds n records more than when
// called: the link is copying, which a fault test needs before it injects
// its fault (a sleep would only hope so, and on a slow machine inject it
// before anything flowed). Counted in end offsets, as waitFor does, so
// exactly-once transaction markers count too: n is a floor on progress,
// not an exact count.
func (e *env) waitGrowth(ctx context.Context, topic string, n int64) {
	e.t.Helper()
	e.waitFor(ctx, topic, e.targetCount(ctx, topic)+n)
}

// waitCaughtUp waits until the fetcher has committed, for every partition
// of the source topic, everything the source holds now (its
// ferry_committed_offset reaches the source's end offset): whatever the
// link would copy of those records, wrongly or not, is in the target then.
func (e *env) waitCaughtUp(ctx context.Context, topic string) {
	e.t.Helper()
	ends := e.sourceEnds(ctx, topic)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		behind := ""
		for p, end := range ends {
			series := fmt.Sprintf(`ferry_committed_offset{link="test",partition="%d",topic="%s"}`, p, topic)
			if got, err := harness.Metric(ctx, e.fetcherAdmin, series); err != nil || int64(got) < end {
				behind = fmt.Sprintf("%s/%d committed %v (err %v), source end %d", topic, p, got, err, end)
				break
			}
		}
		if behind == "" {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("fetcher not caught up after 3m: %s; logs in %s", behind, e.dir)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// sourceEnds is the end offset of each partition of a source topic.
func (e *env) sourceEnds(ctx context.Context, topic string) map[int32]int64 {
	e.t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(e.src...)}, e.srcOpts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		e.t.Fatalf("source end offsets of %s: %v", topic, err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			e.t.Fatalf("source end offset of %s/%d: %v", topic, o.Partition, o.Err)
		}
		out[o.Partition] = o.Offset
	})
	return out
}

// verify compares the target with the source. The end offsets waitFor
// watches also count transaction markers and aborted records, so it can
// return before the last committed records are there: while records are
// missing, verify looks again for up to a minute. Only "missing" can heal
// with time; every other anomaly is final.
func (e *env) verify(ctx context.Context, topics ...string) verify.Result {
	e.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		res := e.verifyOnce(ctx, topics...)
		if res.Missing == 0 || time.Now().After(deadline) {
			return res
		}
		time.Sleep(time.Second)
	}
}

func (e *env) verifyOnce(ctx context.Context, topics ...string) verify.Result {
	e.t.Helper()
	var pairs []verify.Pair
	for _, t := range topics {
		pairs = append(pairs, verify.Pair{Source: t, Target: e.prefix + t})
	}
	res, err := verify.CompareWith(ctx, e.src, e.dst, pairs, e.srcOpts, e.dstOpts)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Log(res.Line())
	return res
}

func ptr[T any](v T) *T { return &v }
