// Package soak runs Ferry under a seeded random schedule of faults, alone
// and overlapping, on real Apache Kafka source and target clusters with a
// real Consul agent, two fetchers and two writers, while producers write
// continuously; then it compares the target with the source record by
// record. The same schedule also runs against MirrorMaker 2 exactly-once
// (System mm2-eos), one MM2 process in place of Ferry's four, so the two
// are compared under faults and not only on speed.
//
// Every hop goes through a toxiproxy proxy, so the network faults reach
// each one: fetcher↔source (the source broker's PROXIED listener),
// fetcher↔writer (one proxy per writer, which the writer advertises in
// Consul's catalog), writer↔target (the target's PROXIED listener) and
// services↔Consul. The test's own clients (producers, progress sampler,
// verifier) use the brokers' direct listeners, so a cut of a hop never
// stops the load or blinds the measurement.
//
// The same seed gives the same schedule (fault kinds, targets, start
// times, durations), whichever the system: a failing seed is replayed with
// SOAK_SEED. Faults without an MM2 counterpart are recorded as not
// applicable for mm2-eos (faults.go, applies).
package soak

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/loadtest/consulagent"
	"github.com/ferry-replicator/ferry/loadtest/harness"
	"github.com/ferry-replicator/ferry/loadtest/kafkabroker"
	"github.com/ferry-replicator/ferry/loadtest/ports"
	"github.com/ferry-replicator/ferry/loadtest/verify"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
)

// The systems a run can put under faults.
const (
	// SystemFerry is two fetchers and two writers with Consul.
	SystemFerry = "ferry"
	// SystemMM2EOS is one MirrorMaker 2 in dedicated mode with exactly-once
	// delivery, configured as the benchmark's mm2-eos.
	SystemMM2EOS = "mm2-eos"
	// SystemFerryActiveActive is SystemFerry plus the link back, target to
	// source ("back": one fetcher, one writer, identity naming), while
	// producers write the target's soak topics too: the forward link must
	// leave out what the link back copied into the source (loops), both
	// under the same faults (env.startBack).
	SystemFerryActiveActive = "ferry-aa"
)

// Options configure a soak run.
type Options struct {
	// System is what copies: SystemFerry (default) or SystemMM2EOS.
	System string
	// Duration is how long faults are injected (after a warm-up).
	Duration time.Duration
	// Seed chooses the schedule.
	Seed uint64
	// Delivery is the writers' link delivery: exactly_once or at_least_once.
	// mm2-eos is exactly_once only.
	Delivery string
	// Codec is the fetchers' link.codec; empty: Ferry's default. Ferry only.
	Codec string
	// Dir holds every process's log and data; the caller keeps or removes it.
	Dir string
	// BinDir holds ferry-fetcher and ferry-writer. Ferry only.
	BinDir string
	// Rate is the records per second of the idempotent producer; the
	// transactional one writes a quarter of it.
	Rate int
	// Log receives progress: faults as they start and end.
	Log *slog.Logger
	// RecoveryBound fails a run whose longest recovery after a fault
	// (Report.LongestRecovery) exceeds it; 0 reports it only.
	RecoveryBound time.Duration
	// RegionLoss is how SystemFerryDR loses the source region: LossKill
	// (default) or LossPartition.
	RegionLoss string
}

