// Package server is the writer's side of the replication stream: it checks
// every open and batch, produces the records to the target cluster and
// commits checkpoints, and acknowledges upstream only what is committed.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-replicator/ferry/pkg/batch"
	"github.com/ferry-replicator/ferry/pkg/budget"
	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/provenance"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
	"github.com/ferry-replicator/ferry/pkg/tracing"
	"github.com/ferry-replicator/ferry/services/writer/internal/checkpoint"
	"github.com/ferry-replicator/ferry/services/writer/internal/groupsyncer"
	"github.com/ferry-replicator/ferry/services/writer/internal/heartbeat"
	"github.com/ferry-replicator/ferry/services/writer/internal/metrics"
	"github.com/ferry-replicator/ferry/services/writer/internal/naming"
	"github.com/ferry-replicator/ferry/services/writer/internal/offsetindex"
	"github.com/ferry-replicator/ferry/services/writer/internal/topicfilter"
	"github.com/ferry-replicator/ferry/services/writer/internal/topics"
)

// Link is a replication flow the writer accepts.
type Link struct {
	Name string
	// ExactlyOnce selects the transactional mode: records and checkpoints
	// of a round commit in one target transaction.
	ExactlyOnce       bool
	Naming            naming.Policy
	ReplicationFactor int16
	// Configs decides the configs of a target topic the link creates.
	Configs topics.ConfigCopy
	// ConfigSync is what Options.Syncer does with the configs of a target
	// topic that exists (links[].config_sync); empty is topics.SyncApply.
	ConfigSync topics.ConfigSync
	// SyncACLs creates the source's Read and Describe ACLs an open
	// carries on the target topic (links[].sync_acls).
	SyncACLs bool
	// PlatformTopics are the platform topics (topics.Platform) the link
	// may write nonetheless, such as _schemas for a Schema Registry copy.
	PlatformTopics map[string]bool
	// Topics is the link's allow list of source topics; an Open naming
	// any other is refused (topicpolicy.go). The zero Filter accepts none.
	Topics topicfilter.Filter
	// Shards is the link's number of shards (the fetchers' link.shards):
	// an Open of a shard number at or above it is refused.
	Shards uint32
	// AllowedIDs are the peer identities that may open the link's shards;
	// empty admits every peer the writer admits (tls.allowed_ids).
	AllowedIDs tlsconfig.IDs
}

