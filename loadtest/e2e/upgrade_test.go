package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-replicator/ferry/loadtest/harness"
	"github.com/ferry-replicator/ferry/loadtest/workload"
)

// upgradeBaseline is the build a rolling upgrade starts from: the release
// before this one (docs/deploy.md, "Upgrades"). There is no tag yet, so it
// is release v0.1.0's commit, the one whose wire contract is
// proto/compat/v0.1.0.binpb. Move both at each release.
//
// FERRY_UPGRADE_BASELINE names another commit to start from instead: a
// build you run, to try its upgrade before making it.
const upgradeBaseline = "2d17c7c4fe5eb87ffc784477e40c144be537c614"

// TestRollingUpgrade replaces, under load, every fetcher and then every
// writer of an exactly-once link one at a time, this build over the
// baseline's, as a platform's rolling deploy does (graceful stop, start the
// new one, wait until it is ready): fetchers and writers one release apart
// run side by side at every step, and the target must end with every
// record once. Real Apache Kafka on both sides and a real Consul agent for
// the fetchers' leases.
func TestRollingUpgrade(t *testing.T) {
	baseline := upgradeBaseline
	if c := os.Getenv("FERRY_UPGRADE_BASELINE"); c != "" {
		baseline = c
	}
	start := time.Now()
	oldBin := buildBaseline(t, baseline)
	t.Logf("baseline %s built in %v", baseline, time.Since(start).Round(time.Second))
	brokers := startKafkas(t, "source", "target")
	e := newEnvOn(t, []string{brokers[0].Addr()}, []string{brokers[1].Addr()})
	e.delivery = "exactly_once"
	// The configurations harness writes load in both builds (the keys they
	// use are all the baseline's), so old and new members share them.
	f := newFleetOn(t, e, oldBin, 2, false)
	for range 2 {
		f.waitReady(f.addFetcher())
	}
	f.waitBalanced(f.fetchers, time.Minute)
	t.Logf("baseline fleet running at %v", time.Since(start).Round(time.Second))

	load := startLoad(t, f)
	f.waitFlowing(500)
	for _, m := range f.fetchers {
		f.upgrade(m, "ferry-fetcher")
		// Both fetchers own shards again, so the new one copies too, into
		// the old writers.
		f.waitBalanced(f.fetchers, 2*time.Minute)
		f.waitFlowing(300)
	}
	for _, m := range f.writers {
		f.upgrade(m, "ferry-writer")
		f.waitShardsOn(m.name, time.Minute)
		f.waitFlowing(300)
	}
	produced := load.stop()
	t.Logf("every fetcher and writer upgraded; %d records produced", produced)
	f.finish(produced, false, 0)
	for _, m := range f.writers {
		if n, err := harness.Metric(context.Background(), m.admin, "ferry_writer_records_total"); err != nil || n == 0 {
			t.Errorf("upgraded writer %s wrote %v records (err %v)", m.name, n, err)
		}
	}
}

// upgrade stops m gracefully and starts this build's bin in its place, with
// its configuration, and waits until it is ready.
func (f *fleet) upgrade(m *member, bin string) {
	f.t.Helper()
	begin := time.Now()
	if err := m.proc.Stop(time.Minute); err != nil {
		f.t.Fatalf("graceful stop of %s before its upgrade: %v (log %s)", m.proc.Name, err, m.proc.LogPath)
	}
	if err := m.proc.RestartWith(filepath.Join(binDir, bin)); err != nil {
		f.t.Fatal(err)
	}
	f.waitReady(m)
	f.t.Logf("%s upgraded (stopped, started, ready) in %v", m.proc.Name, time.Since(begin).Round(100*time.Millisecond))
}

func (f *fleet) waitReady(m *member) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := harness.WaitReady(ctx, m.admin); err != nil {
		f.t.Fatalf("%s not ready: %v (log %s)", m.proc.Name, err, m.proc.LogPath)
	}
}

// buildBaseline builds ferry-fetcher and ferry-writer at commit, checked
// out with git worktree into a temporary folder, and returns the folder
// holding them. The commit must be in the clone: a CI clone needs the full
// history (no --depth).
func buildBaseline(t *testing.T, commit string) string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		t.Fatalf("the upgrade baseline, commit %s, is not in this clone (%v: %s): clone with full history (no --depth), or git fetch --unshallow", commit, err, strings.TrimSpace(string(out)))
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if out, err := exec.Command("git", "-C", root, "worktree", "add", "--detach", src, commit).CombinedOutput(); err != nil {
		t.Fatalf("check out the upgrade baseline %s: %v: %s", commit, err, out)
	}
	t.Cleanup(func() {
		// Registered after TempDir's cleanup, so it runs before the
		// folder goes: git forgets the worktree, then it is deleted.
		if out, err := exec.Command("git", "-C", root, "worktree", "remove", "--force", src).CombinedOutput(); err != nil {
			t.Logf("remove the baseline worktree: %v: %s", err, out)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Stamped with the commit, as tools/release/build.sh stamps a release,
	// so --version names it (builds that have the flag).
	ldflags := "-X github.com/ferry-replicator/ferry/pkg/service.commit=" + commit
	for _, svc := range []string{"fetcher", "writer"} {
		bin := filepath.Join(dir, "ferry-"+svc)
		args := []string{"build", "-ldflags", ldflags, "-o", bin}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.CommandContext(ctx, "go", append(args, "./services/"+svc)...)
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build the baseline's ferry-%s: %v\n%s", svc, err, out)
		}
	}
	return dir
}

// load produces into the fleet's topic until stopped.
type load struct {
	t        *testing.T
	quit     chan struct{}
	quitOnce sync.Once
	done     chan struct{}
	produced int64 // written by the producing goroutine until done closes
	err      error
}

// startLoad writes t.leased at a steady rate, in chunks of one producer
// each, continuing the keys, until stop: each chunk ends flushed, so
// stopping never leaves a record whose outcome is unknown.
func startLoad(t *testing.T, f *fleet) *load {
	const chunk = 600 // a multiple of leasePartitions: each key's sequence continues
	l := &load{t: t, quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for start := 0; ; start += chunk {
			select {
			case <-l.quit:
				return
			default:
			}
			n, err := produceChunk(f.src, workload.Options{Topic: "t.leased", Partitions: leasePartitions, Records: chunk,
				ValueBytes: 200, Rate: 400, Seed: uint64(27 + start), Start: start})
			l.produced += n
			if err != nil {
				l.err = fmt.Errorf("records %d to %d: %w", start, start+chunk, err)
				return
			}
		}
	}()
	t.Cleanup(l.end)
	return l
}

// end stops producing after the chunk in flight and waits for it.
func (l *load) end() {
	l.quitOnce.Do(func() { close(l.quit) })
	<-l.done
}

// stop ends the load and returns how many records were acknowledged.
func (l *load) stop() int64 {
	l.t.Helper()
	l.end()
	if l.err != nil {
		l.t.Fatalf("producing the load: %v", l.err)
	}
	return l.produced
}

func produceChunk(addrs []string, o workload.Options) (int64, error) {
	p, err := workload.NewProducer(addrs, o)
	if err != nil {
		return 0, err
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = p.Run(ctx)
	if err == nil && p.Produced() != int64(o.Records) {
		err = errors.New("fewer records acknowledged than produced")
	}
	return p.Produced(), err
}
