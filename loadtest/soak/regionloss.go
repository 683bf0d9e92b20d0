package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/loadtest/harness"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
)

// SystemFerryDR is SystemFerry that, after the faults, loses the source
// region while producers write and an application consumes on the source:
// the source broker, every fetcher and Consul are killed at a seeded
// moment; ferryctl fails the link over from the target side alone; the
// application carries on on the target with the same consumer group; then
// the source broker is started again only to read what it held, and the
// run accounts for every record (regionloss.go).
const SystemFerryDR = "ferry-dr"

// How a ferry-dr run loses the source region (Options.RegionLoss).
const (
	// LossKill kills the source broker, every fetcher and Consul at once.
	LossKill = "kill"
	// LossPartition cuts the source region off instead: every fetcher's
	// connection to the writers holds its bytes (nothing closes, so the
	// writers' streams are still open at the failover, with rounds in
	// flight), the producers stop, and the source, the fetchers and
	// Consul run on. The failover must end those streams and let their
	// rounds finish before it reads the meter; what the fetchers sent
	// arrives after it and must be refused.
	LossPartition = "partition"
)

// appGroup is the application's consumer group: on the source before the
// loss, on the target after the failover (synced by Ferry meanwhile).
const appGroup = "soak-app"

// DR is what a ferry-dr run found about the region loss. Offsets are
// source offsets; records are the data records a read_committed consumer
// sees (transaction markers and aborted records take offsets, not records).
type DR struct {
	// Loss is how the region was lost: LossKill or LossPartition.
	Loss string `json:"loss"`
	// LossAfter is when, after the faults healed, the region was lost.
	LossAfter time.Duration `json:"loss_after"`
	// ReportedLost is the sum over partitions of what ferryctl failover
	// printed as lost: the last heartbeat's high watermark minus what the
	// target committed, in offsets.
	ReportedLost int64 `json:"reported_lost_offsets"`
	// LostInReport counts the source records missing on the target inside
	// the reported ranges [committed, heartbeat high watermark).
	LostInReport int64 `json:"lost_in_report"`
	// ReportedLostRecords and ReportedUnread are the sums of what ferryctl
	// failover printed as lost in records (of what the fetchers had read
	// at their last heartbeats: lost_records) and as offsets no one read
	// (unread_offsets). Per partition the records missing inside the
	// reported range must lie between lost_records (less, at-least-once,
	// the records copied past the checkpoint) and lost_records plus
	// unread_offsets: RecordsMisreported counts by how many they do not,
	// and must be 0; RecordsUncounted counts partitions the report gave
	// no record count, and must be 0 too.
	ReportedLostRecords int64 `json:"reported_lost_records"`
	ReportedUnread      int64 `json:"reported_unread_offsets"`
	RecordsMisreported  int64 `json:"records_misreported,omitempty"`
	RecordsUncounted    int64 `json:"records_uncounted,omitempty"`
	// LostUnobserved counts the source records missing on the target that
	// the source accepted after its last heartbeat reached the target
	// (offset at or past the heartbeat's high watermark): no one in the
	// target region can know them (docs/disaster-recovery.md).
	LostUnobserved int64 `json:"lost_unobserved"`
	// EstimatedAfterHeartbeat is the sum of the report's estimates of
	// what the source took after its last heartbeat (offsets: the append
	// rate then times the heartbeat's age at the failover), and
	// BeyondEstimate the records lost unobserved beyond a partition's
	// estimate, which must be 0; EstimateUnknown counts partitions the
	// report gave no estimate, which must be 0 too (every partition had
	// heartbeats for some seconds).
	EstimatedAfterHeartbeat int64 `json:"estimated_after_heartbeat_offsets"`
	BeyondEstimate          int64 `json:"beyond_estimate,omitempty"`
	EstimateUnknown         int64 `json:"estimate_unknown,omitempty"`
	// CopiedPastCheckpoint counts records on the target at or past the
	// reported committed offset: at-least-once writes a round's records
	// before its checkpoint, so a loss can strand some there (reported
	// lost, yet copied: the report errs on the safe side). Exactly-once
	// has none.
	CopiedPastCheckpoint int64 `json:"copied_past_checkpoint"`
	// Misreported counts records that contradict the report: below the
	// reported committed offset yet missing on the target, or at or past
	// it yet present. It must be 0.
	Misreported int64 `json:"misreported"`
	// AppMissing counts copied records the application read neither on
	// the source nor, after the failover, on the target. It must be 0.
	AppMissing int64 `json:"app_missing"`
	// AppReread counts records the application read on the source and
	// again on the target. RereadReported is what Ferry's failover meter
	// said of the application's group in ferryctl failover's report
	// (failover_reread_records, offsets): after the writers committed
	// what they held as the streams broke, which the copy's last records
	// join (a group ahead of them is not followed once the link is
	// failed over: docs/disaster-recovery.md). RereadAtLoss is the
	// meter (ferry_failover_reread_records, every group) read right after
	// the loss, before those commits, kept for comparison.
	// RereadKnown are the records between the group's target position and
	// its source commit as the last sync read it (what the meter counts,
	// in records); RereadAfterSync those the application committed on the
	// source after that read, which nothing in the target region can
	// know; RereadCopiedTwice those below the source offset the group's
	// target position stands for, read again because the target holds a
	// second copy after that position: at-least-once's duplicates, which
	// no group sync explains (in exactly-once it must be 0). AppReread
	// must be the sum of these three and RereadUncounted.
	AppReread         int64 `json:"app_reread"`
	RereadReported    int64 `json:"reread_reported"`
	RereadAtLoss      int64 `json:"reread_at_loss"`
	RereadKnown       int64 `json:"reread_known"`
	RereadAfterSync   int64 `json:"reread_after_sync"`
	RereadCopiedTwice int64 `json:"reread_copied_twice,omitempty"`
	// RereadUncounted are re-reads on partitions where the report gives
	// the group no target position, so the meter counts none of them;
	// the report must name each such partition (UncountedUnnamed counts
	// those it did not, and must be 0).
	RereadUncounted  int64 `json:"reread_uncounted,omitempty"`
	UncountedUnnamed int64 `json:"uncounted_unnamed,omitempty"`
	// AtLeastOnce is the link's delivery: at-least-once copies may stand
	// twice on the target.
	AtLeastOnce bool `json:"at_least_once,omitempty"`
	// TranslationErrors counts partitions where the application's first
	// record on the target is not the copy of the first source record at
	// or after the source offset its group's position stands for. It
	// must be 0.
	TranslationErrors int64 `json:"translation_errors"`
	// RTO is from ferryctl failover's start to the application's first
	// record read on the target.
	RTO time.Duration `json:"rto"`
	// FailoverPartial is what ferryctl failover said was missing when it
	// exited 4 (partial: a group left without a target position, named
	// under reread_uncounted, is expected in a region loss).
	FailoverPartial string `json:"failover_partial,omitempty"`
	// Errors says what went wrong in the drill itself.
	Errors []string `json:"errors,omitempty"`
}

