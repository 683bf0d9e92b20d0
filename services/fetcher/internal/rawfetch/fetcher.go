package rawfetch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ErrOffsetOutOfRange is wrapped in a Result's Err when the broker answers
// OFFSET_OUT_OF_RANGE: the asked offset is below the log start (retention
// or DeleteRecords removed it) or past the high watermark. The Result's
// LogStartOffset and HighWatermark then say where the log is, -1 if even a
// ListOffsets request could not tell.
var ErrOffsetOutOfRange = errors.New("offset out of range")

// ErrDiverged is wrapped, by a *Divergence, in a Result's Err when the
// partition's leader says that its log no longer holds what the Reader
// last read of it: an unclean leader election truncated the log below the
// position (KIP-320), and whatever the log holds at and past the
// divergence now is other records.
var ErrDiverged = errors.New("source log diverged from what was read")

// Divergence is the leader's answer that shows the log diverged: for the
// epoch of the last batch read (LastEpoch), the largest epoch it knows
// that is not above it (Epoch) and where its log of that epoch ends
// (EndOffset), from a Fetch answer's DivergingEpoch (v12+) or an
// OffsetForLeaderEpoch answer. The log diverged from what was read when
// EndOffset is below Position, or when Epoch is below LastEpoch (the
// leader never had the epoch of records that were read): records read
// from EndOffset on (or from where LastEpoch began, if earlier) are not
// the source's any more. Where the divergence begins is the caller's to
// work out when Epoch is below LastEpoch: only it knows where each epoch
// it read began.
type Divergence struct {
	Position  int64
	LastEpoch int32
	Epoch     int32
	EndOffset int64
}

func (d *Divergence) Error() string {
	return fmt.Sprintf("%v: read up to offset %d in leader epoch %d, the leader's log of epoch %d ends at %d",
		ErrDiverged, d.Position, d.LastEpoch, d.Epoch, d.EndOffset)
}

func (d *Divergence) Unwrap() error { return ErrDiverged }

// diverged reports whether the leader's answer for lastEpoch (epoch, its
// end) at position shows the log diverged. An answer without an epoch
// (-1: lastEpoch is older than any the leader keeps, its records gone to
// retention) cannot tell; offset checks say whether position is still in
// the log.
func diverged(position int64, lastEpoch, epoch int32, end int64) *Divergence {
	if epoch < 0 || end < 0 || (end >= position && epoch >= lastEpoch) {
		return nil
	}
	return &Divergence{Position: position, LastEpoch: lastEpoch, Epoch: epoch, EndOffset: end}
}

// Defaults for the zero Options.
const (
	// DefaultMaxWait bounds both how long an idle leader holds its
	// request and how long a round waits for it: a round ends when its
	// slowest leader answers, so an idle leader delays a busy one's next
	// round by up to MaxWait.
	DefaultMaxWait = 100 * time.Millisecond
	// DefaultPartitionMaxBytes is Kafka's max.partition.fetch.bytes.
	DefaultPartitionMaxBytes = 1 << 20
	// DefaultMaxBytes bounds the bytes of one leader's response, so a
	// round holds at most this much per leader.
	DefaultMaxBytes = 16 << 20
)

// Partition names a source partition.
type Partition struct {
	Topic     string
	Partition int32
}

func (p Partition) String() string { return p.Topic + "/" + strconv.Itoa(int(p.Partition)) }

// Options tune the FetchRequests. Zero (or negative) fields take the
// defaults. MinBytes is always 1: a leader answers as soon as one of its
// partitions has data, so MaxWait only paces rounds over idle partitions.
type Options struct {
	// MaxWait is how long a leader may hold a request while none of its
	// partitions has data (DefaultMaxWait), in whole milliseconds.
	MaxWait time.Duration
	// PartitionMaxBytes limits each partition's bytes in a response
	// (DefaultPartitionMaxBytes). The broker still returns the first
	// batch of the first partition with data whole, however large
	// (KIP-74), so a batch of any size gets through (each Reader rotates
	// its partitions' order in its requests so that each gets to be
	// first); past it, the broker may cut a partition's bytes mid-batch,
	// and the cut batch comes whole in a later round.
	PartitionMaxBytes int32
	// MaxBytes limits each leader's whole response (DefaultMaxBytes),
	// with the same exception for the first batch.
	MaxBytes int32
}

