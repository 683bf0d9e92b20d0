package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/ferry-replicator/ferry/loadtest/harness"
	"github.com/ferry-replicator/ferry/loadtest/kafkabroker"
	"github.com/ferry-replicator/ferry/loadtest/procgroup"
)

// System names a replicator under test.
type System string

// The systems the benchmark knows.
const (
	Ferry    System = "ferry" // at-least-once delivery
	FerryEOS System = "ferry-eos"
	// FerryZstd is Ferry at-least-once with link.codec zstd: fewer bytes on
	// the wire for more CPU than the default lz4.
	FerryZstd  System = "ferry-zstd"
	MM2Default System = "mm2-default"
	MM2Tuned   System = "mm2-tuned"
	MM2EOS     System = "mm2-eos"
	Floor      System = "floor"
	// Ferry at-least-once with tracing on, exporting to a local Jaeger, at a
	// sampling ratio of 0, 1% and 100%: their cost against Ferry with
	// tracing off is the tracing overhead.
	FerryTrace0   System = "ferry-trace-0"
	FerryTrace1   System = "ferry-trace-1"
	FerryTrace100 System = "ferry-trace-100"
	// FerryBaseline is Ferry at-least-once from other binaries
	// (Config.BaselineBin): an older build, for before/after ratios of a
	// change measured in one run.
	FerryBaseline System = "ferry-baseline"
	// FerryBaselineEOS is the same older build exactly-once, the before of
	// ferry-eos: what a change to the transactional commit costs.
	FerryBaselineEOS System = "ferry-baseline-eos"
	// FerryWin64K is Ferry at-least-once with the writer's gRPC windows
	// fixed at 64 KiB (grpc.stream_window, grpc.conn_window) instead of
	// gRPC's dynamic ones: over a long round trip it shows the ceiling a
	// window sets, window ÷ RTT in wire bytes.
	FerryWin64K System = "ferry-win64k"
	// FerryHB100 and FerryEOSHB100 are ferry and ferry-eos with
	// link.heartbeat.interval 100ms (1s by default): what a tighter
	// failover meter, and a smaller tail after the last heartbeat at a
	// region loss, cost.
	FerryHB100    System = "ferry-hb100"
	FerryEOSHB100 System = "ferry-eos-hb100"
)

// AllSystems in the order they run. MM2 tuned runs first: its catch-up
// throughput sets the default live rates.
var AllSystems = []System{MM2Tuned, Ferry, FerryEOS, FerryZstd, MM2Default, MM2EOS, Floor, FerryTrace0, FerryTrace1, FerryTrace100, FerryBaseline, FerryBaselineEOS, FerryWin64K, FerryHB100, FerryEOSHB100}

// TracingSystems are the tracing overhead variants.
var TracingSystems = []System{FerryTrace0, FerryTrace1, FerryTrace100}

// ParseSystem checks a system name.
func ParseSystem(s string) (System, error) {
	var known []string
	for _, sys := range AllSystems {
		if string(sys) == s {
			return sys, nil
		}
		known = append(known, string(sys))
	}
	return "", fmt.Errorf("unknown system %q (known: %s)", s, strings.Join(known, ", "))
}

// isFerry reports whether sys is a Ferry variant.
func (sys System) isFerry() bool { _, ok := ferryVariants[sys]; return ok }

// transactional reports whether sys writes the target in transactions, so
// the target's end offsets include commit markers.
func (sys System) transactional() bool {
	return sys == MM2EOS || sys == FerryEOS || sys == FerryBaselineEOS || sys == FerryEOSHB100
}

// ferryVariant is how a Ferry system differs from Ferry's defaults.
type ferryVariant struct {
	delivery string
	codec    string  // link.codec; empty: the fetcher's default
	sampling float64 // tracing sampling ratio; < 0: tracing off
	baseline bool    // run the binaries of Config.BaselineBin
	window   int     // the writer's fixed gRPC windows, bytes; 0: dynamic
	// heartbeat is link.heartbeat.interval; 0: the fetcher's default
	heartbeat time.Duration
}

var ferryVariants = map[System]ferryVariant{
	Ferry:            {delivery: "at_least_once", sampling: -1},
	FerryEOS:         {delivery: "exactly_once", sampling: -1},
	FerryZstd:        {delivery: "at_least_once", codec: "zstd", sampling: -1},
	FerryTrace0:      {delivery: "at_least_once", sampling: 0},
	FerryTrace1:      {delivery: "at_least_once", sampling: 0.01},
	FerryTrace100:    {delivery: "at_least_once", sampling: 1},
	FerryBaseline:    {delivery: "at_least_once", sampling: -1, baseline: true},
	FerryBaselineEOS: {delivery: "exactly_once", sampling: -1, baseline: true},
	FerryWin64K:      {delivery: "at_least_once", sampling: -1, window: 64 << 10},
	FerryHB100:       {delivery: "at_least_once", sampling: -1, heartbeat: 100 * time.Millisecond},
	FerryEOSHB100:    {delivery: "exactly_once", sampling: -1, heartbeat: 100 * time.Millisecond},
}