// OK is the region loss accounted for: no misreported record, nothing the
// application skipped, no step failing, every re-read explained, none of
// them more than the failover meter said (it counts offsets, which
// markers and aborted records also take), and no second copies in
// exactly-once.
func (d *DR) OK() bool {
	return d.Misreported == 0 && d.AppMissing == 0 && d.TranslationErrors == 0 && len(d.Errors) == 0 &&
		d.BeyondEstimate == 0 && d.EstimateUnknown == 0 && d.RecordsMisreported == 0 && d.RecordsUncounted == 0 &&
		d.AppReread == d.RereadKnown+d.RereadAfterSync+d.RereadCopiedTwice+d.RereadUncounted && d.UncountedUnnamed == 0 &&
		d.RereadKnown <= d.RereadReported &&
		(d.AtLeastOnce || d.RereadCopiedTwice == 0)
}

// tallyRecords checks a partition's loss in records: the records missing
// inside the reported range (missing) lie between lost (less, at-least-
// once, the records copied past the checkpoint, which lost may count) and
// lost plus unread.
func tallyRecords(dr *DR, k tp, lost, unread *int64, missing, copiedPast int64, log *slog.Logger) {
	if lost == nil || unread == nil {
		dr.RecordsUncounted++
		return
	}
	dr.ReportedLostRecords += *lost
	dr.ReportedUnread += *unread
	lo, hi := *lost-copiedPast, *lost+*unread
	if missing < lo || missing > hi {
		dr.RecordsMisreported += max(lo-missing, missing-hi)
		log.Error("region loss: the records lost are not what the report said", "topic", k.topic, "partition", k.partition,
			"missing", missing, "lost_records", *lost, "unread_offsets", *unread, "copied_past_checkpoint", copiedPast)
	}
}

