package bench

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// markdown renders the report.
func markdown(rep Report, plots []string, notes string) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	m, c := rep.Machine, rep.Config
	p("# Ferry vs MirrorMaker 2: benchmark of %s\n\n", rep.Started.UTC().Format("2006-01-02 15:04 MST"))
	p("Written by `make bench` (`loadtest/cmd/ferry-bench`); method in [docs/benchmark.md](../../../docs/benchmark.md). ")
	p("The run took %v. Raw figures: [results.json](results.json).\n\n", rep.Elapsed.Round(time.Second))

	p("## Machine\n\n")
	p("| | |\n|---|---|\n")
	p("| CPU | %d cores, %s |\n| memory | %.1f GiB |\n| kernel | Linux %s |\n| Go | %s |\n| Java | %s |\n| Kafka | %s |\n| load average at start | %s |\n| Ferry commit | %s |\n\n",
		m.Cores, m.CPU, float64(m.MemoryBytes)/(1<<30), m.Kernel, m.Go, m.Java, m.Kafka, m.LoadAtStart, m.Commit)
	p("Everything (two brokers, the replicator, the workload producer, the target tail consumer and the verifier) shares these cores; see \"Noise\".\n\n")

	p("## Workloads\n\n")
	p("- Source topic `bench.orders`, %d partitions, `compression.type=lz4`; target topic `src.bench.orders` (every system names it so). ", c.Partitions)
	p("Records from `loadtest/workload`: JSON-like values of ~%d bytes (3-5x compressible), keys and two headers, produced with lz4.\n", c.ValueBytes)
	p("- **catch-up**: %d records preloaded into the source, then the replicator starts; timed until the target holds all of them.", c.Records)
	if c.Repeat > 1 {
		p(" Each system runs %d times, interleaved (every system once, then again); every run is in the table, and ratios and plots use each system's run of median throughput.", c.Repeat)
	}
	if c.Groups > 0 {
		p(" Before the replicator starts, %d member-less consumer groups are committed on the source (group i at (i+1)/%d of every partition's end), for the systems that sync groups to translate, and the target's group coordinator is made ready (a target where consumers run has one; created inside a measured copy it would be charged to the system committing there first); each Ferry run's log line counts them on the target after the copy (`groups_synced`).", c.Groups, c.Groups+1)
	}
	p("\n")
	p("- **live**: the replicator starts on an empty topic, %d primer records prove it copies, then a producer runs at a fixed rate for %.0f s ", primerPer*c.Partitions, c.LiveDurationS)
	p("(rates: %v of MM2 tuned's catch-up records/s unless given). Latency = time the tail consumer on the target received a record minus its source timestamp.\n", c.LiveFractions)
	p("- **wan**: catch-up of %d records with toxiproxy on the cross-region hop (half the RTT added each way", c.WANRecords)
	if c.WANBandwidthKBs > 0 {
		p(", bandwidth capped at %d KB/s per connection and direction", c.WANBandwidthKBs)
	}
	p("). Ferry: fetcher → writer. MM2 and the floor: their consumer → the source cluster (the source broker advertises a second listener at the proxy address).\n")
	if hasWorkload(rep.Results, Sizes) {
		var sizes []string
		for _, v := range c.SizeValueBytes {
			sizes = append(sizes, sizeLabel(v))
		}
		p("- **sizes**: catch-up of about %d MB (logical) of records with values of %s, once per system and size; the same topic and settings otherwise.\n", c.SizeMB, strings.Join(sizes, ", "))
	}
	if hasWorkload(rep.Results, Partitions) {
		p("- **partitions**: the catch-up of %d records with %d source partitions instead of %d, once per system.\n", c.Records, c.ManyPartitions, c.Partitions)
	}
	p("\n")

	p("## Systems\n\n")
	for _, sys := range AllSystems {
		if s, ok := c.Settings[sys]; ok && hasSystem(rep.Results, sys) {
			p("- **%s**: %s.\n", sys, s)
		}
	}
	p("\n")

	goals(&b, rep)

	keys, byKey := group(rep.Results)
	for _, k := range keys {
		table(&b, k, byKey[k])
	}

	if len(plots) > 0 {
		p("## Plots\n\n")
		for _, name := range plots {
			p("![%s](%s)\n\n", name, name)
		}
	}

	p("## How to read it\n\n")
	p("- **MB/s** and **rec/s** count logical bytes (key + value + headers, uncompressed) of the records the target received, over the copy window: ")
	p("first record on the target to last (catch-up, wan), or live producer start to last record (live). **startup** is replicator start to its first record on the target; it is not in the window.\n")
	p("- **CPU s/GB** is utime+stime of the replicator's own processes (Ferry: fetcher + writer; MM2: its JVM; floor: its process), read from /proc/PID/stat at the window's start and end, per GB (10^9 logical bytes) copied. Broker CPU is not counted in it.\n")
	p("- **broker CPU s/GB** is the same for each broker's JVM over the same window, source / target: what the replicator's requests cost the clusters; the target's includes the harness's tail consumer (the same for every system).\n")
	p("- **peak RSS** is VmHWM from /proc/PID/status at the end of the run, summed over the system's processes (Ferry has two).\n")
	p("- **×tuned** columns divide by MM2 tuned in the same table (higher is better for throughput, lower for CPU, RSS and latency).\n")
	p("- **wire MB/GB** counts both directions through the WAN proxy per GB copied: for Ferry the gRPC stream (batches in the link codec: lz4 by default, zstd for ferry-zstd), for MM2 and the floor the Kafka fetch traffic (lz4 batches as stored on the source).\n")
	p("- **verify** compares every target partition with its source (`loadtest/verify`): a run with a missing, duplicated, reordered or corrupt record is a failure, shown as FAILED, never as a figure.\n\n")

	p("## Noise\n\n")
	p("All processes share %d cores; the brokers alone take a good part of them under load, and the tail consumer and producer run on the same cores. ", m.Cores)
	p("Load average at start: %s. ", m.LoadAtStart)
	if c.Repeat > 1 {
		p("Each system ran the catch-up %d times, interleaved, and ratios use its median run; live and WAN runs ran once per system: read differences under ~20%% there as noise. ", c.Repeat)
	} else {
		p("Each system ran once per workload: read differences under ~20%% as noise. ")
	}
	p("JVM systems pay JIT warm-up inside the copy window of a short catch-up. ")
	p("CPU per GB is the most stable figure (it does not depend on who else had the cores); throughput and latency depend on contention.\n")
	if notes != "" {
		p("\n## Notes on this run\n\n%s", notes)
	}
	return b.String()
}