// Result is what one Fetch round returned for a partition.
type Result struct {
	// Batches are complete magic v2 batches in offset order, each
	// exactly one batch, with no control batches and no batches of
	// aborted transactions. They alias the response, so holding one
	// keeps the response's memory, except those converted from legacy
	// message sets (magic 0 and 1), one per run of legacy messages, which
	// are uncompressed and have their own. The first may start before
	// the asked offset (Kafka returns whole batches, and a compressed
	// legacy message holds its records whole): records before it are the
	// caller's to skip.
	Batches [][]byte
	// Records are the partition's bytes as the response holds them: the
	// Batches that alias the response are slices of it.
	Records []byte
	// Next is the offset to ask next: one past the last complete batch
	// seen, returned or dropped (control, aborted), or the asked offset
	// if there was none.
	Next int64
	// HighWatermark, LastStableOffset and LogStartOffset are the
	// broker's, -1 when it did not say (errors, old versions).
	HighWatermark, LastStableOffset, LogStartOffset int64
	// Err is a problem fetching again will not fix by itself: it wraps
	// ErrOffsetOutOfRange, recordbatch.ErrCRC (a batch or a legacy
	// message damaged), or the broker's kerr error
	// (TOPIC_AUTHORIZATION_FAILED, ...), or names bytes that cannot be
	// read or converted (a legacy message's codec it cannot decompress,
	// one inflating past its bound). Batches and Next are still valid:
	// they are what came before the problem.
	Err error
	// Retry is set, with Err nil and no Batches, when a retriable
	// problem kept the partition from being read this round: its leader
	// moved or is unknown, its connection failed, the broker answered a
	// retriable error. The leader is looked up again where that can
	// help; the caller just fetches again, and may back off, log or
	// count Retry.
	Retry error
	// LastEpoch is the partition leader epoch of the last batch the round
	// read, returned or dropped (a marker, an aborted batch), -1 when it
	// read none (or only legacy messages, which have none). Epochs are
	// the leader epochs the round's batches began, each with the base
	// offset of its first batch in the round, in offset order: the caller
	// that wants to know, after a Divergence, where the records of an
	// epoch began keeps them.
	LastEpoch int32
	Epochs    []EpochStart
	// TopicID is the id of the topic the answer came from: the id a
	// request by topic id (Fetch v13+) named, or, for a request by name
	// (up to v12) whose answer gives the caller something (batches, a
	// moved Next, an Err), the id the leader's metadata gives the topic
	// right after it answered. Zero when unknown: a Retry, an answer by
	// name that gave nothing, a cluster without topic ids. A topic
	// deleted and created again under its name has a new id, and Fetch
	// reads the new topic once the old id is refused: the caller
	// compares TopicID with the id it expects, so that it never takes
	// the new topic's records for the old one's.
	TopicID [16]byte
}

// EpochStart is where a leader epoch's batches began in what a round read.
type EpochStart struct {
	Epoch int32
	Start int64
}

// Fetcher reads raw batches in rounds, through Readers. It caches
// partition leaders and topic ids between rounds, for all its Readers. It
// is safe for concurrent use.
type Fetcher struct {
	cl   *kgo.Client
	opts Options

	mu     sync.Mutex
	topics map[string]*topicMeta // absent: not looked up, or the last lookup failed
}

// Reader runs the rounds of one owner of partitions (a shard's loop)
// through its Fetcher. Its rounds rotate the order its requests name its
// partitions in on its own count, so each of its partitions is first in
// its leader's request within as many of its rounds as that leader has of
// its partitions, whatever other Readers of the Fetcher do: a count shared
// by every Reader let another's rounds decide the order, and a partition
// whose next batch is above PartitionMaxBytes could wait for ever. Its
// rounds are meant to come one after another; it is safe for concurrent
// use all the same.
type Reader struct {
	f      *Fetcher
	rounds atomic.Uint64

	mu   sync.Mutex
	last map[Partition]readTo
}

// readTo is the leader epoch of the last batch a Reader read of a
// partition, and the offset after it: a round that asks that offset sends
// the epoch as its LastFetchedEpoch, so the leader can say whether its log
// still holds what was read (KIP-320). A round that asks another offset
// (the caller moved the position) sends -1: nothing is known of the batch
// before it. check: validate with OffsetForLeaderEpoch before the next
// fetch (Resume, or after the leader fenced the request's epoch).
type readTo struct {
	next  int64
	epoch int32
	check bool
}

// Reader returns a new Reader of f.
func (f *Fetcher) Reader() *Reader { return &Reader{f: f, last: make(map[Partition]readTo)} }

// Resume tells r that the record before offset next of p is of leader
// epoch epoch, as read by an earlier Reader (the position of an earlier
// session): r's first round that asks next checks with the leader
// (OffsetForLeaderEpoch) that its log of that epoch still reaches next,
// and reports a Divergence instead of reading if it does not.
func (r *Reader) Resume(p Partition, next int64, epoch int32) {
	if epoch < 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last[p] = readTo{next: next, epoch: epoch, check: true}
}

// lastEpoch is the epoch to send with a fetch of p at off, -1 if unknown,
// and whether to validate it first.
func (r *Reader) lastEpoch(p Partition, off int64) (int32, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l, ok := r.last[p]; ok && l.next == off {
		return l.epoch, l.check
	}
	return -1, false
}

// learn keeps what a round's Result says of p's last epoch. A leader that
// fenced the request's epoch (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH)
// leads in another epoch now, perhaps after an election that truncated
// the log: the position is validated before the next fetch, as Kafka's
// consumer does on a leader change.
func (r *Reader) learn(p Partition, asked int64, res Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch l, ok := r.last[p]; {
	case res.LastEpoch >= 0:
		r.last[p] = readTo{next: res.Next, epoch: res.LastEpoch}
	case !ok || l.next != asked:
		delete(r.last, p)
	case errors.Is(res.Retry, kerr.FencedLeaderEpoch) || errors.Is(res.Retry, kerr.UnknownLeaderEpoch):
		l.check = true
		r.last[p] = l
	case res.Err != nil:
		delete(r.last, p)
	}
}