func (o *Options) defaults() {
	if o.System == "" {
		o.System = SystemFerry
	}
	if o.Delivery == "" {
		o.Delivery = "exactly_once"
	}
	if o.Rate <= 0 {
		o.Rate = 800
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.System == SystemFerryDR && o.RegionLoss == "" {
		o.RegionLoss = LossKill
	}
}

// Validate returns every problem of the options, by name, once defaults
// are applied (as Run applies them).
func (o Options) Validate() error {
	o.defaults()
	var errs []error
	switch o.System {
	case SystemFerry, SystemFerryActiveActive, SystemFerryDR:
		if o.Delivery != "exactly_once" && o.Delivery != "at_least_once" {
			errs = append(errs, fmt.Errorf("delivery %q: want exactly_once or at_least_once", o.Delivery))
		}
	case SystemMM2EOS:
		if o.Delivery != "exactly_once" {
			errs = append(errs, fmt.Errorf("delivery %q: %s is exactly_once only", o.Delivery, o.System))
		}
		if o.Codec != "" {
			errs = append(errs, fmt.Errorf("codec %q: a Ferry link setting, not %s's", o.Codec, o.System))
		}
	default:
		errs = append(errs, fmt.Errorf("system %q: want %s, %s, %s or %s", o.System, SystemFerry, SystemFerryActiveActive, SystemFerryDR, SystemMM2EOS))
	}
	switch {
	case o.System == SystemFerryDR && o.RegionLoss != LossKill && o.RegionLoss != LossPartition:
		errs = append(errs, fmt.Errorf("region loss %q: want %s or %s", o.RegionLoss, LossKill, LossPartition))
	case o.System != SystemFerryDR && o.RegionLoss != "":
		errs = append(errs, fmt.Errorf("region loss %q: %s only", o.RegionLoss, SystemFerryDR))
	}
	return errors.Join(errs...)
}

// The link and its topics.
const (
	link         = "soak"
	topicIdem    = "soak.idem"
	topicTxn     = "soak.txn"
	partsIdem    = 6
	partsTxn     = 4
	targetPrefix = "src."
	// Consul session TTL of the fetchers' leases (Consul's minimum).
	leaseTTL = 10 * time.Second
	// slots of each tier: two run, the third only while a tier is scaled.
	slots = 3
	// warmUp runs before the first fault, to measure the healthy lag.
	warmUp = 20 * time.Second
	// MM2's cluster aliases; the source's names the target topics
	// (targetPrefix) and its offsets topic.
	mm2Source = "src"
	mm2Target = "dst"
)

// env is everything a run starts.
type env struct {
	opts   Options
	log    *slog.Logger
	src    *kafkabroker.Broker
	dst    *kafkabroker.Broker
	consul *consulagent.Agent
	toxics *toxiproxy.ApiServer
	// proxies by hop: "source", "target", "consul", and "writer-<i>".
	proxies map[string]*hop
	// addresses the system under test uses: through the proxies.
	srcProxy, dstProxy, consulProxy string
	// Ferry's processes; nil for mm2-eos.
	writers, fetchers [slots]*member
	// mm2 is the MirrorMaker 2 of mm2-eos; nil for Ferry.
	mm2 *kafkabroker.MirrorMaker
	// back are the link back's writer and fetcher (ferry-aa only): the
	// back-* faults act on them, besides the brokers and hops they share.
	back [2]*member
}

type member struct {
	name  string
	admin string
	cfg   map[string]any
	proc  *harness.Process // nil until first started
}

// Run sets up, runs the schedule, heals, waits for the copy to catch up
// and verifies. A setup error is returned; an anomaly is in the Report.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("soak options: %w", err)
	}
	opts.defaults()
	e := &env{opts: opts, log: opts.Log, proxies: map[string]*hop{}}
	defer e.close()
	if err := e.start(ctx); err != nil {
		return nil, err
	}
	sched := Schedule(opts.Seed, opts.Duration, opts.System)
	prog := newProgress(e, opts.Rate+opts.Rate/4)
	runCtx, stopRun := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); prog.run(runCtx) }()
	prod := startProducers(runCtx, e.src.Addr(), opts, nil, e.log)
	backProd := &producers{stop: func() {}}
	if opts.System == SystemFerryActiveActive {
		o := opts
		o.Rate = max(1, opts.Rate/4)
		backProd = startProducers(runCtx, e.dst.Addr(), o, []kgo.RecordHeader{{Key: originHeader, Value: []byte(originTarget)}}, e.log)
	}
	// However the run ends, the sampler and the producers end before the
	// brokers stop (e.close, deferred first, runs last).
	defer func() {
		stopRun()
		prod.stop()
		backProd.stop()
		wg.Wait()
	}()

	// The warm-up measures a copy that runs: MM2 takes 10 to 40 s from its
	// start to its first copied record.
	if err := prog.waitMoving(ctx, 3*time.Minute); err != nil {
		return nil, fmt.Errorf("%w%s", err, e.systemLog())
	}
	warmFrom := time.Now()
	if err := sleep(ctx, warmUp); err != nil {
		return nil, err
	}
	done := e.inject(ctx, sched, warmFrom.Add(warmUp))
	e.heal()
	if opts.System == SystemFerryDR {
		if err := brokenEnvironment(done); err != nil {
			return nil, err
		}
		dr := e.regionLoss(ctx, func() { stopRun(); prod.stop() })
		wg.Wait()
		var res verify.Result
		if len(dr.Errors) == 0 { // else the source may not be back to compare
			vctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			defer cancel()
			var err error
			if res, err = verify.Compare(vctx, []string{e.src.Addr()}, []string{e.dst.Addr()}, e.pairs()); err != nil {
				return nil, fmt.Errorf("verify: %w", err)
			}
		}
		rep := newReport(opts, sched, done, prog, warmFrom, res, prod)
		rep.DR = dr
		rep.Processes = e.processErrors()
		return rep, nil
	}
	prod.stop()
	backProd.stop()
	if err := brokenEnvironment(done); err != nil {
		return nil, err
	}
	caughtUp := prog.waitCaughtUp(ctx, 5*time.Minute)
	stopRun()
	wg.Wait()

	res, err := e.verify(ctx)
	if err != nil {
		return nil, err
	}
	rep := newReport(opts, sched, done, prog, warmFrom, res, prod)
	rep.CaughtUp = caughtUp
	rep.Processes = e.processErrors()
	return rep, nil
}

