package soak

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ferry-replicator/ferry/loadtest/verify"
)

// Report is what a run found.
type Report struct {
	Seed uint64 `json:"seed"`
	// Commit is the Ferry build the run tested (git describe), when known.
	Commit string `json:"commit,omitempty"`
	// System is what copied: ferry or mm2-eos.
	System   string        `json:"system"`
	Delivery string        `json:"delivery"`
	Codec    string        `json:"codec"`
	Duration time.Duration `json:"duration"`
	Faults   []Done        `json:"faults"`
	// ByKind counts the faults that acted, by kind.
	ByKind map[string]int `json:"by_kind"`
	// Skipped counts faults whose target was not running.
	Skipped int `json:"skipped"`
	// NotApplicable counts faults the system has no counterpart for (for
	// mm2-eos: Consul, the fetcher↔writer hop, scaling); Faults has them
	// with Err "not applicable".
	NotApplicable int           `json:"not_applicable"`
	Result        verify.Result `json:"result"`
	// LongestRecovery is the longest time from a fault's end until the lag
	// was back at its healthy level, not counting the time other faults
	// acted meanwhile (each is charged its own recovery); LongestKind names
	// that fault and LongestRecoveryWall is its whole span, other faults
	// included.
	LongestRecovery     time.Duration `json:"longest_recovery"`
	LongestRecoveryWall time.Duration `json:"longest_recovery_wall,omitempty"`
	LongestKind         string        `json:"longest_kind"`
	// Dip is, per fault kind, the copy rate while such a fault acted as a
	// share of the healthy rate (1 = no dip), averaged over its faults.
	Dip map[string]float64 `json:"dip"`
	// HealthyRate is the copy rate, records/s, of the warm-up.
	HealthyRate float64 `json:"healthy_rate"`
	// CaughtUp is whether the copy reached the source after the faults.
	CaughtUp bool `json:"caught_up"`
	// ProducerErrors counts producer chunks an error ended early.
	ProducerErrors int64 `json:"producer_errors"`
	// Processes holds crashes of Ferry's processes (race reports, panics).
	Processes []string `json:"processes,omitempty"`
	// DR is the region loss of a ferry-dr run, nil otherwise.
	DR *DR `json:"dr,omitempty"`
	// RecoveryBound fails a run whose LongestRecovery exceeds it (0: no
	// bound).
	RecoveryBound time.Duration `json:"recovery_bound,omitempty"`
}

// OK applies the delivery's promise: exactly once, nothing missing,
// duplicated, reordered or corrupt; at least once, duplicates allowed.
// mm2-eos is held to exactly once like Ferry: its failing run is a finding
// about MM2.
//
// A ferry-dr run has lost the source region: what is missing on the
// target must be exactly what the region loss took (DR: the records
// ferryctl reported and those the source accepted after its last
// heartbeat), and the drill's own checks must hold.
func (r *Report) OK() bool {
	res := r.Result
	if len(r.Processes) > 0 || res.Reordered != 0 || res.Corrupt != 0 {
		return false
	}
	if r.RecoveryBound > 0 && r.LongestRecovery > r.RecoveryBound {
		return false
	}
	switch {
	case r.DR != nil:
		if !r.DR.OK() || res.Missing != r.DR.LostInReport+r.DR.LostUnobserved {
			return false
		}
	case !r.CaughtUp || res.Missing != 0:
		return false
	}
	return r.Delivery == "at_least_once" || res.Duplicates == 0
}

// healthyLagFactor: a fault's recovery ends when the lag is back within
// this many times the warm-up's 90th percentile (plus two seconds of
// production, for a lag too small to scale).
const healthyLagFactor = 2