// tp names a partition.
type tp struct {
	topic     string
	partition int32
}

// reads are an application's committed reads: per source partition, the
// source offsets (or, on the target, target offsets) it read.
type reads struct {
	mu    sync.Mutex
	by    map[tp][]int64
	first time.Time
	// firstAt is, per partition, when its first read was committed.
	firstAt map[tp]time.Time
}

func (r *reads) add(recs []*kgo.Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.by == nil {
		r.by, r.firstAt = map[tp][]int64{}, map[tp]time.Time{}
	}
	now := time.Now()
	if r.first.IsZero() && len(recs) > 0 {
		r.first = time.Now()
	}
	for _, rec := range recs {
		k := tp{rec.Topic, rec.Partition}
		if _, ok := r.firstAt[k]; !ok {
			r.firstAt[k] = now
		}
		r.by[k] = append(r.by[k], rec.Offset)
	}
}

// consume runs an application on addr: a group member reading topics
// read_committed and committing after every poll; a record counts as read
// once a commit covering it succeeded (what a crash would not re-read).
// It runs until ctx ends, or, with untilIdle, until it has read up to the
// end of every partition and nothing came for untilIdle.
// The returned channel is closed when it has ended; stop ends it and
// closes the client.
// With perSecond > 0 it reads at most that many records a second (an
// application slower than its producers, behind when the region goes).
func consume(ctx context.Context, addr string, topics []string, untilIdle time.Duration, perSecond int) (*reads, <-chan struct{}, func(), error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumerGroup(appGroup), kgo.ConsumeTopics(topics...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, nil, nil, err
	}
	r := &reads{}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var pending []*kgo.Record
		lastRead := time.Now()
		for ctx.Err() == nil {
			pctx, pcancel := context.WithTimeout(ctx, time.Second)
			// A slow application reads (and commits) a tenth of a
			// second's worth at a time, so its last commit is never far
			// behind what it read, as a real consumer's.
			limit := 0
			if perSecond > 0 {
				limit = max(1, perSecond/10)
			}
			fs := cl.PollRecords(pctx, limit)
			pcancel()
			recs := fs.Records()
			pending = append(pending, recs...)
			if len(recs) > 0 {
				lastRead = time.Now()
			}
			if len(pending) > 0 && cl.CommitRecords(ctx, pending...) == nil {
				r.add(pending)
				pending = nil
			}
			if untilIdle > 0 && len(pending) == 0 && time.Since(lastRead) > untilIdle {
				return
			}
			if perSecond > 0 && len(recs) > 0 {
				if sleep(ctx, time.Duration(len(recs))*time.Second/time.Duration(perSecond)) != nil {
					return
				}
			}
		}
	}()
	stop := func() {
		cancel()
		<-done
		cl.Close()
	}
	return r, done, stop, nil
}

// partitionRegion cuts the source region off the target's (LossPartition):
// a latency far beyond any client's wait on every fetcher↔writer hop, so
// no connection closes and no byte is lost or delivered in time.
func (e *env) partitionRegion() error {
	for i := range slots {
		name := fmt.Sprintf("writer-%d", i)
		if e.proxies[name] == nil {
			continue
		}
		for _, stream := range []string{"upstream", "downstream"} {
			spec := fmt.Sprintf(`{"name":"partition-%s","type":"latency","stream":%q,"attributes":{"latency":600000}}`, stream, stream)
			if err := e.proxies[name].addToxic(spec); err != nil {
				return fmt.Errorf("partition %s: %w", name, err)
			}
		}
	}
	return nil
}

