// Package shard replicates one shard: it opens a stream to a writer, reads
// the shard's source partitions from where the writer says the target has
// committed, and sends compressed batches with a bound on unacknowledged
// bytes. Any failure ends the session; the next one resumes from the
// writer's answer, never from this process's memory.
package shard

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/IBM/sarama"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ferry-replicator/ferry/pkg/batch"
	"github.com/ferry-replicator/ferry/pkg/budget"
	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/linkstate"
	"github.com/ferry-replicator/ferry/pkg/provenance"
	"github.com/ferry-replicator/ferry/pkg/refusal"
	"github.com/ferry-replicator/ferry/pkg/tracing"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/discovery"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/metrics"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/rawfetch"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/sourcewatch"
)

// Settings are the fixed parameters of every shard of a fetcher.
type Settings struct {
	Link      string
	FetcherID string
	Codec     ferryv1.Codec
	// BatchMaxBytes bounds a wire batch: a round's Kafka batches of a
	// partition are grouped up to it (a larger one travels alone).
	BatchMaxBytes    int
	MaxInflightBytes int
	// StartFrom is sarama.OffsetOldest or sarama.OffsetNewest, for
	// partitions the writer has no checkpoint of.
	StartFrom    int64
	OpenTimeout  time.Duration
	MinBackoff   time.Duration
	MaxBackoff   time.Duration
	DrainTimeout time.Duration
	// HeartbeatInterval is how often a runner without Deps.Source reads
	// the source's offsets, for the lag gauge and for the heartbeat each
	// open stream then sends (link.heartbeat.interval;
	// DefaultHeartbeatInterval when zero).
	HeartbeatInterval time.Duration
	// SkipOnDataLoss lets a partition go on past an anomaly (counted and
	// logged) instead of stopping: link.on_data_loss: skip.
	SkipOnDataLoss bool
	// MaxMessageBytes is the largest batch a writer takes
	// (writers.max_message_bytes): a Kafka batch above it travels as
	// records (sealRecords), and a record that alone is larger stops its
	// partition. Zero: no limit. A larger record inside a smaller batch is
	// not seen here (batches are not decoded): the writer refuses it.
	MaxMessageBytes int
	// SourceCluster is the source's Kafka cluster id, sent in each Open:
	// the writer records it with its producer id (pkg/provenance).
	SourceCluster string
	// LinkRetry is how often a shard whose link an operator paused or
	// failed over opens again to see whether it runs (DefaultLinkRetry
	// when zero).
	LinkRetry time.Duration
}

// DefaultLinkRetry is Settings.LinkRetry's default: a resumed link copies
// again within a few seconds, and a paused one costs a refused open per
// shard that often.
const DefaultLinkRetry = 3 * time.Second

// Deps are the shared clients a shard uses.
type Deps struct {
	// Client answers where a partition starts and ends when a session
	// opens; the lag and the heartbeats come from Source (lag.go).
	Client  sarama.Client
	Writers *Writers
	Codecs  *batch.Codecs
	Metrics *metrics.Metrics
	Log     *slog.Logger
	// Tracer emits batch and sampled-record spans; nil when tracing is off,
	// which costs nothing: no batch is decoded for it.
	Tracer trace.Tracer
	// Recent keeps the IDs of the last sampled batch traces, for the
	// status page's links into the Jaeger UI; nil keeps none.
	Recent *tracing.RecentTraces
	// RawFetch reads the source's Kafka record batches and offsets;
	// required.
	RawFetch *rawfetch.Fetcher
	// Budget bounds the source bytes all of the fetcher's shards hold at
	// once, from the fetch that reads them to the writer's acknowledgement
	// (link.max_buffered_bytes); nil is no limit beyond each shard's own.
	Budget *budget.Budget
	// Provenance, when set, tells the source's batches that a Ferry writer
	// copying from the link's target cluster (the writer's Opened names
	// it) produced, which the fetch loop then leaves out
	// (link.skip_replicated); nil copies every batch.
	Provenance *provenance.View
	// Source reads the source's offsets for all the fetcher's shards
	// (lag.go); nil: the runner reads its own through RawFetch, every
	// Settings.HeartbeatInterval.
	Source *sourcewatch.Watcher
	// Groups, when set, is the source's consumer-group offsets, which
	// each stream sends to a writer that takes them (link.groups); nil
	// sends none.
	Groups GroupSource
	// pauseFetch, a test hook, holds the fetch loop before each round
	// until it is closed; nil never holds.
	pauseFetch <-chan struct{}
}

