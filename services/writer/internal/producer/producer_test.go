package producer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/ferry-replicator/ferry/pkg/recordbatch"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const topic = "data"

func newCluster(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(3), kfake.SeedTopics(3, topic)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func newClient(t *testing.T, c *kfake.Cluster) *Client {
	t.Helper()
	cl, err := NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// newBatch builds a batch of n records "<tag>-<i>" for a partition.
func newBatch(t *testing.T, p int32, tag string, n int) Batch {
	t.Helper()
	recs := make([]recordbatch.Record, n)
	for i := range recs {
		recs[i] = recordbatch.Record{Timestamp: time.Now().UnixMilli(), Key: []byte(tag), Value: []byte(tag + "-" + strconv.Itoa(i))}
	}
	raw, err := recordbatch.Build(nil, recs, recordbatch.LZ4)
	if err != nil {
		t.Fatal(err)
	}
	return Batch{Topic: topic, Partition: p, Raw: raw}
}

// readAll returns the values of every partition, in order, that a consumer
// at the given isolation level sees.
func readAll(t *testing.T, c *kfake.Cluster, committed bool) map[int32][]string {
	t.Helper()
	// Control records (transaction markers) are kept so the reader knows it
	// has passed everything, including aborted records it does not see.
	opts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.KeepControlRecords()}
	if committed {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = topic
	for p := range int32(3) {
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Partition, lp.Timestamp = p, -1
		lt.Partitions = append(lt.Partitions, lp)
	}
	adm.Topics = append(adm.Topics, lt)
	if committed {
		adm.IsolationLevel = 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := adm.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	end := map[int32]int64{}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			end[rp.Partition] = rp.Offset
		}
	}
	out := map[int32][]string{}
	next := map[int32]int64{} // the offset after the last one read
	done := func() bool {
		for p, e := range end {
			if next[p] < e {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: %v (ends %v, read to %v)", topic, ctx.Err(), end, next)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				out[r.Partition] = append(out[r.Partition], string(r.Value))
			}
			next[r.Partition] = r.Offset + 1
		})
	}
	return out
}

func values(tag string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, tag+"-"+strconv.Itoa(i))
	}
	return out
}