// loseRegion kills what lives in the source region: every fetcher, the
// source broker and Consul, at once (SIGKILL).
func (e *env) loseRegion() {
	var wg sync.WaitGroup
	for _, m := range e.fetchers {
		if m != nil && running(m) {
			wg.Go(m.proc.Kill)
		}
	}
	wg.Go(e.src.Kill)
	wg.Go(e.consul.Kill)
	wg.Wait()
}

// lagTarget slows the writers↔target hop (2 s each way) and waits d.
func (e *env) lagTarget(ctx context.Context, d time.Duration) error {
	for _, stream := range []string{"upstream", "downstream"} {
		spec := fmt.Sprintf(`{"name":"lag-%s","type":"latency","stream":%q,"attributes":{"latency":2000}}`, stream, stream)
		if err := e.proxies["target"].addToxic(spec); err != nil {
			return err
		}
	}
	e.log.Info("region loss: the target hop slowed", "for", d)
	return sleep(ctx, d)
}

// unlagTarget ends lagTarget.
func (e *env) unlagTarget() error {
	if err := e.proxies["target"].removeToxics("lag-upstream", "lag-downstream"); err != nil {
		return fmt.Errorf("end the target hop's latency: %w", err)
	}
	return nil
}

// ctlChange is the part of `ferryctl failover -o json` the drill reads.
type ctlChange struct {
	State  string `json:"state"`
	AtRisk []struct {
		Topic     string `json:"topic"`
		Partition int32  `json:"partition"`
		Committed int64  `json:"committed_next_offset"`
		HW        int64  `json:"source_high_watermark"`
		Lag       int64  `json:"lag_records"`
		// AfterHeartbeat is the tail estimated after the last heartbeat
		// (offsets; absent: unknown).
		AfterHeartbeat *int64 `json:"after_heartbeat_estimate_offsets"`
		// LostRecords and Unread are the loss in records of what the
		// fetcher had read, and the offsets no one read (absent:
		// unknown).
		LostRecords *int64 `json:"lost_records"`
		Unread      *int64 `json:"unread_offsets"`
	} `json:"at_risk"`
	Groups []struct {
		Group  string `json:"group"`
		Reread *int64 `json:"failover_reread_records"`
		// Uncounted are the partitions the meter could not count
		// re-reads on: no target position.
		Uncounted []struct {
			Topic     string `json:"topic"`
			Partition int32  `json:"partition"`
			Reason    string `json:"reason"`
		} `json:"reread_uncounted"`
		Partitions []struct {
			Topic     string `json:"topic"`
			Partition int32  `json:"partition"`
			// Source is the group's committed offset on the source as
			// the last sync read it; StandsFor what its target position
			// stands for.
			Source    int64 `json:"source_offset"`
			StandsFor int64 `json:"target_stands_for_source_offset"`
			// SyncedReadAt is when the fetcher read the source offset
			// the group's position follows.
			SyncedReadAt time.Time `json:"synced_read_at"`
		} `json:"partitions"`
	} `json:"groups"`
}

// position is where ferryctl's report puts the application's group on
// one partition.
type position struct{ source, standsFor int64 }

// positions are the application group's partitions in ferryctl's report
// that have a target position, and uncounted those the report names as
// ones the meter cannot count re-reads on (no position).
func (ch ctlChange) positions() (positions map[tp]position, uncounted map[tp]bool) {
	positions, uncounted = map[tp]position{}, map[tp]bool{}
	for _, g := range ch.Groups {
		if g.Group != appGroup {
			continue
		}
		for _, p := range g.Partitions {
			if p.StandsFor >= 0 {
				positions[tp{p.Topic, p.Partition}] = position{p.Source, p.StandsFor}
			}
		}
		for _, u := range g.Uncounted {
			uncounted[tp{u.Topic, u.Partition}] = true
		}
	}
	return positions, uncounted
}

