package shard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/ferry-replicator/ferry/pkg/budget"
	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/refusal"
	"github.com/ferry-replicator/ferry/pkg/tracing"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/discovery"
)

var (
	errLeaseLost = errors.New("shard lease lost")
	// errRepin ends a session drained to move its shard to the writer it
	// prefers now.
	errRepin = errors.New("shard moved to its preferred writer")
	// errTopicReopen ends a session drained so that the next one opens
	// with a source topic's new id and reads it from its start: the
	// topic was recreated while it was read, and link.on_data_loss: skip
	// accepts it (recreatedWhileReading).
	errTopicReopen = errors.New("source topic recreated: reopening to read the new topic from its start")
)

// session is one stream's life.
type session struct {
	r      *Runner
	stream ferryv1.ReplicationService_ReplicateClient
	out    chan queued
	credit *semaphore.Weighted
	// hold is the session's share of Deps.Budget: what a fetch round
	// reserves before it fetches, kept by each wire batch of the
	// round (queued.held) until the writer acknowledges it, and all of it
	// given back when the session ends, whatever it was doing.
	hold *budget.Hold
	// reserved is what the fetch loop's current round reserved of hold
	// and has not given to a wire batch yet; the loop's alone.
	reserved int64
	// fetched is when the fetch loop's current round returned; the
	// loop's alone. fetchStage observes its batches' fetch stage.
	fetched    time.Time
	fetchStage prometheus.Observer
	// streamSpan is the stream's otelgrpc client span, when sampled: the
	// batches' send spans link to it.
	streamSpan trace.SpanContext

	// probe says which fetched batches are decoded for tracing
	// (traceRecords); the fetch loop's alone.
	probe *tracing.RecordProbe
	// targetCluster is the target's Kafka cluster id, as the writer's
	// Opened names it: link.skip_replicated leaves out what was copied
	// from it.
	targetCluster string
	// startedOver are the partitions this session reads from a recreated
	// topic's start (Runner.fromStart): its acknowledgements of them are
	// the new topic's, and end the runner's mark.
	startedOver map[discovery.Partition]bool

	// counted is what the session queued of each partition, for its
	// heartbeats (countedTo): the writer tells from it how many records
	// it read that a failover would lose; countMu guards it.
	countMu sync.Mutex
	counted map[discovery.Partition]readCount

	recvDone chan struct{} // closed when receive returns
	recvErr  error         // receive's result, set before recvDone closes

	// sendMu orders the sender's and the heartbeats' sends: a gRPC stream
	// takes one Send at a time.
	sendMu sync.Mutex
	// reports is the Report stream the heartbeats and group offsets go on,
	// beside the data (report); nil: they go on stream, to a writer older
	// than it. reportMu orders their sends on it, and guards reportsClosed:
	// the writer ended it cleanly (report).
	reports       ferryv1.ReplicationService_ReportClient
	reportMu      sync.Mutex
	reportsClosed bool

	mu       sync.Mutex
	seq      uint64
	inflight []sent // sent, not yet acknowledged, in order
	acked    bool   // the writer acknowledged something this session
}

// outSlots is how many sealed batches wait for the sender (and its
// in-flight credit). Each holds up to link.batch.max_bytes of a shard's
// memory, and one ready batch is all the sender needs to start on while
// the reader fetches the next: 8 held about 70 MB over 8 shards in the
// 2026-12-01 catch-up's heap profile, for no throughput.
const outSlots = 2

type sent struct {
	seq    uint64
	weight int64 // of credit
	held   int64 // of hold
}

// queued is a batch on its way to the stream, with its batch span, open
// until the batch is sent; nil when the batch is not traced.
type queued struct {
	b    *ferryv1.Batch
	span trace.Span
	// held is what the batch holds of the session's hold (zero for a
	// batch that carries no bytes, or whose round's reservation ran out:
	// send then takes its payload's bytes).
	held int64
}

