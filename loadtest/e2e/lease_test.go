package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-replicator/ferry/loadtest/consulagent"
	"github.com/ferry-replicator/ferry/loadtest/harness"
	"github.com/ferry-replicator/ferry/loadtest/workload"
)

// The lease tests run several fetcher and writer processes coordinated by a
// real Consul agent, between two kfake clusters.

const (
	leaseShards     = 64
	leaseTTL        = 10 * time.Second // Consul's minimum
	leaseLockDelay  = time.Second
	leasePartitions = 12
)

type member struct {
	name  string
	admin string
	proc  *harness.Process
}

type fleet struct {
	*env
	consul   *consulagent.Agent
	writers  []*member
	fetchers []*member
	// bin is the folder whose ferry-writer and ferry-fetcher the fleet
	// starts: this build's (binDir) unless a test runs another.
	bin string
}

func newFleet(t *testing.T, writers int, persistentConsul bool) *fleet {
	t.Helper()
	return newFleetOn(t, newEnv(t), binDir, writers, persistentConsul)
}

// newFleetOn starts a fleet's Consul agent and writers, of the binaries in
// bin, on e's clusters.
func newFleetOn(t *testing.T, e *env, bin string, writers int, persistentConsul bool) *fleet {
	t.Helper()
	f := &fleet{env: e, bin: bin}
	opts := consulagent.Options{LogFile: filepath.Join(f.dir, "consul.log")}
	if persistentConsul {
		opts.Persistent, opts.DataDir = true, t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	agent, err := consulagent.Start(ctx, opts)
	if err != nil {
		t.Fatalf("start Consul: %v", err)
	}
	t.Cleanup(func() { _ = agent.Stop() })
	f.consul = agent
	for range writers {
		f.addWriter(false)
	}
	t.Cleanup(f.dumpFleetLogs)
	f.createTopic("t.leased", leasePartitions, nil)
	return f
}

// addWriter starts a writer; with register it enters the Consul catalog.
func (f *fleet) addWriter(register bool) *member {
	f.t.Helper()
	addr, _ := harness.FreeAddr()
	admin, _ := harness.FreeAddr()
	link := map[string]any{"name": "test", "naming": "prefix", "prefix": f.prefix, "shards": leaseShards}
	if f.delivery != "" {
		link["delivery"] = f.delivery
	}
	name := fmt.Sprintf("writer-%d", len(f.writers))
	cfg := harness.WriterConfig(name, addr, admin, f.dst, link)
	if register {
		cfg["registration"] = map[string]any{"address": f.consul.HTTPAddr()}
	}
	p, err := harness.Start(f.dir, filepath.Join(f.bin, "ferry-writer"), name, cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { f.stop(p) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := harness.WaitReady(ctx, admin); err != nil {
		f.t.Fatal(err)
	}
	m := &member{name: addr, admin: admin, proc: p}
	f.writers = append(f.writers, m)
	return m
}

func (f *fleet) writerAddrs() []string {
	var out []string
	for _, w := range f.writers {
		out = append(out, w.name)
	}
	return out
}

func (f *fleet) fetcherConfig(name, admin string) map[string]any {
	cfg := harness.FetcherConfig(name, admin, "test", f.src, f.writerAddrs(), `t\..*`)
	cfg["lease"] = map[string]any{
		"address":          f.consul.HTTPAddr(),
		"session_ttl":      leaseTTL.String(),
		"lock_delay":       leaseLockDelay.String(),
		"balance_interval": "300ms",
	}
	cfg["link"].(map[string]any)["shards"] = leaseShards
	return cfg
}

func (f *fleet) addFetcher() *member {
	f.t.Helper()
	return f.addFetcherWith(nil)
}

// addFetcherWith starts a fetcher; tweak edits its configuration first.
func (f *fleet) addFetcherWith(tweak func(map[string]any)) *member {
	f.t.Helper()
	name := fmt.Sprintf("fetcher-%d", len(f.fetchers))
	admin, _ := harness.FreeAddr()
	cfg := f.fetcherConfig(name, admin)
	if tweak != nil {
		tweak(cfg)
	}
	p, err := harness.Start(f.dir, filepath.Join(f.bin, "ferry-fetcher"), name, cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { f.stop(p) })
	m := &member{name: name, admin: admin, proc: p}
	f.fetchers = append(f.fetchers, m)
	return m
}

func (f *fleet) dumpFleetLogs() {
	members := append(append([]*member{}, f.writers...), f.fetchers...)
	for _, m := range members {
		checkCrashes(f.t, m.proc)
	}
	if !f.t.Failed() {
		return
	}
	for _, m := range members {
		data, _ := os.ReadFile(m.proc.LogPath)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		f.t.Logf("--- last lines of %s ---\n%s", m.proc.Name, strings.Join(lines[max(0, len(lines)-15):], "\n"))
	}
}

// expectedShards counts the non-empty shards of the test topic, placing
// partitions as the fetcher documents it (FNV-1a of topic, 0, partition).
func expectedShards() int {
	seen := map[uint32]bool{}
	for p := range leasePartitions {
		h := fnv.New32a()
		h.Write([]byte("t.leased"))
		h.Write([]byte{0})
		h.Write([]byte(strconv.Itoa(p)))
		seen[h.Sum32()%leaseShards] = true
	}
	return len(seen)
}

// goroutineDump saves a member's goroutine stacks (pprof) beside its log and
// returns the file's path, so a runner that does not end shows where it waits.
func goroutineDump(m *member, dir string) string {
	cl := http.Client{Timeout: 10 * time.Second}
	resp, err := cl.Get("http://" + m.admin + "/debug/pprof/goroutine?debug=2")
	if err != nil {
		return "unavailable: " + err.Error()
	}
	defer resp.Body.Close()
	path := filepath.Join(dir, m.name+".goroutines.txt")
	out, err := os.Create(path)
	if err != nil {
		return "unavailable: " + err.Error()
	}
	defer out.Close()
	if _, err := io.Copy(out, resp.Body); err != nil {
		return "unavailable: " + err.Error()
	}
	return path
}

type shardState struct {
	Epoch     uint64 `json:"epoch"`
	LeaseLost bool   `json:"lease_lost"`
}

// shardStatus is a fetcher's /status shards by number.
func shardStatus(t *testing.T, admin string) map[int]shardState {
	t.Helper()
	cl := http.Client{Timeout: 10 * time.Second}
	resp, err := cl.Get("http://" + admin + "/status")
	if err != nil {
		t.Fatalf("fetcher status: %v", err)
	}
	defer resp.Body.Close()
	var st struct {
		Shards []struct {
			Shard int `json:"shard"`
			shardState
		} `json:"shards"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("fetcher status: %v", err)
	}
	out := map[int]shardState{}
	for _, s := range st.Shards {
		out[s.Shard] = s.shardState
	}
	return out
}

// owned reads a fetcher's /status: shard -> epoch. ok is false when the
// fetcher does not answer (stopped, paused, dead).
func owned(admin string) (map[int]uint64, bool) {
	shards, ok := statusShards(admin)
	if !ok {
		return nil, false
	}
	out := map[int]uint64{}
	for _, s := range shards {
		out[s.Shard] = s.Epoch
	}
	return out, true
}

// statusShard is what the lease tests and the failover drills read of a
// shard in a fetcher's /status.
type statusShard struct {
	Shard  int    `json:"shard"`
	Epoch  uint64 `json:"epoch"`
	Writer string `json:"writer"`
	// LinkState is set while the writers refuse the shard's opens
	// (paused, failed_over).
	LinkState string `json:"link_state"`
}

// statusShards reads a fetcher's /status shards; ok is false when the
// fetcher does not answer (stopped, paused, dead).
func statusShards(admin string) ([]statusShard, bool) {
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get("http://" + admin + "/status")
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	var st struct {
		Shards []statusShard `json:"shards"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, false
	}
	return st.Shards, true
}

// waitBalanced waits until the given fetchers together own every shard
// exactly once, each within one of the fair share, and returns how long it
// took.
func (f *fleet) waitBalanced(members []*member, timeout time.Duration) time.Duration {
	f.t.Helper()
	start := time.Now()
	total := expectedShards()
	var last string
	for time.Since(start) < timeout {
		counts, owners := []int{}, map[int]int{}
		ok := true
		for _, m := range members {
			o, answered := owned(m.admin)
			if !answered {
				ok = false
				break
			}
			counts = append(counts, len(o))
			for s := range o {
				owners[s]++
			}
		}
		fair := (total + len(members) - 1) / len(members)
		balanced := ok && len(owners) == total
		for _, n := range owners {
			balanced = balanced && n == 1
		}
		for _, c := range counts {
			balanced = balanced && c >= fair-1 && c <= fair
		}
		if balanced {
			return time.Since(start)
		}
		last = fmt.Sprintf("counts %v, %d of %d shards owned", counts, len(owners), total)
		time.Sleep(200 * time.Millisecond)
	}
	f.t.Fatalf("fetchers not balanced after %v: %s", timeout, last)
	return 0
}

// waitFlowing waits until n more records have been copied into the target
// topic: the fleet is replicating when the test injects its fault.
func (f *fleet) waitFlowing(n int64) {
	f.t.Helper()
	f.waitGrowth(context.Background(), "src.t.leased", n)
}

// waitLeasesLost waits, up to within, until every fetcher has counted its
// leases lost and runs no shard: what each must do on its own clock when
// Consul stays away past the session TTL.
func (f *fleet) waitLeasesLost(within time.Duration) {
	f.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(within)
	for {
		var holding []string
		for _, m := range f.fetchers {
			lost, err := harness.Metric(ctx, m.admin, "ferry_lease_losses_total")
			o, _ := owned(m.admin)
			if err != nil || lost == 0 || len(o) != 0 {
				holding = append(holding, fmt.Sprintf("%s (%v leases lost, err %v, runs shards %v)", m.name, lost, err, o))
			}
		}
		if len(holding) == 0 {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%v after Consul stopped, fetchers kept their leases: %v", within, holding)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitShardsOn waits until some fetcher sends a shard to the writer at
// addr (its /status "writer").
func (f *fleet) waitShardsOn(addr string, timeout time.Duration) {
	f.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, m := range f.fetchers {
			if writers, ok := shardWriters(m.admin); ok && writers[addr] > 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("no fetcher sends a shard to writer %s after %v", addr, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// shardWriters counts a fetcher's shards by the writer each is sent to; ok
// is false when the fetcher does not answer.
func shardWriters(admin string) (map[string]int, bool) {
	shards, ok := statusShards(admin)
	if !ok {
		return nil, false
	}
	out := map[string]int{}
	for _, s := range shards {
		out[s.Writer]++
	}
	return out, true
}

// produceInBackground writes records at a steady rate while a test injects
// its fault; wait() returns the count once everything is acknowledged.
func (f *fleet) produceInBackground(records, rate int) (wait func() int64) {
	done := make(chan struct{})
	var p *workload.Producer
	go func() {
		defer close(done)
		p = f.produce(context.Background(), workload.Options{Topic: "t.leased", Partitions: leasePartitions, Records: records, ValueBytes: 200, Rate: rate, Seed: 21})
	}()
	return func() int64 { <-done; return p.Produced() }
}

func (f *fleet) finish(produced int64, allowDuplicates bool, recovery time.Duration) {
	f.t.Helper()
	ctx := context.Background()
	f.waitFor(ctx, "src.t.leased", produced)
	res := f.verify(ctx, "t.leased")
	recordScenario(f.t, "", res, recovery)
	if res.Missing != 0 || res.Reordered != 0 || res.Corrupt != 0 || res.Produced != produced {
		f.t.Fatalf("replication after the fault: %+v", res)
	}
	if !allowDuplicates && res.Duplicates != 0 {
		f.t.Fatalf("%d duplicates where a clean handover should leave none", res.Duplicates)
	}
}

func TestLeasesShareShardsAndRebalanceOnJoin(t *testing.T) {
	t.Parallel() // waits on lease TTLs and lock delays, mostly idle
	f := newFleet(t, 1, false)
	for range 3 {
		f.addFetcher()
	}
	took := f.waitBalanced(f.fetchers, time.Minute)
	t.Logf("3 fetchers balanced %d shards in %v", expectedShards(), took)
	wait := f.produceInBackground(6000, 1000)
	f.waitFlowing(1000)
	f.addFetcher()
	took = f.waitBalanced(f.fetchers, time.Minute)
	t.Logf("a 4th fetcher joined; rebalanced in %v", took)
	// Shards move only by drain-then-release, so even the moves duplicate
	// nothing.
	f.finish(wait(), false, took)
}

func TestLeasesTakeOverAKilledFetcher(t *testing.T) {
	t.Parallel() // waits on lease TTLs and lock delays, mostly idle
	f := newFleet(t, 1, false)
	for range 3 {
		f.addFetcher()
	}
	f.waitBalanced(f.fetchers, time.Minute)
	wait := f.produceInBackground(8000, 1000)
	f.waitFlowing(1000)
	f.fetchers[0].proc.Kill()
	took := f.waitBalanced(f.fetchers[1:], 2*time.Minute)
	t.Logf("takeover after SIGKILL: all shards owned again %v after the kill (TTL %v, lock delay %v)", took, leaseTTL, leaseLockDelay)
	var takeovers float64
	for _, m := range f.fetchers[1:] {
		n, _ := harness.Metric(context.Background(), m.admin, "ferry_lease_takeover_seconds_count")
		takeovers += n
	}
	if takeovers == 0 {
		t.Error("the survivors report no takeover in ferry_lease_takeover_seconds")
	}
	f.finish(wait(), false, took)
}

func TestLeasesFenceAPausedFetcher(t *testing.T) {
	t.Parallel() // waits on lease TTLs and lock delays, mostly idle
	f := newFleet(t, 1, false)
	for range 2 {
		f.addFetcher()
	}
	f.waitBalanced(f.fetchers, time.Minute)
	wait := f.produceInBackground(10000, 500)
	f.waitFlowing(500)
	paused := f.fetchers[0]
	before, _ := owned(paused.admin)
	if err := paused.proc.Pause(); err != nil {
		t.Fatal(err)
	}
	// Past the TTL (Consul may take up to twice it) and the lock delay, the
	// other fetcher owns everything.
	took := f.waitBalanced(f.fetchers[1:], 2*time.Minute)
	t.Logf("the paused fetcher's %d shards were taken over in %v", len(before), took)
	if err := paused.proc.Resume(); err != nil {
		t.Fatal(err)
	}
	// On waking, the paused fetcher must find its leases lost and stop
	// them before sending; its shards must not come back to it with the
	// old epoch.
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		lost, err := harness.Metric(ctx, paused.admin, "ferry_lease_losses_total")
		if err == nil && lost >= float64(len(before)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the resumed fetcher reports %v leases lost, want %d", lost, len(before))
		}
		time.Sleep(200 * time.Millisecond)
	}
	// At once, none of its old shards may show as running under the old
	// epoch: each is gone, or marked lease_lost (sending nothing, stopping).
	var stale []string
	for s, st := range shardStatus(t, paused.admin) {
		if old, ok := before[s]; ok && st.Epoch <= old && !st.LeaseLost {
			stale = append(stale, fmt.Sprintf("shard %d epoch %d (had %d)", s, st.Epoch, old))
		}
	}
	if len(stale) > 0 {
		t.Errorf("the resumed fetcher still runs its old shards with their old epochs: %v", stale)
	}
	// The stopped runners then leave its status (log: "shard stopped after
	// its lease was lost", with how long stopping took).
	for deadline := time.Now().Add(30 * time.Second); ; {
		var stopping []int
		for s, st := range shardStatus(t, paused.admin) {
			if old, ok := before[s]; ok && st.Epoch <= old {
				stopping = append(stopping, s)
			}
		}
		if len(stopping) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("shards %v whose leases were lost have not stopped within 30s (goroutines: %s)", stopping, goroutineDump(paused, f.dir))
		}
		time.Sleep(100 * time.Millisecond)
	}
	f.waitBalanced(f.fetchers, time.Minute)
	f.finish(wait(), false, took)
}

func TestLeasesSurviveAConsulOutage(t *testing.T) {
	t.Parallel() // waits on lease TTLs and lock delays, mostly idle
	f := newFleet(t, 1, true)
	for range 2 {
		f.addFetcher()
	}
	f.waitBalanced(f.fetchers, time.Minute)

	// Sample ownership all along: no shard may have two owners at once.
	stopSampling := make(chan struct{})
	var doubles []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(100 * time.Millisecond):
			}
			owners := map[int][]string{}
			for _, m := range f.fetchers {
				o, _ := owned(m.admin)
				for s := range o {
					owners[s] = append(owners[s], m.name)
				}
			}
			for s, who := range owners {
				if len(who) > 1 {
					mu.Lock()
					doubles = append(doubles, fmt.Sprintf("shard %d owned by %v", s, who))
					mu.Unlock()
				}
			}
		}
	}()

	wait := f.produceInBackground(8000, 400)
	f.waitFlowing(400)
	if err := f.consul.Stop(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	f.waitLeasesLost(leaseTTL + 5*time.Second)
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := f.consul.Restart(rctx); err != nil {
		t.Fatal(err)
	}
	took := f.waitBalanced(f.fetchers, 2*time.Minute)
	t.Logf("after Consul came back, shards were owned again in %v", took)
	f.finish(wait(), false, took)
	close(stopSampling)
	wg.Wait()
	if len(doubles) > 0 {
		t.Fatalf("shards with two owners at once: %v", doubles[:min(5, len(doubles))])
	}
}

func TestLeasesMoveShardsOffAKilledWriter(t *testing.T) {
	t.Parallel() // waits on lease TTLs and lock delays, mostly idle
	f := newFleet(t, 2, false)
	for range 2 {
		f.addFetcher()
	}
	f.waitBalanced(f.fetchers, time.Minute)
	wait := f.produceInBackground(6000, 1000)
	f.waitFlowing(1000)
	f.writers[0].proc.Kill()
	produced := wait()
	f.finish(produced, false, 0)
	n, err := harness.Metric(context.Background(), f.writers[1].admin, "ferry_writer_records_total")
	if err != nil || int64(n) < produced/4 {
		t.Fatalf("the surviving writer wrote %v records (err %v): the killed writer's shards did not move", n, err)
	}
}

func TestBadLeaseConfigFailsAtStart(t *testing.T) {
	f := &fleet{env: newEnv(t)}
	f.consul = nil
	for _, tc := range []struct{ key, value, want string }{
		{"session_ttl", "5s", "lease.session_ttl: 5s: Consul accepts 10s to 24h"},
		{"lock_delay", "-1s", "lease.lock_delay: -1s: must be between 0 and 60s"},
	} {
		admin, _ := harness.FreeAddr()
		cfg := harness.FetcherConfig("bad", admin, "test", f.src, []string{"127.0.0.1:1"}, `t\..*`)
		cfg["lease"] = map[string]any{"address": "127.0.0.1:1", tc.key: tc.value}
		p, err := harness.Start(f.dir, filepath.Join(binDir, "ferry-fetcher"), "bad-"+tc.key, cfg)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.Done():
		case <-time.After(10 * time.Second):
			p.Kill()
			t.Fatalf("fetcher with lease.%s=%s did not exit", tc.key, tc.value)
		}
		log, _ := os.ReadFile(p.LogPath)
		if p.Err() == nil || !strings.Contains(string(log), tc.want) {
			t.Errorf("lease.%s=%s: exit %v, output %q; want an error containing %q", tc.key, tc.value, p.Err(), log, tc.want)
		}
	}
}

// TestWritersFoundThroughConsulCatalog runs fetchers with no writer list:
// they follow the healthy writers in Consul's catalog, so a writer that
// joins is used and one that dies is left.
// Not parallel: its producer must still write when the shards reach the
// writer that joined, which a busy machine can delay past its end.
func TestWritersFoundThroughConsulCatalog(t *testing.T) {
	f := newFleet(t, 0, false)
	f.addWriter(true)
	discover := func(cfg map[string]any) {
		cfg["writers"] = map[string]any{
			"consul":      map[string]any{"address": f.consul.HTTPAddr()},
			"min_backoff": "50ms", "max_backoff": "1s",
		}
	}
	for range 2 {
		f.addFetcherWith(discover)
	}
	f.waitBalanced(f.fetchers, time.Minute)
	wait := f.produceInBackground(6000, 1000)
	f.waitFlowing(1000)
	second := f.addWriter(true)
	// Killed only once the fetchers found the new writer in the catalog
	// and moved shards to it: otherwise the kill tests nothing of discovery.
	f.waitShardsOn(second.name, time.Minute)
	f.writers[0].proc.Kill()
	f.finish(wait(), false, 0)
	n, err := harness.Metric(context.Background(), second.admin, "ferry_writer_records_total")
	if err != nil || n == 0 {
		t.Fatalf("the writer that joined through Consul wrote %v records (err %v)", n, err)
	}
}
