// Package provenance records which Kafka producer ids Ferry's writers
// produce with, in the cluster they write to, and answers, for a cluster
// Ferry reads, whether a batch's producer id is one of them. That is how a
// link never copies back what another link wrote (active-active A→B and
// B→A, identity naming included): the fetcher skips such batches by their
// header alone, with no record header and nothing decoded.
//
// The order that makes the check exact: a writer records a producer id,
// acknowledged by all in-sync replicas, before it produces anything with
// it. So when a fetcher reads a batch of an id it does not know, the
// record is already below the topic's end, and one read of the topic to
// its end settles the id for good (Kafka never gives an id to two
// producers), unless the View forgets it past its bound (below).
package provenance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
)

// Topic is where writers record their producer ids: compacted, in each
// cluster Ferry writes to. Writers need to write it; fetchers of a link
// that skips Ferry's writes, to read it in their source cluster.
const Topic = "__ferry_producers"

// The registry stays bounded. Every at-least-once stream open gets a new
// producer id, so records keyed by the id made a topic that only grew (a
// record per open, never compacted away) and a View that kept the first
// 2^20 ids and refused the rest: after about a million opens over a
// cluster's life a restarted fetcher of the reverse link copied new
// writers' batches back, an active-active loop. Now:
//
//   - A View keeps every id it reads up to its bound, and past it forgets
//     the oldest it read that is no stream's newest (View.take): what a
//     fetcher reads near its position, new batches, comes from new ids,
//     and each stream's current id stays, however old.
//   - With KeyByStream (producer_registry.key: stream) a record is keyed
//     by the stream that produces with the id, its writer, link and
//     shard (Entry.StreamKey): one key per writer, link and shard
//     whatever the opens. Compaction keeps each key's newest record, the
//     id its shard produces with now (an exactly-once shard keeps its id
//     across streams), and every record younger than MinCompactionLag: a
//     fetcher started within a week of an at-least-once id's record (its
//     stream lasted at most its connection's age) still learns it.
//   - The writers rate-limit opens per peer, which bounds how many ids a
//     week brings.
//
// Records of the old format (keyed by the id, no shard) are still read;
// compaction never removes them, and a View forgets them oldest first.
// Fetchers older than the stream key refuse its records (their key is not
// the id), and would copy back every batch of the ids they name: a writer
// writes them only with KeyByStream, set once every fetcher reading its
// target cluster reads them.

// MinCompactionLag is how long the topic keeps a stream's older records,
// whose ids a later open replaced, before compaction may remove them: a
// fetcher started later than that after such a record was written,
// reading a batch of its id (a link started at the beginning of an old
// topic, or paused as long), does not know the id and copies the batch
// back.
const MinCompactionLag = 7 * 24 * time.Hour

// Configs are the topic's settings when a writer creates it.
var Configs = map[string]string{
	"cleanup.policy":        "compact",
	"min.compaction.lag.ms": strconv.FormatInt(MinCompactionLag.Milliseconds(), 10),
}

// Entry is one recorded producer id: the value of its record in Topic,
// keyed by its stream (StreamKey), or by the id in entries of writers
// older than Shard. Encoded and decoded in one place each (encodeEntry,
// decodeEntry), so that a field added later is checked there.
type Entry struct {
	ProducerID int64 `json:"producer_id"`
	// SourceCluster is the Kafka cluster id of the cluster the writer
	// copies from (the fetcher's Open says it). Empty in entries of writers
	// older than the field, and when the source reports no cluster id.
	SourceCluster string `json:"source_cluster,omitempty"`
	Link          string `json:"link"`
	// Shard is the link's shard the stream serves; nil in entries of
	// writers older than the field, keyed by the id.
	Shard  *uint32   `json:"shard,omitempty"`
	Writer string    `json:"writer"`
	Time   time.Time `json:"time"`
}

// StreamKey is the key of e's record: writer/link/shard, or for an entry
// without a shard (the old format) its producer id. Link names hold no
// slash (check) and a shard is a number, so two streams never share a
// key whatever their writers' names.
func (e Entry) StreamKey() string {
	if e.Shard == nil {
		return string(key(e.ProducerID))
	}
	return e.Writer + "/" + e.Link + "/" + strconv.FormatUint(uint64(*e.Shard), 10)
}

// MaxField bounds, in bytes, each of an Entry's strings (link, writer,
// source cluster): anyone who can write the topic chooses them, and a
// View keeps what it reads. Kafka's cluster ids are 22 characters.
const MaxField = 255

