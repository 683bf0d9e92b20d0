// Package bench runs Ferry and MirrorMaker 2 side by side on real Apache
// Kafka brokers and reports throughput, CPU, memory, latency and bytes on an
// emulated WAN, with every run's target verified against its source. See
// docs/benchmark.md.
package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/loadtest/harness"
	"github.com/ferry-replicator/ferry/loadtest/jaegeragent"
	"github.com/ferry-replicator/ferry/loadtest/kafkabroker"
	"github.com/ferry-replicator/ferry/loadtest/verify"
	"github.com/ferry-replicator/ferry/loadtest/workload"
)

// Config selects what the benchmark runs.
type Config struct {
	Bin string // folder of ferry-fetcher and ferry-writer
	// BaselineBin holds the binaries of system ferry-baseline, and
	// BaselineCommit names the commit they were built from.
	BaselineBin, BaselineCommit string
	Self                        string // this program, run as "Self floor-copy ..." for the floor
	WorkDir                     string // per-run folders: configs, logs, broker data (removed)

	Systems     []System // catch-up runs
	LiveSystems []System // live runs
	WANSystems  []System // WAN runs

	CatchUp, Live, WAN, Sizes, ManyParts bool

	Records    int // catch-up records
	ValueBytes int
	Partitions int

	// LiveRates in records/s; when empty, LiveFractions of MM2 tuned's
	// catch-up records/s in this benchmark.
	LiveRates     []int
	LiveFractions []float64
	LiveDuration  time.Duration

	WANRTTs         []time.Duration
	WANBandwidthKBs int
	WANRecords      int

	// SizeValueBytes are the record sizes of the sizes workload: a catch-up
	// of SizeMB logical megabytes at each size, by SizeSystems. A
	// replicator's cost per record and its cost per byte differ; one size
	// hides one of them.
	SizeValueBytes []int
	SizeMB         int
	SizeSystems    []System

	// ManyPartitions is the source partition count of the partitions
	// workload (a catch-up of Records, by PartitionSystems): memory should
	// follow the in-flight bytes, not the partition count.
	ManyPartitions   int
	PartitionSystems []System

	// Groups is how many member-less consumer groups the catch-up runs
	// commit on the source before the replicator starts (commitGroups):
	// the cost of a link's group sync, measured. 0: none.
	Groups int

	// Repeat runs each catch-up system this many times, interleaved (every
	// system once, then again in the reverse order, so that no system is
	// always the first or the last of a round), and ratios use each
	// system's median run: on shared cores one run can be twice as fast as
	// the next.
	Repeat int

	// ProfileSeconds, when above 0, takes a CPU profile of each Ferry
	// process (pprof on its admin.pprof_listen port) for that long from the first
	// record of every copy but the live ones, then a heap profile, into
	// ProfileDir.
	ProfileSeconds int
	ProfileDir     string

	RunTimeout time.Duration
	Out        io.Writer // progress
	// OnResult, if set, is called with all results so far after each run.
	OnResult func([]Result)
}

// Workload kinds.
const (
	CatchUp    = "catch-up"
	Live       = "live"
	WAN        = "wan"
	Sizes      = "sizes"      // catch-up at each record size
	Partitions = "partitions" // catch-up with many partitions
)

