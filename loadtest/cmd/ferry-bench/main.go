// Command ferry-bench runs the side-by-side benchmark of Ferry and
// MirrorMaker 2 on real Apache Kafka (make bench) and writes
// loadtest/results/<date>/: report.md, results.json and PNG plots. See
// docs/benchmark.md.
//
//	ferry-bench [flags]               run the benchmark
//	ferry-bench -report-from FILE     rewrite the report from a results.json
//	ferry-bench floor-copy [flags]    the floor copy loop (started by the benchmark)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ferry-replicator/ferry/loadtest/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if len(os.Args) > 1 && os.Args[1] == "floor-copy" {
		err = floorCopy(ctx, os.Args[2:])
	} else {
		err = run(ctx, os.Args[1:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ferry-bench:", err)
		os.Exit(1)
	}
}

func floorCopy(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("floor-copy", flag.ContinueOnError)
	var o bench.FloorOptions
	fs.StringVar(&o.Source, "source", "", "source bootstrap address")
	fs.StringVar(&o.Target, "target", "", "target bootstrap address")
	fs.StringVar(&o.Topic, "topic", "", "source topic")
	fs.StringVar(&o.Dest, "dest", "", "target topic (must exist)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return bench.FloorCopy(ctx, o)
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("ferry-bench", flag.ContinueOnError)
	binDir := fs.String("bin", "bin", "folder holding ferry-fetcher and ferry-writer")
	out := fs.String("out", filepath.Join("loadtest", "results", time.Now().Format("2006-01-02")), "output folder")
	work := fs.String("work", "", "folder for per-run configs, logs and broker data (default: a new temporary folder)")
	reportFrom := fs.String("report-from", "", "only rewrite report.md and plots in -out from this results.json")
	systems := fs.String("systems", "mm2-tuned,ferry,ferry-eos,mm2-default,mm2-eos,floor",
		"systems for the catch-up runs (mm2-tuned first: it sets the live rates); also ferry-trace-0, ferry-trace-1, ferry-trace-100 (tracing overhead), ferry-baseline and ferry-baseline-eos")
	liveSystems := fs.String("live-systems", "", "systems for the live runs (default: -systems without ferry-zstd and the ferry-trace-* variants)")
	wanSystems := fs.String("wan-systems", "mm2-tuned,ferry,ferry-win64k", "systems for the WAN runs")
	workloads := fs.String("workloads", "catch-up,live,wan,sizes,partitions", "workloads to run: catch-up, live, wan, sizes (catch-up at each -size-value-bytes), partitions (catch-up with -many-partitions)")
	records := fs.Int("records", 1_000_000, "catch-up records (~1 KiB each)")
	valueBytes := fs.Int("value-bytes", 1024, "approximate value size")
	partitions := fs.Int("partitions", 8, "partitions of the source topic")
	liveRates := fs.String("live-rates", "", "live producer rates in records/s, comma-separated (default: -live-fractions of MM2 tuned's catch-up rate)")
	liveFractions := fs.String("live-fractions", "0.25,0.5", "fractions of MM2 tuned's catch-up records/s for the live runs")
	liveDuration := fs.Duration("live-duration", 60*time.Second, "how long the live producer runs")
	wanRTTs := fs.String("wan-rtts", "50ms,100ms", "round trips added on the WAN hop")
	wanBandwidth := fs.Int("wan-bandwidth-kbs", 0, "bandwidth cap per connection and direction on the WAN hop, KB/s (0: none)")
	wanRecords := fs.Int("wan-records", 200_000, "catch-up records of the WAN runs")
	sizeValueBytes := fs.String("size-value-bytes", "100,1024,10240,51200", "record sizes of the sizes workload, comma-separated")
	sizeMB := fs.Int("size-mb", 256, "logical megabytes copied at each size of the sizes workload")
	sizeSystems := fs.String("size-systems", "mm2-tuned,ferry,floor", "systems of the sizes workload")
	manyPartitions := fs.Int("many-partitions", 64, "source partitions of the partitions workload (a catch-up of -records)")
	partitionSystems := fs.String("partition-systems", "mm2-tuned,ferry,ferry-eos,floor", "systems of the partitions workload")
	profileSeconds := fs.Int("profile-seconds", 0, "CPU profile of each Ferry process for this long from the first record of every non-live copy, into -out/profiles (0: none)")
	runTimeout := fs.Duration("run-timeout", 20*time.Minute, "limit of one run")
	groups := fs.Int("groups", 0, "member-less consumer groups committed on the source before each catch-up run, spread over every partition (the cost of group sync; 0: none)")
	baselineBin := fs.String("baseline-bin", "", "folder of an older build's ferry-fetcher and ferry-writer, for systems ferry-baseline and ferry-baseline-eos")
	baselineCommit := fs.String("baseline-commit", "", "the commit -baseline-bin was built from, for the report")
	repeat := fs.Int("repeat", 3, "catch-up runs per system, interleaved (order reversed every other round); ratios use each system's median run")
	quick := fs.Bool("quick", false, "a few minutes: 30,000 records, live 15 s, WAN 20,000 records at 50 ms, systems mm2-tuned, ferry and ferry-eos")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *reportFrom != "" {
		return bench.RewriteReport(*reportFrom, *out)
	}
	if *quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		def := func(name string, apply func()) {
			if !set[name] {
				apply()
			}
		}
		def("records", func() { *records = 30_000 })
		def("live-duration", func() { *liveDuration = 15 * time.Second })
		def("wan-records", func() { *wanRecords = 20_000 })
		def("wan-rtts", func() { *wanRTTs = "50ms" })
		def("systems", func() { *systems = "mm2-tuned,ferry,ferry-eos" })
		def("repeat", func() { *repeat = 1 })
		def("size-value-bytes", func() { *sizeValueBytes = "100,10240" })
		def("size-mb", func() { *sizeMB = 20 })
		def("size-systems", func() { *sizeSystems = "ferry,floor" })
		def("many-partitions", func() { *manyPartitions = 32 })
		def("partition-systems", func() { *partitionSystems = "ferry" })
	}
	cfg := bench.Config{
		Bin: *binDir, WorkDir: *work,
		Records: *records, ValueBytes: *valueBytes, Partitions: *partitions,
		LiveDuration: *liveDuration, WANBandwidthKBs: *wanBandwidth, WANRecords: *wanRecords,
		SizeMB: *sizeMB, ManyPartitions: *manyPartitions, Groups: *groups,
		ProfileSeconds: *profileSeconds, ProfileDir: filepath.Join(*out, "profiles"),
		RunTimeout: *runTimeout, Repeat: *repeat, Out: os.Stdout,
	}
	var err error
	if cfg.Self, err = os.Executable(); err != nil {
		return fmt.Errorf("find own executable: %w", err)
	}
	if cfg.Bin, err = filepath.Abs(cfg.Bin); err != nil {
		return err
	}
	for _, w := range splitList(*workloads) {
		switch w {
		case bench.CatchUp:
			cfg.CatchUp = true
		case bench.Live:
			cfg.Live = true
		case bench.WAN:
			cfg.WAN = true
		case bench.Sizes:
			cfg.Sizes = true
		case bench.Partitions:
			cfg.ManyParts = true
		default:
			return fmt.Errorf("-workloads: unknown %q", w)
		}
	}
	if cfg.Systems, err = parseSystems(*systems); err != nil {
		return err
	}
	if *liveSystems == "" {
		for _, sys := range cfg.Systems {
			if sys != bench.FerryZstd && !slices.Contains(bench.TracingSystems, sys) {
				cfg.LiveSystems = append(cfg.LiveSystems, sys)
			}
		}
	} else if cfg.LiveSystems, err = parseSystems(*liveSystems); err != nil {
		return err
	}
	if cfg.WANSystems, err = parseSystems(*wanSystems); err != nil {
		return err
	}
	if cfg.SizeSystems, err = parseSystems(*sizeSystems); err != nil {
		return err
	}
	if cfg.PartitionSystems, err = parseSystems(*partitionSystems); err != nil {
		return err
	}
	for _, s := range splitList(*sizeValueBytes) {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return fmt.Errorf("-size-value-bytes: bad size %q", s)
		}
		cfg.SizeValueBytes = append(cfg.SizeValueBytes, n)
	}
	if cfg.Sizes && (cfg.SizeMB <= 0 || len(cfg.SizeValueBytes) == 0) {
		return errors.New("-size-mb must be positive and -size-value-bytes must name a size for the sizes workload")
	}
	if cfg.ManyParts && cfg.ManyPartitions <= 0 {
		return errors.New("-many-partitions must be positive for the partitions workload")
	}
	for _, s := range splitList(*liveRates) {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return fmt.Errorf("-live-rates: bad rate %q", s)
		}
		cfg.LiveRates = append(cfg.LiveRates, n)
	}
	for _, s := range splitList(*liveFractions) {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f <= 0 {
			return fmt.Errorf("-live-fractions: bad fraction %q", s)
		}
		cfg.LiveFractions = append(cfg.LiveFractions, f)
	}
	for _, s := range splitList(*wanRTTs) {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return fmt.Errorf("-wan-rtts: bad duration %q", s)
		}
		cfg.WANRTTs = append(cfg.WANRTTs, d)
	}
	if cfg.WorkDir == "" {
		if cfg.WorkDir, err = os.MkdirTemp("", "ferry-bench-"); err != nil {
			return err
		}
	}
	fmt.Printf("ferry-bench: work folder %s (configs and logs), output %s\n", cfg.WorkDir, *out)
	// Other builds may replace bin/ while the benchmark runs: every run
	// uses this snapshot.
	if cfg.Bin, err = snapshot(cfg.Bin, filepath.Join(cfg.WorkDir, "bin")); err != nil {
		return err
	}
	if *baselineBin != "" {
		if cfg.BaselineBin, err = snapshot(*baselineBin, filepath.Join(cfg.WorkDir, "bin-baseline")); err != nil {
			return err
		}
		cfg.BaselineCommit = *baselineCommit
	}

	started, mach := time.Now(), bench.ReadMachine()
	cfg.OnResult = func(results []bench.Result) {
		rep := bench.Report{Started: started, Elapsed: time.Since(started), Machine: mach, Config: bench.Describe(cfg), Results: results}
		if err := bench.WriteReport(*out, rep); err != nil {
			fmt.Fprintln(os.Stderr, "ferry-bench:", err)
		}
	}
	results, runErr := bench.Run(ctx, cfg)
	rep := bench.Report{Started: started, Elapsed: time.Since(started), Machine: mach, Config: bench.Describe(cfg), Results: results}
	if err := bench.WriteReport(*out, rep); err != nil {
		return errors.Join(runErr, err)
	}
	fmt.Printf("ferry-bench: wrote %s in %v\n", filepath.Join(*out, "report.md"), time.Since(started).Round(time.Second))
	if runErr != nil {
		return runErr
	}
	for _, r := range results {
		if !r.OK {
			return fmt.Errorf("%d of %d runs failed; see the report", countFailed(results), len(results))
		}
	}
	return nil
}

// snapshot copies ferry-fetcher and ferry-writer from bin into dir.
func snapshot(bin, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("snapshot binaries: %w", err)
	}
	for _, name := range []string{"ferry-fetcher", "ferry-writer"} {
		b, err := os.ReadFile(filepath.Join(bin, name))
		if err != nil {
			return "", fmt.Errorf("snapshot binaries: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o755); err != nil {
			return "", fmt.Errorf("snapshot binaries: %w", err)
		}
	}
	return dir, nil
}

func countFailed(rs []bench.Result) int {
	n := 0
	for _, r := range rs {
		if !r.OK {
			n++
		}
	}
	return n
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parseSystems(s string) ([]bench.System, error) {
	var out []bench.System
	for _, name := range splitList(s) {
		sys, err := bench.ParseSystem(name)
		if err != nil {
			return nil, err
		}
		out = append(out, sys)
	}
	return out, nil
}