// maxValue bounds a record's value before it is decoded at all: an entry
// of fields at MaxField is well below it.
const maxValue = 4 << 10

func key(id int64) []byte { return strconv.AppendInt(nil, id, 10) }

// Entries are signed by the writer that records them, with the key of its
// gRPC certificate, and a View takes only entries whose signer its link
// admits (the fetcher's writers.tls: CA bundle and allowed ids). Anyone
// else able to produce to the topic could otherwise name an application's
// producer id (any batch header shows it) as copied from this link's
// target, and every fetcher reading the cluster would leave that
// application's data out. An entry that does not verify is not taken: its
// batches are copied, as a loop is better than a loss.
// The signature rides in the record headers tlsconfig names (HeaderChain,
// HeaderSignature), as checkpoints' do.
const signPurpose = "ferry-producer-entry"

// Signer signs entries: a writer's tlsconfig.Source.
type Signer interface {
	Sign(purpose string, key, value []byte) (tlsconfig.Signature, error)
}

// Verifier checks entries' signatures: a fetcher's tlsconfig.Source of
// its writers.
type Verifier interface {
	Verify(purpose string, key, value []byte, sig tlsconfig.Signature) (string, error)
}

func (e Entry) check() error {
	if e.ProducerID < 0 {
		return fmt.Errorf("producer id %d", e.ProducerID)
	}
	for name, f := range map[string]string{"link": e.Link, "writer": e.Writer, "source cluster": e.SourceCluster} {
		if len(f) > MaxField {
			return fmt.Errorf("%s of %d bytes, above %d", name, len(f), MaxField)
		}
	}
	if e.Shard != nil && (e.Link == "" || strings.Contains(e.Link, "/")) {
		return fmt.Errorf("link %q of a stream: empty, or holding a slash", e.Link)
	}
	return nil
}

// encodeEntry is e's record, signed by signer unless it is nil (a writer
// whose gRPC port has no TLS, on loopback, has no key to sign with).
func encodeEntry(e Entry, signer Signer) (*kgo.Record, error) {
	if err := e.check(); err != nil {
		return nil, fmt.Errorf("entry of producer id %d: %w", e.ProducerID, err)
	}
	value, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("entry of producer id %d: %w", e.ProducerID, err)
	}
	rec := &kgo.Record{Key: []byte(e.StreamKey()), Value: value}
	if signer != nil {
		sig, err := signer.Sign(signPurpose, rec.Key, rec.Value)
		if err != nil {
			return nil, fmt.Errorf("entry of producer id %d: %w", e.ProducerID, err)
		}
		for _, h := range sig.Headers() {
			rec.Headers = append(rec.Headers, kgo.RecordHeader(h))
		}
	}
	return rec, nil
}

// decodeEntry is the entry a record holds, refused when anything in it is
// out of bounds, its key is not its stream's (compaction keeps one record
// per key: a record keyed otherwise could outlive the stream's own, or
// replace another's), or verifier, unless nil, does not admit its
// signature.
func decodeEntry(rec *kgo.Record, verifier Verifier) (Entry, error) {
	if len(rec.Value) > maxValue {
		return Entry{}, fmt.Errorf("value of %d bytes, above %d", len(rec.Value), maxValue)
	}
	if verifier != nil {
		var sig tlsconfig.Signature
		for _, h := range rec.Headers {
			sig.ReadHeader(h.Key, h.Value)
		}
		if _, err := verifier.Verify(signPurpose, rec.Key, rec.Value, sig); err != nil {
			return Entry{}, fmt.Errorf("entry %q: %w", rec.Key, err)
		}
	}
	var e Entry
	if err := json.Unmarshal(rec.Value, &e); err != nil {
		return Entry{}, err
	}
	if err := e.check(); err != nil {
		return Entry{}, err
	}
	if string(rec.Key) != e.StreamKey() {
		return Entry{}, fmt.Errorf("key %q for the entry of %s", rec.Key, e.StreamKey())
	}
	return e, nil
}

// ClusterID is the Kafka cluster id (KIP-78) of the cluster cl talks to,
// from a broker's Metadata answer: the identity of a cluster in Ferry's
// records. Empty when the brokers report none.
func ClusterID(ctx context.Context, cl *kgo.Client) (string, error) {
	m, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		return "", fmt.Errorf("cluster id: %w", err)
	}
	return m.Cluster, nil
}

// Keys is how a Recorder keys its records.
type Keys uint8