// topicMeta is what the last metadata answer said of a topic.
type topicMeta struct {
	id      [16]byte
	leaders map[int32]leaderAt // by partition; absent until looked up again
}

// leaderAt is a partition's leader and its leader epoch, which every
// request to it carries (CurrentLeaderEpoch): a broker that leads in
// another epoch refuses it (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH)
// rather than answer from a log an election has moved past.
type leaderAt struct {
	id, epoch int32
}

// RoundBytes is what a round over n partitions reads at most: each
// partition's PartitionMaxBytes (the one exception, a first batch larger
// than that, comes back whole). A caller holding memory for a round
// reserves this much before it asks.
func (f *Fetcher) RoundBytes(n int) int64 {
	return int64(n) * int64(f.opts.PartitionMaxBytes)
}

// New returns a Fetcher that sends its requests through cl. cl needs no
// consumer options: Fetch addresses brokers directly and never uses cl's
// own consumer.
func New(cl *kgo.Client, opts Options) *Fetcher {
	if opts.MaxWait <= 0 {
		opts.MaxWait = DefaultMaxWait
	}
	if opts.PartitionMaxBytes <= 0 {
		opts.PartitionMaxBytes = DefaultPartitionMaxBytes
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	return &Fetcher{cl: cl, opts: opts, topics: make(map[string]*topicMeta)}
}

// answer is a partition's Result and what the round learned of its leader.
type answer struct {
	res Result
	// stale: the leader the request went to is no longer to be trusted
	// (moved, unreachable), so it is looked up again next round.
	stale bool
	// outOfRange: the broker answered OFFSET_OUT_OF_RANGE; Err is made
	// once the log's bounds are known.
	outOfRange bool
}

// Fetch runs one round for the given partitions, each from its offset (a
// concrete offset, 0 or more: resolving earliest or latest is the caller's
// job), and returns a Result for every partition given.
//
// It looks up the leaders it has not cached (a MetadataRequest for their
// topics), sends one FetchRequest per leader, concurrently, and waits for
// all of them. A leader the round finds stale (NOT_LEADER_OR_FOLLOWER,
// FENCED_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE,
// and the like, or a failed connection) is forgotten, and the partition's
// Result has Retry set. An OFFSET_OUT_OF_RANGE answer without the log's
// bounds costs a ListOffsets request for them.
//
// The error is non-nil only when the round could not finish: ctx ended
// (no Result is returned, and none is lost: positions stay the caller's)
// or cl was closed.
func (r *Reader) Fetch(ctx context.Context, positions map[Partition]int64) (map[Partition]Result, error) {
	return r.FetchUpTo(ctx, positions, 0)
}

// FetchUpTo is Fetch with the round's response bytes limited to about
// maxBytes (0: only the Options' limits), shared evenly among the leaders
// asked; as ever, a leader's first batch comes whole even if larger. A
// caller that holds memory for what it reads sizes the round to what it
// holds.
func (r *Reader) FetchUpTo(ctx context.Context, positions map[Partition]int64, maxBytes int64) (map[Partition]Result, error) {
	f := r.f
	out := make(map[Partition]Result, len(positions))
	ask := make(map[Partition]int64, len(positions))
	for p, off := range positions {
		if off < 0 {
			out[p] = Result{Next: off, HighWatermark: -1, LastStableOffset: -1, LogStartOffset: -1, LastEpoch: -1,
				Err: fmt.Errorf("fetch %s at offset %d: not a concrete offset", p, off)}
			continue
		}
		ask[p] = off
	}
	if len(ask) == 0 {
		return out, nil
	}

	byLeader, unrouted, err := f.route(ctx, ask, r.rounds.Add(1))
	if err != nil {
		return nil, err
	}
	for p, a := range unrouted {
		out[p] = a.res
	}
	last := make(map[Partition]int32, len(ask))
	check := make(map[Partition]int32)
	for p, off := range ask {
		epoch, validate := r.lastEpoch(p, off)
		last[p] = epoch
		if _, unrouted := unrouted[p]; validate && !unrouted {
			check[p] = epoch
		}
	}
	if len(check) > 0 {
		checked, err := f.validate(ctx, ask, check)
		if err != nil {
			return nil, err
		}
		for p, a := range checked {
			// Not fetched this round: it diverged, or its leader
			// could not say (a Retry, validated again next round).
			out[p] = a.res
			for leader, parts := range byLeader {
				if !slices.Contains(parts, p) {
					continue
				}
				if a.stale {
					f.forget(p, leader)
				}
				if byLeader[leader] = slices.DeleteFunc(parts, func(q Partition) bool { return q == p }); len(byLeader[leader]) == 0 {
					delete(byLeader, leader)
				}
			}
		}
		r.validated(ask, check, checked)
	}

	type leaderRound struct {
		leader int32
		parts  []Partition
		got    map[Partition]answer
		err    error
	}
	rounds := make([]leaderRound, 0, len(byLeader))
	for leader, parts := range byLeader {
		rounds = append(rounds, leaderRound{leader: leader, parts: parts})
	}
	limit := f.opts.MaxBytes
	// No rounds: every partition was unrouted (its leader unknown, as while
	// the source is down), and there is nothing to share.
	if maxBytes > 0 && len(rounds) > 0 {
		limit = int32(min(int64(limit), max(maxBytes/int64(len(rounds)), 1)))
	}
	var wg sync.WaitGroup
	for i := range rounds {
		r := &rounds[i]
		wg.Go(func() { r.got, r.err = f.fetchFrom(ctx, r.leader, r.parts, ask, last, limit) })
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fetch round: %w", err)
	}

	var outOfRange []Partition
	for _, r := range rounds {
		if r.err != nil {
			return nil, r.err
		}
		for p, a := range r.got {
			if a.stale {
				f.forget(p, r.leader)
			}
			if a.outOfRange {
				outOfRange = append(outOfRange, p)
			}
			out[p] = a.res
		}
	}
	if len(outOfRange) > 0 {
		if err := f.describeOutOfRange(ctx, ask, outOfRange, out); err != nil {
			return nil, err
		}
	}
	for p, off := range ask {
		r.learn(p, off, out[p])
	}
	return out, nil
}

// validated marks the partitions whose check passed as checked.
func (r *Reader) validated(ask map[Partition]int64, check map[Partition]int32, failed map[Partition]answer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p := range check {
		if _, ok := failed[p]; !ok {
			r.last[p] = readTo{next: ask[p], epoch: check[p]}
		}
	}
}

// validate asks the partitions' leaders where their logs of the given
// epochs end (OffsetForLeaderEpoch, KIP-320), each with its cached
// current leader epoch, and returns an answer for each partition that
// may not be fetched: a Divergence Err, or a Retry when its leader did
// not answer (stale: looked up again). Its error is only the client
// closed or ctx ended.
func (f *Fetcher) validate(ctx context.Context, ask map[Partition]int64, epochs map[Partition]int32) (map[Partition]answer, error) {
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.ReplicaID = -1
	f.mu.Lock()
	for p, epoch := range epochs {
		i := slices.IndexFunc(req.Topics, func(t kmsg.OffsetForLeaderEpochRequestTopic) bool { return t.Topic == p.Topic })
		if i < 0 {
			rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
			rt.Topic = p.Topic
			req.Topics = append(req.Topics, rt)
			i = len(req.Topics) - 1
		}
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rp.Partition, rp.CurrentLeaderEpoch, rp.LeaderEpoch = p.Partition, f.leaderEpochLocked(p), epoch
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	f.mu.Unlock()
	// Through the client, which sends each partition to its leader.
	resp, err := req.RequestWith(ctx, f.cl)
	if ctx.Err() != nil || errors.Is(err, kgo.ErrClientClosed) {
		return nil, fmt.Errorf("fetch round: offset for leader epoch: %w", cmp.Or(ctx.Err(), err))
	}
	out := make(map[Partition]answer)
	for p := range epochs {
		out[p] = answer{res: empty(ask[p], fmt.Errorf("validate %s: offset for leader epoch: %w", p, cmp.Or(err, errors.New("missing from the answer")))), stale: true}
	}
	if err != nil {
		return out, nil
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			p := Partition{rt.Topic, rp.Partition}
			epoch, asked := epochs[p]
			if !asked {
				continue
			}
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				out[p] = classify(p, ask[p], "validate "+p.String()+": offset for leader epoch", codeError(rp.ErrorCode))
				continue
			}
			if d := diverged(ask[p], epoch, rp.LeaderEpoch, rp.EndOffset); d != nil {
				res := empty(ask[p], nil)
				res.Err = fmt.Errorf("fetch %s: %w", p, d)
				out[p] = answer{res: res}
				continue
			}
			delete(out, p) // validated: fetched this round
		}
	}
	return out, nil
}