// listed is whether the report lists the application's group on k at all
// (a position or a reason for none), and lastRead the latest source read
// of the group the report's positions follow.
func (ch ctlChange) listed(k tp) bool {
	for _, g := range ch.Groups {
		for _, p := range g.Partitions {
			if g.Group == appGroup && p.Topic == k.topic && p.Partition == k.partition {
				return true
			}
		}
	}
	return false
}

func (ch ctlChange) lastRead() time.Time {
	var last time.Time
	for _, g := range ch.Groups {
		for _, p := range g.Partitions {
			if g.Group == appGroup && p.SyncedReadAt.After(last) {
				last = p.SyncedReadAt
			}
		}
	}
	return last
}

// reread is the failover meter's re-read exposure of the application's
// group in the report (ferryctl merges the writers' views into one entry
// per group; 0 when it has no figure).
func (ch ctlChange) reread() int64 {
	var n int64
	for _, g := range ch.Groups {
		if g.Group == appGroup && g.Reread != nil {
			n += *g.Reread
		}
	}
	return n
}

// exitPartial is ferryctl's exit code for an outcome done but not whole:
// its report is on stdout, what is missing in its JSON error on stderr.
const exitPartial = 4

// failover runs ferryctl failover against the running writers, as an
// operator in the target region would: unplanned (the region is lost),
// confirmed by --yes (nobody is at a terminal). A partial outcome (exit
// 4) is an answer too; what ferryctl said was missing comes back as
// partial.
func (e *env) failover(ctx context.Context) (ch ctlChange, partial string, err error) {
	certDir, err := harness.Certs(e.opts.Dir)
	if err != nil {
		return ctlChange{}, "", err
	}
	args := []string{"failover", link, "--unplanned", "--yes", "--reason", "soak: source region lost", "-o", "json",
		"--cert", filepath.Join(certDir, "ferryctl.pem"), "--key", filepath.Join(certDir, "ferryctl-key.pem"),
		"--ca", filepath.Join(certDir, "ca.pem"),
		"--writer-id", devcerts.SPIFFEID(devcerts.DefaultTrustDomain, "writer"), "--timeout", "30s"}
	for _, m := range e.writers {
		if m != nil && running(m) {
			args = append(args, "--writer", m.cfg["listen"].(string))
		}
	}
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(e.opts.BinDir, "ferryctl"), args...)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != exitPartial {
			return ctlChange{}, "", fmt.Errorf("ferryctl %s: %w: %s%s", strings.Join(args[:2], " "), err, stderr.String(), out.String())
		}
		partial = ctlError(stderr.Bytes())
	}
	// Kept with the run's logs: what the operator was told.
	if err := os.WriteFile(filepath.Join(e.opts.Dir, "failover.json"), out.Bytes(), 0o644); err != nil {
		return ctlChange{}, "", err
	}
	if err := json.Unmarshal(out.Bytes(), &ch); err != nil {
		return ch, "", fmt.Errorf("ferryctl failover output %q: %w", out.String(), err)
	}
	return ch, partial, nil
}

// ctlError is the error ferryctl printed under -o json: the "error" of
// its last stderr line, or that line as it is if it is not JSON.
func ctlError(stderr []byte) string {
	lines := bytes.Split(bytes.TrimSpace(stderr), []byte("\n"))
	last := lines[len(lines)-1]
	var f struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(last, &f); err != nil || f.Error == "" {
		return string(last)
	}
	return f.Error
}

// rereadReported is the failover meter's re-read count, summed over the
// writers that report it (the application's is the source's only group).
func (e *env) rereadReported(ctx context.Context) int64 {
	var n int64
	for _, m := range e.writers {
		if m == nil || !running(m) {
			continue
		}
		if v, err := harness.Metric(ctx, m.admin, "ferry_failover_reread_records"); err == nil {
			n += int64(v)
		}
	}
	return n
}