const (
	// KeyByID keys a record by its producer id, the old format, which
	// every fetcher reads: a record per open, never compacted away.
	KeyByID Keys = iota
	// KeyByStream keys a record by its stream (Entry.StreamKey), which
	// fetchers older than it refuse.
	KeyByStream
)

// Recorder writes a writer's producer ids. It is safe for concurrent use.
type Recorder struct {
	cl     *kgo.Client
	writer string
	signer Signer // nil: entries unsigned
	keys   Keys

	mu sync.Mutex
	// done is the id this process last recorded for each stream key.
	done    map[string]int64
	cluster string // the target's cluster id, once known
}

// maxDone bounds the streams a Recorder remembers (its writer's links
// times their shards); past it they are forgotten, which costs one more
// record of an id, which views take as they took the first.
const maxDone = 1 << 16

// NewRecorder makes a Recorder on a client of its own built from opts (the
// target cluster's seeds, TLS and SASL), signing its entries with signer
// (nil: unsigned) and keying them as keys says. Its produce is not
// idempotent, so it takes no producer id of its own.
func NewRecorder(opts []kgo.Opt, writer string, signer Signer, keys Keys) (*Recorder, error) {
	if len(writer) > MaxField {
		return nil, fmt.Errorf("producer id recorder: writer id of %d bytes, above %d", len(writer), MaxField)
	}
	cl, err := kgo.NewClient(append(opts,
		kgo.DefaultProduceTopic(Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.DisableIdempotentWrite(),
		kgo.ProducerLinger(0),
	)...)
	if err != nil {
		return nil, fmt.Errorf("producer id recorder: %w", err)
	}
	return &Recorder{cl: cl, writer: writer, signer: signer, keys: keys, done: map[string]int64{}}, nil
}

// Close releases the client.
func (r *Recorder) Close() { r.cl.Close() }

// ClusterID is the target cluster's id (see ClusterID), asked of a broker
// once and remembered.
func (r *Recorder) ClusterID(ctx context.Context) (string, error) {
	r.mu.Lock()
	cluster := r.cluster
	r.mu.Unlock()
	if cluster != "" {
		return cluster, nil
	}
	cluster, err := ClusterID(ctx, r.cl)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	r.cluster = cluster
	r.mu.Unlock()
	return cluster, nil
}

// Record writes that the writer's stream of link's shard produces with
// id, copying from the cluster whose id is source, and returns once all
// in-sync replicas have it. With KeyByStream the record replaces the
// stream's last one in the compacted topic (after MinCompactionLag). An
// id this process recorded last under its key (an exactly-once shard's
// producer keeps its id across streams) costs nothing.
func (r *Recorder) Record(ctx context.Context, id int64, link string, shard uint32, source string) error {
	e := Entry{ProducerID: id, SourceCluster: source, Link: link, Writer: r.writer, Time: time.Now().UTC()}
	if r.keys == KeyByStream {
		e.Shard = &shard
	}
	stream := e.StreamKey()
	r.mu.Lock()
	last, done := r.done[stream]
	r.mu.Unlock()
	if done && last == id {
		return nil
	}
	rec, err := encodeEntry(e, r.signer)
	if err != nil {
		return err
	}
	if err := r.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("record producer id %d in %s: %w", id, Topic, err)
	}
	r.mu.Lock()
	if len(r.done) >= maxDone {
		clear(r.done)
	}
	r.done[stream] = id
	r.mu.Unlock()
	return nil
}

// Origin is what a View knows of a producer id of its cluster.
type Origin uint8

const (
	// NotCopied: no Ferry writer recorded the id; its batches are the
	// cluster's own.
	NotCopied Origin = iota
	// CopiedFrom: a Ferry writer copying from the cluster asked about
	// recorded it.
	CopiedFrom
	// CopiedFromOther: a Ferry writer copying from another cluster
	// recorded it (a chain: what A→B wrote into B, read by B→C).
	CopiedFromOther
	// Unattributed: a Ferry writer recorded it without its source cluster
	// (a writer older than the field, or a source with no cluster id).
	Unattributed
)

func (o Origin) String() string {
	switch o {
	case NotCopied:
		return "not copied"
	case CopiedFrom:
		return "copied from the cluster asked about"
	case CopiedFromOther:
		return "copied from another cluster"
	case Unattributed:
		return "copied from an unrecorded cluster"
	}
	return "origin " + strconv.Itoa(int(o))
}