// route groups the asked partitions by cached leader, looking up the
// topics that have partitions without one, each leader's in the order of
// the caller's round rotate. It returns the partitions it could not route,
// with their Results, and an error only if ctx ended or the client is
// closed.
func (f *Fetcher) route(ctx context.Context, ask map[Partition]int64, rotate uint64) (map[int32][]Partition, map[Partition]answer, error) {
	f.mu.Lock()
	var need []string
	seen := make(map[string]bool)
	for p := range ask {
		if _, ok := f.leaderLocked(p); !ok && !seen[p.Topic] {
			seen[p.Topic] = true
			need = append(need, p.Topic)
		}
	}
	f.mu.Unlock()

	var (
		topicErrs map[string]error
		partErrs  map[Partition]error
		reqErr    error
	)
	if len(need) > 0 {
		topicErrs, partErrs, reqErr = f.lookUp(ctx, need)
		if ctx.Err() != nil || errors.Is(reqErr, kgo.ErrClientClosed) {
			return nil, nil, fmt.Errorf("fetch round: metadata: %w", cmp.Or(ctx.Err(), reqErr))
		}
	}

	f.mu.Lock()
	byLeader := make(map[int32][]Partition)
	unrouted := make(map[Partition]answer)
	for p, off := range ask {
		if leader, ok := f.leaderLocked(p); ok {
			byLeader[leader] = append(byLeader[leader], p)
			continue
		}
		if reqErr != nil {
			// The cluster did not answer (kgo already retried): a
			// connection problem, looked up again next round.
			unrouted[p] = answer{res: empty(off, fmt.Errorf("fetch %s: metadata: %w", p, reqErr))}
			continue
		}
		err := cmp.Or(partErrs[p], topicErrs[p.Topic])
		if err == nil {
			err = fmt.Errorf("metadata: no partition %d: %w", p.Partition, kerr.UnknownTopicOrPartition)
		}
		unrouted[p] = classify(p, off, "fetch "+p.String(), err)
	}
	f.mu.Unlock()

	// A broker fills a response in request order and cuts it at MaxBytes,
	// so a fixed order could starve the partitions at the end; rotating
	// it each of the caller's rounds gives each partition its turn at the
	// front, where a batch larger than the limits is still returned whole.
	for leader, parts := range byLeader {
		slices.SortFunc(parts, func(a, b Partition) int {
			return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
		})
		n := int(rotate % uint64(len(parts)))
		byLeader[leader] = slices.Concat(parts[n:], parts[:n])
	}
	return byLeader, unrouted, nil
}