// Runner replicates one shard until its context ends.
type Runner struct {
	set   Settings
	deps  Deps
	shard int
	epoch uint64
	lost  <-chan struct{}
	parts []discovery.Partition
	log   *slog.Logger

	// warnUnattributed logs once that registry entries without a source
	// cluster are copied (withoutReplicated); a metric counts each.
	warnUnattributed sync.Once
	// linkLog logs once that the link is not running (waitLink).
	linkLog sync.Once
	// source reads the partitions' source offsets (lag.go): Deps.Source,
	// or the runner's own, which Run runs.
	source    *sourcewatch.Watcher
	ownSource bool

	mu     sync.Mutex
	status Status
	// topics are the shard's topics; a topic's ID changes when its
	// recreation while it was read is accepted (recreatedWhileReading).
	topics []discovery.Topic
	// fromStart are the partitions the next session reads from their
	// topic's start: the topic was recreated while they were read, and
	// link.on_data_loss: skip accepted it. A partition leaves once a
	// session that started it there has a checkpoint acknowledged.
	fromStart map[discovery.Partition]bool
	// unopenable are the partitions a writer refused to open
	// (checkpoint_unverified): every writer would refuse them again, so
	// the shard's opens leave them out until the fetcher restarts.
	unopenable map[discovery.Partition]bool
	// epochLogs are the leader epochs read of each partition (epochs.go).
	epochLogs map[discovery.Partition]*epochLog
}

// Status is a shard's line in the fetcher's /status.
type Status struct {
	Shard     int    `json:"shard"`
	Epoch     uint64 `json:"epoch"`
	Writer    string `json:"writer"`
	Connected bool   `json:"connected"`
	LastError string `json:"last_error,omitempty"`
	Restarts  int    `json:"restarts"`
	// Draining is set while the shard is being given back (or restarted
	// with new partitions): it stops reading and waits for the last
	// acknowledgements.
	Draining bool `json:"draining,omitempty"`
	// LeaseLost is set from the moment the shard's lease is lost: the
	// runner sends nothing more and is stopping, and another fetcher may
	// own the shard already.
	LeaseLost bool `json:"lease_lost,omitempty"`
	// LinkState is set while the writers refuse the shard because an
	// operator paused the link (paused) or failed it over (failed_over):
	// the shard keeps its lease and opens again every LinkRetry.
	LinkState  string                     `json:"link_state,omitempty"`
	Partitions map[string]PartitionStatus `json:"partitions"`
}

// PartitionStatus is one partition's progress.
type PartitionStatus struct {
	Committed int64  `json:"committed_next_offset"`
	HighWater int64  `json:"high_watermark"`
	Stopped   string `json:"stopped,omitempty"`
}

// NewRunner prepares a runner for a shard with the given partitions. When
// lost is closed the runner stops at once, without draining: its lease is
// gone and another fetcher may own the shard.
func NewRunner(set Settings, deps Deps, shard int, epoch uint64, lost <-chan struct{}, topics []discovery.Topic, parts []discovery.Partition) *Runner {
	r := &Runner{
		set: set, deps: deps, shard: shard, epoch: epoch, lost: lost, topics: topics, parts: parts,
		log:    deps.Log.With("shard", shard, "epoch", epoch),
		status: Status{Shard: shard, Epoch: epoch, Partitions: map[string]PartitionStatus{}},
		source: deps.Source,
	}
	if r.source == nil {
		r.source, r.ownSource = sourcewatch.New(deps.RawFetch, r.heartbeatInterval(), r.log), true
	}
	for _, p := range parts {
		r.status.Partitions[partKey(p)] = PartitionStatus{Committed: -1, HighWater: -1}
	}
	return r
}

func partKey(p discovery.Partition) string { return p.Topic + "/" + strconv.Itoa(int(p.Partition)) }

// Partitions returns the partitions the runner was built for.
func (r *Runner) Partitions() []discovery.Partition { return r.parts }

// Topics returns the shard's topics as its opens describe them.
func (r *Runner) Topics() []discovery.Topic {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.topics)
}

// Status returns a copy of the shard's status.
func (r *Runner) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.status
	s.LeaseLost = r.isLost()
	s.Partitions = make(map[string]PartitionStatus, len(r.status.Partitions))
	for k, v := range r.status.Partitions {
		s.Partitions[k] = v
	}
	return s
}

func (r *Runner) update(fn func(*Status)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fn(&r.status)
}

