// Package writertest is a writer for the fetcher's in-process tests: it
// speaks the replication protocol over real gRPC on a loopback port
// (answers an Open with the shard's resume positions, acknowledges each
// batch with its partition's next offset) and keeps the committed offsets
// in a Checkpoints shared by every writer of a test, as the target cluster
// is shared by real writers.
//
// It is not the writer: that lives in services/writer/internal, which the
// compiler keeps the fetcher from importing. It produces nothing; the
// end-to-end tests in loadtest/e2e run both real tiers against Kafka.
package writertest

import (
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/linkstate"
	"github.com/ferry-replicator/ferry/pkg/refusal"
	"github.com/ferry-replicator/ferry/pkg/testwait"
)

// Checkpoints are the next offsets committed, by topic and partition.
type Checkpoints struct {
	mu   sync.Mutex
	next map[string]map[int32]int64
}

// NewCheckpoints returns an empty store.
func NewCheckpoints() *Checkpoints { return &Checkpoints{next: map[string]map[int32]int64{}} }

// Next returns the next offset committed for the partition, and whether
// any was.
func (c *Checkpoints) Next(topic string, partition int32) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.next[topic][partition]
	return n, ok
}

// Set commits next for the partition, as a checkpoint left by an earlier
// run would be.
func (c *Checkpoints) Set(topic string, partition int32, next int64) {
	c.commit(topic, partition, next)
}

func (c *Checkpoints) commit(topic string, partition int32, next int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.next[topic] == nil {
		c.next[topic] = map[int32]int64{}
	}
	c.next[topic][partition] = next
}

// Writer is one running test writer.
type Writer struct {
	ferryv1.UnimplementedReplicationServiceServer
	addr string
	cps  *Checkpoints
	srv  *grpc.Server
	done chan struct{}

	mu      sync.Mutex
	opens   int
	batches int
	closed  int           // streams the fetcher ended (CloseSend)
	hold    chan struct{} // non-nil: acknowledgements wait until it closes
	// refuseAbove: a batch larger than this (uncompressed) ends its stream
	// with a refusal of its partition, as a writer refuses a record its
	// target cannot take. Zero: none refused.
	refuseAbove int
	// refuseAs is the refusal's reason (refusal.RecordTooLarge when empty).
	refuseAs string
	// unverified is a partition whose checkpoint the writer refuses at
	// every open naming it (checkpoint_unverified); nil: none.
	unverified *ferryv1.TopicPartition
	// targetCluster is the target cluster id each Opened names.
	targetCluster string
	// received is every batch, in the order received.
	received []*ferryv1.Batch
	// openMsgs is every Open, in the order received.
	openMsgs []*ferryv1.Open
	// takeHeartbeats makes each Opened say the writer takes heartbeats;
	// without it the writer is one older than heartbeats, which ends the
	// stream at anything but a batch.
	takeHeartbeats bool
	// heartbeats is every heartbeat, in the order received.
	heartbeats []*ferryv1.Heartbeat
	// takeGroupOffsets makes each Opened say the writer takes group
	// offsets; without it the writer is one older than group sync.
	takeGroupOffsets bool
	// groupOffsets is every GroupOffsets message, in the order received.
	groupOffsets []*ferryv1.GroupOffsets
	// link is the link's state as an operator set it: not running, every
	// open is refused and a stream ends at its next message.
	link linkstate.State
	// noReports makes the writer one older than the Report stream: its
	// Opened does not offer it, and heartbeats and group offsets come on
	// the Replicate stream.
	noReports bool
	// refuseReports makes every Report stream end with a refusal.
	refuseReports bool
	// sessions are the open Replicate streams by Opened.session, each
	// with a channel closed when it ends; reportStreams counts the Report
	// streams bound to one.
	sessions      map[uint64]chan struct{}
	lastSession   uint64
	reportStreams int
}

// NoReports makes the writer one older than the Report stream: the
// fetcher sends its heartbeats and group offsets on the Replicate stream.
func (w *Writer) NoReports() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.noReports = true
}

// RefuseReports makes the writer refuse every Report stream once bound,
// as a real one refuses a report it cannot take.
func (w *Writer) RefuseReports() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.refuseReports = true
}

// ReportStreams counts the Report streams bound to a Replicate stream.
func (w *Writer) ReportStreams() int { return w.count(&w.reportStreams) }

// Report takes the heartbeats and group offsets of an open Replicate
// stream, as the Replicate stream would, until that stream ends.
func (w *Writer) Report(stream ferryv1.ReplicationService_ReportServer) error {
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	w.mu.Lock()
	ended, ok := w.sessions[req.GetOpen().GetSession()]
	if ok {
		w.reportStreams++
	}
	refuse := w.refuseReports
	w.mu.Unlock()
	if !ok {
		return status.Error(codes.FailedPrecondition, "no such replication stream")
	}
	if refuse {
		return status.Error(codes.InvalidArgument, "bad heartbeat: refused by the test")
	}
	reqs, failed := make(chan *ferryv1.ReportRequest), make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				failed <- err
				return
			}
			select {
			case reqs <- req:
			case <-stream.Context().Done():
				return
			}
		}
	}()
	for {
		select {
		case <-ended:
			return stream.SendAndClose(&ferryv1.ReportResponse{})
		case err := <-failed:
			if errors.Is(err, io.EOF) {
				return stream.SendAndClose(&ferryv1.ReportResponse{})
			}
			return err
		case req := <-reqs:
			w.keep(req.GetHeartbeat(), req.GetGroupOffsets())
		}
	}
}

