package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc/peer"

	"github.com/ferry-replicator/ferry/pkg/budget"
	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/pkg/shards"
	"github.com/ferry-replicator/ferry/pkg/stages"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
	"github.com/ferry-replicator/ferry/pkg/tracing"
	"github.com/ferry-replicator/ferry/services/writer/internal/checkpoint"
	"github.com/ferry-replicator/ferry/services/writer/internal/partkey"
	"github.com/ferry-replicator/ferry/services/writer/internal/producer"
	"github.com/ferry-replicator/ferry/services/writer/internal/topics"
	"github.com/ferry-replicator/ferry/services/writer/internal/translation"
)

// topicPartition is a source partition of the stream's link.
type topicPartition = partkey.Partition

// session serves one stream: one shard, one epoch, one target producer.
type session struct {
	s       *Server
	link    Link
	shard   uint32
	epoch   uint64
	fetcher string
	open    *ferryv1.Open
	// topicIDs are the source topic IDs the Open reported.
	topicIDs map[string][]byte
	// next is the lowest source offset the next batch of each partition may
	// start at; it refuses overlaps and replays within the stream.
	next map[topicPartition]int64
	// opened are the Open's partitions. Unlike next it never changes, so
	// the Report stream (report.go) reads it beside the receiver.
	opened map[topicPartition]bool
	// id numbers the stream among the writer's (Opened.session), and peer
	// is its caller's identity: a Report stream binds to it by both.
	id   uint64
	peer string
	// reporting is set once a Report stream is bound to the stream.
	reporting atomic.Bool
	// probe picks the passing batches decoded for tracing (parts).
	probe *tracing.RecordProbe
	// progress is what the shard's rounds commit beside their records.
	progress *progress
	// obs is what the shard's committer reports its rounds to.
	obs *observer
	// transit observes the transit stage of the link's batches.
	transit prometheus.Observer
	// maxBatch is the largest batch the shard's producer sends and its
	// target topics take; maxRecord, the largest record
	// (recordbatch.RecordSize) that fits one, and maxRecordBy names the
	// setting that sets them.
	maxBatch    int
	maxRecord   int
	maxRecordBy string
	// queued holds the bytes of checked batches waiting for a round, at
	// most queueBytes (max_group_bytes): the next round fills while one is
	// in flight (a round's batches leave the queue as it takes them), and
	// a fetcher cannot make the writer hold more. Twice that held some
	// 70 MB of wire batches over 8 streams in a catch-up (heap profile,
	// 2026-12-02) for no throughput.
	queued     *semaphore.Weighted
	queueBytes int64
	// hold is the stream's share of the writer's budget (Server.budget):
	// what its batches take in memory (charge.go) from receipt until their
	// checkpoints are committed, all released when the stream ends (run).
	hold *budget.Hold
	// res is the stream's part of Server.resident.
	res *residentShare
	// charge is what the batch the receiver checks holds of hold
	// (charge.go); the receiver's alone.
	charge *charge
	// builder rebuilds the round's batches that cannot pass as they are
	// (build.go): one of the server's, taken for the build only.
	builder *recordbatch.Builder
	// ctlChanged is closed at the next change of a link's state: serve
	// takes it before it reads the link's state, take wakes on it.
	ctlChanged <-chan struct{}

	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// work is a checked batch on its way to the target.
type work struct {
	b *ferryv1.Batch
	// parts are its records in offset order (parts.go).
	parts []part
	// span is the context of the batch's latest writer span, the parent of
	// its next stage; invalid when the batch is not traced (trace.go).
	span trace.SpanContext
	// held is what the batch holds of session.hold, released when its
	// checkpoint is committed (releaseCommitted).
	held int64
	// decoded is the bytes its decoded records hold (session.parts),
	// charged to session.hold with its payload.
	decoded int64
	// resident is what it keeps in memory (Server.resident).
	resident int64
	// received is when the batch arrived, where its commit stage starts.
	received time.Time
}

func newSession(ctx context.Context, s *Server, link Link, open *ferryv1.Open) (*session, error) {
	if len(open.GetPartitions()) == 0 {
		return nil, fmt.Errorf("%w: open of shard %d lists no partitions", errBadOpen, open.GetShard())
	}
	counts := map[string]int32{}
	for _, t := range open.GetTopics() {
		if err := checkSpec(link, t, counts); err != nil {
			return nil, err
		}
		if err := s.checkTopic(link, t.GetName()); err != nil {
			return nil, err
		}
		// The writer creates or grows the target topic to this count, and
		// growth cannot be undone: a fetcher does not decide it alone.
		if n := t.GetPartitionCount(); n > s.opts.MaxPartitions {
			return nil, fmt.Errorf("%w: link %q, topic %q has %d partitions, above the writer's max_partitions %d",
				errTopicRefused, link.Name, t.GetName(), n, s.opts.MaxPartitions)
		}
		counts[t.GetName()] = t.GetPartitionCount()
	}
	sess := &session{
		s: s, link: link, shard: open.GetShard(), epoch: open.GetEpoch(), fetcher: open.GetFetcher(),
		open: open, next: map[topicPartition]int64{}, opened: map[topicPartition]bool{}, done: make(chan struct{}), topicIDs: map[string][]byte{},
		probe: tracing.NewRecordProbe(),
	}
	for _, t := range open.GetTopics() {
		sess.topicIDs[t.GetName()] = t.GetTopicId()
	}
	sess.progress = newProgress(link.Name, s.opts.ID, sess.epoch, s.store, sess.topicIDs)
	sess.progress.index = s.opts.Index
	sess.obs = &observer{link: link, shard: sess.shard, epoch: sess.epoch, metrics: s.metrics, tracer: s.opts.Tracer, recent: s.opts.Recent, log: s.log, beats: s.beats,
		commitStage: s.metrics.Stages.WithLabelValues(link.Name, stages.Commit)}
	sess.transit = s.metrics.Stages.WithLabelValues(link.Name, stages.Transit)
	sess.queueBytes = int64(s.opts.MaxGroupBytes)
	sess.queued = semaphore.NewWeighted(sess.queueBytes)
	sess.ctx, sess.cancel = context.WithCancelCause(ctx)
	for _, p := range open.GetPartitions() {
		tp := topicPartition{Topic: p.GetTopic(), Partition: p.GetPartition()}
		n, ok := counts[tp.Topic]
		if !ok || tp.Partition < 0 || tp.Partition >= n {
			return nil, fmt.Errorf("%w: partition %s/%d is not described by the open's topics", errBadOpen, tp.Topic, tp.Partition)
		}
		if _, dup := sess.next[tp]; dup {
			return nil, fmt.Errorf("%w: partition %s/%d listed twice", errBadOpen, tp.Topic, tp.Partition)
		}
		// A partition belongs to one shard, and each shard copies under
		// its own transactional id: a stream of another shard number (a
		// fetcher whose link.shards differs, during a change) would copy
		// it beside its own shard's stream, and neither fences the other.
		if in := shards.Of(tp.Topic, tp.Partition, int(link.Shards)); in != int(open.GetShard()) {
			return nil, fmt.Errorf("%w: %s/%d is in shard %d of the link's %d (links[].shards), not %d: the fetchers' link.shards must be the writers'",
				errNotInShard, tp.Topic, tp.Partition, in, link.Shards, open.GetShard())
		}
		sess.next[tp] = 0
		sess.opened[tp] = true
	}
	sess.id = s.sessionIDs.Add(1)
	sess.peer = tlsconfig.PeerIdentity(ctx)
	return sess, nil
}

// run prepares the target, answers the open and then moves batches until
// the stream or the writer ends.
// abortTimeout bounds the abort of a failed stream's open transaction.
const abortTimeout = 10 * time.Second

func (ss *session) run(stream ferryv1.ReplicationService_ReplicateServer) error {
	defer close(ss.done)
	s := ss.s
	// Released before done closes, so a stream replacing this one finds
	// the bytes back; a receiver still waiting is refused by Close.
	ss.hold = s.budget.Hold()
	defer ss.hold.Close()
	ss.res = &residentShare{r: &s.resident}
	defer ss.res.close()
	defer ss.cancel(nil)
	log := s.log.With("link", ss.link.Name, "shard", ss.shard, "epoch", ss.epoch, "fetcher", ss.fetcher)

	// Each stream has a client of its own: Kafka serves one request of a
	// connection at a time, so shards sharing connections would wait for
	// each other's acknowledgements.
	cl, err := producer.NewClient(s.opts.Target...)
	if err != nil {
		return fmt.Errorf("target client: %w", err)
	}
	defer cl.Close()
	prod, targetCluster, err := ss.prepare(log, cl)
	if err != nil {
		ss.forgetMissing(err)
		return err
	}
	// Checked again after prepare's checkpoint sync: a writer started
	// since the link's state changed has read it only now.
	if err := s.linkRefusal(ss.link.Name); err != nil {
		return reject(s.metrics, ss.link.Name, err)
	}
	opened, err := ss.resume(log, targetCluster)
	if err != nil {
		return reject(s.metrics, ss.link.Name, err)
	}
	opened.Heartbeats = true // this writer takes them (heartbeat.go)
	// On a Report stream too, where batches the writer holds back do not
	// delay them (report.go).
	opened.Reports, opened.Session = true, ss.id
	// Group offsets only when it syncs groups: a fetcher sends none to a
	// writer that does not (groups.go).
	opened.GroupOffsets = s.groups != nil
	if opened.GroupOffsets {
		// The shard's offset index is read in memory beside copying,
		// once a group's translation needs it during the stream, and
		// read again for offsets older than memory holds (translate.go,
		// translator.run, which runs on a while after the stream).
		ctx, stop := s.startLoad(ss)
		rd := translation.Reads{Opts: s.opts.Target, Index: s.opts.Index, Link: ss.link.Name, Landmarks: s.landmarks}
		s.loads.Add(1)
		go func() {
			defer s.loads.Done()
			defer stop()
			ss.progress.tr.Run(ctx, ss.ctx.Done(), rd, log)
		}()
	}
	if err := stream.Send(&ferryv1.ReplicateResponse{Msg: &ferryv1.ReplicateResponse_Opened{Opened: opened}}); err != nil {
		return fmt.Errorf("send opened: %w", err)
	}
	log.Info("shard opened", "partitions", len(ss.next))
	s.metrics.Streams.Inc()
	defer s.metrics.Streams.Dec()

	// The receiver blocks in stream.Recv, which only the end of the stream
	// interrupts: gRPC ends it when this handler returns, so the receiver
	// outlives run by at most that. It reports failure by cancelling ss.ctx.
	works := make(chan work, queueSlots)
	go ss.receive(stream, works)
	acks := newAcker(stream, s.opts.AckTimeout)
	go acks.run()
	defer acks.stop()
	c := newCommitter(ss.link.ExactlyOnce, prod, ss.progress, ss.obs, ss.build)
	err = ss.serve(ss.ctx, acks, c, works)
	ss.forgetMissing(err)
	ss.settle(c, cl, log)
	if err != nil {
		// A round the failure cut short ends now, not at its transaction
		// timeout: no new stream of the shard may come to fence it.
		actx, cancel := context.WithTimeout(context.Background(), abortTimeout)
		if aerr := prod.AbortOpen(actx); aerr != nil {
			log.Warn("open transaction of the failed stream not aborted; it ends at its timeout or with the shard's next owner", "err", aerr)
		}
		cancel()
	}
	if cause := context.Cause(ss.ctx); err == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause
	}
	if err == nil {
		log.Info("shard closed by fetcher")
	}
	return err
}

