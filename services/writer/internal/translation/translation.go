// Package translation answers, for the group sync, where a source offset
// of a shard's partitions lands on the target: an offset index per
// partition in memory, read from the index topic when a group first needs
// it and extended by every round that commits. It is the control plane's
// view of the copy; the replication stream only feeds it (Resumed,
// Confirm) and never waits on it.
package translation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/pkg/groupcommit"
	"github.com/ferry-replicator/ferry/services/writer/internal/offsetindex"
	"github.com/ferry-replicator/ferry/services/writer/internal/partkey"
)

// Each partition has an offset index in memory, read from the index topic
// once (load) and extended by each round whose checkpoints commit
// (Confirm): a
// translation is a search in memory, so the stream's receiver answers it
// as a message arrives, and only committed data is ever pointed at.
//
// The index topic is read only once a translation needs it: a group
// behind what the stream itself committed (and its checkpoint carried) on
// one of the shard's partitions. A group at or past the end needs only the
// committed checkpoint, one on what the stream committed only those
// entries (the tail, kept for the load to add), and a shard whose
// source has no such group never reads the topic: each read costs the
// target a consumer's connections and a fetch per partition, at every
// shard open. The first translation that needs the index answers
// index_loading, as one arriving while the read runs does; the group
// syncer translates it again every second (advance) until the read is
// done, and the fetcher sends the group again at its next read anyway.
// A load under way when its stream ends runs on (the writer's server hands Run a context
// that outlives the stream): the
// syncer still translates through this translator, and after a region
// loss no stream comes back to load it again.

// groupIndexRuns bounds each partition's index in memory (24 bytes a run:
// some 1.5 MB, and up to a quarter more between trims, Index.Bound). A
// plain partition copied at-least-once merges its rounds into few runs;
// each exactly-once round, or each compaction gap, adds one. Beyond it the
// oldest runs are dropped from memory, not from the translation: an
// offset older than the runs kept is asked of the index topic, in one
// pass for all such offsets of the shard that holds only their answers
// (offsetindex.Reader.TranslateAll, answerOlder), and answered from there
// on. The same holds when the load failed: such offsets are asked of the
// topic each time, not answered before_index for the stream's life.
const groupIndexRuns = 1 << 16

// LoadTimeout bounds each read of a shard's offset index (a few hundred
// milliseconds on a healthy target): beyond it the read gives up, and its
// groups translate from what the stream committed only. It is also how
// long the reads go on after the stream (Run).
const LoadTimeout = 2 * time.Minute

// maxOlderAnswers bounds the answers from the index topic a partition
// keeps (one per group offset older than memory; dropped all at once
// past it, to be asked again).
const maxOlderAnswers = 4096

// olderRetry is how long a failed read for older offsets waits before
// the next.
const olderRetry = 5 * time.Second

// Why a partition of a group was not translated.
const (
	// NotBeforeIndex: the offset is older than what the index holds (its
	// retention, groupIndexRuns, or data copied before the index).
	NotBeforeIndex = "before_index"
	// NotLoading: the shard's index is still being read; the next read of
	// the group translates it.
	NotLoading = "index_loading"
	// NotCopied: nothing of the partition is committed on the target yet.
	NotCopied = "not_copied"
)

// Translator is the in-memory index of a shard's partitions, shared by
// the stream's receiver (translate), its committer (confirm) and the
// shard's index load (load).
type Translator struct {
	mu    sync.Mutex
	parts map[partkey.Partition]*partIndex
	// loaded is set once load has read the index topic (or given up).
	loaded bool
	// needed is closed by the first translation that needs the index:
	// the shard's load waits for it.
	needed   chan struct{}
	isNeeded bool
	// older signals run that a translation asked the index topic for an
	// offset older than memory holds; olderClosed, that run has ended
	// and such offsets answer before_index.
	older       chan struct{}
	olderClosed bool
}