// session runs one stream. progressed reports whether the writer
// acknowledged anything, which resets the reconnect backoff.
func (r *Runner) session(ctx context.Context, attempt int) (progressed bool, err error) {
	changed := r.deps.Writers.Changed() // before Pick: a change after it is seen
	addr, conn, err := r.deps.Writers.Pick(r.set.Link, r.shard, attempt)
	if err != nil {
		return false, err
	}
	r.update(func(s *Status) { s.Writer = addr })
	// The stream lives on a context of its own: cancelling ctx asks for a
	// drain, and the stream must outlive the drain to receive the last acks.
	sctx, hardStop := context.WithCancel(context.WithoutCancel(ctx))
	defer hardStop()
	stream, err := ferryv1.NewReplicationServiceClient(conn).Replicate(sctx)
	if err != nil {
		return false, fmt.Errorf("open stream to %s: %w", addr, err)
	}
	// The partitions the Open names: group offsets of others are refused.
	openedParts := map[discovery.Partition]bool{}
	for _, p := range r.openable() {
		openedParts[p] = true
	}
	resume, opened, err := r.open(stream, hardStop)
	targetCluster := opened.GetTargetClusterId()
	if err != nil {
		return false, fmt.Errorf("open shard on %s: %w", addr, err)
	}
	if r.deps.Provenance != nil && targetCluster == "" {
		// Without it the registry cannot say which batches came from
		// the target: skipping all of them loses a chain's data, copying
		// all of them loops. The session retries until a writer names it.
		return false, fmt.Errorf("open shard on %s: %w", addr, errNoTargetCluster)
	}
	r.update(func(s *Status) { s.Connected, s.LastError, s.LinkState = true, "", "" })
	r.log.Info("shard stream open", "writer", addr)

	s := &session{
		r: r, stream: stream, streamSpan: r.traceStream(stream),
		out:           make(chan queued, outSlots),
		credit:        semaphore.NewWeighted(int64(r.set.MaxInflightBytes)),
		hold:          r.deps.Budget.Hold(),
		probe:         tracing.NewRecordProbe(),
		recvDone:      make(chan struct{}),
		targetCluster: targetCluster,
	}
	// Deferred first, so it runs last: the reader, the sender and the
	// receiver are done by then, and nothing holds what the session held.
	defer s.hold.Close()
	defer func() { progressed = s.progressed() }()
	readCtx, stopReading := context.WithCancel(sctx)
	defer stopReading()
	g, gctx := errgroup.WithContext(readCtx)
	s.startedOver = r.fromStartNow()
	pos, err := r.positions(resume)
	if err != nil {
		return false, err
	}
	heartbeats := opened.GetHeartbeats() // an older writer ends the stream at a heartbeat
	groupSrc := r.deps.Groups
	if !opened.GetGroupOffsets() { // likewise
		groupSrc = nil
	}
	if opened.GetReports() && (heartbeats || groupSrc != nil) {
		if s.reports, err = r.openReports(sctx, conn, opened); err != nil {
			return false, fmt.Errorf("open report stream to %s: %w", addr, err)
		}
	}
	g.Go(func() error { return s.passThrough(gctx, pos) })
	g.Go(func() error { return s.send(gctx) })
	if heartbeats {
		g.Go(func() error { return s.heartbeats(gctx) })
	}
	if groupSrc != nil {
		g.Go(func() error { return s.groupOffsets(gctx, groupSrc, openedParts) })
	}
	sendDone := make(chan error, 1)
	go func() { sendDone <- g.Wait() }()
	// Every return waits for the receiver (the stream's cancellation ends
	// it), so no acknowledgement lands after the session is over.
	go func() {
		defer close(s.recvDone)
		s.recvErr = s.receive()
	}()
	defer func() {
		hardStop()
		<-s.recvDone
		s.forgetInflight()
	}()

	for {
		select {
		case <-r.lost:
			// No drain: the lease is gone, so nothing more may be sent, and
			// what is in flight is the writer's to commit or drop.
			hardStop()
			<-sendDone
			r.log.Error("shard lease lost: stream stopped")
			return false, errLeaseLost
		case <-ctx.Done():
			stopReading()
			<-sendDone
			return false, s.drain()
		case <-changed:
			changed = r.deps.Writers.Changed()
			want := r.deps.Writers.Preferred(r.set.Link, r.shard)
			if want == "" || want == addr {
				continue
			}
			// The shard belongs on another writer now (its preferred one is
			// back, or joined): move it gently, as a drain does, so the
			// next stream starts exactly where this one ends.
			r.log.Info("writers changed: moving the shard to its preferred writer", "from", addr, "to", want)
			stopReading()
			<-sendDone
			if err := s.drain(); err != nil {
				return false, err
			}
			return false, errRepin
		case <-s.recvDone:
			hardStop()
			<-sendDone
			if s.recvErr == nil {
				return false, errors.New("writer ended the stream")
			}
			return false, s.recvErr
		case err := <-sendDone:
			if errors.Is(err, errTopicReopen) {
				// On purpose, as for a repin: what was sent is
				// acknowledged before the next session starts over.
				if derr := s.drain(); derr != nil {
					return false, derr
				}
			}
			return false, err // the deferred stop ends the receiver
		}
	}
}