// forgetMissing has the writer's Ensurer forget the shard's target topics
// when err, which ends the stream, is the target saying a topic does not
// exist: one was deleted under the writer (or the metadata of a broker
// lags). The fetcher opens the shard again, and that open's ensure
// describes the topics and creates the deleted one, instead of every open
// failing on it until a restart. A metadata answer does not say which
// topic of a request is gone, so all the shard's are forgotten; one that
// exists costs the next open a describe.
func (ss *session) forgetMissing(err error) {
	if !topics.Missing(err) {
		return
	}
	for _, t := range ss.open.GetTopics() {
		ss.s.topics.Forget(ss.link.Naming.Target(t.GetName()))
	}
}

// settle writes, as a stream ends, the checkpoints still waiting for a
// round (at-least-once: a round's ride with the next, after the target
// acknowledged its records). A stream cut (its fetcher gone with the
// source region) left them unwritten: the failover counted records on the
// target lost, and failback --copy-stranded copied them again. They are
// written by a producer of their own, the stream's having failed with it
// maybe. Nothing is acknowledged upstream; a stream replacing this one on
// the writer waits for it (Server.claim), so it resumes from these
// checkpoints.
func (ss *session) settle(c committer, cl *producer.Client, log *slog.Logger) {
	alo, ok := c.(*atLeastOnce)
	if !ok || alo.idle() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), abortTimeout)
	defer cancel()
	r, err := alo.assemble(nil)
	for err == nil {
		retry := false
		// A producer of its own each try: the stream's may have failed
		// with it, and a connection the cut broke fails the first request
		// sent on it. The round holds checkpoints and index records only,
		// which written twice are written once.
		start := time.Now()
		var offsets []int64
		var prod *producer.Producer
		if prod, err = producer.New(ctx, cl, producer.Options{Timeout: ss.s.opts.Producer.Timeout}); err == nil {
			offsets, err = prod.Produce(ctx, r.batches)
		}
		if err == nil {
			done := alo.landed(ctx, nil, r, offsets, start)
			ss.progress.committed(done.cps)
			ss.obs.committed(ctx, done)
			return
		}
		if kgo.IsRetryableBrokerErr(err) {
			select {
			case <-time.After(settleRetry):
				retry = true
			case <-ctx.Done():
				err = fmt.Errorf("%w (last try: %v)", ctx.Err(), err)
			}
		}
		if !retry {
			break
		}
		err = nil
	}
	log.Warn("checkpoints of records on the target not written as the stream ended: they are copied again", "err", err)
}