// Run replicates until ctx ends, then drains: it stops reading, waits (up to
// DrainTimeout) for the writer to acknowledge what was sent, and closes the
// stream, so the next owner starts exactly where this one stopped. When it
// returns the shard's gauges are gone.
func (r *Runner) Run(ctx context.Context) {
	hwCtx, stopHW := context.WithCancel(context.Background())
	var (
		wg     sync.WaitGroup
		lostAt time.Time // when the lease was lost, if it was
	)
	wg.Add(2)
	if r.ownSource {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.source.Run(hwCtx)
		}()
	}
	go func() {
		defer wg.Done()
		r.watchSource(hwCtx)
	}()
	go func() {
		defer wg.Done()
		select {
		case <-r.lost:
			lostAt = time.Now()
		case <-hwCtx.Done():
		}
	}()
	defer func() {
		stopHW()
		wg.Wait()
		r.forgetGauges()
		if !lostAt.IsZero() {
			// How long stopping took tells an operator (and a test) what
			// a lost lease costs before the shard can return here.
			r.log.Warn("shard stopped after its lease was lost", "took", time.Since(lostAt))
		}
	}()
	backoff := r.set.MinBackoff
	attempt := 0
	for {
		if len(r.openable()) == 0 {
			// Every partition stopped at the open (checkpoint_unverified):
			// nothing to copy until an operator acts and the fetcher
			// restarts, and a writer refuses an open of no partitions.
			r.log.Error("every partition of the shard is stopped; the shard waits for a restart")
			select {
			case <-ctx.Done():
			case <-r.lost:
			}
			return
		}
		progressed, err := r.session(ctx, attempt)
		if ctx.Err() != nil || r.isLost() {
			return
		}
		r.update(func(s *Status) { s.Connected = false })
		if errors.Is(err, errRepin) || errors.Is(err, errTopicReopen) { // drained on purpose: no failure, no wait
			attempt, backoff = 0, r.set.MinBackoff
			continue
		}
		// A link an operator paused or failed over: every writer refuses
		// it alike, so this is no writer's failure. The shard keeps its
		// lease, tries no other writer and backs off no further: it
		// waits and opens again, until the link runs (pkg/linkstate).
		if ref, ok := linkstate.From(err); ok {
			r.deps.Metrics.StreamRestarts.WithLabelValues(r.set.Link, "link_"+string(ref.State)).Inc()
			r.update(func(s *Status) { s.LinkState, s.LastError = string(ref.State), errString(err) })
			attempt, backoff = 0, r.set.MinBackoff
			if !r.waitLink(ctx, ref) {
				return
			}
			continue
		}
		// A record the target can never take (too large, or refused by
		// its brokers for good) stops its partition; the shard's other
		// partitions go on at once (the writer is fine).
		if ref, ok := refusal.From(err); ok && r.stopRefused(ref) {
			r.deps.Metrics.StreamRestarts.WithLabelValues(r.set.Link, restartReason(err)).Inc()
			attempt, backoff = 0, r.set.MinBackoff
			continue
		}
		r.deps.Metrics.StreamRestarts.WithLabelValues(r.set.Link, restartReason(err)).Inc()
		r.update(func(s *Status) { s.LastError, s.Restarts = errString(err), s.Restarts+1 })
		if progressed {
			// Back to the preferred writer, which the healthy set decides.
			attempt, backoff = 0, r.set.MinBackoff
		} else {
			attempt++ // try the next writer in this shard's order
			backoff = min(2*backoff, r.set.MaxBackoff)
		}
		// Full jitter keeps shards that failed together from retrying together.
		wait := backoff/2 + rand.N(backoff/2+1)
		r.log.Warn("shard stream ended; reopening", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return
		case <-r.lost:
			return
		case <-time.After(wait):
		}
	}
}

// waitLink waits LinkRetry before the next open of a link the writers
// refuse as ref says (logged at the runner's first wait only: /status and
// the restarts metric show every one); false when the runner must stop.
func (r *Runner) waitLink(ctx context.Context, ref linkstate.Refusal) bool {
	wait := r.set.LinkRetry
	if wait <= 0 {
		wait = DefaultLinkRetry
	}
	r.linkLog.Do(func() {
		r.log.Warn("link not running: the shard keeps its lease and waits", "state", ref.State, "reason", ref.Why, "retry_every", wait)
	})
	select {
	case <-ctx.Done():
		return false
	case <-r.lost:
		return false
	case <-time.After(wait):
		return true
	}
}

func (r *Runner) isLost() bool {
	select {
	case <-r.lost:
		return true
	default:
		return false
	}
}