// leaderLocked is p's cached leader. f.mu is held.
func (f *Fetcher) leaderLocked(p Partition) (int32, bool) {
	t := f.topics[p.Topic]
	if t == nil {
		return 0, false
	}
	leader, ok := t.leaders[p.Partition]
	return leader.id, ok
}

// leaderEpochLocked is p's cached leader epoch, -1 if none. f.mu is held.
func (f *Fetcher) leaderEpochLocked(p Partition) int32 {
	if t := f.topics[p.Topic]; t != nil {
		if l, ok := t.leaders[p.Partition]; ok {
			return l.epoch
		}
	}
	return -1
}

// forget drops p's cached leader if it is still the one the round asked: a
// concurrent round may already have looked up a newer one.
func (f *Fetcher) forget(p Partition, leader int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t := f.topics[p.Topic]; t != nil && t.leaders[p.Partition].id == leader {
		delete(t.leaders, p.Partition)
	}
}

// lookUp asks the cluster for topics' metadata and caches it, replacing
// what was cached of them. It returns why topics or partitions got no
// leader; err is the request's own failure.
func (f *Fetcher) lookUp(ctx context.Context, topics []string) (map[string]error, map[Partition]error, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	req.AllowAutoTopicCreation = false
	// Through the client, not a broker: kgo picks a broker, retries, and
	// learns the addresses of the leaders Fetch then asks by id.
	resp, err := req.RequestWith(ctx, f.cl)
	if err != nil {
		return nil, nil, err
	}
	topicErrs := make(map[string]error)
	partErrs := make(map[Partition]error)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range topics {
		topicErrs[t] = fmt.Errorf("metadata: topic missing from the response: %w", kerr.UnknownTopicOrPartition)
	}
	for _, rt := range resp.Topics {
		if rt.Topic == nil {
			continue
		}
		name := *rt.Topic
		if _, asked := topicErrs[name]; !asked {
			continue
		}
		delete(topicErrs, name)
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil {
			delete(f.topics, name)
			topicErrs[name] = fmt.Errorf("metadata: %w", err)
			continue
		}
		meta := &topicMeta{id: rt.TopicID, leaders: make(map[int32]leaderAt, len(rt.Partitions))}
		for _, rp := range rt.Partitions {
			err := kerr.ErrorForCode(rp.ErrorCode)
			// REPLICA_NOT_AVAILABLE is about a follower; a known
			// leader still serves fetches.
			if rp.Leader >= 0 && (err == nil || errors.Is(err, kerr.ReplicaNotAvailable)) {
				meta.leaders[rp.Partition] = leaderAt{rp.Leader, rp.LeaderEpoch}
				continue
			}
			if err == nil {
				err = kerr.LeaderNotAvailable
			}
			partErrs[Partition{name, rp.Partition}] = fmt.Errorf("metadata: %w", err)
		}
		f.topics[name] = meta
	}
	return topicErrs, partErrs, nil
}

