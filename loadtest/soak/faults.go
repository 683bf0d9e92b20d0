package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ferry-replicator/ferry/loadtest/harness"
)

// Fault is one scheduled fault.
type Fault struct {
	Kind string `json:"kind"`
	// Target is the process index or network hop it acts on, if any.
	Target string `json:"target,omitempty"`
	// At is when it starts, from the end of the warm-up.
	At time.Duration `json:"at"`
	// For is how long it lasts (a pause, a cut, a toxic) or, for a restart,
	// how long the process stays down.
	For time.Duration `json:"for"`
}

// kind is what a fault kind needs and does.
type kind struct {
	name string
	// targets it can act on; one is drawn per fault.
	targets []string
	// dur is the range of Fault.For.
	min, max time.Duration
	// busy is how long its resources stay reserved in the schedule beyond
	// For: the time a restart or a reopen takes.
	settle time.Duration
}

// pausePast are the pauses that outlast what they must: the fetchers'
// gRPC keepalive (10 s and a 5 s timeout) for a writer, the lease TTL for
// a fetcher (Consul ends a session between TTL and twice TTL).
const (
	writerPause  = 20 * time.Second
	fetcherPause = 2*leaseTTL + 5*time.Second
)

var hops = []string{"source", "writers", "target", "consul"}

var kinds = []kind{
	{name: "target-restart", targets: []string{"term", "kill"}, min: time.Second, max: 5 * time.Second, settle: 20 * time.Second},
	{name: "source-restart", targets: []string{"term", "kill"}, min: time.Second, max: 5 * time.Second, settle: 20 * time.Second},
	{name: "writer-kill", targets: []string{"0", "1"}, min: time.Second, max: 4 * time.Second, settle: 10 * time.Second},
	{name: "writer-pause", targets: []string{"0", "1"}, min: writerPause, max: writerPause + 5*time.Second, settle: 10 * time.Second},
	{name: "writer-restart", targets: []string{"0", "1"}, min: 0, max: 2 * time.Second, settle: 10 * time.Second},
	{name: "fetcher-kill", targets: []string{"0", "1"}, min: time.Second, max: 4 * time.Second, settle: 10 * time.Second},
	{name: "fetcher-pause", targets: []string{"0", "1"}, min: fetcherPause, max: fetcherPause + 5*time.Second, settle: 10 * time.Second},
	{name: "fetcher-restart", targets: []string{"0", "1"}, min: 0, max: 2 * time.Second, settle: 10 * time.Second},
	{name: "net-cut", targets: hops, min: time.Second, max: 6 * time.Second, settle: 5 * time.Second},
	{name: "net-stall", targets: hops, min: 2 * time.Second, max: 8 * time.Second, settle: 5 * time.Second},
	{name: "net-latency", targets: hops, min: 5 * time.Second, max: 15 * time.Second, settle: 2 * time.Second},
	{name: "consul-restart", min: 0, max: 3 * time.Second, settle: 15 * time.Second},
	{name: "scale-fetchers", min: 10 * time.Second, max: 20 * time.Second, settle: 20 * time.Second},
	{name: "scale-writers", min: 10 * time.Second, max: 20 * time.Second, settle: 20 * time.Second},
}

// activeActiveKinds act on the link back's own processes (ferry-aa only):
// its one writer (into the source) and its one fetcher (of the target).
// They are drawn only for ferry-aa, so the other systems' schedules of a
// seed stay what they were.
var activeActiveKinds = []kind{
	{name: "back-kill", targets: []string{"writer", "fetcher"}, min: time.Second, max: 4 * time.Second, settle: 10 * time.Second},
	{name: "back-pause", targets: []string{"writer", "fetcher"}, min: fetcherPause, max: fetcherPause + 5*time.Second, settle: 10 * time.Second},
	{name: "back-restart", targets: []string{"writer", "fetcher"}, min: 0, max: 2 * time.Second, settle: 10 * time.Second},
}