// newReport sums up a run; the warm-up's samples, from warmFrom until the
// first fault, give the healthy lag and rate.
func newReport(opts Options, sched []Fault, done []Done, prog *progress, warmFrom time.Time, res verify.Result, prod *producers) *Report {
	r := &Report{
		Seed: opts.Seed, System: opts.System, Delivery: opts.Delivery, Codec: opts.Codec, Duration: opts.Duration,
		Faults: done, ByKind: map[string]int{}, Dip: map[string]float64{}, Result: res,
		ProducerErrors: prod.errors.Load(), RecoveryBound: opts.RecoveryBound,
	}
	switch {
	case opts.System == SystemMM2EOS:
		r.Codec = "-"
	case r.Codec == "":
		r.Codec = "default"
	}
	samples := prog.all()
	var first time.Time
	for _, d := range done {
		switch d.Err {
		case errSkipped.Error():
			r.Skipped++
			continue
		case errNotApplicable.Error():
			r.NotApplicable++
			continue
		}
		r.ByKind[d.Kind]++
		if first.IsZero() || d.Start.Before(first) {
			first = d.Start
		}
	}
	// The warm-up: healthy lag and copy rate.
	var warm []sample
	for _, s := range samples {
		if !first.IsZero() && !s.at.Before(warmFrom) && s.at.Before(first) {
			warm = append(warm, s)
		}
	}
	threshold := int64(2 * prog.rate)
	if len(warm) >= 2 {
		lags := make([]int64, len(warm))
		for i, s := range warm {
			lags[i] = s.lag
		}
		slices.Sort(lags)
		threshold += healthyLagFactor * lags[len(lags)*9/10]
		w0, w1 := warm[len(warm)/2], warm[len(warm)-1] // skip the start-up half
		if dt := w1.at.Sub(w0.at).Seconds(); dt > 0 {
			r.HealthyRate = float64(w1.copied-w0.copied) / dt
		}
	}
	dips := map[string][]float64{}
	for i, d := range done {
		if !acted(d) {
			continue
		}
		if rec, wall, ok := recovery(done, i, samples, threshold); ok && rec > r.LongestRecovery {
			r.LongestRecovery, r.LongestRecoveryWall, r.LongestKind = rec, wall, d.Kind+"/"+d.Target
		}
		if r.HealthyRate > 0 {
			if rate, ok := rateBetween(samples, d.Start, d.End); ok {
				dips[d.Kind] = append(dips[d.Kind], rate/r.HealthyRate)
			}
		}
	}
	for k, v := range dips {
		sum := 0.0
		for _, x := range v {
			sum += x
		}
		r.Dip[k] = sum / float64(len(v))
	}
	return r
}

