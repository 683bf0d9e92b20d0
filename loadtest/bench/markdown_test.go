package bench

import (
	"strings"
	"testing"
)

func catchUp(sys System, run int, mbps, cpu float64) Result {
	return Result{System: sys, Workload: CatchUp, Run: run, MBps: mbps, CPUPerGB: cpu, PeakRSSBytes: 100 << 20, OK: true}
}

// Ratios use each system's run of median throughput, and a failed run is
// never a candidate.
func TestFindUsesTheMedianRun(t *testing.T) {
	rs := []Result{
		catchUp(Ferry, 1, 30, 20), catchUp(Ferry, 2, 10, 40), catchUp(Ferry, 3, 20, 30),
		{System: Ferry, Workload: CatchUp, Run: 4, MBps: 25, OK: false},
		catchUp(MM2Tuned, 1, 5, 50),
	}
	got, ok := find(rs, Ferry)
	if !ok || got.Run != 3 {
		t.Fatalf("find = run %d (ok %v), want run 3 (20 MB/s, the median of 10, 20, 30)", got.Run, ok)
	}
	if _, ok := find(rs, FerryEOS); ok {
		t.Fatal("find found a system that never ran")
	}
}

// The headline divides the median runs, names the goal met or not, and
// the exactly-once table appears only when Ferry exactly-once ran.
func TestHeadline(t *testing.T) {
	rs := []Result{
		catchUp(MM2Tuned, 1, 10, 60), catchUp(Ferry, 1, 40, 8),
		catchUp(MM2Tuned, 2, 14, 50), catchUp(Ferry, 2, 36, 40),
		catchUp(MM2Tuned, 3, 12, 55), catchUp(Ferry, 3, 45, 25),
	}
	var b strings.Builder
	goals(&b, Report{Results: rs})
	out := b.String()
	for _, want := range []string{
		"| catch-up throughput | ≥ 3× | 40.0 MB/s | 12.0 MB/s | 3.33× | yes |",
		"| CPU per GB (catch-up) | ≤ 0.15× | 8.0 s/GB | 55.0 s/GB | 0.15× | yes |",
		"| peak RSS (catch-up) | ≤ 0.25× | 100.0 MB | 100.0 MB | 1.00× | no |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("headline lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Exactly-once") {
		t.Errorf("exactly-once table without a ferry-eos run:\n%s", out)
	}
}

// A pair table divides the later system by the earlier per workload both
// ran, shows wire bytes only where they were measured, and is left out when
// one of the two never ran.
func TestPair(t *testing.T) {
	wan := func(sys System, mbps, wire float64) Result {
		return Result{System: sys, Workload: WAN, RTTMillis: 50, MBps: mbps, CPUPerGB: 10, PeakRSSBytes: 100 << 20, WireBytesPerGB: wire, OK: true}
	}
	rs := []Result{
		catchUp(FerryZstd, 1, 20, 40), catchUp(Ferry, 1, 30, 30),
		wan(FerryZstd, 20, 200e6), wan(Ferry, 25, 300e6),
	}
	var b strings.Builder
	pair(&b, rs, FerryZstd, Ferry, "codec")
	out := b.String()
	for _, want := range []string{
		"| ferry-zstd | ferry | ferry ÷ ferry-zstd |",
		"| catch-up | throughput MB/s | 20.0 | 30.0 | 1.50× |",
		"| catch-up | CPU s/GB | 40.0 | 30.0 | 0.75× |",
		"| wire MB per GB | 200 | 300 | 1.50× |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("pair table lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "wire MB per GB") != 1 {
		t.Errorf("wire bytes shown for a workload that did not measure them:\n%s", out)
	}
	b.Reset()
	pair(&b, rs, FerryBaseline, Ferry, "before/after")
	if b.Len() != 0 {
		t.Errorf("pair table without a ferry-baseline run:\n%s", b.String())
	}
}

// The sizes table takes the default-size catch-up runs for a size the
// sizes workload did not run, prefers the sizes workload's run where both
// ran, and meets its goal only with the floor's throughput at half its CPU.
func TestSizes(t *testing.T) {
	size := func(sys System, vb int, mbps, cpu float64) Result {
		r := catchUp(sys, 0, mbps, cpu)
		r.Workload, r.ValueBytes = Sizes, vb
		return r
	}
	rs := []Result{
		catchUp(Ferry, 0, 50, 10), catchUp(Floor, 0, 40, 30), catchUp(MM2Tuned, 0, 10, 60),
		size(Ferry, 100, 20, 40), size(Floor, 100, 25, 50),
		size(Ferry, 51200, 90, 2), size(Floor, 51200, 60, 8), size(MM2Tuned, 51200, 30, 20),
		size(Ferry, 1024, 45, 12), size(Floor, 1024, 40, 30),
	}
	var b strings.Builder
	sizes(&b, 1024, rs)
	out := b.String()
	for _, want := range []string{
		"| 100 B | 20.0 | 25.0 | 0.80× | – | – | 40.0 | 50.0 | 0.80× | – | – | 0 | no |",
		"| 1 KiB | 45.0 | 40.0 | 1.12× | – | – | 12.0 | 30.0 | 0.40× | – | – | 0 | yes |",
		"| 50 KiB | 90.0 | 60.0 | 1.50× | 30.0 | 3.00× | 2.0 | 8.0 | 0.25× | 20.0 | 0.10× | 0 | yes |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("sizes table lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	sizes(&b, 1024, rs[:3])
	if b.Len() != 0 {
		t.Errorf("sizes table without a sizes run:\n%s", b.String())
	}
}