// resources are what a fault holds while it acts: two faults sharing one
// never overlap, all others may.
func resources(f Fault) []string {
	switch f.Kind {
	case "target-restart":
		return []string{"target"}
	case "source-restart":
		return []string{"source"}
	case "writer-kill", "writer-pause", "writer-restart":
		return []string{"writer-" + f.Target}
	case "fetcher-kill", "fetcher-pause", "fetcher-restart":
		return []string{"fetcher-" + f.Target}
	case "net-cut", "net-stall", "net-latency":
		return []string{"net-" + f.Target}
	case "consul-restart":
		return []string{"consul"}
	case "scale-fetchers":
		return []string{"fetcher-1", "fetcher-2"}
	case "scale-writers":
		return []string{"writer-1", "writer-2"}
	case "back-kill", "back-pause", "back-restart":
		return []string{"back-" + f.Target}
	}
	return nil
}

// applies reports whether a fault has a counterpart in the system. MM2
// shares the brokers and the source and target hops with Ferry, and its
// one process stands in for the writers and the fetchers; it has no
// fetcher↔writer hop, no Consul and no tiers to scale.
func applies(system string, f Fault) bool {
	if strings.HasPrefix(f.Kind, "back-") {
		return system == SystemFerryActiveActive
	}
	if system != SystemMM2EOS {
		return true
	}
	switch f.Kind {
	case "consul-restart", "scale-fetchers", "scale-writers":
		return false
	case "net-cut", "net-stall", "net-latency":
		return f.Target == "source" || f.Target == "target"
	}
	return true
}

// resourcesFor are the resources a fault holds in the system while it
// acts. The schedule keeps Ferry's resources apart; MM2's writer and
// fetcher faults all act on its one process, so they hold "mm2" and one
// waits for another instead of acting at once.
func resourcesFor(system string, f Fault) []string {
	if system != SystemMM2EOS {
		return resources(f)
	}
	if !applies(system, f) {
		return nil
	}
	switch f.Kind {
	case "writer-kill", "writer-pause", "writer-restart", "fetcher-kill", "fetcher-pause", "fetcher-restart":
		return []string{"mm2"}
	}
	return resources(f)
}

// Schedule draws the faults of a run of system from seed: a new fault
// every 6 to 16 seconds, so with the longer ones several overlap, each on
// resources no other fault holds until it has settled.
func Schedule(seed uint64, d time.Duration, system string) []Fault {
	kinds := kinds
	if system == SystemFerryActiveActive {
		kinds = append(slices.Clone(kinds), activeActiveKinds...)
	}
	rng := rand.New(rand.NewPCG(seed, 0x50a4))
	busyUntil := map[string]time.Duration{}
	var out []Fault
	for at := time.Duration(0); at < d; at += 6*time.Second + time.Duration(rng.Int64N(int64(10*time.Second))) {
		// A few draws: a kind whose resources are all busy is passed over.
		for range 8 {
			k := kinds[rng.IntN(len(kinds))]
			f := Fault{Kind: k.name, At: at, For: k.min}
			if k.max > k.min {
				f.For += time.Duration(rng.Int64N(int64(k.max - k.min)))
			}
			f.For = f.For.Round(100 * time.Millisecond)
			if len(k.targets) > 0 {
				f.Target = k.targets[rng.IntN(len(k.targets))]
			}
			res := resources(f)
			if slices.ContainsFunc(res, func(r string) bool { return busyUntil[r] > at }) {
				continue
			}
			for _, r := range res {
				busyUntil[r] = at + f.For + k.settle
			}
			out = append(out, f)
			break
		}
	}
	return out
}

// Done is a fault as it ran.
type Done struct {
	Fault
	Start, End time.Time
	Err        string `json:",omitempty"`
}