func TestIdempotentBatchesArriveInOrderWithTheirOffsets(t *testing.T) {
	c := newCluster(t)
	cl := newClient(t, c)
	ctx := context.Background()
	p, err := New(ctx, cl, Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// Two batches of partition 0 in one call go in two requests, in order;
	// partitions 1 and 2 may sit on other brokers.
	offs, err := p.Produce(ctx, []Batch{newBatch(t, 0, "a", 3), newBatch(t, 1, "b", 2), newBatch(t, 0, "c", 4), newBatch(t, 2, "d", 1)})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{0, 0, 3, 0}; fmt.Sprint(offs) != fmt.Sprint(want) {
		t.Fatalf("base offsets %v, want %v", offs, want)
	}
	// The sequences go on from where the first call left them: the broker
	// refuses a gap or a replay as out of order.
	if offs, err = p.Produce(ctx, []Batch{newBatch(t, 0, "e", 2), newBatch(t, 1, "f", 1)}); err != nil {
		t.Fatalf("second call: %v", err)
	}
	if offs[0] != 7 || offs[1] != 2 {
		t.Fatalf("second call's base offsets %v, want [7 2]", offs)
	}
	got := readAll(t, c, false)
	want := map[int32][]string{
		0: append(append(values("a", 0, 3), values("c", 0, 4)...), values("e", 0, 2)...),
		1: append(values("b", 0, 2), values("f", 0, 1)...),
		2: values("d", 0, 1),
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("target holds\n%v\nwant\n%v", got, want)
	}
	// Commit and Abort are no-ops without a transactional id.
	if err := p.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestAFailedBatchStopsItsPartitionAndTheProducer fails the second of three
// requests for partition 0 (kfake ControlKey): the third batch may already
// be on the wire (pipelined), but the broker refuses it for its sequence,
// so nothing after a failed batch reaches the target, the error names the
// failed batch, not the one refused behind it, and every later call fails.
func TestAFailedBatchStopsItsPartitionAndTheProducer(t *testing.T) {
	c := newCluster(t, kfake.NumBrokers(1))
	cl := newClient(t, c)
	ctx := context.Background()
	p, err := New(ctx, cl, Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	produces := 0
	c.ControlKey(kmsg.Produce.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		produces++
		if produces != 2 {
			return nil, nil, false
		}
		return refuse(req, kerr.NotEnoughReplicas.Code), nil, true
	})
	_, err = p.Produce(ctx, []Batch{newBatch(t, 0, "a", 2), newBatch(t, 0, "b", 2), newBatch(t, 0, "c", 2)})
	var perr *PartitionError
	if !errors.As(err, &perr) || !errors.Is(err, kerr.NotEnoughReplicas) || perr.Batch != 1 || perr.Partition != 0 {
		t.Fatalf("Produce = %v, want NOT_ENOUGH_REPLICAS for batch 1 of %s/0", err, topic)
	}
	if produces > 3 {
		t.Fatalf("%d produce requests, want at most 3", produces)
	}
	if _, err := p.Produce(ctx, []Batch{newBatch(t, 1, "d", 1)}); !errors.Is(err, ErrFailed) {
		t.Fatalf("Produce after a failure = %v, want ErrFailed", err)
	}
	got := readAll(t, c, false)
	if want := values("a", 0, 2); fmt.Sprint(got[0]) != fmt.Sprint(want) || len(got[1]) != 0 {
		t.Fatalf("target holds %v, want only %v on partition 0", got, want)
	}
}

// TestRequestsArePipelined holds a produce request in the broker until the
// next is on the wire: a producer that waited for each answer before
// sending the next request would never send it. Then the target holds every
// batch in order. The partition's first batch goes first, alone (see
// TestARefusedFirstBatchStopsThoseBehindIt).
func TestRequestsArePipelined(t *testing.T) {
	c := newCluster(t, kfake.NumBrokers(1))
	cl := newClient(t, c)
	ctx := context.Background()
	p, err := New(ctx, cl, Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	first := newBatch(t, 0, "first", 1)
	if _, err := p.Produce(ctx, []Batch{first}); err != nil {
		t.Fatal(err)
	}
	var (
		produces, held int
		waited         bool
	)
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		produces++
		if produces != 1 {
			return nil, nil, false
		}
		// Sleeping yields the broker to its other requests; the second
		// produce request is behind this one on the same connection, so
		// it is only written, not served, until this one is answered.
		c.SleepControl(func() {
			// The client's own write count, with a deadline: the wait
			// ends when the second request is written or time is up.
			expired := make(chan struct{})
			timer := time.AfterFunc(10*time.Second, func() { close(expired) })
			defer timer.Stop()
			cl.writes.wait(0, 3, expired)
			n, _ := cl.writes.count(0)
			held, waited = int(n)-1, n < 3
		})
		return nil, nil, false
	})
	batches := make([]Batch, 6)
	var want []string
	for i := range batches {
		tag := string(rune('a' + i))
		batches[i] = newBatch(t, 0, tag, 2)
		want = append(want, values(tag, 0, 2)...)
	}
	offs, err := p.Produce(ctx, batches)
	if err != nil {
		t.Fatal(err)
	}
	if waited || held < 2 {
		t.Fatalf("the second produce request was not written while the first was unanswered (%d written)", held)
	}
	if fmt.Sprint(offs) != fmt.Sprint([]int64{1, 3, 5, 7, 9, 11}) {
		t.Fatalf("base offsets %v", offs)
	}
	want = append(values("first", 0, 1), want...)
	if got := readAll(t, c, false); fmt.Sprint(got[0]) != fmt.Sprint(want) {
		t.Fatalf("target holds %v, want %v", got[0], want)
	}
}

func TestTooLargeBatchNamesItsPartition(t *testing.T) {
	c := newCluster(t, kfake.NumBrokers(1))
	cl := newClient(t, c)
	ctx := context.Background()
	adm := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, topic
	cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	cfg.Name, cfg.Value = "max.message.bytes", kmsg.StringPtr("200")
	res.Configs = append(res.Configs, cfg)
	adm.Resources = append(adm.Resources, res)
	if _, err := adm.RequestWith(ctx, cl); err != nil {
		t.Fatal(err)
	}
	p, err := New(ctx, cl, Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	big := newBatch(t, 2, "x", 1)
	big.Raw, err = recordbatch.Build(nil, []recordbatch.Record{{Value: make([]byte, 500)}}, recordbatch.None)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Produce(ctx, []Batch{newBatch(t, 0, "a", 1), big})
	var perr *PartitionError
	if !errors.As(err, &perr) || !errors.Is(err, kerr.MessageTooLarge) || perr.Partition != 2 || perr.Batch != 1 {
		t.Fatalf("Produce = %v, want MESSAGE_TOO_LARGE for batch 1 of %s/2", err, topic)
	}
}

func TestTransactionCommitsOrAbortsEverything(t *testing.T) {
	c := newCluster(t)
	cl := newClient(t, c)
	ctx := context.Background()
	p, err := New(ctx, cl, Options{TransactionalID: "ferry-t-1", TransactionTimeout: time.Minute, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Produce(ctx, []Batch{newBatch(t, 0, "a", 2), newBatch(t, 1, "a", 2)}); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Produce(ctx, []Batch{newBatch(t, 0, "b", 2), newBatch(t, 2, "b", 1)}); err != nil {
		t.Fatal(err)
	}
	if err := p.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	// Transactions follow one another with the same producer: the second
	// waits for the abort to complete (CONCURRENT_TRANSACTIONS) on its own.
	if _, err := p.Produce(ctx, []Batch{newBatch(t, 0, "c", 1)}); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, c, true)
	want := map[int32][]string{0: append(values("a", 0, 2), values("c", 0, 1)...), 1: values("a", 0, 2)}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("read_committed sees\n%v\nwant\n%v", got, want)
	}
}

// TestNewProducerFencesTheOld starts a second producer of the same
// transactional id while the first has a transaction open: the first can
// no longer commit, and its records are never visible.
func TestNewProducerFencesTheOld(t *testing.T) {
	c := newCluster(t)
	cl := newClient(t, c)
	ctx := context.Background()
	opts := Options{TransactionalID: "ferry-t-2", TransactionTimeout: time.Minute, Timeout: 10 * time.Second}
	old, err := New(ctx, cl, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Produce(ctx, []Batch{newBatch(t, 0, "zombie", 2)}); err != nil {
		t.Fatal(err)
	}
	cur, err := New(ctx, cl, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, oldEpoch := old.ID(); func() bool { _, e := cur.ID(); return e <= oldEpoch }() {
		t.Fatalf("the new producer's epoch does not pass the old one's")
	}
	err = old.Commit(ctx)
	if !errors.Is(err, kerr.ProducerFenced) && !errors.Is(err, kerr.InvalidProducerEpoch) {
		t.Fatalf("old producer's commit = %v, want fenced", err)
	}
	if _, err := old.Produce(ctx, []Batch{newBatch(t, 0, "zombie", 1)}); !errors.Is(err, ErrFailed) {
		t.Fatalf("old producer's Produce after a failure = %v, want ErrFailed", err)
	}
	if _, err := cur.Produce(ctx, []Batch{newBatch(t, 0, "live", 1)}); err != nil {
		t.Fatal(err)
	}
	if err := cur.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, c, true)
	if want := values("live", 0, 1); fmt.Sprint(got[0]) != fmt.Sprint(want) {
		t.Fatalf("read_committed sees %v on partition 0, want %v", got[0], want)
	}
}

// TestAddPartitionsAloneAbortsWhatAnOlderEpochLeftOpen is the fence's
// step: a transaction that only adds partitions and aborts ends, as
// aborted, what a killed producer of the id left open.
func TestAddPartitionsAloneAbortsWhatAnOlderEpochLeftOpen(t *testing.T) {
	c := newCluster(t)
	cl := newClient(t, c)
	ctx := context.Background()
	opts := Options{TransactionalID: "ferry-t-3", TransactionTimeout: time.Minute, Timeout: 10 * time.Second}
	old, err := New(ctx, cl, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Produce(ctx, []Batch{newBatch(t, 1, "zombie", 2)}); err != nil {
		t.Fatal(err)
	}
	cur, err := New(ctx, cl, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := cur.AddPartitions(ctx, []TopicPartition{{topic, 0}, {topic, 1}, {topic, 2}}); err != nil {
		t.Fatal(err)
	}
	if err := cur.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cur.Produce(ctx, []Batch{newBatch(t, 1, "live", 1)}); err != nil {
		t.Fatal(err)
	}
	if err := cur.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, c, true)
	if want := values("live", 0, 1); fmt.Sprint(got[1]) != fmt.Sprint(want) {
		t.Fatalf("read_committed sees %v on partition 1, want %v", got[1], want)
	}
}

// refuse answers every partition of a produce request with code.
func refuse(req kmsg.Request, code int16) kmsg.Response {
	r := req.(*kmsg.ProduceRequest)
	resp := r.ResponseKind().(*kmsg.ProduceResponse)
	for _, rt := range r.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition, sp.ErrorCode = rp.Partition, code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// seedOld writes one record to partition 0 with a client of its own, as an
// earlier stream's producer would have.
func seedOld(t *testing.T, c *kfake.Cluster) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Partition: 0, Value: []byte("old-0")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// TestARefusedFirstBatchStopsThoseBehindIt refuses a new producer's first
// batch on a partition (INVALID_TIMESTAMP, as a target with
// message.timestamp.before.max.ms answers). A broker with no state for the
// producer id takes any first sequence, so batches pipelined behind the
// refused one were appended without it: duplicated by the next stream,
// ahead of the records before them. Nothing may follow the refused batch.
func TestARefusedFirstBatchStopsThoseBehindIt(t *testing.T) {
	c := newCluster(t, kfake.NumBrokers(1))
	seedOld(t, c)
	cl := newClient(t, c)
	ctx := context.Background()
	p, err := New(ctx, cl, Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c.ControlKey(kmsg.Produce.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		return refuse(req, kerr.InvalidTimestamp.Code), nil, true
	})
	_, err = p.Produce(ctx, []Batch{newBatch(t, 0, "a", 2), newBatch(t, 0, "b", 2), newBatch(t, 0, "c", 2)})
	var perr *PartitionError
	if !errors.As(err, &perr) || !errors.Is(err, kerr.InvalidTimestamp) || perr.Batch != 0 {
		t.Fatalf("Produce = %v, want INVALID_TIMESTAMP for batch 0", err)
	}
	if got := readAll(t, c, false); fmt.Sprint(got[0]) != fmt.Sprint([]string{"old-0"}) {
		t.Fatalf("partition 0 holds %v, want only the old record: batches behind the refused one landed", got[0])
	}
}

// dropAfterFirstWrite is a client hook that holds the writing of requests
// after the first produce request until its connection is gone: the window
// in which a pipelining producer's next request goes out on a new
// connection.
type dropAfterFirstWrite struct {
	once         sync.Once
	disconnected chan struct{} // closed at the first disconnect
	discOnce     sync.Once
}

func (h *dropAfterFirstWrite) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key != kmsg.Produce.Int16() || err != nil {
		return
	}
	h.once.Do(func() {
		select {
		case <-h.disconnected:
		case <-time.After(time.Second): // kgo notices a closed connection only when it uses it
		}
	})
}

func (h *dropAfterFirstWrite) OnBrokerDisconnect(kgo.BrokerMetadata, net.Conn) {
	h.discOnce.Do(func() { close(h.disconnected) })
}

// TestADroppedFirstRequestStopsThoseBehindIt drops the connection under a
// new producer's first produce request before the broker appends it: the
// request behind it, on a new connection, would be taken as the producer's
// first batch, so it must not be sent.
func TestADroppedFirstRequestStopsThoseBehindIt(t *testing.T) {
	c := newCluster(t, kfake.NumBrokers(1))
	seedOld(t, c)
	h := &dropAfterFirstWrite{disconnected: make(chan struct{})}
	cl, err := NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.WithHooks(h))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	p, err := New(ctx, cl, Options{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var drops atomic.Int32
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		drops.Add(1)
		return nil, errors.New("connection dropped"), true // closes the connection, appends nothing
	})
	if _, err := p.Produce(ctx, []Batch{newBatch(t, 0, "a", 2), newBatch(t, 0, "b", 2), newBatch(t, 0, "c", 2)}); err == nil {
		t.Fatal("Produce succeeded with its first request dropped")
	}
	if n := drops.Load(); n != 1 {
		t.Fatalf("%d requests dropped, want 1", n)
	}
	if got := readAll(t, c, false); fmt.Sprint(got[0]) != fmt.Sprint([]string{"old-0"}) {
		t.Fatalf("partition 0 holds %v, want only the old record: a request behind the dropped one landed", got[0])
	}
}

// TestAllInSyncReplicasAcknowledge gives the client leader-only acks: the
// producer's requests still ask all in-sync replicas (kgo writes its
// client's setting into every produce request).
func TestAllInSyncReplicasAcknowledge(t *testing.T) {
	c := newCluster(t, kfake.NumBrokers(1))
	cl, err := NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	p, err := New(ctx, cl, Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var acks []int16
	c.ControlKey(kmsg.Produce.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		acks = append(acks, req.(*kmsg.ProduceRequest).Acks)
		return nil, nil, false
	})
	if _, err := p.Produce(ctx, []Batch{newBatch(t, 0, "a", 1), newBatch(t, 1, "b", 1)}); err != nil {
		t.Fatal(err)
	}
	if len(acks) == 0 || slices.ContainsFunc(acks, func(a int16) bool { return a != -1 }) {
		t.Fatalf("produce requests asked acks %v, want all -1", acks)
	}
}

// TestPermanent: the errors a batch's contents cause are permanent,
// wrapped or not; those a new stream or the cluster's recovery cures are
// not.
func TestPermanent(t *testing.T) {
	for _, err := range []error{kerr.InvalidRecord, kerr.InvalidTimestamp, kerr.MessageTooLarge, kerr.RecordListTooLarge,
		kerr.CorruptMessage, kerr.UnsupportedCompressionType, kerr.PolicyViolation,
		&PartitionError{Err: fmt.Errorf("%w (record 3: null key)", kerr.InvalidRecord)}} {
		if !Permanent(err) {
			t.Errorf("Permanent(%v) = false", err)
		}
	}
	for _, err := range []error{kerr.NotLeaderForPartition, kerr.NotEnoughReplicas, kerr.NotEnoughReplicasAfterAppend,
		kerr.RequestTimedOut, kerr.OutOfOrderSequenceNumber, kerr.InvalidProducerEpoch, kerr.ProducerFenced,
		kerr.TopicAuthorizationFailed, kerr.UnknownTopicOrPartition, kerr.KafkaStorageError, errors.New("connection reset")} {
		if Permanent(err) {
			t.Errorf("Permanent(%v) = true", err)
		}
	}
}