// settleRetry is settle's pause between tries.
const settleRetry = 100 * time.Millisecond

// queueSlots bounds how many checked batches wait for a round; their bytes
// are bounded by session.queued. Under a slow target (a long round trip)
// a round must be able to fill up to max_group_bytes while the previous one
// is in flight, or each round trip carries only the few batches a short
// queue held (it did, with 4 slots: 300 ms on the writer-target hop cut
// exactly-once copying to a fifth).
const queueSlots = 1024

// weight is what a batch holds of session.queued.
func (ss *session) weight(b *ferryv1.Batch) int64 {
	return min(int64(b.GetUncompressedSize()), ss.queueBytes)
}

// receive checks each batch whole before handing it on, so nothing of a bad
// batch reaches the target.
func (ss *session) receive(stream ferryv1.ReplicationService_ReplicateServer, out chan<- work) {
	defer close(out)
	var seq uint64
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			ss.cancel(fmt.Errorf("receive: %w", err))
			return
		}
		if handled, err := ss.other(req); handled {
			if err != nil {
				ss.cancel(reject(ss.s.metrics, ss.link.Name, err))
				return
			}
			continue
		}
		received := time.Now()
		b := req.GetBatch()
		wire := int64(len(b.GetPayload()))
		ss.res.add(wire)
		if err := ss.queued.Acquire(ss.ctx, ss.weight(b)); err != nil {
			return // the session ended
		}
		// The batch is charged before anything of it is decompressed or
		// decoded, and waits holding only its wire message (charge.go).
		// Waiting cannot deadlock: only receivers take from the budget,
		// never rounds, and every round ends (commits or fails, ending its
		// stream and releasing its hold) without its receiver, so held
		// bytes always come back. A batch above the whole budget takes
		// all of it (Acquire caps), so it is admitted once the others are
		// gone.
		ss.charge = &charge{ss: ss}
		if err := ss.charge.begin(ss.ctx, wire+ss.inflated(b)); err != nil {
			return // the session ended
		}
		w, err := ss.checkTraced(b, seq+1)
		if err != nil {
			ss.charge.drop()
			ss.res.add(-wire)
			if ss.ctx.Err() == nil {
				ss.cancel(reject(ss.s.metrics, ss.link.Name, err))
			}
			return
		}
		w.held = ss.charge.finish()
		w.resident = wire + ss.inflated(w.b) + w.decoded
		ss.res.add(w.resident - wire)
		seq++
		ss.arrived(&w, received)
		select {
		case out <- w:
		case <-ss.ctx.Done():
			return
		}
	}
}