// keep keeps a heartbeat or group offsets (nil: none).
func (w *Writer) keep(hb *ferryv1.Heartbeat, g *ferryv1.GroupOffsets) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if hb != nil {
		w.heartbeats = append(w.heartbeats, hb)
	}
	if g != nil {
		w.groupOffsets = append(w.groupOffsets, g)
	}
}

// session registers a Replicate stream for Report to bind to; end
// forgets it.
func (w *Writer) session() (id uint64, end func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sessions == nil {
		w.sessions = map[uint64]chan struct{}{}
	}
	w.lastSession++
	id, ended := w.lastSession, make(chan struct{})
	w.sessions[id] = ended
	return id, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.sessions, id)
		close(ended)
	}
}

// TakeGroupOffsets makes the writer say in its Opened that it takes group
// offsets, and keep those it receives (GroupOffsets).
func (w *Writer) TakeGroupOffsets() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.takeGroupOffsets = true
}

// GroupOffsets returns every GroupOffsets message received, in order.
func (w *Writer) GroupOffsets() []*ferryv1.GroupOffsets {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*ferryv1.GroupOffsets(nil), w.groupOffsets...)
}

// SetLinkState makes the writer act as a real one does on a link an
// operator set to state: paused or failed_over refuse every open, and end
// each stream at its next message, with the link's refusal; running
// serves again.
func (w *Writer) SetLinkState(state linkstate.State) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.link = state
}

// linkRefusal is the refusal of a stream while the link does not run.
func (w *Writer) linkRefusal(link string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.link == "" || w.link == linkstate.Running {
		return nil
	}
	return linkstate.Refusal{Link: link, State: w.link, Why: "set by the test"}.Status()
}

// TakeHeartbeats makes the writer say in its Opened that it takes
// heartbeats, and keep those it receives (Heartbeats).
func (w *Writer) TakeHeartbeats() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.takeHeartbeats = true
}

// Heartbeats returns every heartbeat received, in order.
func (w *Writer) Heartbeats() []*ferryv1.Heartbeat {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*ferryv1.Heartbeat(nil), w.heartbeats...)
}

// RefuseBatchesAbove makes the writer refuse, as record too large, every
// batch above n bytes uncompressed, naming the batch's first offset.
func (w *Writer) RefuseBatchesAbove(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.refuseAbove = n
}

// RefuseAs makes the refusals of RefuseBatchesAbove carry reason
// (refusal.TargetRefused: as the target's brokers refuse a record for
// good; refusal.BatchTooLarge: as a writer refuses a batch too large to
// rebuild), instead of refusal.RecordTooLarge.
func (w *Writer) RefuseAs(reason string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.refuseAs = reason
}

// RefuseCheckpointOf makes the writer refuse every open naming
// topic/partition, as a writer refuses a partition whose checkpoint does
// not verify (refusal.CheckpointUnverified).
func (w *Writer) RefuseCheckpointOf(topic string, partition int32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.unverified = &ferryv1.TopicPartition{Topic: topic, Partition: partition}
}

// SetTargetCluster makes each Opened name id as the target's Kafka cluster
// id, as a real writer names its target's (empty: none, as an old writer).
func (w *Writer) SetTargetCluster(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.targetCluster = id
}

// Start serves on addr ("127.0.0.1:0" for a free port, or the address of
// a stopped writer to bring it back). The test's cleanup stops it.
func Start(t testing.TB, addr string, cps *Checkpoints) *Writer {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("writer listen: %v", err)
	}
	w := &Writer{addr: lis.Addr().String(), cps: cps, srv: grpc.NewServer(), done: make(chan struct{})}
	ferryv1.RegisterReplicationServiceServer(w.srv, w)
	go func() {
		defer close(w.done)
		_ = w.srv.Serve(lis)
	}()
	t.Cleanup(w.Stop)
	return w
}

// Addr is the writer's host:port.
func (w *Writer) Addr() string { return w.addr }

// Stop ends every stream at once, as a killed writer would (held batches
// stay unacknowledged), and waits for the server to end.
func (w *Writer) Stop() {
	w.srv.Stop()
	<-w.done
}

// HoldAcks makes the writer keep every batch unacknowledged until
// ReleaseAcks.
func (w *Writer) HoldAcks() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.hold == nil {
		w.hold = make(chan struct{})
	}
}

// ReleaseAcks acknowledges what was held and what comes.
func (w *Writer) ReleaseAcks() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.hold != nil {
		close(w.hold)
		w.hold = nil
	}
}

// Opens counts the streams opened on this writer.
func (w *Writer) Opens() int { return w.count(&w.opens) }