// fetchFrom sends one FetchRequest for parts to leader and returns each
// part's answer. Its error is only kgo.ErrClientClosed; when ctx ends it
// returns nothing and Fetch reports ctx.
func (f *Fetcher) fetchFrom(ctx context.Context, leader int32, parts []Partition, ask map[Partition]int64, last map[Partition]int32, maxBytes int32) (map[Partition]answer, error) {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = int32(min(f.opts.MaxWait.Milliseconds(), math.MaxInt32))
	req.MinBytes = 1
	req.MaxBytes = maxBytes
	req.IsolationLevel = 1 // read_committed: up to the last stable offset, with the aborted list
	req.SessionID = 0      // no fetch session: each request names all its partitions
	req.SessionEpoch = -1

	f.mu.Lock()
	ids := make(map[string][16]byte)
	current := make(map[Partition]int32, len(parts))
	for _, p := range parts {
		if t := f.topics[p.Topic]; t != nil {
			ids[p.Topic] = t.id
		}
		current[p] = f.leaderEpochLocked(p)
	}
	f.mu.Unlock()
	// Topics by name and by id: the version kgo picks encodes one or
	// the other. A topic may appear more than once when the rotation
	// splits its partitions; the broker keeps the request's order.
	names := make(map[[16]byte]string)
	mine := make(map[Partition]bool, len(parts))
	for _, p := range parts {
		mine[p] = true
		if n := len(req.Topics); n == 0 || req.Topics[n-1].Topic != p.Topic {
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic, rt.TopicID = p.Topic, ids[p.Topic]
			req.Topics = append(req.Topics, rt)
			if id := ids[p.Topic]; id != ([16]byte{}) {
				names[id] = p.Topic
			}
		}
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = p.Partition
		rp.FetchOffset = ask[p]
		rp.CurrentLeaderEpoch = current[p]
		rp.LastFetchedEpoch = last[p]
		rp.LogStartOffset = -1
		rp.PartitionMaxBytes = f.opts.PartitionMaxBytes
		rt := &req.Topics[len(req.Topics)-1]
		rt.Partitions = append(rt.Partitions, rp)
	}

	got := make(map[Partition]answer, len(parts))
	resp, err := req.RequestWith(ctx, f.cl.Broker(int(leader)))
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil
		}
		if errors.Is(err, kgo.ErrClientClosed) {
			return nil, fmt.Errorf("fetch round: %w", err)
		}
		for _, p := range parts {
			got[p] = answer{res: empty(ask[p], fmt.Errorf("fetch %s from broker %d: %w", p, leader, err)), stale: true}
		}
		return got, nil
	}

	// A top-level error (v7+, about sessions, which are not used) would
	// apply to every partition.
	if code := resp.ErrorCode; code != 0 {
		for _, p := range parts {
			got[p] = classify(p, ask[p], fmt.Sprintf("fetch %s from broker %d", p, leader), codeError(code))
		}
		return got, nil
	}
	for i := range resp.Topics {
		rt := &resp.Topics[i]
		name := rt.Topic
		if resp.Version >= 13 {
			name = names[rt.TopicID] // "" for an id not asked, or the zero id
		}
		for j := range rt.Partitions {
			rp := &rt.Partitions[j]
			p := Partition{name, rp.Partition}
			if _, dup := got[p]; !mine[p] || dup {
				continue // not asked of this broker, or a broker repeating itself
			}
			off := ask[p]
			var a answer
			if code := rp.ErrorCode; code != 0 {
				a = classify(p, off, fmt.Sprintf("fetch %s from broker %d", p, leader), codeError(code))
			} else if d := diverged(off, last[p], rp.DivergingEpoch.Epoch, rp.DivergingEpoch.EndOffset); d != nil && last[p] >= 0 {
				// The leader found the log diverged from the
				// LastFetchedEpoch sent (v12+), and sent no records.
				a.res = empty(off, nil)
				a.res.HighWatermark, a.res.LastStableOffset, a.res.LogStartOffset = rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset
				a.res.Err = fmt.Errorf("fetch %s: %w", p, d)
			} else {
				a.res = readPartition(off, rp)
				if a.res.Err != nil {
					a.res.Err = fmt.Errorf("fetch %s: %w", p, a.res.Err)
				}
			}
			if resp.Version >= 13 && a.res.Retry == nil {
				// Asked by id, answered by id: whatever came is that topic's.
				a.res.TopicID = rt.TopicID
			}
			got[p] = a
		}
	}
	for _, p := range parts {
		if _, ok := got[p]; ok {
			continue
		}
		if resp.Version >= 13 && ids[p.Topic] == ([16]byte{}) {
			res := empty(ask[p], nil)
			res.Err = fmt.Errorf("fetch %s: broker %d fetches by topic id (v%d) and metadata gave the topic none; cap Fetch at v12 with kgo.MaxVersions", p, leader, resp.Version)
			got[p] = answer{res: res}
			continue
		}
		got[p] = answer{res: empty(ask[p], fmt.Errorf("fetch %s: missing from broker %d's response", p, leader))}
	}
	if resp.Version < 13 {
		if err := f.confirmIDs(ctx, leader, ask, ids, got); err != nil {
			return nil, err
		}
	}
	return got, nil
}