// arrived marks w received at now and observes its transit stage, from the
// fetch time its fetcher stamped on it (on the fetcher's clock, so the
// skew between the two clocks is in it; a writer's clock behind counts
// as 0, not as a negative latency). A batch of a fetcher older than the
// stamp has none: it is left out rather than observed from 1970.
func (ss *session) arrived(w *work, now time.Time) {
	w.received = now
	if at := w.b.GetFetchedUnixMicros(); at > 0 {
		ss.transit.Observe(max(0, now.Sub(time.UnixMicro(at)).Seconds()))
	}
}

func (ss *session) check(b *ferryv1.Batch, wantSeq uint64) (work, error) {
	if b == nil {
		return work{}, fmt.Errorf("%w: expected a batch after the open", errBadRequest)
	}
	if b.GetSequence() != wantSeq {
		return work{}, fmt.Errorf("%w: batch sequence %d, want %d", errBadRequest, b.GetSequence(), wantSeq)
	}
	if cur := ss.s.currentEpoch(ss.link.Name, ss.shard); b.GetEpoch() != ss.epoch || b.GetEpoch() < cur {
		ss.s.metrics.StaleEpochs.WithLabelValues(ss.link.Name).Inc()
		return work{}, fmt.Errorf("%w: batch epoch %d on a stream of epoch %d, shard at %d", errStaleEpoch, b.GetEpoch(), ss.epoch, cur)
	}
	tp := topicPartition{Topic: b.GetTopic(), Partition: b.GetPartition()}
	next, ok := ss.next[tp]
	if !ok {
		return work{}, fmt.Errorf("%w: %s/%d is not in shard %d", errNotInShard, tp.Topic, tp.Partition, ss.shard)
	}
	if b.GetFirstOffset() < next {
		return work{}, fmt.Errorf("%w: %s/%d batch starts at %d, below %d", errOutOfOrder, tp.Topic, tp.Partition, b.GetFirstOffset(), next)
	}
	if err := withinSource(b); err != nil {
		return work{}, err
	}
	parts, decoded, err := ss.parts(b)
	if errors.Is(err, errRecharge) {
		// Its receiver may now wait while holding part of it.
		if err = ss.charge.again(ss.ctx); err == nil {
			parts, decoded, err = ss.parts(b)
		}
	}
	if err != nil {
		return work{}, fmt.Errorf("batch %d of %s/%d: %w", b.GetSequence(), tp.Topic, tp.Partition, err)
	}
	w := work{b: b, parts: parts, decoded: decoded}
	if err := ss.oversized(w); err != nil {
		return work{}, err
	}
	ss.next[tp] = b.GetLastOffset() + 1
	return w, nil
}