// OpenRequests returns every Open received, in order.
func (w *Writer) OpenRequests() []*ferryv1.Open {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.openMsgs)
}

// Batches counts the batches received.
func (w *Writer) Batches() int { return w.count(&w.batches) }

// Received returns every batch received, in order, as sent (compressed
// payloads included), refused and unacknowledged ones too.
func (w *Writer) Received() []*ferryv1.Batch {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.received)
}

// Closed counts the streams the fetcher ended itself, after a drain.
func (w *Writer) Closed() int { return w.count(&w.closed) }

func (w *Writer) count(n *int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return *n
}

// Replicate serves one shard stream.
func (w *Writer) Replicate(stream ferryv1.ReplicationService_ReplicateServer) error {
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	open := req.GetOpen()
	if open == nil {
		return errors.New("first message is not an open")
	}
	w.mu.Lock()
	opened := &ferryv1.Opened{Writer: w.addr, TargetClusterId: w.targetCluster, Heartbeats: w.takeHeartbeats, GroupOffsets: w.takeGroupOffsets}
	unverified, reports := w.unverified, !w.noReports
	w.openMsgs = append(w.openMsgs, open)
	w.mu.Unlock()
	if reports {
		id, end := w.session()
		defer end()
		opened.Reports, opened.Session = true, id
	}
	if err := w.linkRefusal(open.GetLink()); err != nil {
		return err
	}
	for _, tp := range open.GetPartitions() {
		if unverified != nil && tp.GetTopic() == unverified.GetTopic() && tp.GetPartition() == unverified.GetPartition() {
			return refusal.Refusal{Reason: refusal.CheckpointUnverified, Topic: tp.GetTopic(), Partition: tp.GetPartition(),
				Offset: 42, Setting: "__ferry_checkpoints partition 0", Cause: "not signed"}.Status()
		}
	}
	for _, tp := range open.GetPartitions() {
		next, ok := w.cps.Next(tp.GetTopic(), tp.GetPartition())
		opened.Resume = append(opened.Resume, &ferryv1.PartitionPosition{
			Topic: tp.GetTopic(), Partition: tp.GetPartition(), NextOffset: next, HasCheckpoint: ok,
		})
	}
	if err := stream.Send(&ferryv1.ReplicateResponse{Msg: &ferryv1.ReplicateResponse_Opened{Opened: opened}}); err != nil {
		return err
	}
	w.mu.Lock()
	w.opens++
	w.mu.Unlock()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			w.mu.Lock()
			w.closed++
			w.mu.Unlock()
			return nil
		}
		if err != nil {
			return err
		}
		if err := w.linkRefusal(open.GetLink()); err != nil {
			return err
		}
		if hb := req.GetHeartbeat(); hb != nil && opened.GetHeartbeats() {
			w.keep(hb, nil)
			continue
		}
		if g := req.GetGroupOffsets(); g != nil && opened.GetGroupOffsets() {
			w.keep(nil, g)
			continue
		}
		b := req.GetBatch()
		if b == nil {
			return errors.New("expected a batch")
		}
		w.mu.Lock()
		w.batches++
		w.received = append(w.received, b)
		hold, refuseAbove, refuseAs := w.hold, w.refuseAbove, w.refuseAs
		w.mu.Unlock()
		if refuseAbove > 0 && int(b.GetUncompressedSize()) > refuseAbove {
			switch refuseAs {
			case refusal.TargetRefused:
				return refusal.Refusal{Reason: refuseAs, Topic: b.GetTopic(), Partition: b.GetPartition(), Offset: b.GetFirstOffset(),
					Cause: "INVALID_RECORD: the test writer's target"}.Status()
			case refusal.BatchTooLarge:
				return refusal.Refusal{Reason: refuseAs, Topic: b.GetTopic(), Partition: b.GetPartition(), Offset: b.GetFirstOffset(),
					Limit: int64(refuseAbove), Setting: "max_batch_bytes", Cause: "at least 7000000 bytes decompressed"}.Status()
			}
			return refusal.Refusal{Reason: refusal.RecordTooLarge, Topic: b.GetTopic(), Partition: b.GetPartition(),
				Offset: b.GetFirstOffset(), Size: int64(b.GetUncompressedSize()), Limit: int64(refuseAbove), Setting: "the test writer's limit"}.Status()
		}
		if hold != nil {
			select {
			case <-hold:
			case <-stream.Context().Done():
				return stream.Context().Err()
			}
		}
		next := b.GetLastOffset() + 1
		w.cps.commit(b.GetTopic(), b.GetPartition(), next)
		ack := &ferryv1.Ack{Sequence: b.GetSequence(), Committed: []*ferryv1.PartitionPosition{
			{Topic: b.GetTopic(), Partition: b.GetPartition(), NextOffset: next, HasCheckpoint: true},
		}}
		if err := stream.Send(&ferryv1.ReplicateResponse{Msg: &ferryv1.ReplicateResponse_Ack{Ack: ack}}); err != nil {
			return err
		}
	}
}

// WaitFor fails the test unless cond holds within timeout, polling it.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, timeout, what, cond)
}