// partIndex is one partition's index and committed position.
type partIndex struct {
	// next and target are the committed checkpoint's next source offset
	// and target offset after the last copied record; -1 while unknown.
	next, target int64
	// idx is the index, nil until loaded; tail are the entries committed
	// before that (merged while they continue each other, at most
	// groupIndexRuns runs and a last entry), added after what the load
	// read; tailRuns counts their runs.
	idx      *offsetindex.Index
	tail     []offsetindex.Entry
	tailRuns int
	// tailIdx is tail as an index, built at the first translation that
	// needs it before the load and kept up to date after: what this
	// stream committed (and its checkpoint carried) translates without
	// reading the index topic.
	tailIdx *offsetindex.Index
	// partial says the load did not read the index topic (it failed, or
	// stopped): idx holds only what the stream committed.
	partial bool
	// answers are offsets older than idx holds, as the index topic
	// answered them (answerOlder); asked, those waiting for its next
	// read. gen counts the times idx started anew (a source topic
	// created again), which makes answers read before it stale.
	answers map[int64]offsetindex.Answer
	asked   []int64
	gen     int
	// lowest is the oldest offset that needed the index before the load
	// (-1: none): the load reads from the landmark below it.
	lowest int64
}

func New() *Translator {
	return &Translator{parts: map[partkey.Partition]*partIndex{}, needed: make(chan struct{}), older: make(chan struct{}, 1)}
}

// addTail keeps e, committed before the index is loaded, for the load to
// add. Runs beyond groupIndexRuns drop the oldest entries: an index holds
// no more, and what they describe was flushed to the index topic long
// before (a flush at least every 256 runs), where the load reads it.
func (p *partIndex) addTail(e offsetindex.Entry) {
	// The tail's entries are its own: the progress extends its unindexed
	// entries in place (Entry.Extend) while the load reads these.
	if n := len(p.tail); n == 0 || !p.tail[n-1].Extend(e) {
		p.tail = append(p.tail, e.Clone())
	}
	p.tailRuns += len(e.Runs)
	for len(p.tail) > 1 && p.tailRuns-len(p.tail[0].Runs) >= groupIndexRuns {
		p.tailRuns -= len(p.tail[0].Runs)
		p.tail = slices.Delete(p.tail, 0, 1)
	}
	if p.tailIdx != nil {
		p.tailIdx.Add(e)
		p.tailIdx.Bound(groupIndexRuns)
	}
}

// tailIndex is tail as an index (tailIdx), built on first use.
func (p *partIndex) tailIndex() *offsetindex.Index {
	if p.tailIdx == nil {
		p.tailIdx = fromTail(offsetindex.NewIndex(), p.tail)
	}
	return p.tailIdx
}

// loadedFrom makes x, the index the load read, the partition's, with the
// tail added after it.
func (p *partIndex) loadedFrom(x *offsetindex.Index) {
	p.idx = fromTail(x, p.tail)
	p.tail, p.tailRuns, p.tailIdx = nil, 0, nil
}

// resumed sets tp's committed position from its checkpoint at open (next
// -1: none) and the index entries it carries, which the load adds after
// what it reads of the index topic.
func (t *Translator) Resumed(tp partkey.Partition, next, target int64, carried []offsetindex.Entry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := &partIndex{next: next, target: target, lowest: -1}
	for _, e := range carried {
		p.addTail(e)
	}
	t.parts[tp] = p
}

// confirm adds the index entries of a committed round of tp and its new
// checkpoint.
func (t *Translator) Confirm(tp partkey.Partition, next, target int64, entries []offsetindex.Entry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.parts[tp]
	if p == nil {
		p = &partIndex{lowest: -1}
		t.parts[tp] = p
	}
	p.next, p.target = next, target
	if p.idx == nil {
		for _, e := range entries {
			p.addTail(e)
		}
		return
	}
	trimmed := p.idx.Trimmed()
	for _, e := range entries {
		p.idx.Add(e)
	}
	if trimmed && !p.idx.Trimmed() { // started anew: older answers are another copy's
		p.answers, p.asked = nil, nil
		p.gen++
	}
	p.idx.Bound(groupIndexRuns)
}