// Result is one system on one workload.
type Result struct {
	System   System `json:"system"`
	Workload string `json:"workload"`
	// Run numbers the repeats of a catch-up run (Config.Repeat > 1); 0
	// when the run is not repeated.
	Run int `json:"run,omitempty"`
	// RateTarget is the live producer rate, records/s; RateProduced what
	// the producer achieved (on shared cores it can fall short).
	RateTarget   int     `json:"rate_target,omitempty"`
	RateProduced float64 `json:"rate_produced,omitempty"`
	// RTT and BandwidthKBs describe the WAN hop of a WAN run.
	RTTMillis    int64 `json:"rtt_ms,omitempty"`
	BandwidthKBs int   `json:"bandwidth_kbs,omitempty"`
	// ValueBytes and Partitions are the run's record size and source
	// partitions (reports before 2026-12-01 leave them 0: the config's).
	ValueBytes int `json:"value_bytes,omitempty"`
	Partitions int `json:"partitions,omitempty"`

	Records int64 `json:"records"` // records expected on the target
	Bytes   int64 `json:"bytes"`   // their logical size: keys, values, headers

	// StartupSeconds: replicator start to its first record on the target.
	StartupSeconds float64 `json:"startup_s"`
	// CopySeconds: first to last record on the target (catch-up), or live
	// producer start to last record (live).
	CopySeconds   float64 `json:"copy_s"`
	MBps          float64 `json:"mb_per_s"`
	RecordsPerSec float64 `json:"records_per_s"`
	// CPUSeconds is utime+stime of the replicator's processes over the
	// copy window; CPUTotalSeconds from process start to the end.
	CPUSeconds      float64 `json:"cpu_s"`
	CPUTotalSeconds float64 `json:"cpu_total_s"`
	CPUPerGB        float64 `json:"cpu_s_per_gb"`
	// SourceCPUPerGB and TargetCPUPerGB are utime+stime of each broker
	// over the copy window, per GB: what the replicator costs the
	// clusters (its fetches, produces, offset and metadata requests); the
	// target's includes what the harness's tail consumer costs it, the
	// same for all systems.
	SourceCPUPerGB float64 `json:"source_cpu_s_per_gb,omitempty"`
	TargetCPUPerGB float64 `json:"target_cpu_s_per_gb,omitempty"`
	PeakRSSBytes   int64   `json:"peak_rss_bytes"`

	Latency    LatencyMillis `json:"latency_ms"`
	LatencyCDF []float64     `json:"latency_cdf_ms,omitempty"` // 1000 quantiles

	WireBytes      int64   `json:"wire_bytes,omitempty"`
	WireBytesPerGB float64 `json:"wire_bytes_per_gb,omitempty"`

	// Series is records on the target, sampled every second from start.
	Series []int64 `json:"series"`

	// GroupsSynced counts the Config.Groups found committed on the
	// target after the copy (catch-up runs of Ferry; 0 for a baseline
	// built before group sync).
	GroupsSynced int `json:"groups_synced,omitempty"`

	Verify verify.Result `json:"verify"`
	OK     bool          `json:"ok"`
	Error  string        `json:"error,omitempty"`
}

// LatencyMillis are end-to-end latency percentiles in milliseconds.
type LatencyMillis struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p999"`
	Max   float64 `json:"max"`
}

// Key names the run in tables and plots.
func (r Result) Key() string {
	switch r.Workload {
	case Live:
		return fmt.Sprintf("live %d rec/s", r.RateTarget)
	case WAN:
		if r.BandwidthKBs > 0 {
			return fmt.Sprintf("wan %d ms, %d KB/s", r.RTTMillis, r.BandwidthKBs)
		}
		return fmt.Sprintf("wan %d ms", r.RTTMillis)
	case Sizes:
		return "catch-up, " + sizeLabel(r.ValueBytes) + " values"
	case Partitions:
		return fmt.Sprintf("catch-up, %d partitions", r.Partitions)
	}
	return r.Workload
}

// sizeLabel writes a value size as 100 B, 1 KiB, 50 KiB.
func sizeLabel(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%d KiB", n/1024)
	}
	return fmt.Sprintf("%d B", n)
}

const (
	topic       = "bench.orders"
	targetTopic = sourceAlias + "." + topic
	primerPer   = 25 // primer records per partition before a live run
)

type spec struct {
	system     System
	workload   string
	run        int // repeat number, 0 when not repeated
	records    int // catch-up or WAN preload
	rate       int // live
	wan        *WANOptions
	valueBytes int // record size; 0: the config's
	partitions int // source partitions; 0: the config's
}