func (e *env) start(ctx context.Context) error {
	startCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	e.toxics = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	free, err := ports.Free(3, false)
	if err != nil {
		return err
	}
	e.srcProxy, e.dstProxy, e.consulProxy = loopback(free[0]), loopback(free[1]), loopback(free[2])
	e.src, err = kafkabroker.Start(startCtx, kafkabroker.Options{Name: "source", DataDir: filepath.Join(e.opts.Dir, "source"), ProxiedPort: free[0]})
	if err != nil {
		return err
	}
	e.dst, err = kafkabroker.Start(startCtx, kafkabroker.Options{Name: "target", DataDir: filepath.Join(e.opts.Dir, "target"), ProxiedPort: free[1]})
	if err != nil {
		return err
	}
	hops := map[string][2]string{
		"source": {e.srcProxy, e.src.ProxiedAddr()},
		"target": {e.dstProxy, e.dst.ProxiedAddr()},
	}
	if e.opts.System != SystemMM2EOS {
		e.consul, err = consulagent.Start(startCtx, consulagent.Options{
			Persistent: true, DataDir: filepath.Join(e.opts.Dir, "consul"), LogFile: filepath.Join(e.opts.Dir, "consul.log"),
		})
		if err != nil {
			return fmt.Errorf("start consul: %w", err)
		}
		hops["consul"] = [2]string{e.consulProxy, e.consul.HTTPAddr()}
	}
	for name, hop := range hops {
		if err := e.proxy(name, hop[0], hop[1]); err != nil {
			return err
		}
	}
	if err := e.createTopics(startCtx); err != nil {
		return err
	}
	if e.opts.System == SystemMM2EOS {
		return e.startMM2(startCtx)
	}
	if e.opts.System == SystemFerryDR {
		if _, err := os.Stat(filepath.Join(e.opts.BinDir, "ferryctl")); err != nil {
			return fmt.Errorf("%s fails over with ferryctl, not in %s (make build): %w", SystemFerryDR, e.opts.BinDir, err)
		}
	}
	for i := range slots {
		if err := e.prepareWriter(i); err != nil {
			return err
		}
		e.prepareFetcher(i)
	}
	for i := range 2 {
		if err := e.startWriter(startCtx, i); err != nil {
			return err
		}
	}
	for i := range 2 {
		if err := e.startFetcher(i); err != nil {
			return err
		}
	}
	if e.opts.System == SystemFerryActiveActive {
		return e.startBack(startCtx)
	}
	return nil
}

// The link back (ferry-aa): its name, and the origin header of the records
// produced on the target, which tells the two sides' records apart.
const (
	backLink     = "back"
	originHeader = "origin"
	originTarget = "target"
)

// startBack starts the link back: a writer into the source and a fetcher of
// the target, both through the proxies (so broker and network faults reach
// them), the fetcher dialing the writer directly.
func (e *env) startBack(ctx context.Context) error {
	listen, err := harness.FreeAddr()
	if err != nil {
		return err
	}
	wadmin, err := harness.FreeAddr()
	if err != nil {
		return err
	}
	fadmin, err := harness.FreeAddr()
	if err != nil {
		return err
	}
	l := map[string]any{"name": backLink, "naming": "identity", "delivery": e.opts.Delivery, "topics": map[string]any{"include": []string{`soak\..*`}}}
	e.back[0] = &member{name: "back-writer", admin: wadmin, cfg: harness.WriterConfig("back-writer", listen, wadmin, []string{e.srcProxy}, l)}
	fcfg := harness.FetcherConfig("back-fetcher", fadmin, backLink, []string{e.dstProxy}, []string{listen}, `soak\..*`)
	fcfg["link"].(map[string]any)["shards"] = 8
	if e.opts.Codec != "" {
		fcfg["link"].(map[string]any)["codec"] = e.opts.Codec
	}
	e.back[1] = &member{name: "back-fetcher", admin: fadmin, cfg: fcfg}
	if err := e.launch(e.back[0], "ferry-writer"); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := harness.WaitReady(wctx, wadmin); err != nil {
		return fmt.Errorf("back-writer not ready: %w (log %s)", err, e.back[0].proc.LogPath)
	}
	return e.launch(e.back[1], "ferry-fetcher")
}