const (
	// maxForeign bounds the ids remembered as not Ferry's (every
	// idempotent producer of the source has one); past it they are
	// forgotten, which costs one more read of the topic each.
	maxForeign = 1 << 20
	// maxEntries bounds the ids remembered as Ferry's (one per writer's
	// at-least-once stream open, and whatever else is written to the
	// topic). Past it the oldest read that is no stream's newest is
	// forgotten (counted) for each new one (take): a batch of a forgotten
	// id, met again, is copied, as a loop is better than a loss. Half of
	// it at most is streams' newest (maxStreams).
	maxEntries = 1 << 20
	// maxClusters bounds the distinct source cluster ids shared between
	// entries; an entry of another keeps its own copy (MaxField bytes).
	maxClusters = 64
	// readTimeout bounds one read of the topic to its end: past it the
	// callers waiting for it fail, so their sessions end and retry,
	// instead of every shard hanging on a partition without a leader.
	readTimeout = 30 * time.Second
)

// View tells a cluster's Ferry producer ids from the rest, and from which
// cluster each copied. It is safe for concurrent use: the shards of a
// fetcher share one. One read of the topic runs at a time, without the
// lock: ids already settled are answered meanwhile.
type View struct {
	cl       *kgo.Client
	adm      *kadm.Client
	verifier Verifier // nil: entries taken unsigned
	log      *slog.Logger
	timeout  time.Duration // readTimeout; shorter in tests
	// maxEntries is the const maxEntries; smaller in tests.
	maxEntries int

	mu sync.Mutex
	// ferry holds each recorded id's source cluster id (interned through
	// clusters). The first valid entry of an id wins: a later record of
	// the key cannot rewrite what the View answers.
	ferry    map[int64]string
	clusters map[string]string
	foreign  map[int64]bool
	refused  int // records not taken: invalid, or rewriting an id
	// order holds the ids of ferry, oldest read first: the order they are
	// forgotten in past maxEntries.
	order []int64
	// streams holds each stream key's newest id (at most maxEntries/2
	// keys: a stream past that is not tracked), and newest counts, for an
	// id, the streams it is the newest of: those are not forgotten.
	streams map[string]int64
	newest  map[int64]int
	// forgotten counts the ids forgotten past maxEntries.
	forgotten int
	// reading is the read in progress, nil when none; started and ok
	// number the reads started and the last one that succeeded.
	reading *read
	started int
	ok      int
	// Reads counts reads of the topic to its end, for tests and metrics.
	reads int

	// next is the offset the next read of each of the topic's partitions
	// starts at; partitions are added to the client's consumer as the
	// topic's end offsets name them. Only the one read in progress uses it.
	next map[int32]int64
}

// read is one read of the topic to its end; err is set before done closes.
type read struct {
	n    int
	done chan struct{}
	err  error
}

// NewView makes a View on a client of its own built from opts (the source
// cluster's seeds, TLS and SASL), taking only entries verifier admits (nil:
// every entry, signed or not), logging refused entries to log (nil: not
// logged). It reads nothing until asked.
func NewView(opts []kgo.Opt, verifier Verifier, log *slog.Logger) (*View, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Each read must see the topic as it is now: a topic a writer created
	// a moment ago, after this client found it missing, holds the record
	// of the id being asked about. A missing topic is asked of a broker
	// again (exists), and the cache's minimum age is kept short so the
	// end offsets that follow see the topic; reads are rare.
	//
	// Read committed, to the last stable offset, keeping control records
	// so that a marker there is seen: read_uncommitted, one committed
	// transactional record written to the topic (by anyone with Write
	// and a transactional id) put a marker at the end, which such a read
	// waits for in vain, and every read timed out: each session meeting an
	// unfamiliar producer id failed, and the link stalled.
	cl, err := kgo.NewClient(append(opts, kgo.MetadataMinAge(10*time.Millisecond),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())...)
	if err != nil {
		return nil, fmt.Errorf("producer id view: %w", err)
	}
	return &View{
		cl: cl, adm: kadm.NewClient(cl), verifier: verifier, log: log, timeout: readTimeout, maxEntries: maxEntries,
		ferry: map[int64]string{}, clusters: map[string]string{}, foreign: map[int64]bool{}, next: map[int32]int64{},
		streams: map[string]int64{}, newest: map[int64]int{},
	}, nil
}

// Close releases the client.
func (v *View) Close() { v.cl.Close() }

// Reads is how many times the View has read the topic to its end.
func (v *View) Reads() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.reads
}