// inject runs the schedule from t0 and returns once every fault has ended.
func (e *env) inject(ctx context.Context, sched []Fault, t0 time.Time) []Done {
	var (
		mu   sync.Mutex
		out  = make([]Done, len(sched))
		wg   sync.WaitGroup
		held = map[string]*sync.Mutex{}
	)
	system := e.opts.System
	for _, f := range sched {
		for _, r := range resourcesFor(system, f) {
			if held[r] == nil {
				held[r] = &sync.Mutex{}
			}
		}
	}
	for i, f := range sched {
		if err := sleep(ctx, time.Until(t0.Add(f.At))); err != nil {
			break
		}
		if !applies(system, f) {
			e.log.Info("fault not applicable", "system", system, "kind", f.Kind, "target", f.Target)
			now := time.Now()
			mu.Lock()
			out[i] = Done{Fault: f, Start: now, End: now, Err: errNotApplicable.Error()}
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The schedule keeps resources apart; a fault that ran long
			// (or, for MM2, one on the same process) makes the next one on
			// its resources wait, in sorted order.
			res := resourcesFor(system, f)
			slices.Sort(res)
			for _, r := range res {
				held[r].Lock()
			}
			defer func() {
				for _, r := range res {
					held[r].Unlock()
				}
			}()
			d := Done{Fault: f, Start: time.Now()}
			e.log.Info("fault start", "kind", f.Kind, "target", f.Target, "for", f.For)
			if err := e.apply(ctx, f); err != nil {
				d.Err = err.Error()
				e.log.Warn("fault", "kind", f.Kind, "target", f.Target, "err", err)
			}
			d.End = time.Now()
			e.log.Info("fault end", "kind", f.Kind, "target", f.Target, "took", d.End.Sub(d.Start).Round(time.Millisecond))
			mu.Lock()
			out[i] = d
			mu.Unlock()
		}()
	}
	wg.Wait()
	return slices.DeleteFunc(out, func(d Done) bool { return d.Kind == "" })
}

// apply carries out one fault and returns once it is healed.
func (e *env) apply(ctx context.Context, f Fault) error {
	switch f.Kind {
	case "target-restart", "source-restart":
		b := e.dst
		if f.Kind == "source-restart" {
			b = e.src
		}
		if f.Target == "kill" {
			b.Kill()
			if err := sleep(ctx, f.For); err != nil {
				return err
			}
		}
		rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		return b.Restart(rctx) // a clean stop (SIGTERM) first when it runs
	case "writer-kill", "writer-pause", "writer-restart":
		if e.mm2 != nil {
			return e.mm2Fault(ctx, f)
		}
		return e.processFault(ctx, f, e.writers[f.Target[0]-'0'], true)
	case "fetcher-kill", "fetcher-pause", "fetcher-restart":
		if e.mm2 != nil {
			return e.mm2Fault(ctx, f)
		}
		return e.processFault(ctx, f, e.fetchers[f.Target[0]-'0'], false)
	case "net-cut", "net-stall", "net-latency":
		return e.netFault(ctx, f)
	case "consul-restart":
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := e.consul.Stop(); err != nil {
			return err
		}
		if err := sleep(ctx, f.For); err != nil {
			return err
		}
		return e.consul.Restart(rctx)
	case "scale-fetchers":
		return e.scale(ctx, f, false)
	case "scale-writers":
		return e.scale(ctx, f, true)
	case "back-kill", "back-pause", "back-restart":
		if f.Target == "writer" {
			return e.processFault(ctx, f, e.back[0], true)
		}
		return e.processFault(ctx, f, e.back[1], false)
	}
	return fmt.Errorf("unknown fault kind %q", f.Kind)
}

func (e *env) processFault(ctx context.Context, f Fault, m *member, writer bool) error {
	if !running(m) {
		return errSkipped
	}
	switch {
	case strings.HasSuffix(f.Kind, "-kill"):
		m.proc.Kill()
	case strings.HasSuffix(f.Kind, "-pause"):
		if err := m.proc.Pause(); err != nil {
			return err
		}
		err := sleep(ctx, f.For)
		if rerr := m.proc.Resume(); rerr != nil {
			return rerr
		}
		return err
	default: // graceful restart
		if err := m.proc.Stop(time.Minute); err != nil {
			e.log.Warn("graceful stop", "process", m.name, "err", err)
		}
	}
	if err := sleep(ctx, f.For); err != nil {
		return err
	}
	return e.restart(ctx, m, writer)
}

