// Package producer is Ferry's own Kafka batch producer: it writes record
// batches that are already built (passed through from the source or
// rebuilt by the writer) to their target partitions, idempotently or inside
// transactions, speaking the protocol with franz-go's kmsg requests.
//
// Why not a client library's producer: sarama and kgo both take records,
// so a batch would be decoded and compressed again, and both retry inside
// a transaction and recover from a failed batch on their own (sarama bumps
// the idempotent epoch and goes on with the batches behind it), which let
// records behind a failed one reach the target before it. This producer
// does neither:
//
//   - A Producer serves one stream. Its batches carry per-partition
//     sequence numbers from zero, and the batches of a partition are sent
//     in order on one connection, up to MaxInFlight requests to a broker
//     on the wire at once (pipelined: each is written once the one before
//     it is, without waiting for its answer). Kafka serves a connection's
//     requests one at a time, in order, and refuses a batch whose sequence
//     does not follow the partition's last one, so the target takes a
//     partition's batches in order or not at all: a batch behind a refused
//     one is refused too (OUT_OF_ORDER_SEQUENCE_NUMBER). That holds only
//     once the broker knows the producer on the partition, so a partition's
//     first batch of a Producer is sent alone and answered before anything
//     follows it (produceTo).
//   - Any error ends the Producer: no produce request is retried, and
//     nothing new is sent after a failure is seen. The stream ends, and the next one
//     starts a new Producer (which fences, for a transactional id) and
//     resumes from what is committed. (Requests to the transaction
//     coordinator go through kgo's Client.Request, which sends them again
//     on a dropped connection or a "coordinator moved or loading" answer;
//     those requests are idempotent, and AddPartitionsToTxn also waits out
//     CONCURRENT_TRANSACTIONS here.)
//   - It speaks Kafka's first transaction protocol (AddPartitionsToTxn,
//     then Produce, then EndTxn), which every Kafka since 0.11 serves;
//     MaxVersions caps the requests there.
package producer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/ferry-replicator/ferry/pkg/recordbatch"
)

// MaxVersions caps the client's requests at Kafka's first transaction
// protocol: AddPartitionsToTxn v4 and up is for brokers only, EndTxn v5 and
// up and Produce v12 and up (KIP-890 transactions v2) would add partitions
// implicitly and bump the epoch on every end.
func MaxVersions() *kversion.Versions {
	v := kversion.Stable()
	v.SetMaxKeyVersion(kmsg.AddPartitionsToTxn.Int16(), 3)
	v.SetMaxKeyVersion(kmsg.EndTxn.Int16(), 4)
	v.SetMaxKeyVersion(kmsg.Produce.Int16(), 11)
	return v
}

// MaxInFlight is how many produce requests a Producer keeps on the wire to
// one broker: Kafka's limit for an idempotent producer
// (max.in.flight.requests.per.connection), the number of recent batches a
// broker remembers per producer and partition. A source that writes small
// batches (a producer lingering a few milliseconds) is copied batch for
// batch, each in a request of its own, so the requests of a partition must
// not wait for each other's answers.
const MaxInFlight = 5

// Client is a target client made for Producers.
type Client struct {
	*kgo.Client
	writes *writes
}

// NewClient returns a client for Producers: its requests capped at
// MaxVersions, and a hook that tells its Producers when each produce
// request is on the wire.
func NewClient(opts ...kgo.Opt) (*Client, error) {
	w := &writes{n: map[int32]uint64{}, changed: make(chan struct{})}
	// Acks: kgo writes its client's setting into every ProduceRequest it
	// sends, whatever the request says, so all in-sync replicas are
	// required here, after the caller's options, where nothing overrides
	// it: a batch acknowledged by the leader alone may be lost with it.
	cl, err := kgo.NewClient(append(slices.Clip(opts), kgo.MaxVersions(MaxVersions()), kgo.WithHooks(w), kgo.RequiredAcks(kgo.AllISRAcks()))...)
	if err != nil {
		return nil, err
	}
	return &Client{Client: cl, writes: w}, nil
}