// regionLoss is ferry-dr's ending, once the faults have healed: load and
// the application run a seeded while, the region is lost, the link is
// failed over, the application carries on on the target, and every record
// is accounted for.
func (e *env) regionLoss(ctx context.Context, stopLoad func()) *DR {
	dr := &DR{}
	fail := func(format string, a ...any) *DR {
		msg := fmt.Sprintf(format, a...)
		e.log.Error("region loss: drill failed", "err", msg)
		dr.Errors = append(dr.Errors, msg)
		return dr
	}
	// Slower than the producers (half their rate): behind when the region
	// goes, so it carries on on the target and the RTO is measured.
	srcApp, _, stopSrcApp, err := consume(ctx, e.src.Addr(), []string{topicIdem, topicTxn}, 0, max(1, e.opts.Rate/2))
	if err != nil {
		stopLoad()
		return fail("source application: %v", err)
	}
	// Long enough for several group syncs (interval 2 s here), seeded.
	dr.LossAfter = 10*time.Second + time.Duration(e.opts.Seed%20)*time.Second
	if err := sleep(ctx, dr.LossAfter); err != nil {
		stopSrcApp()
		stopLoad()
		return fail("%v", err)
	}
	// The target lags when the region goes: the writers' hop to the
	// target slowed for a few seconds first, so what the report names as
	// lost (committed to the last heartbeat's high watermark) is not empty.
	if err := e.lagTarget(ctx, 3*time.Second+time.Duration(e.opts.Seed%5)*time.Second); err != nil {
		stopSrcApp()
		stopLoad()
		return fail("slow the target hop: %v", err)
	}
	dr.Loss = e.opts.RegionLoss
	loadStopped := make(chan struct{})
	if dr.Loss == LossPartition {
		e.log.Info("region loss: cutting the source region off (fetchers↔writers)")
		if err := e.partitionRegion(); err != nil {
			return fail("%v", err)
		}
		// The producers stop; their source runs on.
		go func() { defer close(loadStopped); stopLoad() }()
	} else {
		e.log.Info("region loss: killing the source broker, the fetchers and Consul")
		e.loseRegion()
		// The producers give up on the dead source in their own time;
		// the failover does not wait for them.
		go func() { defer close(loadStopped); stopLoad() }()
	}
	if err := e.unlagTarget(); err != nil {
		return fail("%v", err)
	}
	stopSrcApp()
	dr.RereadAtLoss = e.rereadReported(ctx)
	// The writers commit what they hold as the streams break; the report
	// is read once they have.
	if err := sleep(ctx, 3*time.Second); err != nil {
		return fail("%v", err)
	}
	e.log.Info("region loss: ferryctl failover")
	failStart := time.Now()
	ch, partial, err := e.failover(ctx)
	if err != nil {
		return fail("%v", err)
	}
	if partial != "" {
		dr.FailoverPartial = partial
		e.log.Warn("region loss: ferryctl failover was partial", "missing", partial)
	}
	if ch.State != "failed_over" {
		return fail("ferryctl failover left the link %q", ch.State)
	}
	for _, p := range ch.AtRisk {
		dr.ReportedLost += max(0, p.HW-p.Committed)
	}
	dr.RereadReported = ch.reread()
	e.log.Info("region loss: the application reads on the target", "lost_offsets_reported", dr.ReportedLost)
	dstApp, dstDone, stopDstApp, err := consume(ctx, e.dst.Addr(), []string{targetPrefix + topicIdem, targetPrefix + topicTxn}, 15*time.Second, 0)
	if err != nil {
		return fail("target application: %v", err)
	}
	<-dstDone // read to the end, then nothing for 15 s
	stopDstApp()
	if dstApp.first.IsZero() {
		return fail("the application read nothing on the target: no RTO to measure")
	}
	dr.RTO = dstApp.first.Sub(failStart)
	// The source comes back only to be read; nothing writes to it again:
	// the producers' clients are closed (startProducers).
	select {
	case <-loadStopped:
	case <-time.After(3 * time.Minute):
		return fail("the producers did not give up on the lost source within 3 minutes")
	}
	e.log.Info("region loss: starting the source broker again to read what it held")
	rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := e.src.Restart(rctx); err != nil {
		return fail("restart the source to read what it held: %v", err)
	}
	if err := e.account(rctx, dr, ch, srcApp, dstApp); err != nil {
		return fail("%v", err)
	}
	return dr
}

