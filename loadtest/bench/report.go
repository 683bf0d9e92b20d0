package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Report is everything a benchmark run writes; results.json holds it.
type Report struct {
	Started time.Time     `json:"started"`
	Elapsed time.Duration `json:"elapsed_ns"`
	Machine Machine       `json:"machine"`
	Config  ConfigDesc    `json:"config"`
	Results []Result      `json:"results"`
}

// Machine describes where the benchmark ran.
type Machine struct {
	CPU, Kernel, Go, Java, Kafka string
	Commit                       string // of the Ferry build measured
	Cores                        int
	MemoryBytes                  int64
	LoadAtStart                  string
}

// ConfigDesc is the serializable part of Config.
type ConfigDesc struct {
	Records         int               `json:"records"`
	ValueBytes      int               `json:"value_bytes"`
	Partitions      int               `json:"partitions"`
	LiveDurationS   float64           `json:"live_duration_s"`
	LiveFractions   []float64         `json:"live_fractions"`
	WANRecords      int               `json:"wan_records"`
	Repeat          int               `json:"repeat,omitempty"`
	WANBandwidthKBs int               `json:"wan_bandwidth_kbs"`
	SizeValueBytes  []int             `json:"size_value_bytes,omitempty"`
	SizeMB          int               `json:"size_mb,omitempty"`
	ManyPartitions  int               `json:"many_partitions,omitempty"`
	Groups          int               `json:"groups,omitempty"`
	Settings        map[System]string `json:"settings"`
}

// Describe returns the description of cfg and the machine, for the report.
func Describe(cfg Config) ConfigDesc {
	settings := map[System]string{}
	for _, sys := range AllSystems {
		settings[sys] = systemSettings(sys, cfg.Partitions)
	}
	if cfg.BaselineBin == "" {
		delete(settings, FerryBaseline)
		delete(settings, FerryBaselineEOS)
	} else {
		settings[FerryBaseline] = "`ferry` built from commit " + cfg.BaselineCommit + " (an earlier build, for before/after ratios in one run)"
		settings[FerryBaselineEOS] = "`ferry-eos` built from commit " + cfg.BaselineCommit + " (the earlier build, exactly-once)"
	}
	return ConfigDesc{
		Records: cfg.Records, ValueBytes: cfg.ValueBytes, Partitions: cfg.Partitions,
		LiveDurationS: cfg.LiveDuration.Seconds(), LiveFractions: cfg.LiveFractions, Repeat: cfg.Repeat,
		WANRecords: cfg.WANRecords, WANBandwidthKBs: cfg.WANBandwidthKBs, Settings: settings, Groups: cfg.Groups,
		SizeValueBytes: cfg.SizeValueBytes, SizeMB: cfg.SizeMB, ManyPartitions: cfg.ManyPartitions,
	}
}

func systemSettings(sys System, partitions int) string {
	switch sys {
	case Ferry, FerryEOS, FerryZstd, FerryTrace0, FerryTrace1, FerryTrace100, FerryBaseline, FerryBaselineEOS, FerryWin64K, FerryHB100, FerryEOSHB100:
		v := ferryVariants[sys]
		tr := "tracing off"
		if v.sampling >= 0 {
			tr = fmt.Sprintf("tracing on, OTLP to a local Jaeger v1.75.0 (its CPU not counted), sampling_ratio %g", v.sampling)
		}
		codec := ""
		if v.codec != "" {
			codec = ", link.codec " + v.codec
		}
		if v.window > 0 {
			codec += fmt.Sprintf(", writer grpc.stream_window and grpc.conn_window %d KiB (fixed, not gRPC's dynamic windows)", v.window>>10)
		}
		if v.heartbeat > 0 {
			codec += ", link.heartbeat.interval " + v.heartbeat.String()
		}
		return "one ferry-fetcher, one ferry-writer, at their defaults (the source's batches passed through, link.codec lz4 (for uncompressed source batches), link.batch.max_bytes 1MiB, " +
			"link.max_inflight_bytes 16MiB, link.fetch_max_bytes 1MiB, link.shards 8, link.max_buffered_bytes 32MiB, writer max_buffered_bytes 64MiB, writer producer.compression lz4) but for delivery " + v.delivery + codec + " and " + tr +
			"; naming prefix `src.`; gRPC link in plaintext on loopback (`tls.insecure: true` on both, as MM2's Kafka connections are plaintext here); the harness sets link.discovery_interval 1s"
	case Floor:
		return "`ferry-bench floor-copy`: franz-go v1.22.3 consumer (read_committed, 4 MiB per partition per fetch) feeding a producer " +
			"(same partition, lz4, acks=all, idempotent, 1 MiB batches, 20 ms linger); no checkpoints, no wire hop, no checks: the floor, not a replicator"
	}
	var keys []string
	for k, v := range mm2Props(sys, partitions) {
		keys = append(keys, k+"="+v)
	}
	slices.Sort(keys)
	base := "MM2 4.3.1 dedicated mode, one node, 1 GiB heap; the kafkabroker helper's settings (reverse-flow heartbeats off, plugin.discovery=service_load, " +
		"sync.topic.acls.enabled=false, topic/group refresh 10 s, replication factor 1), none of which touches the data path"
	if len(keys) == 0 {
		return base + "; otherwise stock (tasks.max=1, producer batch.size 16384, linger.ms 0 (Kafka 4: 5), no producer compression, consumer defaults)"
	}
	return base + "; plus `" + strings.Join(keys, "`, `") + "`"
}