// fromTarget is a record produced on the target (ferry-aa).
func fromTarget(r *kgo.Record) bool {
	for _, h := range r.Headers {
		if h.Key == originHeader {
			return string(h.Value) == originTarget
		}
	}
	return false
}

// startMM2 starts MirrorMaker 2 exactly-once through the source and target
// proxies, as Ferry's services connect, and waits until it has created the
// target topics: MM2 has no readiness signal, and its connector creates them
// just before its tasks start copying.
func (e *env) startMM2(ctx context.Context) error {
	m, err := kafkabroker.StartMirrorMaker(ctx, kafkabroker.MM2Options{
		SourceAlias: mm2Source, TargetAlias: mm2Target,
		SourceAddr: e.srcProxy, TargetAddr: e.dstProxy,
		// No backslash: mm2.properties is a Java properties file, where
		// "\." reads as ".".
		Topics: `soak[.].*`,
		Props:  kafkabroker.MM2ExactlyOnceProps(mm2Source, mm2Target, partsIdem+partsTxn),
		Dir:    filepath.Join(e.opts.Dir, "mm2"),
	})
	if err != nil {
		return err
	}
	e.mm2 = m
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.dst.Addr()))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	want := map[string]int{targetPrefix + topicIdem: partsIdem, targetPrefix + topicTxn: partsTxn}
	for {
		if err := m.ExitError(); err != nil {
			return fmt.Errorf("mirrormaker: %w", err)
		}
		tds, err := adm.ListTopics(ctx, targetPrefix+topicIdem, targetPrefix+topicTxn)
		if err == nil {
			ready := 0
			for name, n := range want {
				if td, ok := tds[name]; ok && td.Err == nil && len(td.Partitions) == n {
					ready++
				}
			}
			if ready == len(want) {
				return nil
			}
		}
		if err := sleep(ctx, time.Second); err != nil {
			return fmt.Errorf("mirrormaker created no target topics (log %s): %w", m.LogPath(), err)
		}
	}
}