// Options are the server's fixed settings.
type Options struct {
	// ID names this writer in Opened answers and checkpoints.
	ID string
	// Target are the target cluster's client options (seeds, TLS, SASL);
	// each stream builds its own client and producer from them.
	Target []kgo.Opt
	// Producer tunes each stream's target producer.
	Producer ProducerSettings
	// MaxBatchBytes bounds one batch's uncompressed records.
	MaxBatchBytes int
	// MaxGroupBytes bounds the records of one produce round.
	MaxGroupBytes int
	// MaxStreams bounds the streams the writer serves at once, and
	// MaxStreamsPerPeer those of one peer identity: each stream holds a
	// Kafka client and a producer id of its own.
	MaxStreams        int
	MaxStreamsPerPeer int
	// OpenRatePerPeer bounds the Opens a peer identity may make a second,
	// with bursts of OpenBurstPerPeer (openrate.go): each Open takes a
	// producer id and writes a __ferry_producers record. 0: unbounded.
	OpenRatePerPeer  float64
	OpenBurstPerPeer int
	// MaxPartitions bounds the partition count of a target topic the
	// writer creates or grows (growth cannot be undone).
	MaxPartitions int32
	// MaxBufferedBytes bounds the bytes of the received batches the server
	// holds, queued or in a round, across all its streams: their payloads,
	// as received and decompressed, and the records decoded from them
	// (charge.go). 0: no bound.
	MaxBufferedBytes int64
	// AckTimeout bounds how long a stream's acknowledgement may wait for
	// its peer to read it before the stream ends (session.ack): a peer
	// that stops reading must not keep its stream's resources until its
	// connection's maximum age. 0: defaultAckTimeout.
	AckTimeout time.Duration
	// Tracer emits batch and sampled-record spans; nil: tracing off.
	Tracer trace.Tracer
	// Recent keeps the IDs of the last traced batches the writer wrote,
	// for the status page's links into the Jaeger UI; nil keeps none.
	Recent *tracing.RecentTraces
	// Recorder records each stream's producer id in the target before
	// anything is produced with it, so that links reading the target skip
	// what Ferry wrote (pkg/provenance). Nil records nothing (tests only).
	Recorder *provenance.Recorder
	// Index is the offset index topic: each round adds, beside each
	// partition's checkpoint, the index record of what it copied of it
	// (progress, package offsetindex).
	Index offsetindex.Topic
	// Heartbeats is the table the streams' heartbeats and commits go to
	// (package heartbeat), persisted by the caller; nil: a table of the
	// server's own, in memory only.
	Heartbeats *heartbeat.Table
	// HeartbeatsTopic is where Heartbeats is persisted: no link may write
	// it.
	HeartbeatsTopic string
	// FlushHeartbeats writes what Heartbeats changed since its last write
	// now (heartbeat.Store.Flush), before a stopped link's report is
	// given (Durable); nil: nothing to write.
	FlushHeartbeats func(context.Context) error
	// Groups commits the consumer-group offsets streams bring (group
	// sync, package groupsyncer) on the writer's group syncer (RunGroupSync); nil:
	// the writer syncs no groups and its Opened says it takes none.
	Groups groupsyncer.Committer
	// GroupState keeps the group syncer's state in the target cluster,
	// written every GroupStatePersist (heartbeats.persist_interval) and
	// read back by RestoreGroups; nil: memory only (tests).
	GroupState        groupsyncer.Store
	GroupStatePersist time.Duration
	// Syncer keeps existing target topics' configs like their source's
	// and creates their synced ACLs (topicsync.go); nil: configs are
	// copied at creation only, and no ACL is synced.
	Syncer *topics.Syncer
	// ReplicateIDs, when not empty, are the only peers that may call
	// Replicate (tls.allowed_ids): the TLS interceptors also admit the
	// operators of control.allowed_ids, who may not write a link.
	ReplicateIDs tlsconfig.IDs
}

// ProducerSettings tune the shards' target producers.
type ProducerSettings struct {
	// Compression of the batches the writer builds.
	Compression recordbatch.Compression
	// MaxMessageBytes bounds one batch (Kafka's max.message.bytes counts
	// the batch as written).
	MaxMessageBytes int
	// MergeBelow: a source batch smaller than this that shares a round
	// with other batches of its partition is merged with them (build.go).
	MergeBelow int
	// Timeout bounds one produce request.
	Timeout time.Duration
	// TransactionTimeout is how long the target keeps an exactly-once
	// round's transaction open before aborting it.
	TransactionTimeout time.Duration
}

// Server implements ferryv1.ReplicationServiceServer.
type Server struct {
	ferryv1.UnimplementedReplicationServiceServer

	opts  Options
	links map[string]Link
	// gaps are the source topics the offset index cannot cover
	// (coverage.go).
	gaps    indexGaps
	topics  *topics.Ensurer
	store   *checkpoint.Store
	codecs  *batch.Codecs
	metrics *metrics.Metrics
	log     *slog.Logger
	// budget is MaxBufferedBytes, shared by all streams (nil: none): each
	// session holds its batches' bytes from it (session.hold, charge.go).
	budget *budget.Budget
	// growing is the turn of the one receiver that may wait for the
	// budget while its batch holds part of it (charge.go).
	growing chan struct{}
	// resident is what the streams' batches keep in memory, charged or
	// not; receiversWaiting, how many receivers wait for the budget now.
	resident         resident
	receiversWaiting atomic.Int64
	// builders are the recordbatch.Builders sessions take to build a
	// round (build.go).
	builders sync.Pool
	// beats is the heartbeat table (Options.Heartbeats).
	beats *heartbeat.Table
	// groups is the group syncer; nil without Options.Groups.
	groups *groupsyncer.Syncer
	// stops are the partitions the writer refused for good (stopped.go).
	stops stoppedTable

	// sessionIDs numbers the streams (session.id), for Report to name.
	sessionIDs atomic.Uint64

	mu sync.Mutex
	// shards holds only shards of the writer's links below their shard
	// counts (admit), so it is bounded by the links' settings.
	shards   map[shardKey]*shardState
	streams  int            // streams entered (enter)
	perPeer  map[string]int // streams entered by peer identity
	opens    openLimiter    // Opens by peer identity (enter)
	draining bool
	drain    chan struct{} // closed by Drain
	sessions sync.WaitGroup

	// loads are the shards' offset index loads (session.go), which outlive
	// their streams: loadsCtx ends them at Drain.
	loads     sync.WaitGroup
	loadsCtx  context.Context
	stopLoads context.CancelFunc
}