// confirmIDs sets the TopicID of the answers a request by name got (Fetch
// up to v12, which names no topic id) and that give the caller something,
// from what the leader that answered says of the topics right after: a
// broker serves a name from the topic it knows by that name, and knows a
// recreated topic no later than it serves it, so if the id it gives is
// still the one the request was built with, the answer came from that
// topic. An answer whose topic it cannot confirm (the request failed, the
// topic is gone) becomes a Retry, its leader looked up again. Topics
// cached without an id (a cluster before Kafka 2.8) are left alone:
// nothing tells their incarnations apart. Its error is only
// kgo.ErrClientClosed; when ctx ends it clears got, and Fetch reports ctx.
func (f *Fetcher) confirmIDs(ctx context.Context, leader int32, ask map[Partition]int64, ids map[string][16]byte, got map[Partition]answer) error {
	var topics []string
	for p, a := range got {
		gave := len(a.res.Batches) > 0 || a.res.Next != ask[p] || a.res.Err != nil || a.outOfRange
		if gave && a.res.Retry == nil && ids[p.Topic] != ([16]byte{}) && !slices.Contains(topics, p.Topic) {
			topics = append(topics, p.Topic)
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
	req.AllowAutoTopicCreation = false
	resp, err := req.RequestWith(ctx, f.cl.Broker(int(leader)))
	if ctx.Err() != nil {
		clear(got)
		return nil
	}
	if errors.Is(err, kgo.ErrClientClosed) {
		return fmt.Errorf("fetch round: %w", err)
	}
	now := make(map[string][16]byte, len(topics))
	why := make(map[string]error, len(topics))
	for _, t := range topics {
		why[t] = cmp.Or(err, error(kerr.UnknownTopicOrPartition))
	}
	if err == nil {
		for _, rt := range resp.Topics {
			if rt.Topic == nil {
				continue
			}
			if err := kerr.ErrorForCode(rt.ErrorCode); err != nil {
				why[*rt.Topic] = err
				continue
			}
			now[*rt.Topic] = rt.TopicID // zero from a broker that gives none: unknown
		}
	}
	for p, a := range got {
		if !slices.Contains(topics, p.Topic) || a.res.Retry != nil {
			continue
		}
		id, ok := now[p.Topic]
		if !ok {
			got[p] = answer{res: empty(ask[p], fmt.Errorf("fetch %s from broker %d by name: its topic id: %w", p, leader, why[p.Topic])), stale: true}
			continue
		}
		a.res.TopicID = id
		got[p] = a
	}
	// A new id: the next round looks the topic up again, leaders and all.
	f.mu.Lock()
	defer f.mu.Unlock()
	for t, id := range now {
		if m := f.topics[t]; m != nil && m.id == ids[t] && id != ids[t] && id != ([16]byte{}) {
			delete(f.topics, t)
		}
	}
	return nil
}

// codeError is the kerr error of a Kafka error code, naming codes kerr
// does not know rather than hiding them behind UNKNOWN_SERVER_ERROR.
func codeError(code int16) error {
	err := kerr.ErrorForCode(code)
	if err == kerr.UnknownServerError && code != kerr.UnknownServerError.Code {
		return fmt.Errorf("%w (error code %d)", err, code)
	}
	return err
}

// leaderGone lists the errors after which the partition's leader is looked
// up again: it moved, has not been elected, lost the log's disk, or the
// topic's id or existence changed.
var leaderGone = []error{
	kerr.NotLeaderForPartition, kerr.FencedLeaderEpoch, kerr.UnknownLeaderEpoch,
	kerr.UnknownTopicOrPartition, kerr.LeaderNotAvailable, kerr.ReplicaNotAvailable,
	kerr.KafkaStorageError, kerr.UnknownTopicID, kerr.InconsistentTopicID,
}

// classify makes the answer for a partition answered with the Kafka error
// err; what names where the answer came from.
func classify(p Partition, off int64, what string, err error) answer {
	switch {
	case errors.Is(err, kerr.OffsetOutOfRange):
		return answer{res: empty(off, nil), outOfRange: true}
	case slices.ContainsFunc(leaderGone, func(e error) bool { return errors.Is(err, e) }):
		return answer{res: empty(off, fmt.Errorf("%s: %w", what, err)), stale: true}
	case kerr.IsRetriable(err):
		return answer{res: empty(off, fmt.Errorf("%s: %w", what, err))}
	default:
		res := empty(off, nil)
		res.Err = fmt.Errorf("fetch %s at offset %d: %w", p, off, err)
		return answer{res: res}
	}
}

// empty is the Result of a partition that gave nothing, retry (nil or) why.
func empty(off int64, retry error) Result {
	return Result{Next: off, HighWatermark: -1, LastStableOffset: -1, LogStartOffset: -1, LastEpoch: -1, Retry: retry}
}

// describeOutOfRange sets the Err of the out-of-range partitions, after
// asking the log start and end of those whose answer did not carry them:
// Apache Kafka answers an out-of-range fetch with -1 for both.
func (f *Fetcher) describeOutOfRange(ctx context.Context, ask map[Partition]int64, parts []Partition, out map[Partition]Result) error {
	var unknown []Partition
	for _, p := range parts {
		if r := out[p]; r.LogStartOffset < 0 || r.HighWatermark < 0 {
			unknown = append(unknown, p)
		}
	}
	var lookErr error
	if len(unknown) > 0 {
		// ListOffsets goes through the client, which sends each
		// partition to its leader as kgo knows it and retries.
		for _, at := range []struct {
			ts  int64
			set func(*Result, int64)
		}{
			{-2, func(r *Result, o int64) { r.LogStartOffset = o }}, // earliest
			{-1, func(r *Result, o int64) { r.HighWatermark = o }},  // latest, read_uncommitted: the high watermark
		} {
			offs, err := f.listOffsets(ctx, unknown, at.ts)
			if ctx.Err() != nil || errors.Is(err, kgo.ErrClientClosed) {
				return fmt.Errorf("fetch round: list offsets: %w", cmp.Or(ctx.Err(), err))
			}
			lookErr = cmp.Or(lookErr, err)
			for p, o := range offs {
				r := out[p]
				at.set(&r, o)
				out[p] = r
			}
		}
	}
	for _, p := range parts {
		r := out[p]
		bounds := fmt.Sprintf("log start %d, high watermark %d", r.LogStartOffset, r.HighWatermark)
		if (r.LogStartOffset < 0 || r.HighWatermark < 0) && lookErr != nil {
			bounds += fmt.Sprintf(" (bounds unknown: %v)", lookErr)
		}
		r.Err = fmt.Errorf("fetch %s: %w: offset %d, %s", p, ErrOffsetOutOfRange, ask[p], bounds)
		out[p] = r
	}
	return nil
}

// listOffsets asks the offset at timestamp ts (-2 earliest, -1 latest) of
// each partition. Partitions the answer lacks or refuses are left out; err
// says why.
func (f *Fetcher) listOffsets(ctx context.Context, parts []Partition, ts int64) (map[Partition]int64, error) {
	got, err := f.listAt(ctx, parts, ts)
	offs := make(map[Partition]int64, len(got))
	for p, at := range got {
		offs[p] = at.offset
	}
	return offs, err
}

// offsetAt is a ListOffsets answer of one partition.
type offsetAt struct{ offset, timestamp int64 }

// listAt is listOffsets with the answer's timestamp too (that of the
// record at the offset, for -3, KIP-734).
func (f *Fetcher) listAt(ctx context.Context, parts []Partition, ts int64) (map[Partition]offsetAt, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	for _, p := range parts {
		i := slices.IndexFunc(req.Topics, func(t kmsg.ListOffsetsRequestTopic) bool { return t.Topic == p.Topic })
		if i < 0 {
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = p.Topic
			req.Topics = append(req.Topics, rt)
			i = len(req.Topics) - 1
		}
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = p.Partition
		rp.Timestamp = ts
		rp.CurrentLeaderEpoch = -1
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	resp, err := req.RequestWith(ctx, f.cl)
	if err != nil {
		return nil, err
	}
	offs := make(map[Partition]offsetAt, len(parts))
	var partErr error
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				partErr = cmp.Or(partErr, fmt.Errorf("%s/%d: %w", rt.Topic, rp.Partition, err))
				continue
			}
			offs[Partition{rt.Topic, rp.Partition}] = offsetAt{rp.Offset, rp.Timestamp}
		}
	}
	return offs, partErr
}