func group(results []Result) ([]string, map[string][]Result) {
	var keys []string
	by := map[string][]Result{}
	for _, r := range results {
		k := r.Key()
		if _, ok := by[k]; !ok {
			keys = append(keys, k)
		}
		by[k] = append(by[k], r)
	}
	return keys, by
}

// find returns the system's run that ratios use: with repeated runs, the
// one of median throughput (a real run, not a mix of several), so one run
// disturbed by the shared machine moves no ratio.
func find(rs []Result, sys System) (Result, bool) {
	var ok []Result
	for _, r := range rs {
		if r.System == sys && r.OK {
			ok = append(ok, r)
		}
	}
	if len(ok) == 0 {
		return Result{}, false
	}
	slices.SortFunc(ok, func(a, b Result) int { return cmp.Compare(a.MBps, b.MBps) })
	return ok[(len(ok)-1)/2], true
}

// runLabel names a run in tables: the system, and which repeat it was.
func runLabel(r Result) string {
	if r.Run == 0 {
		return string(r.System)
	}
	return fmt.Sprintf("%s (run %d)", r.System, r.Run)
}

func ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func table(b *strings.Builder, key string, rs []Result) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	tuned, hasTuned := find(rs, MM2Tuned)
	live := rs[0].Workload == Live
	wan := rs[0].Workload == WAN
	p("## %s\n\n", key)
	p("| system | MB/s | rec/s | ×tuned | CPU s/GB | ×tuned | broker CPU s/GB source / target | peak RSS MB | ×tuned | startup s |")
	if live {
		p(" produced rec/s | p50 ms | p99 ms | p99.9 ms | max ms | p99 ×tuned |")
	}
	if wan {
		p(" wire MB/GB | ×tuned |")
	}
	p(" verify |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	if live {
		p("---:|---:|---:|---:|---:|---:|")
	}
	if wan {
		p("---:|---:|")
	}
	p("---|\n")
	for _, r := range rs {
		if !r.OK {
			p("| %s | FAILED: %s |\n", runLabel(r), strings.ReplaceAll(firstLine(r.Error), "|", "/"))
			continue
		}
		t := func(a, bb float64) string {
			if !hasTuned {
				return "–"
			}
			return ratio(a, bb)
		}
		p("| %s | %.1f | %.0f | %s | %.1f | %s | %s | %d | %s | %.1f |", runLabel(r), r.MBps, r.RecordsPerSec, t(r.MBps, tuned.MBps),
			r.CPUPerGB, t(r.CPUPerGB, tuned.CPUPerGB), brokerCPU(r), r.PeakRSSBytes>>20, t(float64(r.PeakRSSBytes), float64(tuned.PeakRSSBytes)), r.StartupSeconds)
		if live {
			l := r.Latency
			prod := "–"
			if r.RateProduced > 0 {
				prod = fmt.Sprintf("%.0f", r.RateProduced)
			}
			p(" %s | %.0f | %.0f | %.0f | %.0f | %s |", prod, l.P50, l.P99, l.P999, l.Max, t(l.P99, tuned.Latency.P99))
		}
		if wan {
			p(" %.0f | %s |", r.WireBytesPerGB/1e6, t(r.WireBytesPerGB, tuned.WireBytesPerGB))
		}
		v := r.Verify
		p(" ok: %d/%d, 0 missing, %d dup |\n", v.Replicated, v.Produced, v.Duplicates)
	}
	p("\n")
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// goals is the headline: Ferry against the project's goals, as ratios to
// MM2 tuned in the same run; then the same for exactly-once (Ferry's
// against MM2's), and the cost of tracing.
func goals(b *strings.Builder, rep Report) {
	results := rep.Results
	headline(b, results, Ferry, MM2Tuned, "Headline: Ferry against its goals (ratios to MM2 tuned, same run)")
	headline(b, results, FerryEOS, MM2EOS, "Exactly-once: Ferry exactly-once against MM2 exactly-once (the same goals, same run)")
	sizes(b, rep.Config.ValueBytes, results)
	pair(b, results, Ferry, FerryZstd, "Wire codec: ferry-zstd (link.codec zstd) against ferry (lz4, the default; same run)")
	tracingOverhead(b, results)
	pair(b, results, FerryBaseline, Ferry, "Before and after: ferry against ferry-baseline (same run)")
	pair(b, results, FerryBaselineEOS, FerryEOS, "Before and after, exactly-once: ferry-eos against ferry-baseline-eos (same run)")
	pair(b, results, Ferry, FerryHB100, "Heartbeats every 100 ms: ferry-hb100 against ferry (1 s, the default; same run)")
	pair(b, results, FerryEOS, FerryEOSHB100, "Heartbeats every 100 ms, exactly-once: ferry-eos-hb100 against ferry-eos (same run)")
}