// errNoTargetCluster: the writer's Opened does not name its target cluster
// (a writer older than the field), which link.skip_replicated needs.
var errNoTargetCluster = errors.New("the writer names no target cluster id, which link.skip_replicated needs: upgrade the writers before the fetchers")

// open sends the Open and waits for the writer's resume offsets and the
// rest of its Opened (its target's cluster id, whether it takes
// heartbeats).
func (r *Runner) open(stream ferryv1.ReplicationService_ReplicateClient, hardStop context.CancelFunc) (map[discovery.Partition]*ferryv1.PartitionPosition, *ferryv1.Opened, error) {
	open := &ferryv1.Open{Link: r.set.Link, Shard: uint32(r.shard), Epoch: r.epoch, Fetcher: r.set.FetcherID, SourceClusterId: r.set.SourceCluster}
	r.mu.Lock()
	topics := slices.Clone(r.topics)
	r.mu.Unlock()
	for _, t := range topics {
		open.Topics = append(open.Topics, &ferryv1.TopicSpec{Name: t.Name, PartitionCount: t.Partitions, Configs: t.Configs, TopicId: t.ID, Acls: topicACLs(t.ACLs)})
	}
	// A partition a writer refused to open is left out: the writer would
	// refuse every open naming it (checkpoint_unverified).
	for _, p := range r.openable() {
		open.Partitions = append(open.Partitions, &ferryv1.TopicPartition{Topic: p.Topic, Partition: p.Partition})
	}
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Open{Open: open}}); err != nil {
		return nil, nil, fmt.Errorf("send open: %w", err)
	}
	timer := time.AfterFunc(r.set.OpenTimeout, hardStop)
	resp, err := stream.Recv()
	if !timer.Stop() {
		return nil, nil, fmt.Errorf("no answer within %v: %w", r.set.OpenTimeout, context.DeadlineExceeded)
	}
	if err != nil {
		return nil, nil, err
	}
	opened := resp.GetOpened()
	if opened == nil {
		return nil, nil, errors.New("writer answered the open with something else")
	}
	resume := map[discovery.Partition]*ferryv1.PartitionPosition{}
	for _, pos := range opened.GetResume() {
		resume[discovery.Partition{Topic: pos.GetTopic(), Partition: pos.GetPartition()}] = pos
	}
	return resume, opened, nil
}

// topicACLs are a topic's ACLs as an Open carries them.
func topicACLs(acls []discovery.ACL) []*ferryv1.TopicAcl {
	var out []*ferryv1.TopicAcl
	for _, a := range acls {
		op := ferryv1.AclOperation_ACL_OPERATION_READ
		if a.Operation == sarama.AclOperationDescribe {
			op = ferryv1.AclOperation_ACL_OPERATION_DESCRIBE
		}
		out = append(out, &ferryv1.TopicAcl{Principal: a.Principal, Host: a.Host, Operation: op})
	}
	return out
}