// Run runs the selected workloads one system at a time, each on two fresh
// brokers, and returns every result (failed runs included, with Error set).
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	var results []Result
	run := func(s spec) Result {
		s.valueBytes = cmp.Or(s.valueBytes, cfg.ValueBytes)
		s.partitions = cmp.Or(s.partitions, cfg.Partitions)
		fmt.Fprintf(cfg.Out, "=== %s %s\n", s.system, describe(s))
		r := runOne(ctx, cfg, s, len(results))
		if r.Error != "" {
			fmt.Fprintf(cfg.Out, "    FAILED: %s\n", r.Error)
		} else {
			fmt.Fprintf(cfg.Out, "    %.1f MB/s %.0f rec/s, cpu %.1f s/GB (source broker %.1f, target broker %.1f), rss %d MB, latency p99 %.0f ms, %s\n",
				r.MBps, r.RecordsPerSec, r.CPUPerGB, r.SourceCPUPerGB, r.TargetCPUPerGB, r.PeakRSSBytes>>20, r.Latency.P99, r.Verify.Line())
		}
		results = append(results, r)
		if cfg.OnResult != nil {
			cfg.OnResult(results)
		}
		return r
	}
	if cfg.CatchUp {
		repeat := max(cfg.Repeat, 1)
		for i := range repeat {
			for _, sys := range roundOrder(cfg.Systems, i) {
				sp := spec{system: sys, workload: CatchUp, records: cfg.Records}
				if repeat > 1 {
					sp.run = i + 1
				}
				run(sp)
				if ctx.Err() != nil {
					return results, ctx.Err()
				}
			}
		}
	}
	if cfg.Live {
		rates := cfg.LiveRates
		if len(rates) == 0 {
			base, ok := tunedRate(results)
			if !ok {
				return results, errors.New("live: no rates given and no successful mm2-tuned catch-up run to derive them from")
			}
			for _, f := range cfg.LiveFractions {
				rates = append(rates, int(math.Round(base*f/100))*100)
			}
		}
		for _, rate := range rates {
			for _, sys := range cfg.LiveSystems {
				run(spec{system: sys, workload: Live, rate: rate})
				if ctx.Err() != nil {
					return results, ctx.Err()
				}
			}
		}
	}
	if cfg.WAN {
		for _, rtt := range cfg.WANRTTs {
			for _, sys := range cfg.WANSystems {
				run(spec{system: sys, workload: WAN, records: cfg.WANRecords,
					wan: &WANOptions{RTT: rtt, BandwidthKBs: cfg.WANBandwidthKBs}})
				if ctx.Err() != nil {
					return results, ctx.Err()
				}
			}
		}
	}
	if cfg.Sizes {
		for _, vb := range cfg.SizeValueBytes {
			for _, sys := range cfg.SizeSystems {
				run(spec{system: sys, workload: Sizes, records: sizeRecords(cfg.SizeMB, vb), valueBytes: vb})
				if ctx.Err() != nil {
					return results, ctx.Err()
				}
			}
		}
	}
	if cfg.ManyParts {
		for _, sys := range cfg.PartitionSystems {
			run(spec{system: sys, workload: Partitions, records: cfg.Records, partitions: cfg.ManyPartitions})
			if ctx.Err() != nil {
				return results, ctx.Err()
			}
		}
	}
	return results, nil
}

// sizeRecords is how many records of valueBytes make about mb logical
// megabytes (a record's key and headers add about 60 bytes).
func sizeRecords(mb, valueBytes int) int {
	return max(1000, mb*1_000_000/(valueBytes+60))
}

func describe(s spec) string {
	switch s.workload {
	case Live:
		return fmt.Sprintf("live at %d records/s", s.rate)
	case WAN:
		return fmt.Sprintf("catch-up of %d records over a %v RTT hop (bandwidth cap %d KB/s, 0 = none)", s.records, s.wan.RTT, s.wan.BandwidthKBs)
	}
	return fmt.Sprintf("catch-up of %d records of ~%d bytes, %d partitions", s.records, s.valueBytes, s.partitions)
}

// tunedRate is MM2 tuned's catch-up records/s.
func tunedRate(results []Result) (float64, bool) {
	for _, r := range results {
		if r.System == MM2Tuned && r.Workload == CatchUp && r.OK {
			return r.RecordsPerSec, true
		}
	}
	return 0, false
}