// pair compares system after with system before on every workload both
// ran: the before/after of a change (ferry-baseline) or of a setting
// (ferry-zstd, the other wire codec).
func pair(b *strings.Builder, results []Result, before, after System, title string) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	keys, by := group(results)
	header := false
	for _, k := range keys {
		x, okX := find(by[k], before)
		y, okY := find(by[k], after)
		if !okX || !okY {
			continue
		}
		if !header {
			p("## %s\n\n", title)
			p("| workload | measure | %s | %s | %s ÷ %s |\n|---|---|---:|---:|---:|\n", before, after, after, before)
			header = true
		}
		p("| %s | throughput MB/s | %.1f | %.1f | %s |\n", k, x.MBps, y.MBps, ratio(y.MBps, x.MBps))
		p("| %s | CPU s/GB | %.1f | %.1f | %s |\n", k, x.CPUPerGB, y.CPUPerGB, ratio(y.CPUPerGB, x.CPUPerGB))
		if x.SourceCPUPerGB > 0 && y.SourceCPUPerGB > 0 {
			p("| %s | source broker CPU s/GB | %.1f | %.1f | %s |\n", k, x.SourceCPUPerGB, y.SourceCPUPerGB, ratio(y.SourceCPUPerGB, x.SourceCPUPerGB))
			p("| %s | target broker CPU s/GB | %.1f | %.1f | %s |\n", k, x.TargetCPUPerGB, y.TargetCPUPerGB, ratio(y.TargetCPUPerGB, x.TargetCPUPerGB))
		}
		p("| %s | peak RSS MB | %d | %d | %s |\n", k, x.PeakRSSBytes>>20, y.PeakRSSBytes>>20, ratio(float64(y.PeakRSSBytes), float64(x.PeakRSSBytes)))
		if x.WireBytesPerGB > 0 && y.WireBytesPerGB > 0 {
			p("| %s | wire MB per GB | %.0f | %.0f | %s |\n", k, x.WireBytesPerGB/1e6, y.WireBytesPerGB/1e6, ratio(y.WireBytesPerGB, x.WireBytesPerGB))
		}
	}
	if header {
		p("\n")
	}
}