// withinSource refuses a batch whose range ends at or past the source high
// watermark it carries, and a Skip (no records) that carries none. A Skip
// moves the partition's checkpoint with nothing written, so a range beyond
// what the source had (a fetcher's bug, or a peer's lie: 0..2^62) would
// silently lose everything the source writes below its end. A record
// batch of a fetcher older than the field carries none and is not held
// to it: its payload's own offsets are checked (batch.OpenKafka).
func withinSource(b *ferryv1.Batch) error {
	hw, what := b.GetSourceHighWatermark(), "batch"
	if b.GetRecordCount() == 0 {
		what = "skip"
		if hw == 0 {
			return fmt.Errorf("%w: skip of %s/%d over %d..%d carries no source high watermark", errBeyondSource,
				b.GetTopic(), b.GetPartition(), b.GetFirstOffset(), b.GetLastOffset())
		}
	}
	if hw != 0 && b.GetLastOffset() >= hw {
		return fmt.Errorf("%w: %s of %s/%d over %d..%d ends at or beyond the source high watermark %d", errBeyondSource,
			what, b.GetTopic(), b.GetPartition(), b.GetFirstOffset(), b.GetLastOffset(), hw)
	}
	return nil
}

// take returns the batches ready now, at least one unless nonBlocking, and
// whether the input is still open.
func (ss *session) take(ctx context.Context, in <-chan work, nonBlocking bool) ([]work, bool) {
	var group []work
	size := 0
	for size < ss.s.opts.MaxGroupBytes {
		if len(group) > 0 || nonBlocking {
			select {
			case w, ok := <-in:
				if !ok {
					return group, false
				}
				ss.queued.Release(ss.weight(w.b))
				group, size = append(group, w), size+int(w.b.GetUncompressedSize())
				continue
			default:
				return group, true
			}
		}
		select {
		case w, ok := <-in:
			if !ok {
				return group, false
			}
			ss.queued.Release(ss.weight(w.b))
			group, size = append(group, w), size+int(w.b.GetUncompressedSize())
		case <-ss.s.drain:
			return group, true
		case <-ss.ctlChanged:
			return group, true
		case <-ctx.Done():
			return nil, true
		}
	}
	return group, true
}

func (ss *session) draining() bool {
	select {
	case <-ss.s.drain:
		return true
	default:
		return false
	}
}

func (ss *session) ack(ctx context.Context, acks *acker, acked []work, cps map[topicPartition]checkpoint.Checkpoint) error {
	ack := &ferryv1.Ack{Sequence: acked[len(acked)-1].b.GetSequence()}
	for tp, cp := range cps {
		ack.Committed = append(ack.Committed, &ferryv1.PartitionPosition{
			Topic: tp.Topic, Partition: tp.Partition, NextOffset: cp.NextSourceOffset, HasCheckpoint: true,
		})
	}
	err := acks.send(ctx, &ferryv1.ReplicateResponse{Msg: &ferryv1.ReplicateResponse_Ack{Ack: ack}})
	if errors.Is(err, errAckStalled) {
		return fmt.Errorf("%w: peer %s (fetcher %q) read no ack of shard %d in %v", err, ss.who(), ss.fetcher, ss.shard, acks.timeout)
	}
	if err != nil {
		return fmt.Errorf("send ack: %w", err)
	}
	return nil
}

// who names the stream's peer in errors: its identity, or without TLS its
// address.
func (ss *session) who() string {
	if ss.peer != "" {
		return fmt.Sprintf("%q", ss.peer)
	}
	if p, ok := peer.FromContext(ss.ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return "unknown"
}