// runOne runs one spec and always returns a Result.
func runOne(ctx context.Context, cfg Config, s spec, n int) Result {
	r := Result{System: s.system, Workload: s.workload, RateTarget: s.rate, Run: s.run, ValueBytes: s.valueBytes, Partitions: s.partitions}
	if s.wan != nil {
		r.RTTMillis, r.BandwidthKBs = s.wan.RTT.Milliseconds(), s.wan.BandwidthKBs
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.RunTimeout)
	defer cancel()
	dir := filepath.Join(cfg.WorkDir, fmt.Sprintf("%02d-%s-%s", n, s.system, s.workload))
	if err := runIn(ctx, cfg, s, dir, &r); err != nil {
		r.Error = err.Error()
		r.OK = false
	}
	return r
}

// cluster is the pair of fresh brokers of one run.
type cluster struct {
	source, target *kafkabroker.Broker
	// wanAddr is where the source's WAN listener is advertised: a
	// replicator that bootstraps from it talks to the source only through
	// the proxy listening there. wanPort is the listener's real port.
	wanAddr string
	wanPort int
}

func startCluster(ctx context.Context, dir string) (*cluster, error) {
	ports := make([]int, 3)
	for i := range ports {
		a, err := harness.FreeAddr()
		if err != nil {
			return nil, err
		}
		_, p, _ := net.SplitHostPort(a)
		ports[i], _ = strconv.Atoi(p)
	}
	wanAddr, err := harness.FreeAddr()
	if err != nil {
		return nil, err
	}
	c := &cluster{wanAddr: wanAddr, wanPort: ports[2]}
	// Two client listeners on the source: PLAINTEXT for local clients
	// (workload, verifier) and WAN, advertised at the proxy address.
	srcProps := map[string]string{
		"listeners": fmt.Sprintf("PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d,WAN://127.0.0.1:%d",
			ports[0], ports[1], ports[2]),
		"advertised.listeners":           fmt.Sprintf("PLAINTEXT://127.0.0.1:%d,WAN://%s", ports[0], wanAddr),
		"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,WAN:PLAINTEXT",
	}
	c.source, err = kafkabroker.Start(ctx, kafkabroker.Options{Name: "source", DataDir: filepath.Join(dir, "source"),
		Port: ports[0], ControllerPort: ports[1], Props: srcProps})
	if err != nil {
		return nil, err
	}
	c.target, err = kafkabroker.Start(ctx, kafkabroker.Options{Name: "target", DataDir: filepath.Join(dir, "target")})
	if err != nil {
		c.source.Stop()
		return nil, err
	}
	return c, nil
}

// stop stops both brokers and removes their data, keeping logs.
func (c *cluster) stop() {
	for _, b := range []*kafkabroker.Broker{c.source, c.target} {
		_ = b.Stop()
		_ = os.RemoveAll(filepath.Join(b.DataDir(), "data"))
	}
}

func createTopic(ctx context.Context, addr, name string, partitions int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return err
	}
	defer cl.Close()
	lz4 := "lz4"
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, int32(partitions), 1, map[string]*string{"compression.type": &lz4}, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("create topic %s: %w", name, err)
	}
	return nil
}

func produce(ctx context.Context, addr string, o workload.Options) error {
	p, err := workload.NewProducer([]string{addr}, o)
	if err != nil {
		return err
	}
	defer p.Close()
	if err := p.Run(ctx); err != nil {
		return fmt.Errorf("produce %d records: %w", o.Records, err)
	}
	return nil
}