// headline compares system f with reference t on every workload both ran.
func headline(b *strings.Builder, results []Result, fs, ts System, title string) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	keys, by := group(results)
	ran := false
	for _, r := range results {
		ran = ran || r.System == fs
	}
	if !ran {
		return
	}
	p("## %s\n\n", title)
	p("| goal | target | %s | %s | ratio | met |\n|---|---|---:|---:|---:|---|\n", fs, ts)
	row := func(goal, target string, f, t float64, unit string, better func(r float64) bool) {
		if f <= 0 || t <= 0 {
			p("| %s | %s | – | – | – | no data |\n", goal, target)
			return
		}
		r := f / t
		met := "no"
		switch {
		case better == nil:
			met = "–"
		case better(r):
			met = "yes"
		}
		p("| %s | %s | %.1f %s | %.1f %s | %.2f× | %s |\n", goal, target, f, unit, t, unit, r, met)
	}
	for _, k := range keys {
		rs := by[k]
		f, okF := find(rs, fs)
		t, okT := find(rs, ts)
		if !okF || !okT {
			if hasSystem(rs, fs) && hasSystem(rs, ts) {
				p("| %s | | missing or failed run | | | no data |\n", k)
			}
			continue
		}
		switch rs[0].Workload {
		case CatchUp:
			row("catch-up throughput", "≥ 3×", f.MBps, t.MBps, "MB/s", func(r float64) bool { return r >= 3 })
			row("CPU per GB (catch-up)", "≤ 0.15×", f.CPUPerGB, t.CPUPerGB, "s/GB", func(r float64) bool { return r <= 0.15 })
			row("peak RSS (catch-up)", "≤ 0.25×", float64(f.PeakRSSBytes>>20), float64(t.PeakRSSBytes>>20), "MB", func(r float64) bool { return r <= 0.25 })
		case Partitions:
			row("peak RSS, "+k, "≤ 0.25×", float64(f.PeakRSSBytes>>20), float64(t.PeakRSSBytes>>20), "MB", func(r float64) bool { return r <= 0.25 })
			row("throughput, "+k, "(no goal)", f.MBps, t.MBps, "MB/s", nil)
		case Live:
			row("p99 latency, "+k, "≤ 0.5×", f.Latency.P99, t.Latency.P99, "ms", func(r float64) bool { return r <= 0.5 })
			row("CPU per GB, "+k, "≤ 0.5×", f.CPUPerGB, t.CPUPerGB, "s/GB", func(r float64) bool { return r <= 0.5 })
		case WAN:
			row("throughput, "+k+" RTT", "≥ 5×", f.MBps, t.MBps, "MB/s", func(r float64) bool { return r >= 5 })
			row("wire bytes per GB, "+k+" RTT", "(no goal)", f.WireBytesPerGB/1e6, t.WireBytesPerGB/1e6, "MB/GB", nil)
		}
	}
	p("\n")
}