// writes counts, per broker, the produce requests a client has written
// (kgo's write hook). kgo writes a broker's requests in the order they are
// enqueued, but Broker.Request enqueues inside the call: a Producer that
// waits until request k is written before it calls for request k+1 keeps
// their order without waiting for k's answer.
type writes struct {
	mu      sync.Mutex
	n       map[int32]uint64
	changed chan struct{} // closed and replaced at every count
}

func (w *writes) OnBrokerWrite(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key != kmsg.Produce.Int16() || err != nil {
		return // a write that failed is not on the wire (kgo may write it again on a new connection)
	}
	w.mu.Lock()
	w.n[meta.NodeID]++
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
}

func (w *writes) count(broker int32) (uint64, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n[broker], w.changed
}

// wait returns once broker's count reaches n or done is closed.
func (w *writes) wait(broker int32, n uint64, done <-chan struct{}) {
	for {
		c, changed := w.count(broker)
		if c >= n {
			return
		}
		select {
		case <-changed:
		case <-done:
			return
		}
	}
}

// Options configure a Producer.
type Options struct {
	// TransactionalID makes the producer transactional; empty means
	// idempotent only.
	TransactionalID string
	// TransactionTimeout is how long the coordinator lets a transaction of
	// this producer stay open before it aborts it.
	TransactionTimeout time.Duration
	// Timeout bounds each produce request, as Kafka's request timeout does
	// (the brokers' wait for the in-sync replicas) and, a little longer,
	// the wait for its answer.
	Timeout time.Duration
}

// Batch is one record batch for a target partition.
type Batch struct {
	Topic     string
	Partition int32
	// Raw is exactly one record batch (magic v2). Produce rewrites its
	// header in place: base offset, producer id and epoch, base sequence,
	// transactional bit and CRC.
	Raw []byte
}

// TopicPartition names a target partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// PartitionError is the target's refusal of a batch.
type PartitionError struct {
	TopicPartition
	// Batch is the refused batch's index in the Produce call.
	Batch int
	// Record is the index in the batch of the first record the target
	// named as the cause (Produce v8 and up: INVALID_RECORD,
	// INVALID_TIMESTAMP); -1 when it named none.
	Record int
	Err    error
}