// Refused is how many of the topic's records the View did not take:
// malformed or out of bounds, not signed by an admitted writer, or a
// later record of an id it knows, naming another source cluster.
func (v *View) Refused() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.refused
}

// Forgotten is how many ids the View forgot to keep within its bound on
// entries: the oldest it had read that were no stream's newest.
func (v *View) Forgotten() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.forgotten
}

// Origins reports, for each of ids, whether a Ferry writer recorded it and
// whether that writer copied from the cluster whose id is from. Ids not
// settled yet cost one read of the topic to its end, shared with the
// callers asking meanwhile; the -1 of a producer without an id is never
// Ferry's. A read that cannot finish within its bound is an error.
func (v *View) Origins(ctx context.Context, ids []int64, from string) (map[int64]Origin, error) {
	v.mu.Lock()
	// Any read started from now on sees every record written before this
	// call: the records of ids the caller has seen in batches.
	need := v.started + 1
	for v.unsettled(ids) && v.ok < need {
		if r := v.reading; r != nil {
			v.mu.Unlock()
			select {
			case <-r.done:
			case <-ctx.Done():
				return nil, fmt.Errorf("wait for a read of %s: %w", Topic, ctx.Err())
			}
			if r.err != nil && r.n >= need {
				return nil, r.err
			}
			v.mu.Lock()
			continue
		}
		if err := v.readOnce(ctx); err != nil {
			return nil, err // readOnce unlocked
		}
	}
	defer v.mu.Unlock()
	if len(v.foreign) > maxForeign {
		clear(v.foreign)
	}
	out := make(map[int64]Origin, len(ids))
	for _, id := range ids {
		source, ok := v.ferry[id]
		switch {
		case !ok:
			out[id] = NotCopied
			if id >= 0 {
				v.foreign[id] = true
			}
		case source == "":
			out[id] = Unattributed
		case source == from:
			out[id] = CopiedFrom
		default:
			out[id] = CopiedFromOther
		}
	}
	return out, nil
}

// unsettled reports whether any of ids is neither known as Ferry's nor as
// not; v.mu held.
func (v *View) unsettled(ids []int64) bool {
	for _, id := range ids {
		if _, ok := v.ferry[id]; !ok && id >= 0 && !v.foreign[id] {
			return true
		}
	}
	return false
}

// readOnce reads the topic to its end, bounded by v.timeout, without
// holding v.mu, which it is called with. On success it returns with v.mu
// held; on error, released.
func (v *View) readOnce(ctx context.Context) error {
	v.started++
	r := &read{n: v.started, done: make(chan struct{})}
	v.reading = r
	v.mu.Unlock()

	rctx, cancel := context.WithTimeout(ctx, v.timeout)
	entries, err := v.readToEnd(rctx)
	cancel()
	if err != nil {
		err = fmt.Errorf("read %s to its end (bound %v): %w", Topic, v.timeout, err)
	}

	v.mu.Lock()
	forgotten := v.forgotten
	v.take(entries)
	if n := v.forgotten - forgotten; n > 0 {
		// Once a read: an id forgotten is met again only in an old batch,
		// which is then copied.
		v.log.Info("producer ids forgotten past the view's bound (the oldest read; their batches, met again, are copied)",
			"topic", Topic, "forgotten", n, "kept", len(v.ferry))
	}
	v.reading = nil
	if ctx.Err() == nil {
		// Shared with the callers waiting for this read; a read that
		// ended with its caller (a session stopped) is not their failure:
		// they start another.
		r.err = err
	}
	if err == nil {
		v.ok, v.reads = r.n, v.reads+1
	}
	close(r.done)
	if err != nil {
		v.mu.Unlock()
	}
	return err
}

// take keeps the entries a read found, the first of each id, and notes
// each stream's newest; past maxEntries it forgets the oldest id that is
// no stream's newest for each new one; v.mu held.
func (v *View) take(entries []Entry) {
	for _, e := range entries {
		if known, ok := v.ferry[e.ProducerID]; ok {
			if known != e.SourceCluster {
				v.refused++
				continue
			}
		} else {
			if len(v.ferry) >= v.maxEntries && !v.forgetOldest() {
				v.refused++
				continue
			}
			source, ok := v.clusters[e.SourceCluster]
			if !ok {
				source = e.SourceCluster
				if len(v.clusters) < maxClusters {
					v.clusters[source] = source
				}
			}
			v.ferry[e.ProducerID] = source
			v.order = append(v.order, e.ProducerID)
			delete(v.foreign, e.ProducerID)
		}
		if e.Shard != nil {
			v.setNewest(e.StreamKey(), e.ProducerID)
		}
	}
}