// systemLog names the log that says why the copy does not move, for a
// setup error.
func (e *env) systemLog() string {
	if e.mm2 != nil {
		return " (log " + e.mm2.LogPath() + ")"
	}
	return " (logs in " + e.opts.Dir + ")"
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

func (e *env) proxy(name, listen, upstream string) error {
	p := toxiproxy.NewProxy(e.toxics, name, listen, upstream)
	if err := p.Start(); err != nil {
		return fmt.Errorf("proxy %s: %w", name, err)
	}
	e.proxies[name] = &hop{p: p, toxics: e.toxics, log: e.log}
	return nil
}

// createTopics creates the soak topics on the source, and for ferry-aa on
// the target too (the link back's source).
func (e *env) createTopics(ctx context.Context) error {
	clusters := []*kafkabroker.Broker{e.src}
	if e.opts.System == SystemFerryActiveActive {
		clusters = append(clusters, e.dst)
	}
	for _, b := range clusters {
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
		if err != nil {
			return err
		}
		adm := kadm.NewClient(cl)
		for topic, n := range map[string]int32{topicIdem: partsIdem, topicTxn: partsTxn} {
			if _, err := adm.CreateTopic(ctx, n, 1, nil, topic); err != nil {
				cl.Close()
				return fmt.Errorf("create %s: %w", topic, err)
			}
		}
		cl.Close()
	}
	return nil
}

func (e *env) prepareWriter(i int) error {
	listen, err := harness.FreeAddr()
	if err != nil {
		return err
	}
	admin, err := harness.FreeAddr()
	if err != nil {
		return err
	}
	proxied, err := harness.FreeAddr()
	if err != nil {
		return err
	}
	name := fmt.Sprintf("writer-%d", i)
	if err := e.proxy(name, proxied, listen); err != nil {
		return err
	}
	l := map[string]any{"name": link, "naming": "prefix", "prefix": targetPrefix, "delivery": e.opts.Delivery}
	cfg := harness.WriterConfig(name, listen, admin, []string{e.dstProxy}, l)
	cfg["registration"] = map[string]any{"address": e.consulProxy, "advertise": proxied}
	if e.opts.System == SystemFerryDR {
		// ferryctl, the operator in the target region, fails the link over.
		cfg["control"] = map[string]any{"allowed_ids": []string{devcerts.SPIFFEID(devcerts.DefaultTrustDomain, "ferryctl")}}
	}
	e.writers[i] = &member{name: name, admin: admin, cfg: cfg}
	return nil
}

func (e *env) prepareFetcher(i int) {
	name := fmt.Sprintf("fetcher-%d", i)
	admin, _ := harness.FreeAddr()
	cfg := harness.FetcherConfig(name, admin, link, []string{e.srcProxy}, nil, `soak\..*`)
	cfg["writers"] = map[string]any{
		"consul":      map[string]any{"address": e.consulProxy},
		"min_backoff": "50ms", "max_backoff": "1s", "open_timeout": "2m",
	}
	cfg["lease"] = map[string]any{
		"address": e.consulProxy, "session_ttl": leaseTTL.String(), "lock_delay": "1s", "balance_interval": "500ms",
	}
	if e.opts.Codec != "" {
		cfg["link"].(map[string]any)["codec"] = e.opts.Codec
	}
	if e.opts.System == SystemFerryDR {
		// Several syncs of the application's group before the loss.
		cfg["link"].(map[string]any)["groups"] = map[string]any{"interval": "2s"}
	}
	e.fetchers[i] = &member{name: name, admin: admin, cfg: cfg}
}

// startWriter starts (or restarts) writer i and waits until it is ready.
func (e *env) startWriter(ctx context.Context, i int) error {
	if err := e.launch(e.writers[i], "ferry-writer"); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := harness.WaitReady(wctx, e.writers[i].admin); err != nil {
		return fmt.Errorf("%s not ready: %w (log %s)", e.writers[i].name, err, e.writers[i].proc.LogPath)
	}
	return nil
}

func (e *env) startFetcher(i int) error { return e.launch(e.fetchers[i], "ferry-fetcher") }

func (e *env) launch(m *member, bin string) error {
	if m.proc != nil {
		return m.proc.Restart()
	}
	p, err := harness.Start(e.opts.Dir, filepath.Join(e.opts.BinDir, bin), m.name, m.cfg)
	if err != nil {
		return err
	}
	m.proc = p
	return nil
}

// running reports whether m's process runs (it may be paused).
func running(m *member) bool {
	if m.proc == nil {
		return false
	}
	select {
	case <-m.proc.Done():
		return false
	default:
		return true
	}
}

// heal ends every fault a run may have left: toxics, stopped proxies,
// paused processes, and brings the two-and-two baseline (or MM2) back.
func (e *env) heal() {
	for _, h := range e.proxies {
		h.reset()
	}
	// A broker a failed restart left down comes back (the run still
	// fails: brokenEnvironment).
	for _, b := range []*kafkabroker.Broker{e.src, e.dst} {
		if !b.Running() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			if err := b.Restart(ctx); err != nil {
				e.log.Error("heal: start broker", "broker", b, "err", err)
			}
			cancel()
		}
	}
	if e.mm2 != nil {
		if e.mm2.Running() {
			_ = e.mm2.Resume()
		} else if err := e.mm2.Restart(); err != nil {
			e.log.Error("heal: start mirrormaker", "err", err)
		}
		return
	}
	for i, m := range e.writers {
		if m.proc != nil && running(m) {
			_ = m.proc.Resume()
		}
		if i < 2 && !running(m) {
			if err := e.startWriter(context.Background(), i); err != nil {
				e.log.Error("heal: start writer", "writer", i, "err", err)
			}
		}
	}
	// The link back's processes come back too: a back-* fault may have
	// left one paused or down, and a writer ends when its checkpoint view
	// fails (a broker restart can do that), as its orchestrator would
	// restart it.
	for i, m := range e.back {
		if m != nil && running(m) {
			_ = m.proc.Resume()
		}
		if m != nil && m.proc != nil && !running(m) {
			e.log.Warn("heal: the link back's process had exited; starting it", "process", m.name, "err", m.proc.Err())
			if err := e.launch(m, []string{"ferry-writer", "ferry-fetcher"}[i]); err != nil {
				e.log.Error("heal: start the link back", "process", m.name, "err", err)
			}
		}
	}
	for i, m := range e.fetchers {
		if m.proc != nil && running(m) {
			_ = m.proc.Resume()
		}
		if i < 2 && !running(m) {
			if err := e.startFetcher(i); err != nil {
				e.log.Error("heal: start fetcher", "fetcher", i, "err", err)
			}
		}
	}
}