// recovery is how long the lag took to come back under threshold after
// fault done[i] ended (wall: from its end to the first such sample), less
// the time other faults acted in that span. The schedule starts a fault
// every 6 to 16 s, so several overlap: measured by the clock alone, a
// fault's recovery would include every fault acting until the lag first
// came back (seed 735: a target restart charged 65 s, 40 s of it seven
// other faults acting, the last of which recovered in 14 s). Time with no
// fault acting still counts in full, so a copy that never recovers
// between faults fails the bound at its last fault. ok is false if the
// lag never came back.
func recovery(done []Done, i int, samples []sample, threshold int64) (rec, wall time.Duration, ok bool) {
	d := done[i]
	var healthy time.Time
	for _, s := range samples {
		if s.at.After(d.End) && s.lag <= threshold {
			healthy, ok = s.at, true
			break
		}
	}
	if !ok {
		return 0, 0, false
	}
	// The other faults' acting spans within (d.End, healthy], merged.
	type span struct{ from, to time.Time }
	var spans []span
	for j, o := range done {
		if j == i || !acted(o) {
			continue
		}
		from, to := later(o.Start, d.End), earlier(o.End, healthy)
		if to.After(from) {
			spans = append(spans, span{from, to})
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return a.from.Compare(b.from) })
	wall = healthy.Sub(d.End)
	rec = wall
	var reach time.Time // the end of the spans counted so far
	for _, sp := range spans {
		from := later(sp.from, reach)
		if sp.to.After(from) {
			rec -= sp.to.Sub(from)
			reach = sp.to
		}
	}
	return rec, wall, true
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// acted reports whether a fault acted: neither skipped nor not applicable.
func acted(d Done) bool { return d.Err != errSkipped.Error() && d.Err != errNotApplicable.Error() }

// rateBetween is the copy rate between the samples nearest to from and to.
func rateBetween(samples []sample, from, to time.Time) (float64, bool) {
	var a, b *sample
	for i := range samples {
		s := &samples[i]
		if a == nil && !s.at.Before(from) {
			a = s
		}
		if !s.at.After(to) {
			b = s
		}
	}
	if a == nil || b == nil || !b.at.After(a.at) {
		return 0, false
	}
	return float64(b.copied-a.copied) / b.at.Sub(a.at).Seconds(), true
}

// Row is the run as a row of docs/reliability.md's soak table.
func (r *Report) Row() string {
	result := "pass"
	if !r.OK() {
		result = "**FAIL**"
	}
	res := r.Result
	commit := r.Commit
	if commit == "" {
		commit = "-"
	}
	return fmt.Sprintf("| %d | %s | %s | %s | %s | %.0f | %d | %s | %d | %d | %d | %d | %s | %s |",
		r.Seed, commit, r.System, r.Delivery, r.Codec, r.Duration.Minutes(), r.faults(), r.kinds(), res.Produced,
		res.Missing, res.Duplicates, res.Reordered, r.LongestRecovery.Round(time.Second), result)
}

// RowHeader heads Row's table.
const RowHeader = "| seed | commit | system | delivery | codec | minutes | faults | by kind | records | missing | duplicates | reordered | longest recovery | result |\n" +
	"|---:|---|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|---|"

func (r *Report) faults() int {
	n := 0
	for _, c := range r.ByKind {
		n += c
	}
	return n
}

func (r *Report) kinds() string { return joinCounts(r.ByKind) }

// joinCounts lists counts by name, sorted: "net-cut 2, writer-kill 1".
func joinCounts(counts map[string]int) string {
	names := make([]string, 0, len(counts))
	for k := range counts {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s %d", k, counts[k])
	}
	return strings.Join(parts, ", ")
}

// notApplicable counts the faults that did not apply by kind/target, for
// people: "consul-restart 2, net-cut/writers 1".
func (r *Report) notApplicable() string {
	counts := map[string]int{}
	for _, d := range r.Faults {
		if d.Err != errNotApplicable.Error() {
			continue
		}
		name := d.Kind
		if strings.HasPrefix(d.Kind, "net-") {
			name += "/" + d.Target
		}
		counts[name]++
	}
	return joinCounts(counts)
}

// Summary is a few lines for people: the row's figures, the dips and what
// went wrong.
func (r *Report) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "soak seed=%d system=%s delivery=%s codec=%s minutes=%.1f faults=%d skipped=%d not applicable=%d\n",
		r.Seed, r.System, r.Delivery, r.Codec, r.Duration.Minutes(), r.faults(), r.Skipped, r.NotApplicable)
	fmt.Fprintf(&b, "%s\n", r.Result.Line())
	longest := r.LongestKind
	if under := r.LongestRecoveryWall - r.LongestRecovery; under > 0 {
		longest += fmt.Sprintf("; %s from its end, %s of it under other faults", r.LongestRecoveryWall.Round(time.Second), under.Round(time.Second))
	}
	fmt.Fprintf(&b, "caught up=%v longest recovery=%s (%s) healthy rate=%.0f rec/s producer errors=%d\n",
		r.CaughtUp, r.LongestRecovery.Round(time.Second), longest, r.HealthyRate, r.ProducerErrors)
	kinds := make([]string, 0, len(r.Dip))
	for k := range r.Dip {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(&b, "  copy rate during %s: %.0f%% of healthy\n", k, 100*r.Dip[k])
	}
	if na := r.notApplicable(); na != "" {
		fmt.Fprintf(&b, "  not applicable to %s: %s\n", r.System, na)
	}
	for _, d := range r.Faults {
		if d.Err != "" && acted(d) {
			fmt.Fprintf(&b, "  fault %s/%s at %s: %s\n", d.Kind, d.Target, d.At, d.Err)
		}
	}
	for _, p := range r.Processes {
		fmt.Fprintf(&b, "  %s\n", p)
	}
	if r.RecoveryBound > 0 && r.LongestRecovery > r.RecoveryBound {
		fmt.Fprintf(&b, "  longest recovery %s over the bound %s\n", r.LongestRecovery.Round(time.Second), r.RecoveryBound)
	}
	if d := r.DR; d != nil {
		fmt.Fprintf(&b, "region lost %s after the faults healed; ferryctl reported %d offsets lost: %d records missing in those ranges, %d accepted after the last heartbeat (estimated %d offsets; %d beyond it, %d partitions unestimated), %d misreported\n",
			d.LossAfter.Round(time.Second), d.ReportedLost, d.LostInReport, d.LostUnobserved, d.EstimatedAfterHeartbeat, d.BeyondEstimate, d.EstimateUnknown, d.Misreported)
		if d.CopiedPastCheckpoint > 0 {
			fmt.Fprintf(&b, "  %d records reported lost were copied (at-least-once writes records before their checkpoint)\n", d.CopiedPastCheckpoint)
		}
		fmt.Fprintf(&b, "  in records: %d read and lost, %d offsets unread; %d records misreported, %d partitions uncounted\n",
			d.ReportedLostRecords, d.ReportedUnread, d.RecordsMisreported, d.RecordsUncounted)
		fmt.Fprintf(&b, "application: %d records skipped, %d read again: %d the meter knew (it said %d offsets at the failover, %d at the loss), %d committed on the source after the last sync; %d translation errors; RTO %s (failover to first record read on the target)\n",
			d.AppMissing, d.AppReread, d.RereadKnown, d.RereadReported, d.RereadAtLoss, d.RereadAfterSync, d.TranslationErrors, d.RTO.Round(100*time.Millisecond))
		if d.RereadUncounted > 0 {
			fmt.Fprintf(&b, "  and %d read again on partitions where the group had no target position (the meter cannot count them; %d such partitions ferryctl did not name)\n", d.RereadUncounted, d.UncountedUnnamed)
		}
		if d.RereadCopiedTwice > 0 {
			fmt.Fprintf(&b, "  and %d read again from a second copy on the target after the group's position (at-least-once)\n", d.RereadCopiedTwice)
		}
		for _, e := range d.Errors {
			fmt.Fprintf(&b, "  drill: %s\n", e)
		}
	}
	if len(r.Result.FirstDuplicates) > 0 {
		fmt.Fprintf(&b, "  first duplicates: %+v\n", r.Result.FirstDuplicates)
	}
	return b.String()
}