type shardKey struct {
	link  string
	shard uint32
}

// shardState is what the writer knows of a shard across its streams.
type shardState struct {
	highest uint64   // highest epoch seen
	active  *session // the stream serving it now, if any
	// stopLoad ends the offset index load of its latest stream
	// (startLoad), which may outlive that stream.
	stopLoad context.CancelFunc
}

// New builds a server. The caller owns the dependencies and closes them
// after the server has drained.
func New(opts Options, links []Link, ens *topics.Ensurer, store *checkpoint.Store, codecs *batch.Codecs, m *metrics.Metrics, log *slog.Logger) *Server {
	byName := map[string]Link{}
	for _, l := range links {
		byName[l.Name] = l
	}
	if opts.AckTimeout <= 0 {
		opts.AckTimeout = defaultAckTimeout
	}
	s := &Server{
		opts: opts, links: byName, topics: ens, store: store, codecs: codecs,
		metrics: m, log: log, shards: map[shardKey]*shardState{}, perPeer: map[string]int{}, drain: make(chan struct{}),
		opens:    newOpenLimiter(opts.OpenRatePerPeer, opts.OpenBurstPerPeer),
		growing:  make(chan struct{}, 1),
		builders: sync.Pool{New: func() any { return new(recordbatch.Builder) }},
		beats:    opts.Heartbeats,
	}
	if s.beats == nil {
		s.beats = heartbeat.NewTable()
	}
	if opts.MaxBufferedBytes > 0 {
		s.budget = budget.New(opts.MaxBufferedBytes, func(n int64) { m.BufferedBytes.Set(float64(n)) })
	}
	s.loadsCtx, s.stopLoads = context.WithCancel(context.Background())
	m.Failover.SetSource(s.failoverMetrics)
	if opts.Groups != nil {
		s.groups = groupsyncer.New(groupsyncer.Config{Commit: opts.Groups, Store: opts.GroupState, PersistEvery: opts.GroupStatePersist,
			Refused: s.linkRefusal, Metrics: m, Log: log.With("component", "group-sync")})
		m.Groups.SetSource(s.groupMetrics)
	}
	return s
}

// Replicate serves one shard stream.
func (s *Server) Replicate(stream ferryv1.ReplicationService_ReplicateServer) error {
	err := s.replicate(stream)
	if err != nil && !errors.Is(err, context.Canceled) {
		s.log.Warn("stream ended", "err", err)
	}
	return toStatus(err)
}

func (s *Server) replicate(stream ferryv1.ReplicationService_ReplicateServer) error {
	if err := s.admitPeer(stream.Context()); err != nil {
		return err
	}
	req, err := stream.Recv()
	if err != nil {
		return fmt.Errorf("receive open: %w", err)
	}
	open := req.GetOpen()
	if open == nil {
		return fmt.Errorf("%w: the first message must be an Open", errBadRequest)
	}
	// Nothing of the Open is labelled, kept or allocated for before these
	// checks: its link name becomes a metric label only once it is known.
	if err := checkOpen(open); err != nil {
		return reject(s.metrics, unknownLink, err)
	}
	link, err := s.admit(stream.Context(), open)
	if err != nil {
		return err
	}
	peer := tlsconfig.PeerIdentity(stream.Context())
	if err := s.enter(peer); err != nil {
		return reject(s.metrics, link.Name, err)
	}
	defer s.leave(peer)
	sess, err := newSession(stream.Context(), s, link, open)
	if err != nil {
		return reject(s.metrics, link.Name, err)
	}
	sess.traceStream()
	if err := s.claim(stream.Context(), sess); err != nil {
		sess.cancel(nil)
		return err
	}
	defer s.release(sess)
	s.stops.reopened(link.Name, open.GetPartitions())
	err = sess.run(stream)
	s.stops.note(link.Name, err)
	return err
}