func runIn(ctx context.Context, cfg Config, s spec, dir string, r *Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	c, err := startCluster(ctx, dir)
	if err != nil {
		return fmt.Errorf("brokers: %w", err)
	}
	defer c.stop()
	src, dst := c.source.Addr(), c.target.Addr()
	if err := createTopic(ctx, src, topic, s.partitions); err != nil {
		return err
	}
	wl := workload.Options{Topic: topic, Partitions: int32(s.partitions), ValueBytes: s.valueBytes, Seed: 1}
	if s.workload != Live {
		wl.Records = s.records
		start := time.Now()
		if err := produce(ctx, src, wl); err != nil {
			return fmt.Errorf("preload: %w", err)
		}
		fmt.Fprintf(cfg.Out, "    preloaded %d records in %v\n", s.records, time.Since(start).Round(100*time.Millisecond))
		if cfg.Groups > 0 {
			if err := commitGroups(ctx, src, topic, cfg.Groups); err != nil {
				return err
			}
		}
	}
	// The target topic exists before any system starts, with the source's
	// partition count (every system keeps partition numbers): the tail
	// consumer and the end-offset poller then see the first record, where a
	// topic created by the replicator is found only at their next metadata
	// refresh, seconds later; a fast copy could be over by then and the
	// copy window would come out near zero.
	if err := createTopic(ctx, dst, targetTopic, s.partitions); err != nil {
		return err
	}
	if cfg.Groups > 0 && s.workload != Live {
		if err := readyCoordinator(ctx, dst); err != nil {
			return err
		}
	}
	t, err := startTail([]string{dst}, targetTopic)
	if err != nil {
		return err
	}
	defer t.Close()

	// The replicator, with the WAN hop where its traffic crosses regions:
	// fetcher to writer for Ferry, consumer to source cluster for MM2 and
	// the floor (they run next to the target).
	var hop *wan
	sourceForReplicator := src
	start := time.Now()
	var rep replicator
	switch {
	case s.system.isFerry():
		v := ferryVariants[s.system]
		otlp := ""
		if v.sampling >= 0 {
			// A Jaeger of its own per run, so spans of one run never
			// load the next; its CPU is not the replicator's, as the
			// brokers' is not.
			agent, err := jaegeragent.Start(ctx, jaegeragent.Options{LogFile: filepath.Join(dir, "jaeger.log")})
			if err != nil {
				return fmt.Errorf("jaeger: %w", err)
			}
			defer agent.Stop()
			otlp = agent.OTLPGRPCAddr()
		}
		listen, err := harness.FreeAddr()
		if err != nil {
			return err
		}
		dial := listen
		if s.wan != nil {
			proxyAddr, err := harness.FreeAddr()
			if err != nil {
				return err
			}
			if hop, err = startWAN(proxyAddr, listen, *s.wan); err != nil {
				return err
			}
			defer hop.Close()
			dial = proxyAddr
		}
		start = time.Now()
		bin := cfg.Bin
		if v.baseline {
			if cfg.BaselineBin == "" {
				return errors.New("ferry-baseline needs -baseline-bin")
			}
			bin = cfg.BaselineBin
		}
		rep, err = startFerry(ctx, v, otlp, bin, dir, src, dst, listen, dial, topic)
		if err != nil {
			return err
		}
	default:
		if s.wan != nil {
			if hop, err = startWAN(c.wanAddr, fmt.Sprintf("127.0.0.1:%d", c.wanPort), *s.wan); err != nil {
				return err
			}
			defer hop.Close()
			sourceForReplicator = c.wanAddr
		}
		start = time.Now()
		if s.system == Floor {
			rep, err = startFloor(cfg.Self, dir, FloorOptions{Source: sourceForReplicator, Target: dst, Topic: topic, Dest: targetTopic})
		} else {
			rep, err = startMM2(ctx, s.system, dir, sourceForReplicator, dst, topic, s.partitions)
		}
		if err != nil {
			return err
		}
	}
	defer func() {
		if err := rep.Stop(); err != nil {
			fmt.Fprintf(cfg.Out, "    stop %s: %v\n", s.system, err)
		}
	}()
	pids := rep.PIDs()

	ends, err := newEndOffsets(dst, targetTopic)
	if err != nil {
		return err
	}
	defer ends.close()
	p := &progress{rep: rep, brokers: [2]int{c.source.PID(), c.target.PID()}, tail: t, ends: ends, start: start, txn: s.system.transactional()}
	if f, ok := rep.(*ferry); ok && cfg.ProfileSeconds > 0 && s.workload != Live {
		prof := &profiler{dir: cfg.ProfileDir, name: filepath.Base(dir), seconds: cfg.ProfileSeconds, out: cfg.Out}
		p.onCopy = func() { prof.start(ctx, map[string]string{"writer": f.pprofs[0], "fetcher": f.pprofs[1]}) }
		defer prof.wait() // before the replicator stops: the profiles need it
	}
	var m measured
	if s.workload == Live {
		m, err = measureLive(ctx, cfg, c, wl, s.rate, p)
	} else {
		m, err = measureCatchUp(ctx, int64(s.records), p)
	}
	r.Series = p.series
	if err != nil {
		return err
	}
	r.Records, r.Bytes = m.records, m.bytes
	r.StartupSeconds = m.first.Sub(start).Seconds()
	r.RateProduced = m.produced
	r.CopySeconds = m.last.Sub(m.from).Seconds()
	if r.CopySeconds > 0 {
		r.MBps = float64(m.bytes) / 1e6 / r.CopySeconds
		r.RecordsPerSec = float64(m.records) / r.CopySeconds
	}
	r.CPUSeconds, r.CPUTotalSeconds = m.cpuEnd-m.cpuFrom, m.cpuEnd
	if m.bytes > 0 {
		r.CPUPerGB = r.CPUSeconds / (float64(m.bytes) / 1e9)
		r.SourceCPUPerGB = (m.brokersEnd[0] - m.brokersFrom[0]) / (float64(m.bytes) / 1e9)
		r.TargetCPUPerGB = (m.brokersEnd[1] - m.brokersFrom[1]) / (float64(m.bytes) / 1e9)
	}
	if r.PeakRSSBytes, err = totalPeakRSS(pids); err != nil {
		return err
	}
	if hop != nil {
		r.WireBytes = hop.Bytes()
		r.WireBytesPerGB = float64(r.WireBytes) / (float64(m.bytes) / 1e9)
	}
	lat := t.Latencies()
	r.Latency, r.LatencyCDF = summarize(lat)

	res, err := verify.Compare(ctx, []string{src}, []string{dst}, []verify.Pair{{Source: topic, Target: targetTopic}})
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	r.Verify = res
	if !res.OK() || res.Produced != m.expected {
		return fmt.Errorf("verify failed (expected %d): %s", m.expected, res.Line())
	}
	if cfg.Groups > 0 && s.workload != Live && s.system.isFerry() {
		if r.GroupsSynced, err = groupsOn(ctx, dst, targetTopic, cfg.Groups); err != nil {
			return err
		}
		fmt.Fprintf(cfg.Out, "    groups on the target: %d of %d\n", r.GroupsSynced, cfg.Groups)
	}
	r.OK = true
	return nil
}