// load reads the partitions' indexes from the index topic, then adds what
// rounds committed meanwhile. When the read fails they keep only those
// (older offsets answer before_index), logged: the shard copies on
// whatever happens here.
func (t *Translator) load(ctx context.Context, rd Reads, log *slog.Logger) {
	partial := rd.Index.Name != "" // until read
	defer func() {
		t.mu.Lock()
		t.loaded = true
		for _, p := range t.parts {
			if p.idx == nil {
				p.loadedFrom(offsetindex.NewIndex())
				p.partial = partial
			}
		}
		t.mu.Unlock()
	}()
	if rd.Index.Name == "" {
		return
	}
	r, err := offsetindex.NewReader(rd.Opts, rd.Index.Name)
	if err != nil {
		log.Warn("offset index not read: groups translate from what this stream commits only", "err", err)
		return
	}
	defer r.Close()
	t.mu.Lock()
	keys := make([]offsetindex.Key, 0, len(t.parts))
	from := make(map[offsetindex.Key]int64, len(t.parts))
	for tp, p := range t.parts {
		k := offsetindex.Key{Link: rd.Link, Topic: tp.Topic, Partition: tp.Partition}
		keys = append(keys, k)
		// From the landmark below the oldest offset that needed the
		// index (a partition no group needed it for: below its
		// checkpoint); an older offset asked later reads the topic for
		// itself (answerOlder), as one older than memory does.
		if rd.Landmarks != nil && (p.lowest >= 0 || p.next >= 0) {
			at := p.next
			if p.lowest >= 0 {
				at = p.lowest
			}
			from[k] = offsetindex.From(rd.Landmarks(k), at)
		}
	}
	t.mu.Unlock()
	// One pass over the index partitions for all the shard's partitions,
	// each index trimmed as it grows to what the translator keeps.
	start := time.Now()
	xs, err := r.LoadFrom(ctx, keys, groupIndexRuns, from)
	if ctx.Err() != nil {
		log.Info("offset index load stopped (a newer stream of the shard, the writer draining, or over its time): groups translate from what this stream committed only", "partitions", len(keys), "took", time.Since(start))
		return
	}
	if err != nil {
		log.Warn("offset index of the shard not read: its groups translate from what this stream commits only", "partitions", len(keys), "err", err)
		return
	}
	runs := 0
	partial = false
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range keys {
		p := t.parts[partkey.Partition{Topic: k.Topic, Partition: k.Partition}]
		p.loadedFrom(xs[k])
		runs += p.idx.Runs()
	}
	// Once per stream open, when a group behind the copy needs it: how
	// long its groups waited (index_loading).
	log.Info("offset index loaded", "partitions", len(keys), "runs", runs, "took", time.Since(start))
}

// fromTail adds tail to x: entries the load may have read too are added
// again, which Index.Add takes as the same copy described again.
func fromTail(x *offsetindex.Index, tail []offsetindex.Entry) *offsetindex.Index {
	for _, e := range tail {
		x.Add(e)
	}
	x.Trim(groupIndexRuns)
	return x
}

// translate answers where a group whose committed source offset on tp is
// s resumes on the target, and the source offset that position stands
// for; why names, when ok is false, why it cannot say.
//
// At or beyond the committed checkpoint, the group lands at the committed
// target end, standing for the checkpoint's next source offset: it reads
// on from there as data arrives (re-reading what it had read on the
// source, which the re-read exposure counts). Below it, the exact index
// translation: the first copied record at or after s, standing for s
// itself (the source records between were not copied). Never a position
// ahead of committed data.
func (t *Translator) Translate(tp partkey.Partition, s int64) (pos groupcommit.Position, why string, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.parts[tp]
	switch {
	case p == nil || p.next < 0 || p.target < 0:
		return pos, NotCopied, false
	case s >= p.next:
		return groupcommit.Position{Target: p.target, Source: p.next}, "", true
	}
	x := p.idx
	if x == nil {
		// Before the load, what this stream committed answers an offset
		// it covers (the same answer: the load adds it after what it
		// reads, and it describes the copy from its start on); an older
		// offset needs the index topic.
		x = p.tailIndex()
	}
	got, err := x.Translate(s)
	if err != nil && p.idx != nil && (p.idx.Trimmed() || p.partial) {
		// Older than memory holds: the index topic may hold it.
		a, ok := p.answers[s]
		switch {
		case ok:
			got, err = a.Position, a.Err
		case !t.olderClosed:
			t.ask(p, s)
			return pos, NotLoading, false
		}
	}
	switch {
	case err != nil && p.idx == nil:
		if p.lowest < 0 || s < p.lowest {
			p.lowest = s
		}
		if !t.isNeeded {
			t.isNeeded = true
			close(t.needed)
		}
		return pos, NotLoading, false
	case errors.Is(err, offsetindex.ErrBeforeIndex), errors.Is(err, offsetindex.ErrNotIndexed):
		return pos, NotBeforeIndex, false
	case err != nil:
		return pos, fmt.Sprintf("translate: %v", err), false
	case got.Offset < 0:
		return pos, NotCopied, false
	}
	return groupcommit.Position{Target: min(got.Offset, p.target), Source: s}, "", true
}