// Offsets are what a source partition holds, as ListOffsets answers.
type Offsets struct {
	LogStart      int64
	HighWatermark int64
	// HeadOffset and HeadTimestamp are the offset and timestamp (Unix
	// milliseconds) of the record with the largest timestamp (ListOffsets
	// MAX_TIMESTAMP, -3, KIP-734, Kafka 3.0 and later); -1 when unknown:
	// an empty partition, or a broker without it.
	HeadOffset    int64
	HeadTimestamp int64
}

// maxTimestamp is ListOffsets' MAX_TIMESTAMP (KIP-734).
const maxTimestamp = -3

// Bounds reads the log start and high watermark of each partition, leaving
// its head unknown (-1): two ListOffsets requests per leader, which the
// broker answers from memory, where the head (Offsets) has it read a
// record batch from the log and decompress it. A partition whose bounds
// could not be read is left out, and err says why.
func (f *Fetcher) Bounds(ctx context.Context, parts []Partition) (map[Partition]Offsets, error) {
	starts, err := f.listAt(ctx, parts, -2)
	ends, endErr := f.listAt(ctx, parts, -1)
	err = cmp.Or(err, endErr)
	out := make(map[Partition]Offsets, len(parts))
	for _, p := range parts {
		start, ok1 := starts[p]
		end, ok2 := ends[p]
		if ok1 && ok2 {
			out[p] = Offsets{LogStart: start.offset, HighWatermark: end.offset, HeadOffset: -1, HeadTimestamp: -1}
		}
	}
	return out, err
}

// Offsets reads the log start, high watermark and head timestamp of each
// partition: three ListOffsets requests per leader, as one partition may
// appear once per request. A partition whose log start or high watermark
// could not be read is left out, and err says why; a head the broker
// cannot give leaves it at -1.
func (f *Fetcher) Offsets(ctx context.Context, parts []Partition) (map[Partition]Offsets, error) {
	out, err := f.Bounds(ctx, parts)
	f.WithHeads(ctx, out)
	return out, err
}

// WithHeads reads the head of each partition of bounds, just read by
// Bounds, and sets it where it lies below the partition's high watermark.
// The head is read after the bounds, so it covers every record below the
// high watermark read. Read before them (as it was), records appended
// between the two reads left a head older than the high watermark said,
// and since the watcher asks the head again only when the bounds move, an
// idle partition kept that stale head (its lag in seconds reading low)
// until its next record. The leader answers -3 from its whole log: a head
// at or past the high watermark read (appended since, or not replicated
// yet) is left unknown this time; the bounds have moved by the next read,
// which asks it again. A broker before Kafka 3.0 refuses -3 (or kgo sends
// it below v7, where it means nothing): the head is then unknown, not an
// error.
func (f *Fetcher) WithHeads(ctx context.Context, bounds map[Partition]Offsets) {
	if len(bounds) == 0 {
		return
	}
	parts := make([]Partition, 0, len(bounds))
	for p := range bounds {
		parts = append(parts, p)
	}
	heads, _ := f.listAt(ctx, parts, maxTimestamp)
	for p, o := range bounds {
		if h, ok := heads[p]; ok && h.offset >= 0 && h.timestamp >= 0 && h.offset < o.HighWatermark {
			o.HeadOffset, o.HeadTimestamp = h.offset, h.timestamp
			bounds[p] = o
		}
	}
}