// Names used on both clusters.
const (
	sourceAlias = "src"
	targetAlias = "dst"
	linkName    = "bench"
)

// replicator is a running system under test.
type replicator interface {
	// PIDs are the processes whose CPU and memory are the system's cost.
	PIDs() []int
	// Check returns an error once a process of the system has exited.
	Check() error
	Stop() error
}

// mm2Props are the MirrorMaker 2 properties of each MM2 variant, on top of
// the kafkabroker helper's defaults (see docs/real-kafka.md): none of those
// changes the data path (they turn off the reverse flow's heartbeat herder,
// the plugin classpath scan and ACL sync, and shorten the topic refresh), so
// "default" here is stock MM2 on the data path. Tuned and exactly-once are
// kafkabroker's, which the fault soak's mm2-eos shares.
func mm2Props(sys System, partitions int) map[string]string {
	tasks := min(partitions, mm2MaxTasks)
	switch sys {
	case MM2Default:
		return map[string]string{}
	case MM2Tuned:
		return kafkabroker.MM2TunedProps(sourceAlias, targetAlias, tasks)
	case MM2EOS:
		return kafkabroker.MM2ExactlyOnceProps(sourceAlias, targetAlias, tasks)
	}
	return nil
}

// mm2MaxTasks caps the tuned variants' tasks.max: a task per partition up
// to 8 (the 8-partition workloads), and 8 tasks sharing 64 partitions in
// the partitions workload. A task per partition there gave 64 producers of
// 64 MiB buffer.memory each, and the 1 GiB JVM ran out of memory
// (2026-12-01); 8 tasks on 2 cores is what an operator sizing MM2 would
// choose.
const mm2MaxTasks = 8

type mm2 struct{ m *kafkabroker.MirrorMaker }

func startMM2(ctx context.Context, sys System, dir, sourceAddr, targetAddr, topic string, partitions int) (*mm2, error) {
	m, err := kafkabroker.StartMirrorMaker(ctx, kafkabroker.MM2Options{
		SourceAlias: sourceAlias, TargetAlias: targetAlias,
		SourceAddr: sourceAddr, TargetAddr: targetAddr,
		Topics: topic,
		Props:  mm2Props(sys, partitions),
		Dir:    filepath.Join(dir, "mm2"),
	})
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", sys, err)
	}
	return &mm2{m: m}, nil
}

func (m *mm2) PIDs() []int  { return []int{m.m.PID()} }
func (m *mm2) Check() error { return m.m.ExitError() }
func (m *mm2) Stop() error  { return m.m.Stop() }

// ferryLink is the writer's link: MM2-style names, src.<topic>.
func ferryLink(delivery string) map[string]any {
	return map[string]any{"name": linkName, "naming": "prefix", "prefix": sourceAlias + ".", "delivery": delivery}
}

type ferry struct {
	writer, fetcher *harness.Process
	// pprofs are the writer's and the fetcher's profiling addresses
	// (admin.pprof_listen), which the profiler asks.
	pprofs []string
}

