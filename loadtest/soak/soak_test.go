package soak

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/loadtest/harness"
	"github.com/ferry-replicator/ferry/loadtest/verify"
)

// TestSoak runs the fault soak for SOAK_MINUTES (default 2) with seed
// SOAK_SEED (default 1) and delivery SOAK_DELIVERY (default exactly_once),
// link codec SOAK_CODEC (default Ferry's); `make soak` runs longer ones.
// The run's folder is kept when it fails.
func TestSoak(t *testing.T) {
	minutes, err := envFloat("SOAK_MINUTES", 2)
	if err != nil {
		t.Fatal(err)
	}
	seed, err := strconv.ParseUint(envOr("SOAK_SEED", "1"), 10, 64)
	if err != nil {
		t.Fatalf("SOAK_SEED: %v", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	ctx := context.Background()
	bctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if err := harness.Build(bctx, bin, raceEnabled); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(os.TempDir(), "ferry-test-artifacts", fmt.Sprintf("soak-%d-%d", seed, time.Now().Unix()))
	opts := Options{
		Duration: time.Duration(minutes * float64(time.Minute)),
		Seed:     seed,
		Delivery: envOr("SOAK_DELIVERY", "exactly_once"),
		Codec:    os.Getenv("SOAK_CODEC"),
		Dir:      work,
		BinDir:   bin,
		Rate:     400,
		// RecoveryBound stays 0: recovery is reported, not bounded, here,
		// where the processes run under the race detector on a shared
		// machine; make soak (real builds) bounds it at 60 s.
		Log: slog.New(slog.NewTextHandler(testWriter{t}, nil)),
	}
	rep, err := Run(ctx, opts)
	if err != nil {
		t.Fatalf("soak (folder %s): %v", work, err)
	}
	t.Log("\n" + rep.Summary())
	if !rep.OK() {
		t.Fatalf("soak seed %d failed; folder %s kept:\n%s", seed, work, rep.Row())
	}
	if rep.faults() < int(minutes*3) {
		t.Fatalf("only %d faults acted in %.1f minutes (%d skipped)", rep.faults(), minutes, rep.Skipped)
	}
	os.RemoveAll(work)
}

func TestScheduleIsSeededAndKeepsResourcesApart(t *testing.T) {
	a, b := Schedule(7, 10*time.Minute, SystemFerry), Schedule(7, 10*time.Minute, SystemFerry)
	if !slices.Equal(a, b) {
		t.Fatal("the same seed gave two schedules")
	}
	if !slices.Equal(a, Schedule(7, 10*time.Minute, SystemMM2EOS)) {
		t.Fatal("ferry and mm2-eos got two schedules from one seed")
	}
	if slices.Equal(a, Schedule(8, 10*time.Minute, SystemFerry)) {
		t.Fatal("two seeds gave the same schedule")
	}
	seen := map[string]bool{}
	for seed := range uint64(20) {
		s := Schedule(seed, 5*time.Minute, SystemFerry)
		if len(s) < 15 {
			t.Fatalf("seed %d: %d faults in 5 minutes", seed, len(s))
		}
		overlapping := false
		for i, f := range s {
			seen[f.Kind] = true
			for _, g := range s[:i] {
				k := kindOf(g.Kind)
				if g.At+g.For+k.settle > f.At {
					overlapping = true
					for _, r := range resources(f) {
						if slices.Contains(resources(g), r) {
							t.Fatalf("seed %d: %+v and %+v share %s", seed, g, f, r)
						}
					}
				}
			}
		}
		if !overlapping {
			t.Errorf("seed %d: no two faults overlap", seed)
		}
	}
	for _, k := range kinds {
		if !seen[k.name] {
			t.Errorf("no seed of 20 drew %s", k.name)
		}
	}
	if seen["back-kill"] || seen["back-pause"] || seen["back-restart"] {
		t.Error("a ferry schedule drew a fault of the link back")
	}
}

// The active-active schedule adds faults on the link back's own processes,
// each holding its process apart from the others, and only there.
func TestActiveActiveScheduleActsOnTheLinkBack(t *testing.T) {
	seen := map[string]bool{}
	for seed := range uint64(20) {
		s := Schedule(seed, 5*time.Minute, SystemFerryActiveActive)
		for i, f := range s {
			if !strings.HasPrefix(f.Kind, "back-") {
				continue
			}
			seen[f.Kind+"/"+f.Target] = true
			if !applies(SystemFerryActiveActive, f) || applies(SystemFerry, f) || applies(SystemMM2EOS, f) {
				t.Fatalf("%+v applies to the wrong systems", f)
			}
			for _, g := range s[:i] {
				if strings.HasPrefix(g.Kind, "back-") && g.Target == f.Target {
					if g.At+g.For+kindOf(g.Kind).settle > f.At {
						t.Fatalf("seed %d: %+v and %+v act on the same process at once", seed, g, f)
					}
				}
			}
		}
	}
	for _, k := range activeActiveKinds {
		for _, target := range k.targets {
			if !seen[k.name+"/"+target] {
				t.Errorf("no seed of 20 drew %s on the link back's %s", k.name, target)
			}
		}
	}
}

// TestMM2Mapping checks how the schedule's faults act on MM2, how its
// progress is read and how the report counts what did not apply.
func TestMM2Mapping(t *testing.T) {
	t.Run("faults", func(t *testing.T) {
		notApplicable := map[string]bool{
			"consul-restart": true, "scale-fetchers": true, "scale-writers": true,
			"net-cut/writers": true, "net-stall/writers": true, "net-latency/writers": true,
			"net-cut/consul": true, "net-stall/consul": true, "net-latency/consul": true,
		}
		process := map[string]bool{
			"writer-kill": true, "writer-pause": true, "writer-restart": true,
			"fetcher-kill": true, "fetcher-pause": true, "fetcher-restart": true,
		}
		seen := 0
		for _, k := range kinds {
			targets := k.targets
			if len(targets) == 0 {
				targets = []string{""}
			}
			for _, target := range targets {
				f := Fault{Kind: k.name, Target: target}
				name := k.name
				if strings.HasPrefix(name, "net-") {
					name += "/" + target
				}
				if !applies(SystemFerry, f) || !slices.Equal(resourcesFor(SystemFerry, f), resources(f)) {
					t.Errorf("%s: Ferry's mapping changed", name)
				}
				if got := !applies(SystemMM2EOS, f); got != notApplicable[name] {
					t.Errorf("%s: not applicable to mm2-eos = %v, want %v", name, got, notApplicable[name])
				}
				if notApplicable[name] {
					seen++
					if res := resourcesFor(SystemMM2EOS, f); res != nil {
						t.Errorf("%s: not applicable but holds %v", name, res)
					}
					continue
				}
				want := resources(f)
				if process[k.name] {
					want = []string{"mm2"}
				}
				if got := resourcesFor(SystemMM2EOS, f); !slices.Equal(got, want) {
					t.Errorf("%s: mm2-eos resources %v, want %v", name, got, want)
				}
			}
		}
		if seen != len(notApplicable) {
			t.Errorf("%d of the %d not applicable faults exist in kinds", seen, len(notApplicable))
		}
	})

	t.Run("positions", func(t *testing.T) {
		rec := func(key, value string) *kgo.Record {
			r := &kgo.Record{Key: []byte(key)}
			if value != "" {
				r.Value = []byte(value)
			}
			return r
		}
		for _, c := range []struct {
			name string
			read positionFunc
			r    *kgo.Record
			tp   string
			next int64
		}{
			{"mm2 source offset", mm2Position, rec(`["MirrorSourceConnector",{"cluster":"src","partition":3,"topic":"soak.txn"}]`, `{"offset":41}`), "soak.txn/3", 42},
			{"mm2 partition 0", mm2Position, rec(`["MirrorSourceConnector",{"topic":"soak.idem","partition":0,"cluster":"src"}]`, `{"offset":0}`), "soak.idem/0", 1},
			{"mm2 checkpoint connector", mm2Position, rec(`["MirrorCheckpointConnector",{"group":"g","partition":0,"topic":"soak.idem"}]`, `{"offset":5}`), "", 0},
			{"mm2 heartbeat connector", mm2Position, rec(`["MirrorHeartbeatConnector",{"sourceClusterAlias":"src","targetClusterAlias":"dst"}]`, `{"offset":0}`), "", 0},
			{"mm2 other cluster", mm2Position, rec(`["MirrorSourceConnector",{"cluster":"dst","partition":0,"topic":"soak.idem"}]`, `{"offset":5}`), "", 0},
			{"mm2 tombstone", mm2Position, rec(`["MirrorSourceConnector",{"cluster":"src","partition":0,"topic":"soak.idem"}]`, ""), "", 0},
			{"ferry checkpoint", ferryPosition, rec("soak/soak.idem/2", `{"next_source_offset":7,"target_offset":9}`), "soak.idem/2", 7},
			{"ferry other link", ferryPosition, rec("other/soak.idem/2", `{"next_source_offset":7}`), "", 0},
			{"ferry barrier", ferryPosition, rec("barrier/writer-0/1", `{}`), "", 0},
		} {
			tp, next, ok := c.read(c.r)
			if ok != (c.tp != "") || tp != c.tp || next != c.next {
				t.Errorf("%s: got %q %d %v, want %q %d", c.name, tp, next, ok, c.tp, c.next)
			}
		}
	})

	t.Run("report", func(t *testing.T) {
		t0 := time.Now()
		done := []Done{
			{Fault: Fault{Kind: "writer-kill", Target: "0"}, Start: t0, End: t0.Add(time.Second)},
			{Fault: Fault{Kind: "consul-restart"}, Start: t0, End: t0, Err: errNotApplicable.Error()},
			{Fault: Fault{Kind: "net-cut", Target: "writers"}, Start: t0, End: t0, Err: errNotApplicable.Error()},
			{Fault: Fault{Kind: "fetcher-pause", Target: "1"}, Start: t0, End: t0, Err: errSkipped.Error()},
		}
		opts := Options{System: SystemMM2EOS, Seed: 1}
		opts.defaults()
		r := newReport(opts, nil, done, &progress{}, t0, verify.Result{}, &producers{})
		if r.NotApplicable != 2 || r.Skipped != 1 || !maps.Equal(r.ByKind, map[string]int{"writer-kill": 1}) {
			t.Errorf("not applicable %d, skipped %d, by kind %v", r.NotApplicable, r.Skipped, r.ByKind)
		}
		if !strings.Contains(r.Row(), "| mm2-eos | exactly_once | - |") || strings.Count(RowHeader, "|")/2 != strings.Count(r.Row(), "|") {
			t.Errorf("row %q does not fit header %q", r.Row(), RowHeader)
		}
		if sum := r.Summary(); !strings.Contains(sum, "not applicable to mm2-eos: consul-restart 1, net-cut/writers 1") {
			t.Errorf("summary does not list the faults that did not apply:\n%s", sum)
		}
	})

	t.Run("options", func(t *testing.T) {
		for _, c := range []struct {
			opts Options
			ok   bool
		}{
			{Options{}, true},
			{Options{System: SystemMM2EOS}, true},
			{Options{System: SystemFerryActiveActive, Delivery: "at_least_once", Codec: "zstd"}, true},
			{Options{Delivery: "at_least_once", Codec: "zstd"}, true},
			{Options{System: SystemMM2EOS, Delivery: "at_least_once"}, false},
			{Options{System: SystemMM2EOS, Codec: "zstd"}, false},
			{Options{System: "mm2"}, false},
			{Options{System: SystemFerryDR}, true},
			{Options{System: SystemFerryDR, RegionLoss: LossPartition}, true},
			{Options{System: SystemFerryDR, RegionLoss: "flood"}, false},
			{Options{RegionLoss: LossPartition}, false},
		} {
			if err := c.opts.Validate(); (err == nil) != c.ok {
				t.Errorf("%+v: %v", c.opts, err)
			}
		}
	})
}

func kindOf(name string) kind {
	for _, k := range append(slices.Clone(kinds), activeActiveKinds...) {
		if k.name == name {
			return k
		}
	}
	panic(name)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func envFloat(k string, def float64) (float64, error) {
	v := os.Getenv(k)
	if v == "" {
		return def, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive number of minutes", k, v)
	}
	return f, nil
}

// testWriter sends the soak's log to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// A fault's recovery leaves out the time other faults acted before the lag
// was healthy again; its whole span is reported beside it.
func TestRecoveryLeavesOutOtherFaults(t *testing.T) {
	// A target restart ends at 10 s; a writer pause (15-40 s) and a
	// fetcher kill (35-45 s) follow before the lag is healthy again at
	// 60 s. A fault that did not act (skipped) takes no time off.
	t0 := time.Now()
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	done := []Done{
		{Fault: Fault{Kind: "target-restart", Target: "kill"}, Start: at(5), End: at(10)},
		{Fault: Fault{Kind: "writer-pause", Target: "0"}, Start: at(15), End: at(40)},
		{Fault: Fault{Kind: "fetcher-kill", Target: "1"}, Start: at(35), End: at(45)},
		{Fault: Fault{Kind: "fetcher-pause", Target: "0"}, Start: at(20), End: at(50), Err: errSkipped.Error()},
	}
	var samples []sample
	for sec := -5; sec <= 70; sec++ {
		lag := int64(0)
		if sec >= 6 && sec < 60 {
			lag = 10_000
		}
		samples = append(samples, sample{at: at(sec), lag: lag})
	}
	for i, want := range []struct{ rec, wall time.Duration }{
		{20 * time.Second, 50 * time.Second}, // 50 s less 15-45 s
		{15 * time.Second, 20 * time.Second}, // 20 s less 40-45 s
		{15 * time.Second, 15 * time.Second},
	} {
		rec, wall, ok := recovery(done, i, samples, 100)
		if !ok || rec != want.rec || wall != want.wall {
			t.Errorf("%s: recovery %s of %s (%v), want %s of %s", done[i].Kind, rec, wall, ok, want.rec, want.wall)
		}
	}
	if _, _, ok := recovery(done, 0, samples[:60], 100); ok {
		t.Error("a lag never back under the threshold gave a recovery")
	}

	opts := Options{Seed: 1, RecoveryBound: 19 * time.Second}
	opts.defaults()
	r := newReport(opts, nil, done, &progress{rate: 10, samples: samples}, at(-5), verify.Result{}, &producers{})
	if r.LongestRecovery != 20*time.Second || r.LongestRecoveryWall != 50*time.Second || r.LongestKind != "target-restart/kill" {
		t.Errorf("longest recovery %s (%s from its end) after %s, want 20s (50s) after target-restart/kill", r.LongestRecovery, r.LongestRecoveryWall, r.LongestKind)
	}
	if r.OK() {
		t.Error("a run with a recovery over its bound is OK")
	}
	if sum := r.Summary(); !strings.Contains(sum, "longest recovery=20s (target-restart/kill; 50s from its end, 30s of it under other faults)") {
		t.Errorf("summary does not give the recovery and its span:\n%s", sum)
	}
}