// ReadMachine describes this machine; call it when the benchmark starts
// (it records the load average).
func ReadMachine() Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version(), Kafka: "4.3.1 (kafka_2.13, KRaft, single node; loadtest/kafka/pom.xml)"}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.LoadAtStart = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				m.CPU = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		for line := range strings.Lines(string(b)) {
			if _, err := fmt.Sscanf(line, "MemTotal: %d kB", &kb); err == nil {
				m.MemoryBytes = kb * 1024
				break
			}
		}
	}
	if out, err := exec.Command("git", "log", "-1", "--format=%h %cI %s").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "status", "--porcelain", "--", "services", "pkg").Output(); err == nil && len(st) > 0 {
			m.Commit += " (plus uncommitted changes in services/ or pkg/)"
		}
	}
	if out, err := exec.Command("java", "-version").CombinedOutput(); err == nil {
		m.Java = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	}
	return m
}

// WriteReport writes results.json, report.md and the plots into dir.
func WriteReport(dir string, rep Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), b, 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return writeMarkdownAndPlots(dir, rep)
}

// RewriteReport rewrites report.md and the plots in dir from a results.json.
func RewriteReport(jsonPath, dir string) error {
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		return fmt.Errorf("rewrite report: %w", err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("rewrite report: %s: %w", jsonPath, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("rewrite report: %w", err)
	}
	return writeMarkdownAndPlots(dir, rep)
}

func writeMarkdownAndPlots(dir string, rep Report) error {
	plots, err := writePlots(dir, rep.Results)
	if err != nil {
		return err
	}
	// notes.md, hand-written after a run, is kept in the report.
	notes, err := os.ReadFile(filepath.Join(dir, "notes.md"))
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("report: %w", err)
	}
	md := markdown(rep, plots, string(notes))
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(md), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// writePlots draws one latency CDF per live rate and one throughput-over-
// time plot per catch-up or WAN key; it returns the file names.
func writePlots(dir string, results []Result) ([]string, error) {
	var names []string
	byKey := map[string][]Result{}
	var keys []string
	for _, r := range results {
		if !r.OK {
			continue
		}
		k := r.Key()
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], r)
	}
	for _, k := range keys {
		rs := byKey[k]
		slug := strings.NewReplacer(", ", "-", " ", "-", "/", "").Replace(k)
		var c chart
		if rs[0].Workload == Live {
			c = chart{title: "End-to-end latency CDF, " + k, xLabel: "latency, ms (log scale)", yLabel: "fraction of records", logX: true}
			for _, r := range rs {
				l := line{name: string(r.System)}
				for i, v := range r.LatencyCDF {
					l.xs = append(l.xs, max(v, 0.1))
					l.ys = append(l.ys, float64(i)/float64(len(r.LatencyCDF)))
				}
				c.lines = append(c.lines, l)
			}
		} else {
			c = chart{title: "Records copied per second (target, sampled every second), " + k, xLabel: "seconds since replicator start", yLabel: "MB/s"}
			for _, r := range medianRuns(rs) {
				l := line{name: string(r.System)}
				per := float64(r.Bytes) / float64(max(r.Records, 1)) / 1e6
				for i := 1; i < len(r.Series); i++ {
					l.xs = append(l.xs, float64(i))
					l.ys = append(l.ys, float64(r.Series[i]-r.Series[i-1])*per)
				}
				c.lines = append(c.lines, l)
			}
		}
		name := slug + ".png"
		if rs[0].Workload == Live {
			name = "latency-cdf-" + name
		} else {
			name = "throughput-" + name
		}
		if err := c.writePNG(filepath.Join(dir, name)); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	return names, nil
}

// medianRuns keeps, of repeated runs, each system's median run (see find).
func medianRuns(rs []Result) []Result {
	var out []Result
	seen := map[System]bool{}
	for _, r := range rs {
		if seen[r.System] {
			continue
		}
		seen[r.System] = true
		if m, ok := find(rs, r.System); ok {
			out = append(out, m)
		}
	}
	return out
}