// startFerry starts a writer listening on writerListen and a fetcher that
// dials writerDial (the writer itself, or a WAN proxy in front of it), both
// at Ferry's defaults but for the variant's delivery and tracing (spans go
// to the OTLP endpoint otlp).
func startFerry(ctx context.Context, v ferryVariant, otlp, bin, dir, sourceAddr, targetAddr, writerListen, writerDial, topic string) (*ferry, error) {
	wAdmin, err := harness.FreeAddr()
	if err != nil {
		return nil, err
	}
	fAdmin, err := harness.FreeAddr()
	if err != nil {
		return nil, err
	}
	pprofs := make([]string, 2)
	for i := range pprofs {
		if pprofs[i], err = harness.FreeAddr(); err != nil {
			return nil, err
		}
	}
	// The gRPC link runs in plaintext on loopback (tls.insecure), as MM2's
	// Kafka connections do here.
	wcfg := harness.WriterConfig("writer-1", writerListen, wAdmin, []string{targetAddr}, ferryLink(v.delivery))
	wcfg["tls"] = map[string]any{"insecure": true}
	wcfg["admin"].(map[string]any)["pprof_listen"] = pprofs[0]
	if v.sampling >= 0 {
		wcfg["tracing"] = tracingConfig(otlp, v.sampling)
	}
	if v.window > 0 {
		wcfg["grpc"] = map[string]any{"stream_window": v.window, "conn_window": v.window}
	}
	writer, err := harness.Start(dir, filepath.Join(bin, "ferry-writer"), "writer", wcfg)
	if err != nil {
		return nil, fmt.Errorf("start ferry writer: %w", err)
	}
	f := &ferry{writer: writer, pprofs: pprofs}
	if err := waitReady(ctx, writer, wAdmin); err != nil {
		writer.Kill()
		return nil, err
	}
	fcfg := harness.FetcherConfig("fetcher-1", fAdmin, linkName, []string{sourceAddr}, []string{writerDial}, regexpQuote(topic))
	fcfg["writers"].(map[string]any)["tls"] = map[string]any{"insecure": true}
	fcfg["admin"].(map[string]any)["pprof_listen"] = pprofs[1]
	if v.codec != "" {
		fcfg["link"].(map[string]any)["codec"] = v.codec
	}
	if v.heartbeat > 0 {
		fcfg["link"].(map[string]any)["heartbeat"] = map[string]any{"interval": v.heartbeat.String()}
	}
	if v.sampling >= 0 {
		fcfg["tracing"] = tracingConfig(otlp, v.sampling)
	}
	f.fetcher, err = harness.Start(dir, filepath.Join(bin, "ferry-fetcher"), "fetcher", fcfg)
	if err != nil {
		writer.Kill()
		return nil, fmt.Errorf("start ferry fetcher: %w", err)
	}
	if err := waitReady(ctx, f.fetcher, fAdmin); err != nil {
		f.fetcher.Kill()
		writer.Kill()
		return nil, err
	}
	return f, nil
}

func tracingConfig(otlp string, sampling float64) map[string]any {
	return map[string]any{"endpoint": otlp, "insecure": true, "sampling_ratio": sampling}
}

// waitReady waits for /readyz of p, failing at once if p exits.
func waitReady(ctx context.Context, p *harness.Process, admin string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case <-p.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	err := harness.WaitReady(ctx, admin)
	cancel()
	<-exited
	select {
	case <-p.Done():
		return fmt.Errorf("ferry %s exited: %v (log %s)", p.Name, p.Err(), p.LogPath)
	default:
	}
	if err != nil {
		return fmt.Errorf("ferry %s: %w (log %s)", p.Name, err, p.LogPath)
	}
	return nil
}

func (f *ferry) PIDs() []int { return []int{f.fetcher.PID(), f.writer.PID()} }

func (f *ferry) Check() error {
	for _, p := range []*harness.Process{f.fetcher, f.writer} {
		select {
		case <-p.Done():
			return fmt.Errorf("ferry %s exited: %v (log %s)", p.Name, p.Err(), p.LogPath)
		default:
		}
	}
	return nil
}

func (f *ferry) Stop() error {
	errF := f.fetcher.Stop(30 * time.Second)
	errW := f.writer.Stop(30 * time.Second)
	if errF != nil {
		return fmt.Errorf("stop ferry fetcher: %w", errF)
	}
	if errW != nil {
		return fmt.Errorf("stop ferry writer: %w", errW)
	}
	return nil
}

// floorProc is the floor copy loop running as a child process of this
// benchmark (the same binary, subcommand floor-copy).
type floorProc struct {
	proc *procgroup.Proc
	log  string
}

func startFloor(self, dir string, o FloorOptions) (*floorProc, error) {
	logPath := filepath.Join(dir, "floor.log")
	p, err := procgroup.Start(self, []string{"floor-copy", "-source", o.Source, "-target", o.Target, "-topic", o.Topic, "-dest", o.Dest}, logPath)
	if err != nil {
		return nil, fmt.Errorf("start floor: %w", err)
	}
	return &floorProc{proc: p, log: logPath}, nil
}

func (p *floorProc) PIDs() []int { return []int{p.proc.PID()} }

func (p *floorProc) Check() error {
	if p.proc.Exited() {
		return fmt.Errorf("floor copy exited: %v (log %s)", p.proc.Err(), p.log)
	}
	return nil
}

func (p *floorProc) Stop() error {
	if err := p.proc.Stop(10 * time.Second); err != nil {
		return fmt.Errorf("floor copy: %w", err)
	}
	return nil
}

// regexpQuote escapes the dots of a topic name for an anchored regex.
func regexpQuote(topic string) string {
	out := make([]byte, 0, len(topic)+4)
	for i := range len(topic) {
		if topic[i] == '.' {
			out = append(out, '\\')
		}
		out = append(out, topic[i])
	}
	return string(out)
}