// setNewest makes id stream's newest; v.mu held. A stream past
// maxEntries/2 is not tracked: its ids are forgotten like any other.
func (v *View) setNewest(stream string, id int64) {
	prev, ok := v.streams[stream]
	switch {
	case ok && prev == id:
		return
	case !ok && len(v.streams) >= v.maxEntries/2:
		return
	case ok:
		if v.newest[prev]--; v.newest[prev] <= 0 {
			delete(v.newest, prev)
		}
	}
	v.streams[stream] = id
	v.newest[id]++
}

// forgetOldest forgets the oldest id read that is no stream's newest, and
// reports whether there was one; v.mu held. Streams' newest ids met on
// the way go to the back, so each pass looks at every id once at most.
func (v *View) forgetOldest() bool {
	for range len(v.order) {
		id := v.order[0]
		v.order = v.order[1:]
		if v.newest[id] > 0 {
			v.order = append(v.order, id)
			continue
		}
		delete(v.ferry, id)
		v.forgotten++
		return true
	}
	return false
}

// readToEnd reads every partition of the topic from where the last read
// stopped to the end it has now, and returns the valid entries it found
// (even when it fails: they stay valid). A missing topic holds nothing: no
// Ferry writer has written to this cluster. Only one runs at a time.
func (v *View) readToEnd(ctx context.Context) (entries []Entry, err error) {
	refused := 0
	var firstRefusal error
	defer func() {
		v.mu.Lock()
		v.refused += refused
		v.mu.Unlock()
		if refused > 0 {
			// Once a read, and reads are rare: an entry refused for its
			// signature is what a writer outside this fetcher's
			// writers.tls looks like, whose copies then loop back.
			v.log.Warn("producer id entries refused (their batches are copied)", "topic", Topic, "refused", refused, "first", firstRefusal)
		}
	}()
	ends, err := v.endOffsets(ctx)
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		// The client's metadata may predate the topic: only a broker's
		// answer now says it is missing.
		exists, merr := v.exists(ctx)
		if merr != nil {
			return nil, fmt.Errorf("metadata of %s: %w", Topic, merr)
		}
		if !exists {
			return nil, nil
		}
		ends, err = v.endOffsets(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("end of %s: %w", Topic, err)
	}
	want := map[int32]int64{}
	add := map[string]map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		next, known := v.next[o.Partition]
		if !known {
			if add[Topic] == nil {
				add[Topic] = map[int32]kgo.Offset{}
			}
			add[Topic][o.Partition] = kgo.NewOffset().AtStart()
			v.next[o.Partition] = 0
		}
		if o.Offset > next {
			want[o.Partition] = o.Offset
		}
	})
	if len(add) > 0 {
		v.cl.AddConsumePartitions(add)
	}
	for len(want) > 0 {
		fs := v.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return entries, ctx.Err()
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = errors.Join(ferr, err) })
		if ferr != nil {
			return entries, ferr
		}
		fs.EachRecord(func(rec *kgo.Record) {
			if rec.Attrs.IsControl() {
				// A transaction's marker: nothing to decode.
			} else if e, err := decodeEntry(rec, v.verifier); err == nil {
				entries = append(entries, e)
			} else {
				refused++
				if firstRefusal == nil {
					firstRefusal = fmt.Errorf("offset %d: %w", rec.Offset, err)
				}
			}
			v.next[rec.Partition] = rec.Offset + 1
			if end, ok := want[rec.Partition]; ok && rec.Offset+1 >= end {
				delete(want, rec.Partition)
			}
		})
	}
	return entries, nil
}

// endOffsets are the topic's last stable offsets: what a read_committed
// read reaches.
func (v *View) endOffsets(ctx context.Context) (kadm.ListedOffsets, error) {
	ends, err := v.adm.ListCommittedOffsets(ctx, Topic)
	if err == nil {
		err = ends.Error()
	}
	return ends, err
}

// exists asks a broker whether the topic exists, past the client's cache.
func (v *View) exists(ctx context.Context) (bool, error) {
	req := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = kmsg.StringPtr(Topic)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, v.cl)
	if err != nil {
		return false, err
	}
	if len(resp.Topics) != 1 {
		return false, fmt.Errorf("%d topics in the answer", len(resp.Topics))
	}
	switch err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); {
	case err == nil:
		return true, nil
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return false, nil
	default:
		return false, err
	}
}