// ask adds s to p's offsets for the next read of the index topic
// (answerOlder) and wakes run for it.
func (t *Translator) ask(p *partIndex, s int64) {
	if !slices.Contains(p.asked, s) && len(p.asked) < maxOlderAnswers {
		p.asked = append(p.asked, s)
	}
	t.wake()
}

// wake asks run for a read of the index topic for the offsets asked.
func (t *Translator) wake() {
	select {
	case t.older <- struct{}{}:
	default: // a read is asked for already
	}
}

// Reads is what reading a link's offset index takes: the target's
// client options, the topic, the link.
type Reads struct {
	Opts  []kgo.Opt
	Index offsetindex.Topic
	Link  string
	// Landmarks are a partition's landmarks in the index topic (its
	// checkpoint's), where a read for an older offset starts; nil: none.
	Landmarks func(offsetindex.Key) []offsetindex.Landmark
}

// run reads the index topic for the shard's translations: the load,
// once a translation first needs it (none before the stream, done,
// ends), then a pass for the offsets older than memory holds each time
// some are asked. It ends with ctx (the shard's next stream, the
// writer's drain), or LoadTimeout after the stream: the group
// syncer still translates through the translator for a while after it
// (a region loss ends every stream; no stream comes back to load).
// From then on older offsets answer before_index.
func (t *Translator) Run(ctx context.Context, done <-chan struct{}, rd Reads, log *slog.Logger) {
	defer func() {
		t.mu.Lock()
		t.olderClosed = true
		t.mu.Unlock()
	}()
	select {
	case <-t.needed:
	case <-done:
		return
	case <-ctx.Done():
		return
	}
	lctx, cancel := context.WithTimeout(ctx, LoadTimeout)
	t.load(lctx, rd, log)
	cancel()
	var grace <-chan time.Time
	for {
		select {
		case <-t.older:
		case <-done:
			done, grace = nil, time.After(LoadTimeout)
			continue
		case <-grace:
			return
		case <-ctx.Done():
			return
		}
		if err := t.answerOlder(ctx, rd); err != nil {
			log.Warn("offset index not read for offsets older than memory holds: their groups wait", "err", err, "retry_in", olderRetry)
			select {
			case <-time.After(olderRetry):
				t.wake() // the same offsets again
			case <-ctx.Done():
				return
			}
		}
	}
}

// answerOlder asks the index topic, in one pass, for every offset asked
// older than memory holds, and keeps the answers.
func (t *Translator) answerOlder(ctx context.Context, rd Reads) error {
	t.mu.Lock()
	asks := map[offsetindex.Key][]int64{}
	gens := map[partkey.Partition]int{}
	for tp, p := range t.parts {
		if len(p.asked) > 0 {
			asks[offsetindex.Key{Link: rd.Link, Topic: tp.Topic, Partition: tp.Partition}] = slices.Clone(p.asked)
			gens[tp] = p.gen
		}
	}
	t.mu.Unlock()
	if len(asks) == 0 {
		return nil
	}
	r, err := offsetindex.NewReader(rd.Opts, rd.Index.Name)
	if err != nil {
		return err
	}
	defer r.Close()
	rctx, cancel := context.WithTimeout(ctx, LoadTimeout)
	defer cancel()
	var marks map[offsetindex.Key][]offsetindex.Landmark
	if rd.Landmarks != nil {
		marks = make(map[offsetindex.Key][]offsetindex.Landmark, len(asks))
		for k := range asks {
			marks[k] = rd.Landmarks(k)
		}
	}
	answers, err := r.TranslateAll(rctx, asks, marks)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, as := range answers {
		tp := partkey.Partition{Topic: k.Topic, Partition: k.Partition}
		p := t.parts[tp]
		if p == nil || p.gen != gens[tp] {
			continue // started anew meanwhile: asked again if still needed
		}
		if len(p.answers)+len(as) > maxOlderAnswers {
			p.answers = nil
		}
		if p.answers == nil {
			p.answers = make(map[int64]offsetindex.Answer, len(as))
		}
		for s, a := range as {
			p.answers[s] = a
		}
		p.asked = slices.DeleteFunc(p.asked, func(s int64) bool { _, ok := as[s]; return ok })
	}
	return nil
}