func (e *env) restart(ctx context.Context, m *member, writer bool) error {
	if err := m.proc.Restart(); err != nil {
		return err
	}
	if !writer {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := harness.WaitReady(wctx, m.admin); err != nil {
		return fmt.Errorf("%s not ready after restart: %w", m.name, err)
	}
	return nil
}

// mm2Fault is a writer or fetcher fault on MirrorMaker 2's one process:
// SIGKILL then a start after For, SIGSTOP for For then SIGCONT, or a clean
// stop then a start after For.
func (e *env) mm2Fault(ctx context.Context, f Fault) error {
	m := e.mm2
	if !m.Running() {
		return errSkipped
	}
	switch {
	case strings.HasSuffix(f.Kind, "-kill"):
		m.Kill()
	case strings.HasSuffix(f.Kind, "-pause"):
		if err := m.Pause(); err != nil {
			_ = m.Resume() // some threads may have stopped
			return err
		}
		err := sleep(ctx, f.For)
		if rerr := m.Resume(); rerr != nil {
			return rerr
		}
		return err
	default: // graceful restart
		if err := m.Stop(); err != nil {
			e.log.Warn("graceful stop", "process", "mirrormaker", "err", err)
		}
	}
	if err := sleep(ctx, f.For); err != nil {
		return err
	}
	return m.Restart()
}

// netFault acts on every proxy of a hop.
func (e *env) netFault(ctx context.Context, f Fault) error {
	var names []string
	if f.Target == "writers" {
		for i := range slots {
			names = append(names, fmt.Sprintf("writer-%d", i))
		}
	} else {
		names = []string{f.Target}
	}
	switch f.Kind {
	case "net-cut":
		for _, n := range names {
			e.proxies[n].proxy().Stop() // closes every connection, refuses new ones
		}
		err := sleep(ctx, f.For)
		for _, n := range names {
			if serr := e.proxies[n].proxy().Start(); serr != nil && err == nil {
				err = serr
			}
		}
		return err
	case "net-stall", "net-latency":
		// A stall holds every byte for longer than any client waits for an
		// answer and loses none (toxiproxy's timeout toxic would drop
		// them, corrupting the streams: not what a stalled link does).
		latency, jitter := 30_000, 0
		if f.Kind == "net-latency" {
			latency, jitter = 300, 100
		}
		for _, n := range names {
			for _, stream := range []string{"upstream", "downstream"} {
				spec := fmt.Sprintf(`{"name":%q,"type":"latency","stream":%q,"attributes":{"latency":%d,"jitter":%d}}`,
					f.Kind+"-"+stream, stream, latency, jitter)
				if err := e.proxies[n].addToxic(spec); err != nil {
					return fmt.Errorf("toxic on %s: %w", n, err)
				}
			}
		}
		err := sleep(ctx, f.For)
		for _, n := range names {
			if rerr := e.proxies[n].removeToxics(f.Kind+"-upstream", f.Kind+"-downstream"); rerr != nil && err == nil {
				err = rerr
			}
		}
		if f.Kind == "net-stall" {
			// What the stall held would arrive 30 s late: a stalled link
			// that recovers resets its connections instead.
			for _, n := range names {
				p := e.proxies[n].proxy()
				p.Stop()
				if serr := p.Start(); serr != nil && err == nil {
					err = serr
				}
			}
		}
		return err
	}
	return nil
}

// scale takes a tier from two members to one, then three, then one, and
// back to two (fetchers 1→3→1; writers 1→2→1 using the third slot).
func (e *env) scale(ctx context.Context, f Fault, writers bool) error {
	tier, start := e.fetchers, func(i int) error { return e.startFetcher(i) }
	if writers {
		tier, start = e.writers, func(i int) error { return e.startWriter(ctx, i) }
	}
	step := f.For / 2
	if !running(tier[1]) {
		return errSkipped
	}
	if err := tier[1].proc.Stop(time.Minute); err != nil {
		e.log.Warn("scale: stop", "process", tier[1].name, "err", err)
	}
	up := []int{1, 2}
	if writers {
		up = []int{2}
	}
	for _, i := range up {
		if err := start(i); err != nil {
			return err
		}
	}
	if err := sleep(ctx, step); err != nil {
		return err
	}
	for _, i := range up {
		if err := tier[i].proc.Stop(time.Minute); err != nil {
			e.log.Warn("scale: stop", "process", tier[i].name, "err", err)
		}
	}
	if err := sleep(ctx, step); err != nil {
		return err
	}
	return start(1)
}
