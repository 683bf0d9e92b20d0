package server

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
)

// The translator part of progress: where a source offset of one of the
// shard's partitions lands on the target, for group sync. Each partition
// has an offset index in memory, read from the index topic once (load)
// and extended by each round whose checkpoints commit (confirm): a
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
// A load under way when its stream ends runs on (Server.startLoad): the
// syncer still translates through this translator, and after a region
// loss no stream comes back to load it again.

// groupIndexRuns bounds each partition's index in memory (24 bytes a run:
// some 1.5 MB, and up to a quarter more between trims, Index.Bound). A
// plain partition copied at-least-once merges its rounds into few runs;
// each exactly-once round, or each compaction gap, adds one. Beyond it the oldest runs are dropped: a group committed
// before the first kept run is left where it is, reported before_index,
// until it reaches what the index holds.
const groupIndexRuns = 1 << 16

// Why a partition of a group was not translated.
const (
	// notBeforeIndex: the offset is older than what the index holds (its
	// retention, groupIndexRuns, or data copied before the index).
	notBeforeIndex = "before_index"
	// notLoading: the shard's index is still being read; the next read of
	// the group translates it.
	notLoading = "index_loading"
	// notCopied: nothing of the partition is committed on the target yet.
	notCopied = "not_copied"
)

// translator is the in-memory index of a shard's partitions, shared by
// the stream's receiver (translate), its committer (confirm) and the
// shard's index load (load).
type translator struct {
	mu    sync.Mutex
	parts map[topicPartition]*partIndex
	// loaded is set once load has read the index topic (or given up).
	loaded bool
	// needed is closed by the first translation that needs the index:
	// the shard's load waits for it.
	needed   chan struct{}
	isNeeded bool
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
}

func newTranslator() *translator {
	return &translator{parts: map[topicPartition]*partIndex{}, needed: make(chan struct{})}
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
func (t *translator) resumed(tp topicPartition, next, target int64, carried []offsetindex.Entry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := &partIndex{next: next, target: target}
	for _, e := range carried {
		p.addTail(e)
	}
	t.parts[tp] = p
}

// confirm adds the index entries of a committed round of tp and its new
// checkpoint.
func (t *translator) confirm(tp topicPartition, next, target int64, entries []offsetindex.Entry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.parts[tp]
	if p == nil {
		p = &partIndex{}
		t.parts[tp] = p
	}
	p.next, p.target = next, target
	if p.idx == nil {
		for _, e := range entries {
			p.addTail(e)
		}
		return
	}
	for _, e := range entries {
		p.idx.Add(e)
	}
	p.idx.Bound(groupIndexRuns)
}

// load reads the partitions' indexes from the index topic, then adds what
// rounds committed meanwhile. When the read fails they keep only those
// (older offsets answer before_index), logged: the shard copies on
// whatever happens here.
func (t *translator) load(ctx context.Context, opts []kgo.Opt, index offsetindex.Topic, link string, log *slog.Logger) {
	defer func() {
		t.mu.Lock()
		t.loaded = true
		for _, p := range t.parts {
			if p.idx == nil {
				p.loadedFrom(offsetindex.NewIndex())
			}
		}
		t.mu.Unlock()
	}()
	if index.Name == "" {
		return
	}
	r, err := offsetindex.NewReader(opts, index.Name)
	if err != nil {
		log.Warn("offset index not read: groups translate from what this stream commits only", "err", err)
		return
	}
	defer r.Close()
	t.mu.Lock()
	keys := make([]offsetindex.Key, 0, len(t.parts))
	for tp := range t.parts {
		keys = append(keys, offsetindex.Key{Link: link, Topic: tp.topic, Partition: tp.partition})
	}
	t.mu.Unlock()
	// One pass over the index partitions for all the shard's partitions,
	// each index trimmed as it grows to what the translator keeps.
	start := time.Now()
	xs, err := r.LoadAll(ctx, keys, groupIndexRuns)
	if ctx.Err() != nil {
		log.Info("offset index load stopped (a newer stream of the shard, the writer draining, or over its time): groups translate from what this stream committed only", "partitions", len(keys), "took", time.Since(start))
		return
	}
	if err != nil {
		log.Warn("offset index of the shard not read: its groups translate from what this stream commits only", "partitions", len(keys), "err", err)
		return
	}
	runs := 0
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range keys {
		p := t.parts[topicPartition{k.Topic, k.Partition}]
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
func (t *translator) translate(tp topicPartition, s int64) (pos groupcommit.Position, why string, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.parts[tp]
	switch {
	case p == nil || p.next < 0 || p.target < 0:
		return pos, notCopied, false
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
	switch {
	case err != nil && p.idx == nil:
		if !t.isNeeded {
			t.isNeeded = true
			close(t.needed)
		}
		return pos, notLoading, false
	case errors.Is(err, offsetindex.ErrBeforeIndex), errors.Is(err, offsetindex.ErrNotIndexed):
		return pos, notBeforeIndex, false
	case err != nil:
		return pos, fmt.Sprintf("translate: %v", err), false
	case got.Offset < 0:
		return pos, notCopied, false
	}
	return groupcommit.Position{Target: min(got.Offset, p.target), Source: s}, "", true
}