// admit returns the Open's link if the peer may open the shard: its
// identity is one the link admits and the shard is one the link has. It
// runs before anything of the stream is allocated and before the shard's
// epoch is looked at, so a peer that may not hold a shard can neither
// raise its epoch (refusing the real owner until the writer restarts) nor
// supersede its stream.
func (s *Server) admit(ctx context.Context, open *ferryv1.Open) (Link, error) {
	link, err := s.admitLink(ctx, open.GetLink())
	if err != nil {
		return Link{}, err
	}
	if open.GetShard() >= link.Shards {
		return Link{}, reject(s.metrics, link.Name, fmt.Errorf("%w: open of shard %d, but link %q has links[].shards %d (shards 0..%d)",
			errBadOpen, open.GetShard(), link.Name, link.Shards, link.Shards-1))
	}
	// Before the epoch is looked at: a zombie of a failed-over link
	// neither writes nor fences anything (linkstate.go).
	if err := s.linkRefusal(link.Name); err != nil {
		return Link{}, reject(s.metrics, link.Name, err)
	}
	return link, nil
}

// admitPeer refuses a caller that is not one of tls.allowed_ids, when
// they are set: the TLS interceptors also admit the operators of
// control.allowed_ids, who may not write a link or report for one.
func (s *Server) admitPeer(ctx context.Context) error {
	if s.opts.ReplicateIDs.Empty() {
		return nil
	}
	if err := s.opts.ReplicateIDs.AdmitPeer(ctx); err != nil {
		return reject(s.metrics, unknownLink, fmt.Errorf("%w: the replication service admits only tls.allowed_ids: %v", errPeerRefused, err))
	}
	return nil
}

// admitLink returns the link named name if the caller's identity is one
// the link admits (links[].allowed_ids).
func (s *Server) admitLink(ctx context.Context, name string) (Link, error) {
	link, ok := s.links[name]
	if !ok {
		return Link{}, reject(s.metrics, unknownLink, fmt.Errorf("%w %q: this writer is not configured for it", errUnknownLink, Clip(name)))
	}
	if !link.AllowedIDs.Empty() {
		if err := link.AllowedIDs.AdmitPeer(ctx); err != nil {
			return Link{}, reject(s.metrics, link.Name, fmt.Errorf("%w: link %q admits only its links[].allowed_ids: %v", errPeerRefused, link.Name, err))
		}
	}
	return link, nil
}

// unknownLink is the link label of refusals before the Open's link is
// known to be one of the writer's: a client-chosen name would make a
// series per Open.
const unknownLink = ""

// Clip shortens a client-chosen name for an error or a log line.
func Clip(name string) string {
	const max = 128
	if len(name) <= max {
		return name
	}
	return name[:max] + "…(" + strconv.Itoa(len(name)) + " bytes)"
}

// enter counts a stream of peer (its identity; "" in plaintext) against
// max_streams and max_streams_per_peer, and its Open against
// open_rate_per_peer, before anything is allocated for it: each stream
// holds a Kafka client, a producer id and a __ferry_producers record.
// leave gives the place back (not the Open).
func (s *Server) enter(peer string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.streams >= s.opts.MaxStreams {
		return fmt.Errorf("%w: the writer serves max_streams %d streams already", errTooManyStreams, s.opts.MaxStreams)
	}
	if s.perPeer[peer] >= s.opts.MaxStreamsPerPeer {
		return fmt.Errorf("%w: peer %q holds max_streams_per_peer %d streams already", errTooManyStreams, peer, s.opts.MaxStreamsPerPeer)
	}
	if wait, ok := s.opens.take(peer); !ok {
		return s.opens.refusal(peer, wait)
	}
	s.streams++
	s.perPeer[peer]++
	return nil
}