// Permanent reports whether the target refused a batch for what it holds,
// so that sending the same records again, on any producer or connection,
// is refused again: the partition cannot go on without an operator.
// Everything else a produce can fail with (leadership moves, too few
// in-sync replicas, timeouts, the producer's own state, authorization) is
// cured by a new stream, or by the operator fixing the cluster while it
// retries.
func Permanent(err error) bool {
	for _, e := range permanent {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// permanent are the per-partition produce errors a batch's contents cause:
//   - MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE: above the topic's
//     max.message.bytes or the brokers' message.max.bytes;
//   - INVALID_RECORD: the broker's record checks (a record without a key
//     into a compacted topic, a broker-side record validation policy);
//   - INVALID_TIMESTAMP: a CreateTime outside the topic's
//     message.timestamp.before.max.ms / after.max.ms (or the older
//     message.timestamp.difference.max.ms);
//   - CORRUPT_MESSAGE: the broker's validation of a batch the writer has
//     already checked (its CRC, built or verified here) and that TCP
//     carried intact, so it refuses the same bytes again (older brokers
//     also answer it for a keyless record into a compacted topic);
//   - UNSUPPORTED_COMPRESSION_TYPE: a codec the target's brokers or
//     version do not take (zstd below Kafka 2.1);
//   - POLICY_VIOLATION: a broker plugin's refusal.
var permanent = []error{
	kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord, kerr.InvalidTimestamp,
	kerr.CorruptMessage, kerr.UnsupportedCompressionType, kerr.PolicyViolation,
}

func (e *PartitionError) Error() string {
	return fmt.Sprintf("produce to %s/%d: %v", e.Topic, e.Partition, e.Err)
}

func (e *PartitionError) Unwrap() error { return e.Err }

// ErrFailed is returned by every call after one has failed: the Producer
// is over, and the stream must end.
var ErrFailed = errors.New("producer failed earlier")

// Producer writes batches for one stream. Its methods are not safe for
// concurrent use.
type Producer struct {
	cl    *Client
	opts  Options
	id    int64
	epoch int16
	seq   map[TopicPartition]int32
	// acked are the partitions where the target has acknowledged a batch
	// of this producer (see produceTo: until then one request at a time).
	acked   map[TopicPartition]bool
	leaders map[TopicPartition]int32
	inTxn   map[TopicPartition]bool
	err     error
}

// New initialises a producer id on the target (for a transactional id this
// fences every older producer of it, and waits until any transaction they
// left is completed).
func New(ctx context.Context, cl *Client, opts Options) (*Producer, error) {
	req := kmsg.NewPtrInitProducerIDRequest()
	if opts.TransactionalID != "" {
		req.TransactionalID = &opts.TransactionalID
		req.TransactionTimeoutMillis = int32(opts.TransactionTimeout.Milliseconds())
	}
	req.ProducerID, req.ProducerEpoch = -1, -1
	p := &Producer{
		cl: cl, opts: opts,
		seq: map[TopicPartition]int32{}, acked: map[TopicPartition]bool{}, leaders: map[TopicPartition]int32{}, inTxn: map[TopicPartition]bool{},
	}
	err := Retry(ctx, "init producer id", func() error {
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		p.id, p.epoch = resp.ProducerID, resp.ProducerEpoch
		return kerr.ErrorForCode(resp.ErrorCode)
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// ID returns the producer id and epoch.
func (p *Producer) ID() (int64, int16) { return p.id, p.epoch }

func (p *Producer) transactional() bool { return p.opts.TransactionalID != "" }

// fail ends the producer with err and returns it.
func (p *Producer) fail(err error) error {
	if p.err == nil {
		p.err = err
	}
	return err
}

func (p *Producer) check() error {
	if p.err != nil {
		return fmt.Errorf("%w: %v", ErrFailed, p.err)
	}
	return nil
}

// AddPartitions adds partitions to the open transaction (beginning it),
// those not added yet. Produce adds its batches' partitions itself; this
// is for a transaction that writes nothing to some of them (an abort that
// only ends what an older producer left open).
func (p *Producer) AddPartitions(ctx context.Context, tps []TopicPartition) error {
	if err := p.check(); err != nil {
		return err
	}
	if !p.transactional() {
		return nil
	}
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch = p.opts.TransactionalID, p.id, p.epoch
	byTopic := map[string]int{}
	var add []TopicPartition
	for _, tp := range tps {
		if p.inTxn[tp] {
			continue
		}
		i, ok := byTopic[tp.Topic]
		if !ok {
			i = len(req.Topics)
			byTopic[tp.Topic] = i
			t := kmsg.NewAddPartitionsToTxnRequestTopic()
			t.Topic = tp.Topic
			req.Topics = append(req.Topics, t)
		}
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, tp.Partition)
		add = append(add, tp)
	}
	if len(add) == 0 {
		return nil
	}
	// The coordinator answers CONCURRENT_TRANSACTIONS while it completes
	// the previous transaction; that wait is the only retry.
	err := Retry(ctx, "add partitions to transaction", func() error {
		resp, err := req.RequestWith(ctx, p.cl)
		if err != nil {
			return err
		}
		for _, t := range resp.Topics {
			for _, pr := range t.Partitions {
				if err := kerr.ErrorForCode(pr.ErrorCode); err != nil {
					return fmt.Errorf("%s/%d: %w", t.Topic, pr.Partition, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		return p.fail(err)
	}
	for _, tp := range add {
		p.inTxn[tp] = true
	}
	return nil
}

// Produce writes batches and returns the target offset of each batch's
// first record. The batches of one partition are written in the order
// given, one request after another (pipelined, see MaxInFlight);
// partitions on different brokers are written in parallel. Any error ends the Producer; what it wrote before
// is the caller's to commit (idempotent) or is aborted with the
// transaction.
func (p *Producer) Produce(ctx context.Context, batches []Batch) ([]int64, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	if len(batches) == 0 {
		return nil, nil
	}
	// Each partition's batches in order; the k-th of every partition led by
	// a broker go in that broker's k-th request.
	order := map[TopicPartition][]int{}
	var tps []TopicPartition
	for i, b := range batches {
		tp := TopicPartition{b.Topic, b.Partition}
		if _, ok := order[tp]; !ok {
			tps = append(tps, tp)
		}
		order[tp] = append(order[tp], i)
	}
	if err := p.lookupLeaders(ctx, tps); err != nil {
		return nil, p.fail(err)
	}
	if err := p.AddPartitions(ctx, tps); err != nil {
		return nil, err
	}
	for _, tp := range tps {
		seq := p.seq[tp]
		for _, i := range order[tp] {
			info, err := recordbatch.Parse(batches[i].Raw)
			if err == nil && info.Size() != len(batches[i].Raw) {
				err = fmt.Errorf("%d bytes after the batch", len(batches[i].Raw)-info.Size())
			}
			if err == nil {
				err = recordbatch.SetProducer(batches[i].Raw, p.id, p.epoch, seq, p.transactional())
			}
			if err != nil {
				return nil, p.fail(fmt.Errorf("batch %d for %s/%d: %w", i, tp.Topic, tp.Partition, err))
			}
			seq = nextSequence(seq, info.NumRecords)
		}
	}

	byLeader := map[int32][]TopicPartition{}
	for _, tp := range tps {
		l := p.leaders[tp]
		byLeader[l] = append(byLeader[l], tp)
	}
	offsets := make([]int64, len(batches))
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for leader, parts := range byLeader {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.produceTo(ctx, leader, parts, order, batches, offsets); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return nil, p.fail(first)
	}
	for _, tp := range tps {
		for _, i := range order[tp] {
			info, _ := recordbatch.Parse(batches[i].Raw)
			p.seq[tp] = nextSequence(p.seq[tp], info.NumRecords)
		}
		p.acked[tp] = true
	}
	return offsets, nil
}

// nextSequence follows Kafka's producer: sequences wrap from MaxInt32 to 0.
func nextSequence(seq, records int32) int32 {
	return int32((int64(seq) + int64(records)) % (1 << 31))
}

// produceTo sends the batches of parts, all led by leader: request k
// carries the k-th batch of each partition, and up to MaxInFlight requests
// are on the wire at once. The first refusal stops the sending; the
// requests already on the wire are answered (those behind a refused batch
// are refused for their sequence) and the earliest request's error, the
// cause, is returned.
//
// Until the target has acknowledged a batch of this producer on each of
// parts, request 0 is alone on the wire: a broker that holds no state for
// a producer id on a partition takes any first sequence (Kafka's
// ProducerStateManager checks the sequence only against a known epoch), so
// a refused or lost first batch would not stop the ones pipelined behind
// it, and they would land without it, ahead of the records the next stream
// sends again. Once one batch is acknowledged, the broker holds the
// producer's last sequence and refuses any batch that does not follow it.
func (p *Producer) produceTo(ctx context.Context, leader int32, parts []TopicPartition, order map[TopicPartition][]int, batches []Batch, offsets []int64) error {
	br := p.cl.Broker(int(leader))
	type answer struct {
		k   int
		err error
	}
	answers := make(chan answer, MaxInFlight)
	var (
		errs     = map[int]error{}
		inflight int
		// known: every partition of parts has an acknowledged batch, so
		// requests may be pipelined.
		known = !slices.ContainsFunc(parts, func(tp TopicPartition) bool { return !p.acked[tp] })
	)
	take := func(a answer) {
		inflight--
		if a.err != nil {
			errs[a.k] = a.err
		} else if a.k == 0 {
			known = true // request 0 held a batch of every partition of parts
		}
	}
	for k := 0; len(errs) == 0; k++ {
		req, sent := p.request(parts, order, batches, k)
		if len(sent) == 0 {
			break
		}
		for (inflight >= MaxInFlight || !known && inflight > 0) && len(errs) == 0 {
			take(<-answers)
		}
		if len(errs) > 0 {
			break
		}
		written, _ := p.cl.writes.count(leader)
		done := make(chan struct{})
		inflight++
		go func() {
			err := p.send(ctx, br, leader, req, sent, batches, offsets)
			answers <- answer{k, err}
			close(done)
		}()
		// The next request follows once this one is written (or failed
		// before it was).
		p.cl.writes.wait(leader, written+1, done)
		for drained := false; !drained; {
			select {
			case a := <-answers:
				take(a)
			default:
				drained = true
			}
		}
	}
	for inflight > 0 {
		take(<-answers)
	}
	first := -1
	for k := range errs {
		if first < 0 || k < first {
			first = k
		}
	}
	if first >= 0 {
		return errs[first]
	}
	return nil
}

// request builds produce request k of parts: the k-th batch of each
// partition that has one; sent are those batches' indexes.
func (p *Producer) request(parts []TopicPartition, order map[TopicPartition][]int, batches []Batch, k int) (*kmsg.ProduceRequest, []int) {
	req := kmsg.NewPtrProduceRequest()
	if p.transactional() {
		req.TransactionID = &p.opts.TransactionalID
	}
	req.Acks = -1
	req.TimeoutMillis = int32(p.opts.Timeout.Milliseconds())
	var sent []int
	byTopic := map[string]int{}
	for _, tp := range parts {
		if k >= len(order[tp]) {
			continue
		}
		i := order[tp][k]
		ti, ok := byTopic[tp.Topic]
		if !ok {
			ti = len(req.Topics)
			byTopic[tp.Topic] = ti
			t := kmsg.NewProduceRequestTopic()
			t.Topic = tp.Topic
			req.Topics = append(req.Topics, t)
		}
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = tp.Partition, batches[i].Raw
		req.Topics[ti].Partitions = append(req.Topics[ti].Partitions, rp)
		sent = append(sent, i)
	}
	return req, sent
}

// send sends one produce request and records the base offsets of its
// batches (sent) in offsets.
func (p *Producer) send(ctx context.Context, br *kgo.Broker, leader int32, req *kmsg.ProduceRequest, sent []int, batches []Batch, offsets []int64) error {
	// The answer may take the brokers' whole timeout; the wait for it
	// a little longer, so a broker that never answers ends the call.
	rctx, cancel := context.WithTimeout(ctx, p.opts.Timeout+5*time.Second)
	kresp, err := br.Request(rctx, req)
	cancel()
	if err != nil {
		return fmt.Errorf("produce to broker %d: %w", leader, err)
	}
	resp := kresp.(*kmsg.ProduceResponse)
	answered := 0
	for _, t := range resp.Topics {
		for _, rp := range t.Partitions {
			i, ok := batchOf(batches, sent, t.Topic, rp.Partition)
			if !ok {
				return fmt.Errorf("produce to broker %d: answer for %s/%d, which was not asked", leader, t.Topic, rp.Partition)
			}
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				record := -1
				for _, re := range rp.ErrorRecords {
					if record < 0 || int(re.RelativeOffset) < record {
						record = int(re.RelativeOffset)
					}
					if re.ErrorMessage != nil && *re.ErrorMessage != "" {
						err = fmt.Errorf("%w (record %d: %s)", err, re.RelativeOffset, *re.ErrorMessage)
					}
				}
				if rp.ErrorMessage != nil && *rp.ErrorMessage != "" {
					err = fmt.Errorf("%w (%s)", err, *rp.ErrorMessage)
				}
				return &PartitionError{TopicPartition: TopicPartition{t.Topic, rp.Partition}, Batch: i, Record: record, Err: err}
			}
			offsets[i] = rp.BaseOffset
			answered++
		}
	}
	if answered != len(sent) {
		return fmt.Errorf("produce to broker %d: %d partitions answered of %d", leader, answered, len(sent))
	}
	return nil
}

func batchOf(batches []Batch, sent []int, topic string, partition int32) (int, bool) {
	for _, i := range sent {
		if batches[i].Topic == topic && batches[i].Partition == partition {
			return i, true
		}
	}
	return 0, false
}

// lookupLeaders finds the leaders of the partitions not looked up yet. They
// are kept for the Producer's life: a leader that moves answers
// NOT_LEADER_OR_FOLLOWER, which ends the Producer, and the next one looks
// again.
func (p *Producer) lookupLeaders(ctx context.Context, tps []TopicPartition) error {
	var topics []string
	seen := map[string]bool{}
	for _, tp := range tps {
		if _, ok := p.leaders[tp]; !ok && !seen[tp.Topic] {
			seen[tp.Topic] = true
			topics = append(topics, tp.Topic)
		}
	}
	if len(topics) == 0 {
		return nil
	}
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, p.cl)
	if err != nil {
		return fmt.Errorf("metadata of %v: %w", topics, err)
	}
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return fmt.Errorf("metadata of %s: %w", *t.Topic, err)
		}
		for _, mp := range t.Partitions {
			if mp.ErrorCode == 0 && mp.Leader >= 0 {
				p.leaders[TopicPartition{*t.Topic, mp.Partition}] = mp.Leader
			}
		}
	}
	for _, tp := range tps {
		if _, ok := p.leaders[tp]; !ok {
			return fmt.Errorf("metadata: %s/%d has no leader: %w", tp.Topic, tp.Partition, kerr.LeaderNotAvailable)
		}
	}
	return nil
}

// Commit commits the open transaction: everything produced since the last
// Commit or Abort becomes visible at once. An error leaves the outcome
// unknown.
func (p *Producer) Commit(ctx context.Context) error { return p.end(ctx, true) }

// Abort aborts the open transaction: nothing produced in it becomes
// visible, and whatever an older epoch of the transactional id left open
// on the partitions added to it ends aborted too.
func (p *Producer) Abort(ctx context.Context) error { return p.end(ctx, false) }

func (p *Producer) end(ctx context.Context, commit bool) error {
	if err := p.check(); err != nil {
		return err
	}
	if !p.transactional() || len(p.inTxn) == 0 {
		return nil // nothing was added, so no transaction is open
	}
	req := kmsg.NewPtrEndTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = p.opts.TransactionalID, p.id, p.epoch, commit
	resp, err := req.RequestWith(ctx, p.cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		what := "abort"
		if commit {
			what = "commit"
		}
		return p.fail(fmt.Errorf("%s: %w", what, err))
	}
	clear(p.inTxn)
	return nil
}

// AbortOpen aborts the transaction this producer has open, even after it
// failed (Abort refuses then): the end of a stream whose round failed.
// Left open, the transaction holds back every read_committed reader of its
// partitions (consumers of the target topics, the checkpoint view and with
// it the link's control records) until its timeout, unless the shard's
// next owner fences it first; after a region loss no next owner comes.
// A refusal (fenced: a newer owner has aborted it already; a commit whose
// outcome was unknown and did land) leaves nothing to abort and is
// returned for the log only.
func (p *Producer) AbortOpen(ctx context.Context) error {
	if !p.transactional() || len(p.inTxn) == 0 {
		return nil
	}
	req := kmsg.NewPtrEndTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = p.opts.TransactionalID, p.id, p.epoch, false
	resp, err := req.RequestWith(ctx, p.cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	clear(p.inTxn)
	if err != nil {
		return fmt.Errorf("abort the open transaction: %w", err)
	}
	return nil
}

// RetryWait is the pause between attempts while the coordinator is busy.
const RetryWait = 100 * time.Millisecond

// Retry runs f until it succeeds, fails with an error that waiting does not
// cure, or ctx ends. Only the coordinator's "busy" answers are retried:
// the previous transaction completing, or the coordinator loading or
// moving.
func Retry(ctx context.Context, what string, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		if !busy(err) {
			return fmt.Errorf("%s: %w", what, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last: %v)", what, ctx.Err(), err)
		case <-time.After(RetryWait):
		}
	}
}

func busy(err error) bool {
	return errors.Is(err, kerr.ConcurrentTransactions) ||
		errors.Is(err, kerr.CoordinatorLoadInProgress) ||
		errors.Is(err, kerr.CoordinatorNotAvailable) ||
		errors.Is(err, kerr.NotCoordinator)
}