// restartReason names why a stream ended, for the restarts metric: the
// gRPC status code in snake case when the error carries one (a refused
// identity is permission_denied, a dropped connection or failed handshake
// unavailable), else other (the source, a local check).
func restartReason(err error) string {
	st, ok := status.FromError(err)
	if !ok && errors.Is(err, context.DeadlineExceeded) {
		st, ok = status.New(codes.DeadlineExceeded, ""), true // a local timeout, as an open's
	}
	if !ok || st.Code() == codes.OK || st.Code() == codes.Unknown {
		return "other"
	}
	var b strings.Builder
	for i, c := range st.Code().String() {
		if unicode.IsUpper(c) {
			if i > 0 {
				b.WriteByte('_')
			}
			c = unicode.ToLower(c)
		}
		b.WriteRune(c)
	}
	return b.String()
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Reasons a partition stops, as the data-loss metric and /status name them.
const (
	ReasonOutOfRange      = "offset_out_of_range"
	ReasonCheckpointAhead = "checkpoint_ahead"
	ReasonTopicRecreated  = "topic_recreated"
	// ReasonRecordTooLarge: a record above what the writer or the target
	// takes (writers.max_message_bytes, the writer's
	// producer.max_message_bytes, the target topic's max.message.bytes).
	ReasonRecordTooLarge = "record_too_large"
	// ReasonTargetRefused: the target's brokers refused a record for what
	// it holds, and would refuse it again (INVALID_RECORD, such as a record
	// without a key into a compacted target topic; INVALID_TIMESTAMP
	// against the target topic's message.timestamp.*.max.ms; ...): the
	// writer's refusal names the record and Kafka's error.
	ReasonTargetRefused = "target_refused"
	// ReasonBatchTooLarge: a source batch the writer must decompress to
	// rebuild (LogAppendTime, offset gaps, a delete horizon, straddling
	// the resume offset) inflates past the writer's max_batch_bytes, or
	// its decoded records past the writer's max_buffered_bytes: a
	// compression bomb, or a batch larger than the writer is configured
	// to rebuild.
	ReasonBatchTooLarge = "batch_too_large"
	// ReasonSourceUnreadable: the fetcher cannot read the partition's
	// batches as they are, and fetching again will not change
	// it: a batch or legacy message failing its CRC, a legacy message set
	// (magic 0 or 1) the fetcher cannot convert to a v2 batch (a codec
	// legacy messages do not have, a compressed message inflating past
	// its bound), an authorization failure.
	ReasonSourceUnreadable = "source_unreadable"
	// ReasonCheckpointUnverified: the writer found the partition's latest
	// checkpoint unsigned, or signed by no writer its checkpoints.signers
	// admit (forged, replayed, or a misconfigured writer): it cannot say
	// where the partition resumes, and starting it from start_from would
	// copy it again or skip data.
	ReasonCheckpointUnverified = "checkpoint_unverified"
)

// stopRefused stops the partition a writer refused, if it is one of the
// shard's; it reports whether it was.
func (r *Runner) stopRefused(ref refusal.Refusal) bool {
	p := discovery.Partition{Topic: ref.Topic, Partition: ref.Partition}
	if !slices.Contains(r.parts, p) {
		return false
	}
	if ref.Reason == refusal.CheckpointUnverified {
		r.mu.Lock()
		if r.unopenable == nil {
			r.unopenable = map[discovery.Partition]bool{}
		}
		r.unopenable[p] = true
		r.mu.Unlock()
	}
	r.stopPartition(p, &StopError{Reason: refusedReason(ref), Err: ref})
	return true
}

// openable are the partitions the shard's opens name: all but those a
// writer refused to open.
func (r *Runner) openable() []discovery.Partition {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []discovery.Partition
	for _, p := range r.parts {
		if !r.unopenable[p] {
			out = append(out, p)
		}
	}
	return out
}

// refusedReason names a writer's refusal as the data-loss metric and
// /status name stops; a reason this fetcher does not know (a newer writer)
// is a target refusal.
func refusedReason(ref refusal.Refusal) string {
	switch ref.Reason {
	case refusal.RecordTooLarge:
		return ReasonRecordTooLarge
	case refusal.BatchTooLarge:
		return ReasonBatchTooLarge
	case refusal.CheckpointUnverified:
		return ReasonCheckpointUnverified
	}
	return ReasonTargetRefused
}

// stopped reports whether p has been stopped (stopPartition): it is not
// read again by this runner.
func (r *Runner) stopped(p discovery.Partition) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status.Partitions[partKey(p)].Stopped != ""
}

// StopError marks a partition that cannot go on without losing or skipping
// data; the operator must act.
type StopError struct {
	Reason string
	Err    error
}

func (e *StopError) Error() string { return "partition stopped: " + e.Reason + ": " + e.Err.Error() }
func (e *StopError) Unwrap() error { return e.Err }