func (s *Server) leave(peer string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streams--
	if s.perPeer[peer]--; s.perPeer[peer] == 0 {
		delete(s.perPeer, peer)
	}
}

// claim makes sess the shard's active stream. An open with an older epoch
// than the shard has seen is refused; a stream it replaces (same or newer
// epoch: a reconnect or a new owner) is stopped and waited for first, so two
// streams of one shard never produce at the same time in this writer.
func (s *Server) claim(ctx context.Context, sess *session) error {
	key := shardKey{sess.link.Name, sess.shard}
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		return errDraining
	}
	st := s.shards[key]
	if st == nil {
		st = &shardState{}
		s.shards[key] = st
	}
	if sess.epoch < st.highest {
		s.mu.Unlock()
		s.metrics.StaleEpochs.WithLabelValues(sess.link.Name).Inc()
		return fmt.Errorf("%w: open of shard %d with epoch %d, but epoch %d exists", errStaleEpoch, sess.shard, sess.epoch, st.highest)
	}
	st.highest = sess.epoch
	old := st.active
	st.active = sess
	s.sessions.Add(1)
	s.mu.Unlock()
	if old != nil {
		old.cancel(errSuperseded)
		select {
		case <-old.done:
		case <-ctx.Done():
			s.release(sess)
			return ctx.Err()
		}
	}
	return nil
}

// startLoad returns the context of sess's offset index reads, ended by
// the next stream of its shard (which reads its own) or by Drain; not by
// sess's end, so a region loss that ends every stream while a load runs
// (slowed, maybe, by what went before) still gives the group syncer,
// which translates through sess's translator after the stream is gone
// (advance), the positions it was needed for.
func (s *Server) startLoad(sess *session) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(s.loadsCtx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.shards[shardKey{sess.link.Name, sess.shard}]; st != nil {
		if st.stopLoad != nil {
			st.stopLoad()
		}
		st.stopLoad = cancel
	}
	return ctx, cancel
}

// StreamOpened is true when a stream of link has opened on this writer
// since it started (a shard it claimed).
func (s *Server) StreamOpened(link string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.shards {
		if k.link == link {
			return true
		}
	}
	return false
}

func (s *Server) release(sess *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.shards[shardKey{sess.link.Name, sess.shard}]; st != nil && st.active == sess {
		st.active = nil
	}
	s.sessions.Done()
}

// currentEpoch is the highest epoch seen for the shard; a batch of a lower
// epoch is refused even on a stream opened before the newer owner came.
func (s *Server) currentEpoch(link string, shard uint32) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.shards[shardKey{link, shard}]; st != nil {
		return st.highest
	}
	return 0
}

// Drain stops taking streams and asks every stream to commit what it has
// produced, acknowledge it and end with Unavailable, so fetchers resume
// elsewhere from the checkpoints. It returns when all have ended or ctx ends.
func (s *Server) Drain(ctx context.Context) error {
	s.mu.Lock()
	if !s.draining {
		s.draining = true
		close(s.drain)
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.sessions.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("drain: %w", ctx.Err())
	}
	// The index loads end either way: each holds a Kafka client, and a
	// writer whose drain gave up may still run (embedded, in tests).
	s.stopLoads()
	s.loads.Wait()
	return err
}

// ShardStatus is one shard's line in /status.
type ShardStatus struct {
	Link    string `json:"link"`
	Shard   uint32 `json:"shard"`
	Epoch   uint64 `json:"epoch"`
	Fetcher string `json:"fetcher,omitempty"`
	Active  bool   `json:"active"`
}

// Status lists the shards this writer has served.
func (s *Server) Status() []ShardStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ShardStatus, 0, len(s.shards))
	for k, st := range s.shards {
		ss := ShardStatus{Link: k.link, Shard: k.shard, Epoch: st.highest, Active: st.active != nil}
		if st.active != nil {
			ss.Fetcher = st.active.fetcher
		}
		out = append(out, ss)
	}
	return out
}