// tracingOverhead compares the tracing variants with Ferry with tracing off
// on the catch-up run.
func tracingOverhead(b *strings.Builder, results []Result) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	_, by := group(results)
	rs := by[CatchUp]
	off, ok := find(rs, Ferry)
	if !ok {
		return
	}
	header := false
	for _, sys := range TracingSystems {
		if !hasSystem(rs, sys) {
			continue
		}
		if !header {
			p("## Tracing overhead (catch-up, ratios to Ferry with tracing off, same run)\n\n")
			p("| system | sampling | MB/s | ×off | CPU s/GB | ×off | peak RSS MB | ×off |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
			header = true
		}
		r, ok := find(rs, sys)
		if !ok {
			p("| %s | %g | FAILED | | | | | |\n", sys, ferryVariants[sys].sampling)
			continue
		}
		p("| %s | %g | %.1f | %s | %.1f | %s | %d | %s |\n", sys, ferryVariants[sys].sampling,
			r.MBps, ratio(r.MBps, off.MBps), r.CPUPerGB, ratio(r.CPUPerGB, off.CPUPerGB),
			r.PeakRSSBytes>>20, ratio(float64(r.PeakRSSBytes), float64(off.PeakRSSBytes)))
	}
	if header {
		p("\n")
	}
}

// sizes holds Ferry against the floor and MM2 tuned at every record size:
// the catch-up runs (at the config's size) and the sizes workload. The
// goals: at least the floor's throughput for at most half its CPU per GB.
func sizes(b *strings.Builder, defaultBytes int, results []Result) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	by := map[int][]Result{}
	for _, r := range results {
		if r.Workload != CatchUp && r.Workload != Sizes {
			continue
		}
		vb := cmp.Or(r.ValueBytes, defaultBytes)
		by[vb] = append(by[vb], r)
	}
	if !hasWorkload(results, Sizes) {
		return
	}
	vbs := slices.Sorted(maps.Keys(by))
	p("## Record sizes: Ferry against the floor (goals: throughput ≥ 1× the floor's, CPU per GB ≤ 0.5× the floor's)\n\n")
	p("Catch-up runs at the default size and the sizes workload; where a size has both, the table uses the sizes workload's run.\n\n")
	p("| values | ferry MB/s | floor MB/s | ×floor | mm2-tuned MB/s | ×tuned | ferry CPU s/GB | floor CPU s/GB | ×floor | mm2-tuned CPU s/GB | ×tuned | ferry rec/s | met |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, vb := range vbs {
		rs := by[vb]
		if hasWorkload(rs, Sizes) {
			rs = slices.DeleteFunc(slices.Clone(rs), func(r Result) bool { return r.Workload != Sizes })
		}
		f, okF := find(rs, Ferry)
		fl, okFl := find(rs, Floor)
		t, okT := find(rs, MM2Tuned)
		if !okF || !okFl {
			p("| %s | missing or failed run | | | | | | | | | | | no data |\n", sizeLabel(vb))
			continue
		}
		tm, tc := "–", "–"
		if okT {
			tm, tc = fmt.Sprintf("%.1f", t.MBps), fmt.Sprintf("%.1f", t.CPUPerGB)
		}
		met := "no"
		if f.MBps >= fl.MBps && f.CPUPerGB <= 0.5*fl.CPUPerGB {
			met = "yes"
		}
		p("| %s | %.1f | %.1f | %s | %s | %s | %.1f | %.1f | %s | %s | %s | %.0f | %s |\n", sizeLabel(vb),
			f.MBps, fl.MBps, ratio(f.MBps, fl.MBps), tm, ratio(f.MBps, t.MBps),
			f.CPUPerGB, fl.CPUPerGB, ratio(f.CPUPerGB, fl.CPUPerGB), tc, ratio(f.CPUPerGB, t.CPUPerGB), f.RecordsPerSec, met)
	}
	p("\n")
}

func hasWorkload(rs []Result, w string) bool {
	for _, r := range rs {
		if r.Workload == w {
			return true
		}
	}
	return false
}

func hasSystem(rs []Result, sys System) bool {
	for _, r := range rs {
		if r.System == sys {
			return true
		}
	}
	return false
}

// brokerCPU is r's source / target broker CPU per GB, "–" in results from
// before it was measured.
func brokerCPU(r Result) string {
	if r.SourceCPUPerGB <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f / %.1f", r.SourceCPUPerGB, r.TargetCPUPerGB)
}