// logRecord is one data record of a log: its offset and content digest.
type logRecord struct {
	offset int64
	digest uint64
}

// readLog reads every data record of topics read_committed, once the
// last stable offset has reached the high watermark everywhere (a
// transaction the loss left open is aborted by its timeout first), until
// nothing more comes for a few seconds.
func readLog(ctx context.Context, addr string, topics []string, seed maphash.Seed) (map[tp][]logRecord, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topics...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for {
		hw, err := adm.ListEndOffsets(ctx, topics...)
		if err == nil {
			var lso kadm.ListedOffsets
			if lso, err = adm.ListCommittedOffsets(ctx, topics...); err == nil && sameEnds(hw, lso) {
				break
			}
		}
		if err := sleep(ctx, 2*time.Second); err != nil {
			return nil, fmt.Errorf("%v: the last stable offset never reached the end: %w", topics, err)
		}
	}
	out := map[tp][]logRecord{}
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("read %v: %w", topics, ctx.Err())
		}
		recs := fs.Records()
		if len(recs) == 0 {
			return out, nil
		}
		for _, r := range recs {
			k := tp{r.Topic, r.Partition}
			out[k] = append(out[k], logRecord{r.Offset, digest(seed, r)})
		}
	}
}

func sameEnds(a, b kadm.ListedOffsets) bool {
	same := true
	a.Each(func(o kadm.ListedOffset) {
		if x, ok := b.Lookup(o.Topic, o.Partition); !ok || o.Err != nil || x.Offset != o.Offset {
			same = false
		}
	})
	return same
}

// digest identifies a record by content: key, value and headers (the
// workload's records are unique by key).
func digest(seed maphash.Seed, r *kgo.Record) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	h.Write(r.Key)
	h.WriteByte(0)
	h.Write(r.Value)
	for _, hd := range r.Headers {
		h.WriteString(hd.Key)
		h.Write(hd.Value)
	}
	return h.Sum64()
}

// account checks the report and the application's reads against what the
// source held and the target has.
func (e *env) account(ctx context.Context, dr *DR, ch ctlChange, srcApp, dstApp *reads) error {
	seed := maphash.MakeSeed()
	src, err := readLog(ctx, e.src.Addr(), []string{topicIdem, topicTxn}, seed)
	if err != nil {
		return fmt.Errorf("read the source: %w", err)
	}
	dst, err := readLog(ctx, e.dst.Addr(), []string{targetPrefix + topicIdem, targetPrefix + topicTxn}, seed)
	if err != nil {
		return fmt.Errorf("read the target: %w", err)
	}
	tally(dr, e.opts.Delivery == "at_least_once", ch, src, dst, srcApp.by, dstApp.by, srcApp.firstAt, e.log)
	return nil
}