// forEachStart calls start with the offset each partition not stopped
// starts reading from (startOffset); a partition startOffset stops is
// reported and left out. Any other error is transient: it is returned at
// once, and the session fails and is retried whole.
func (r *Runner) forEachStart(resume map[discovery.Partition]*ferryv1.PartitionPosition, start func(discovery.Partition, int64) error) error {
	for _, p := range r.parts {
		if r.stopped(p) { // stays stopped until an operator acts
			continue
		}
		offset, err := r.startOffset(p, resume[p])
		if err == nil {
			err = start(p, offset)
		}
		var stop *StopError
		if errors.As(err, &stop) {
			r.stopPartition(p, stop)
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// startOffset decides where a partition starts reading: where the writer
// said, checking that the position exists in the source (a checkpoint below
// the log start means retention removed data not yet copied, one above the
// end means the topic was recreated or truncated: both stop the partition
// instead of skipping), or StartFrom without a checkpoint.
func (r *Runner) startOffset(p discovery.Partition, pos *ferryv1.PartitionPosition) (int64, error) {
	if r.fromStartNow()[p] {
		// Its topic was recreated while it was read, accepted (and
		// counted) then: the checkpoint, if any, is the old topic's.
		return sarama.OffsetOldest, nil
	}
	offset := r.set.StartFrom
	if pos != nil && pos.GetHasCheckpoint() {
		offset = pos.GetNextOffset()
		if id, cpID := r.topicID(p.Topic), pos.GetSourceTopicId(); len(id) > 0 && len(cpID) > 0 && !bytes.Equal(id, cpID) {
			// Skipped, the new topic is read from its start.
			return sarama.OffsetOldest, r.lossPolicy(p, &StopError{Reason: ReasonTopicRecreated, Err: fmt.Errorf(
				"the checkpoint belongs to topic ID %x, the source topic now has ID %x: it was deleted and recreated", cpID, id)}, sarama.OffsetOldest, -1)
		}
		oldest, err := r.deps.Client.GetOffset(p.Topic, p.Partition, sarama.OffsetOldest)
		if err != nil {
			return 0, fmt.Errorf("log start of %s/%d: %w", p.Topic, p.Partition, err)
		}
		newest, err := r.deps.Client.GetOffset(p.Topic, p.Partition, sarama.OffsetNewest)
		if err != nil {
			return 0, fmt.Errorf("log end of %s/%d: %w", p.Topic, p.Partition, err)
		}
		switch {
		case offset < oldest:
			err := r.lossPolicy(p, &StopError{Reason: ReasonOutOfRange, Err: fmt.Errorf("checkpoint %d is below the source log start %d: retention removed %d records not yet copied",
				offset, oldest, oldest-offset)}, oldest, oldest-offset)
			if err != nil {
				return 0, err
			}
			offset = oldest
		case offset > newest:
			err := r.lossPolicy(p, &StopError{Reason: ReasonCheckpointAhead, Err: fmt.Errorf("checkpoint %d is beyond the source log end %d: was the topic deleted and recreated?",
				offset, newest)}, oldest, -1)
			if err != nil {
				return 0, err
			}
			offset = oldest
		}
		r.setCommitted(p, offset)
	}
	return offset, nil
}

// lossPolicy applies link.on_data_loss to an anomaly: "stop" returns it
// (the partition stops, loudly); "skip" logs it, counts the records skipped
// (skipped < 0: unknown) and lets the partition go on from 'from'.
func (r *Runner) lossPolicy(p discovery.Partition, stop *StopError, from, skipped int64) error {
	if !r.set.SkipOnDataLoss {
		return stop
	}
	part := strconv.Itoa(int(p.Partition))
	r.deps.Metrics.PartitionStops.WithLabelValues(r.set.Link, p.Topic, part, stop.Reason).Inc()
	if skipped > 0 {
		r.deps.Metrics.Skipped.WithLabelValues(r.set.Link, p.Topic, part).Add(float64(skipped))
	}
	r.log.Error("data loss accepted by policy (link.on_data_loss: skip): partition goes on",
		"topic", p.Topic, "partition", p.Partition, "reason", stop.Reason, "from", from, "skipped_records", skipped, "err", stop.Err)
	return nil
}

func (r *Runner) topicID(topic string) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range r.topics {
		if t.Name == topic {
			return t.ID
		}
	}
	return nil
}

// recreatedWhileReading is topic_recreated found by the fetch loop rather
// than at open: a round of p came from the topic its name has now,
// whose id is now, not was, the one the shard opened with. As at open,
// link.on_data_loss decides. With stop it returns the StopError, and the
// loop stops p; the topic's other partitions stop as their own rounds
// find it. With skip the new topic is read from its start, as at open:
// every partition of it the shard reads (each is a new log), each counted
// and logged. The new id is kept for the next Open to name (the writer
// checkpoints under the id its Open names), and errTopicReopen ends the
// session, so the next one starts them there.
func (r *Runner) recreatedWhileReading(p discovery.Partition, was, now []byte) (*StopError, error) {
	recreated := func() *StopError {
		return &StopError{Reason: ReasonTopicRecreated, Err: fmt.Errorf(
			"the source topic ID changed from %x to %x while the partition was read: it was deleted and recreated", was, now)}
	}
	if stop := recreated(); r.lossPolicy(p, stop, sarama.OffsetOldest, -1) != nil {
		return stop, nil
	}
	for _, q := range r.parts {
		if q.Topic == p.Topic && q != p && !r.stopped(q) {
			_ = r.lossPolicy(q, recreated(), sarama.OffsetOldest, -1) // skip: nil
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.topics {
		if r.topics[i].Name == p.Topic {
			r.topics[i].ID = slices.Clone(now) // a new slice: the plan's is shared
		}
	}
	if r.fromStart == nil {
		r.fromStart = map[discovery.Partition]bool{}
	}
	for _, q := range r.parts {
		if q.Topic == p.Topic {
			r.fromStart[q] = true
		}
	}
	return nil, fmt.Errorf("%w: %s", errTopicReopen, p.Topic)
}

// fromStartNow is a copy of the partitions to read from their topic's
// start at the next open.
func (r *Runner) fromStartNow() map[discovery.Partition]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.fromStart)
}

// stopPartition reports, loudly (error log, data-loss metric, status), a
// partition that cannot go on without losing or skipping data. It stays
// stopped until an operator acts (and the fetcher restarts).
func (r *Runner) stopPartition(p discovery.Partition, err *StopError) {
	// The status first: whoever the counter alerts finds the reason there
	// (TestPassThroughUnreadablePartitionStops read an empty status after
	// the counter moved, once in CI).
	r.updatePartition(p, func(ps *PartitionStatus) { ps.Stopped = err.Error() })
	r.log.Error("partition stopped: replicating on would lose data", "topic", p.Topic, "partition", p.Partition, "reason", err.Reason, "err", err.Err)
	r.deps.Metrics.PartitionStops.WithLabelValues(r.set.Link, p.Topic, strconv.Itoa(int(p.Partition)), err.Reason).Inc()
}

// tooLarge is the stop of a partition before a record no writer takes
// (above writers.max_message_bytes).
func (r *Runner) tooLarge(p discovery.Partition, offset int64, size int) *StopError {
	return &StopError{Reason: ReasonRecordTooLarge, Err: refusal.Refusal{
		Reason: refusal.RecordTooLarge, Topic: p.Topic, Partition: p.Partition, Offset: offset,
		Size: int64(size), Limit: int64(r.set.MaxMessageBytes), Setting: "the fetcher's writers.max_message_bytes",
	}}
}

// send numbers batches and sends them, holding at most MaxInflightBytes of
// compressed payload unacknowledged.
func (s *session) send(ctx context.Context) error {
	max := int64(s.r.set.MaxInflightBytes)
	for {
		var q queued
		select {
		case <-ctx.Done():
			return nil
		case q = <-s.out:
		}
		b := q.b
		sendSpan := s.startSend(q) // before the credit wait: the span shows it
		if q.held == 0 && len(b.Payload) > 0 {
			// A batch past its round's reservation: it holds its payload
			// of the fetcher's budget while it is in flight. (Acknowledgements give bytes back
			// without waiting for anything here, so this cannot wait on
			// itself.)
			held, err := s.hold.Acquire(ctx, int64(len(b.Payload)))
			if err != nil {
				return nil // ctx ended
			}
			q.held = held
		}
		w := min(int64(len(b.Payload)), max)
		if err := s.credit.Acquire(ctx, w); err != nil {
			return nil // ctx ended; the session's end gives back q.held
		}
		if s.r.isLost() {
			return errLeaseLost
		}
		s.mu.Lock()
		s.seq++
		b.Sequence = s.seq
		s.inflight = append(s.inflight, sent{seq: s.seq, weight: w, held: q.held})
		s.mu.Unlock()
		s.r.deps.Metrics.InflightBytes.Add(float64(w))
		err := s.sendRequest(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Batch{Batch: b}})
		endSend(q, sendSpan, err)
		if err != nil {
			return fmt.Errorf("send batch: %w", err)
		}
	}
}

// receive applies acknowledgements until the stream ends; it returns nil
// when the writer closed the stream cleanly.
func (s *session) receive() error {
	for {
		resp, err := s.stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		ack := resp.GetAck()
		if ack == nil {
			return errors.New("writer sent something other than an ack")
		}
		s.applyAck(ack)
	}
}

func (s *session) applyAck(ack *ferryv1.Ack) {
	s.mu.Lock()
	var release, held int64
	n := 0
	for n < len(s.inflight) && s.inflight[n].seq <= ack.GetSequence() {
		release += s.inflight[n].weight
		held += s.inflight[n].held
		n++
	}
	s.inflight = s.inflight[n:]
	s.acked = true
	s.mu.Unlock()
	s.hold.Release(held)
	s.credit.Release(release)
	s.r.deps.Metrics.InflightBytes.Sub(float64(release))
	for _, pos := range ack.GetCommitted() {
		p := discovery.Partition{Topic: pos.GetTopic(), Partition: pos.GetPartition()}
		s.r.setCommitted(p, pos.GetNextOffset())
		if s.startedOver[p] { // the checkpoint is the new topic's now
			s.r.mu.Lock()
			delete(s.r.fromStart, p)
			s.r.mu.Unlock()
		}
	}
}

func (s *session) progressed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked
}