// measured is what a wait loop saw.
type measured struct {
	records, bytes          int64      // in the measured window
	expected                int64      // on the target in all
	first, from, last       time.Time  // first record seen; window start; last record seen
	cpuFrom, cpuEnd         float64    // the replicator's processes
	brokersFrom, brokersEnd [2]float64 // the source's and the target's
	produced                float64    // live producer records/s
}

// progress watches the target while a replicator runs: the tail's record
// count decides completion; the end offsets, polled every 50 ms, give the
// first and last moments of the copy (for systems writing transactions,
// whose commit markers also advance end offsets, the tail decides the last
// moment) and the per-second series.
type progress struct {
	rep     replicator
	brokers [2]int // the source's and the target's processes
	tail    *tail
	ends    *endOffsets
	start   time.Time
	series  []int64
	txn     bool   // the system writes transactions
	onCopy  func() // if set, runs when the first record shows up
}

// waitFor returns once the tail holds want records (and the end offsets
// reach want), with the time the copy was first seen complete; onFirst runs
// once when the first record shows up. It fails if the replicator exits or
// ctx ends.
func (p *progress) waitFor(ctx context.Context, want int64, onFirst func()) (time.Time, error) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	next := p.start.Add(time.Duration(len(p.series)+1) * time.Second)
	first := onFirst == nil
	var last time.Time
	for {
		now := time.Now()
		end := p.ends.sum(ctx)
		for !now.Before(next) {
			p.series = append(p.series, end)
			next = next.Add(time.Second)
		}
		if !first && end > 0 {
			first = true
			onFirst()
			if p.onCopy != nil {
				p.onCopy()
			}
		}
		if last.IsZero() && end >= want && !p.txn {
			last = now
		}
		if n := p.tail.Count(); n >= want && end >= want {
			if last.IsZero() {
				last = now
			}
			return last, nil
		}
		if err := p.rep.Check(); err != nil {
			return now, err
		}
		select {
		case <-ctx.Done():
			return now, fmt.Errorf("target holds %d of %d records: %w (last tail error: %v)", p.tail.Count(), want, ctx.Err(), p.tail.LastErr())
		case <-tick.C:
		}
	}
}