// verify compares the target with the source; while records are missing
// (the last commits still landing) it looks again for up to two minutes.
//
// For ferry-aa it compares both links: the forward link's copy with the
// source's own records (what the link back copied into the source must not
// come back: it would count as corrupt), and the link back's copy, the
// source's records from the target, with the target's own records.
func (e *env) verify(ctx context.Context) (verify.Result, error) {
	pairs := e.pairs()
	var back []verify.Pair
	if e.opts.System == SystemFerryActiveActive {
		own := func(r *kgo.Record) bool { return !fromTarget(r) }
		for i := range pairs {
			pairs[i].KeepSource = own
		}
		for _, topic := range []string{topicIdem, topicTxn} {
			back = append(back, verify.Pair{Source: topic, Target: topic, KeepTarget: fromTarget})
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		vctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		res, err := verify.Compare(vctx, []string{e.src.Addr()}, []string{e.dst.Addr()}, pairs)
		if err == nil && back != nil {
			var b verify.Result
			b, err = verify.Compare(vctx, []string{e.dst.Addr()}, []string{e.src.Addr()}, back)
			res = res.Add(b)
		}
		cancel()
		if err != nil {
			return res, fmt.Errorf("verify: %w", err)
		}
		if res.Missing == 0 || time.Now().After(deadline) || res.Duplicates+res.Reordered+res.Corrupt > 0 {
			return res, nil
		}
		if err := sleep(ctx, 5*time.Second); err != nil {
			return res, err
		}
	}
}

// pairs are the soak topics and their copies.
func (e *env) pairs() []verify.Pair {
	return []verify.Pair{{Source: topicIdem, Target: targetPrefix + topicIdem}, {Source: topicTxn, Target: targetPrefix + topicTxn}}
}

// processErrors lists the race reports, panics and fatal runtime errors
// of Ferry's processes (none for mm2-eos): any of them fails the run, even
// one whose copy came out exact (a fetcher that panicked was simply not
// copying until heal started it again).
func (e *env) processErrors() []string {
	var out []string
	for _, m := range append(append(e.writers[:], e.fetchers[:]...), e.back[:]...) {
		if m == nil || m.proc == nil {
			continue
		}
		if r := m.proc.Crashes(); r != "" {
			out = append(out, m.name+" crashed: "+firstLines(r, 30))
		}
	}
	return out
}

func firstLines(s string, n int) string {
	for i, c := 0, 0; i < len(s); i++ {
		if s[i] == '\n' {
			if c++; c == n {
				return s[:i]
			}
		}
	}
	return s
}

func (e *env) close() {
	for _, m := range append(append(e.back[1:], e.fetchers[:]...), append(e.writers[:], e.back[0])...) {
		if m != nil && m.proc != nil && running(m) {
			_ = m.proc.Stop(30 * time.Second)
		}
	}
	if e.mm2 != nil {
		_ = e.mm2.Stop()
	}
	for _, h := range e.proxies {
		h.proxy().Stop()
	}
	if e.consul != nil {
		_ = e.consul.Stop()
	}
	for _, b := range []*kafkabroker.Broker{e.src, e.dst} {
		if b != nil {
			_ = b.Stop()
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// errSkipped is a fault that could not act (its target was not running).
var errSkipped = errors.New("skipped")

// errNotApplicable is a fault the system has no counterpart for (applies).
var errNotApplicable = errors.New("not applicable")

// brokenEnvironment is the first fault that could not bring back what it
// stopped (a broker or Consul that did not start again): the run measured
// the harness, not the system, and must fail as such.
func brokenEnvironment(done []Done) error {
	for _, d := range done {
		switch d.Kind {
		case "target-restart", "source-restart", "consul-restart":
			if d.Err != "" && d.Err != errSkipped.Error() && d.Err != errNotApplicable.Error() {
				return fmt.Errorf("fault %s/%s at %s did not recover: %s", d.Kind, d.Target, d.At, d.Err)
			}
		}
	}
	return nil
}