func (s *session) unacked() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.inflight)
}

// forgetInflight takes what the writer never acknowledged out of the
// inflight gauge once the session is over: the next session sends it again
// and counts it then.
func (s *session) forgetInflight() {
	s.mu.Lock()
	var left int64
	for _, b := range s.inflight {
		left += b.weight
	}
	s.inflight = nil
	s.mu.Unlock()
	s.r.deps.Metrics.InflightBytes.Sub(float64(left))
}

// drain waits for the writer to acknowledge everything sent, then closes the
// stream and waits for the writer to end it.
func (s *session) drain() error {
	deadline := time.After(s.r.set.DrainTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for s.unacked() > 0 {
		select {
		case <-s.recvDone:
			if s.recvErr == nil {
				return fmt.Errorf("writer ended the stream during drain, %d batches unacknowledged", s.unacked())
			}
			return fmt.Errorf("stream ended during drain: %w", s.recvErr)
		case <-deadline:
			return fmt.Errorf("drain: %d batches unacknowledged after %v", s.unacked(), s.r.set.DrainTimeout)
		case <-tick.C:
		}
	}
	if err := s.stream.CloseSend(); err != nil {
		return fmt.Errorf("close stream: %w", err)
	}
	select {
	case <-s.recvDone:
		if s.recvErr == nil {
			s.r.log.Info("shard drained")
		}
		return s.recvErr
	case <-deadline:
		return errors.New("drain: writer did not end the stream")
	}
}