// cpu reads the CPU seconds the replicator's processes and each broker
// have used.
func (p *progress) cpu() (replicator float64, brokers [2]float64, err error) {
	if replicator, err = totalCPU(p.rep.PIDs()); err != nil {
		return 0, brokers, err
	}
	for i, pid := range p.brokers {
		if brokers[i], err = cpuSeconds(pid); err != nil {
			return 0, brokers, err
		}
	}
	return replicator, brokers, nil
}

func measureCatchUp(ctx context.Context, records int64, p *progress) (measured, error) {
	m := measured{records: records, expected: records}
	var cpuErr error
	last, err := p.waitFor(ctx, records, func() {
		m.first = time.Now()
		m.from = m.first
		m.cpuFrom, m.brokersFrom, cpuErr = p.cpu()
	})
	if err != nil {
		return m, err
	}
	if cpuErr != nil {
		return m, cpuErr
	}
	m.last = last
	if m.cpuEnd, m.brokersEnd, err = p.cpu(); err != nil {
		return m, err
	}
	m.bytes = p.tail.Bytes()
	return m, nil
}

// measureLive primes the replicator with a few records (so start-up is
// not counted as latency), then produces at rate for the live duration
// while the tail records each record's latency.
func measureLive(ctx context.Context, cfg Config, c *cluster, wl workload.Options, rate int, p *progress) (measured, error) {
	t := p.tail
	var m measured
	primer := wl
	primer.Records, primer.Seed = primerPer*int(wl.Partitions), 2
	if err := produce(ctx, c.source.Addr(), primer); err != nil {
		return m, fmt.Errorf("primer: %w", err)
	}
	if _, err := p.waitFor(ctx, int64(primer.Records), func() { m.first = time.Now() }); err != nil {
		return m, fmt.Errorf("primer: %w", err)
	}
	var err error
	if m.cpuFrom, m.brokersFrom, err = p.cpu(); err != nil {
		return m, err
	}
	bytes0 := t.Bytes()
	live := wl
	live.Records, live.Rate, live.Seed = rate*int(cfg.LiveDuration.Seconds()), rate, 3
	m.from = time.Now()
	t.MeasureFrom(m.from)
	prodErr := make(chan error, 1)
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		err := produce(pctx, c.source.Addr(), live)
		m.produced = float64(live.Records) / time.Since(m.from).Seconds()
		prodErr <- err
	}()
	m.expected = int64(primer.Records + live.Records)
	last, err := p.waitFor(ctx, m.expected, nil)
	if err != nil {
		cancel()
		<-prodErr
		return m, err
	}
	if err := <-prodErr; err != nil {
		return m, err
	}
	m.last = last
	if m.cpuEnd, m.brokersEnd, err = p.cpu(); err != nil {
		return m, err
	}
	m.bytes = p.tail.Bytes() - bytes0
	m.records = int64(live.Records)
	return m, nil
}

// summarize turns latencies into percentiles and 1000 quantiles (ms).
func summarize(d []time.Duration) (LatencyMillis, []float64) {
	if len(d) == 0 {
		return LatencyMillis{}, nil
	}
	slices.Sort(d)
	ms := func(x time.Duration) float64 { return float64(x) / 1e6 }
	at := func(q float64) float64 { return ms(d[min(len(d)-1, int(q*float64(len(d))))]) }
	cdf := make([]float64, 1000)
	for i := range cdf {
		cdf[i] = at(float64(i) / 1000)
	}
	return LatencyMillis{Count: len(d), P50: at(0.5), P99: at(0.99), P999: at(0.999), Max: ms(d[len(d)-1])}, cdf
}

// roundOrder is the order of systems in catch-up round i: as given, and
// reversed every other round. Whichever system ran first of a pair was
// slower by some 2 % in throughput in one comparison of two builds, head
// first and baseline first (2026-12-05-dr-cost-flush and -rev).
func roundOrder(systems []System, i int) []System {
	order := slices.Clone(systems)
	if i%2 == 1 {
		slices.Reverse(order)
	}
	return order
}