// tally accounts for every record the source held (src), partition by
// partition, against ferryctl's failover report (ch), what the target has
// (dst) and what the application read on each side (srcRead: source
// offsets; dstRead: target offsets). Records are matched by content (the
// workload's are unique), every copy of a record the target holds twice
// (at-least-once) to its source offset.
func tally(dr *DR, alo bool, ch ctlChange, src, dst map[tp][]logRecord, srcRead, dstRead map[tp][]int64, srcFirst map[tp]time.Time, log *slog.Logger) {
	dr.AtLeastOnce = alo
	positions, uncounted := ch.positions()
	lastRead := ch.lastRead()
	report := map[tp]int{}
	for i, p := range ch.AtRisk {
		report[tp{p.Topic, p.Partition}] = i
	}
	for k, recs := range src {
		i, ok := report[k]
		if !ok {
			dr.Errors = append(dr.Errors, fmt.Sprintf("ferryctl reported nothing of %s/%d", k.topic, k.partition))
			continue
		}
		rep := ch.AtRisk[i]
		// Source offset of each target offset (every copy, where
		// at-least-once wrote a record twice), for the target reads.
		offsetOf := make(map[uint64]int64, len(recs))
		for _, r := range recs {
			offsetOf[r.digest] = r.offset
		}
		sourceOf := map[int64]int64{}
		onTarget := map[int64]bool{}
		for _, r := range dst[tp{targetPrefix + k.topic, k.partition}] {
			if so, ok := offsetOf[r.digest]; ok {
				sourceOf[r.offset] = so
				onTarget[so] = true
			}
		}
		var unobserved, missing, copiedPast int64
		for _, r := range recs {
			switch {
			case onTarget[r.offset]:
				switch {
				case r.offset < rep.Committed:
				case alo:
					// Written before its checkpoint: at-least-once
					// writes records first, so the report overstates.
					dr.CopiedPastCheckpoint++
					copiedPast++
				default:
					dr.Misreported++
				}
			case r.offset < rep.Committed:
				dr.Misreported++
			case r.offset < rep.HW:
				dr.LostInReport++
				missing++
			default:
				dr.LostUnobserved++
				unobserved++
			}
		}
		tallyRecords(dr, k, rep.LostRecords, rep.Unread, missing, copiedPast, log)
		switch est := rep.AfterHeartbeat; {
		case est == nil:
			dr.EstimateUnknown++
		case unobserved > *est:
			dr.EstimatedAfterHeartbeat += *est
			dr.BeyondEstimate += unobserved - *est
			log.Error("region loss: more lost after the last heartbeat than the report estimated", "topic", k.topic, "partition", k.partition, "lost", unobserved, "estimated", *est)
		default:
			dr.EstimatedAfterHeartbeat += *est
		}
		readSrc := map[int64]bool{}
		for _, o := range srcRead[k] {
			readSrc[o] = true
		}
		readDst := map[int64]bool{}
		firstDst := int64(-1)
		for _, to := range dstRead[tp{targetPrefix + k.topic, k.partition}] {
			if so, ok := sourceOf[to]; ok {
				readDst[so] = true
				if firstDst < 0 {
					firstDst = so
				}
			}
		}
		pos, synced := positions[k]
		// A partition the report does not list at all, which the
		// application first committed after the group's last read that
		// reached the writers: no read saw a position there, so what it
		// read again was all committed after the last sync.
		fresh := !synced && !ch.listed(k) && !lastRead.IsZero() && srcFirst[k].After(lastRead)
		var unpositioned int64
		for _, r := range recs {
			if r.offset >= rep.Committed {
				continue
			}
			switch {
			case readSrc[r.offset] && readDst[r.offset]:
				dr.AppReread++
				switch {
				case fresh:
					dr.RereadAfterSync++
				case !synced:
					unpositioned++
				case r.offset < pos.standsFor:
					// Below what the group's target position stands
					// for, yet read after it: a second copy.
					dr.RereadCopiedTwice++
				case r.offset < pos.source:
					dr.RereadKnown++
				default:
					dr.RereadAfterSync++
				}
			case !readSrc[r.offset] && !readDst[r.offset]:
				dr.AppMissing++
			}
		}
		dr.RereadUncounted += unpositioned
		if unpositioned > 0 && !uncounted[k] {
			dr.UncountedUnnamed++
			log.Error("region loss: re-reads on a partition without a target position that ferryctl did not name", "topic", k.topic, "partition", k.partition, "reread", unpositioned)
		}
		// Exact translation: the application's first record on the target
		// is the copy of the first source record at or after what its
		// position stands for.
		if synced && firstDst >= 0 {
			want := int64(-1)
			for _, r := range recs {
				if r.offset >= pos.standsFor {
					want = r.offset
					break
				}
			}
			if firstDst != want {
				dr.TranslationErrors++
				log.Error("region loss: translation", "topic", k.topic, "partition", k.partition, "stands_for", pos.standsFor, "first_read_on_target", firstDst, "want", want)
			}
		}
	}
}
