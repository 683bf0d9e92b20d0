package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/groupcommit"
	"github.com/ferry-replicator/ferry/pkg/groupsync"
	"github.com/ferry-replicator/ferry/services/writer/internal/groupstate"
	"github.com/ferry-replicator/ferry/services/writer/internal/heartbeat"
	"github.com/ferry-replicator/ferry/services/writer/internal/metrics"
	"github.com/ferry-replicator/ferry/services/writer/internal/translation"
)

// Group sync, the writer's half (the fetchers read the source's groups,
// link.groups): a stream's GroupOffsets is checked whole, each offset is
// translated at once with the shard's in-memory index (translate.go), and
// the result is handed to the writer's one group syncer, which commits it
// to the target group (package groupcommit) on a goroutine of its own, so
// a slow or unreachable group coordinator never holds up copying. The
// syncer keeps only the latest translation of each (link, group,
// partition): a group read again before the syncer reached it is synced
// once, with the newer offsets.

// errBadGroupOffsets is a GroupOffsets message the writer refuses: for a
// partition the stream's Open does not list, a negative offset, a group
// id groupsync.CheckName refuses, a group or partition listed twice, or
// more than groupsync.MaxEntries offsets.
var errBadGroupOffsets = errors.New("bad group offsets")

// GroupCommitter commits translated positions to one target group
// (groupcommit.Committer).
type GroupCommitter interface {
	Move(group string, want map[groupcommit.TopicPartition]groupcommit.Position, o groupcommit.Options) (groupcommit.Result, error)
}

// Outcomes of a group's sync, as /status and ferry_group_sync_total name
// them: groupcommit's (moved, unchanged, active, owned), and
// before_index (nothing of the group could be translated: its offsets
// are older than the offset index), error (the target did not answer;
// tried again with the next read) and limit (a group beyond
// groupsync.MaxGroups of the link, not synced).
const (
	outcomeBeforeIndex = "before_index"
	outcomeError       = "error"
	outcomeLimit       = "limit"
)

// noteBehind marks a partition whose group stands on the target for a
// later source offset than the source group now has: the group was
// rewound on the source, and the target is left where it is (a group
// never moves backwards).
const noteBehind = "behind"

// groupOffsets checks m whole against the stream's Open, translates it
// and hands it to the syncer; nothing of a refused message is kept.
func (ss *session) groupOffsets(m *ferryv1.GroupOffsets) error {
	if cur := ss.s.currentEpoch(ss.link.Name, ss.shard); m.GetEpoch() != ss.epoch || m.GetEpoch() < cur {
		ss.s.metrics.StaleEpochs.WithLabelValues(ss.link.Name).Inc()
		return fmt.Errorf("%w: group offsets epoch %d on a stream of epoch %d, shard at %d", errStaleEpoch, m.GetEpoch(), ss.epoch, cur)
	}
	n := 0
	for _, g := range m.GetGroups() {
		n += len(g.GetPartitions())
	}
	if n > groupsync.MaxEntries {
		return fmt.Errorf("%w: %d offsets in one message, above %d", errBadGroupOffsets, n, groupsync.MaxEntries)
	}
	seenGroup := make(map[string]bool, len(m.GetGroups()))
	for i, g := range m.GetGroups() {
		field := fmt.Sprintf("group_offsets.groups[%d]", i)
		if err := groupsync.CheckName(g.GetGroup()); err != nil {
			return fmt.Errorf("%w: %s.group: %v", errBadGroupOffsets, field, err)
		}
		if seenGroup[g.GetGroup()] {
			return fmt.Errorf("%w: %s: group %q listed twice", errBadGroupOffsets, field, g.GetGroup())
		}
		seenGroup[g.GetGroup()] = true
		seen := make(map[topicPartition]bool, len(g.GetPartitions()))
		for j, p := range g.GetPartitions() {
			tp := topicPartition{Topic: p.GetTopic(), Partition: p.GetPartition()}
			pf := fmt.Sprintf("%s.partitions[%d]", field, j)
			if !ss.opened[tp] {
				return fmt.Errorf("%w: %s: %s/%d is not in shard %d's open", errBadGroupOffsets, pf, clip(tp.Topic), tp.Partition, ss.shard)
			}
			if seen[tp] {
				return fmt.Errorf("%w: %s: %s/%d listed twice", errBadGroupOffsets, pf, tp.Topic, tp.Partition)
			}
			seen[tp] = true
			if p.GetOffset() < 0 {
				return fmt.Errorf("%w: %s.offset %d is negative", errBadGroupOffsets, pf, p.GetOffset())
			}
		}
	}
	if ss.s.groups == nil {
		return nil // this writer syncs no groups (its Opened said so)
	}
	readAt := time.UnixMilli(m.GetReadAt())
	for _, g := range m.GetGroups() {
		parts := make(map[topicPartition]wantPart, len(g.GetPartitions()))
		for _, p := range g.GetPartitions() {
			tp := topicPartition{Topic: p.GetTopic(), Partition: p.GetPartition()}
			pos, why, ok := ss.progress.tr.Translate(tp, p.GetOffset())
			parts[tp] = wantPart{reported: p.GetOffset(), readAt: readAt, pos: pos, ok: ok, why: why,
				target: groupcommit.TopicPartition{Topic: ss.link.Naming.Target(tp.Topic), Partition: tp.Partition}}
		}
		ss.s.groups.offer(groupKey{ss.link.Name, g.GetGroup()}, parts, ss.progress.tr)
	}
	return nil
}

type groupKey struct{ link, group string }

// wantPart is one partition of a group as a stream translated it.
type wantPart struct {
	reported int64     // the source offset the fetcher read
	readAt   time.Time // when it read it
	target   groupcommit.TopicPartition
	pos      groupcommit.Position // valid when ok
	ok       bool
	why      string // when not ok
}

// groupSyncer commits the latest translation of each group, one group at
// a time, on its own goroutine (run), and keeps what each sync did.
//
// A group that landed at the copied end, behind what it had read on the
// source, moves on as data arrives: every followEvery the syncer
// translates its last reported offset again through the translator of
// the stream that reported it (advance), without waiting for the next
// read of the source group (link.groups.interval, 10 s by default). It
// bounds what a group would read again after a failover to what it read
// in the last followEvery, rather than the last interval, and commits at
// most once a followEvery per lagging group.
type groupSyncer struct {
	commit  GroupCommitter
	metrics *metrics.Metrics
	log     *slog.Logger
	wake    chan struct{}
	// refused is nil while a link runs (Server.linkRefusal): a link failed
	// over or paused is not followed, so its groups stay where the failover
	// report found them.
	refused func(link string) error

	mu sync.Mutex
	// pending are the translations not synced yet, latest per partition;
	// order, their groups in the order they came.
	pending map[groupKey]map[topicPartition]wantPart
	order   []groupKey
	// state is what the syncs did, per group; perLink counts its groups,
	// bounded by groupsync.MaxGroups.
	state   map[groupKey]*groupState
	perLink map[string]int
	// follow is, per link and source partition, the translator of the
	// stream that last reported a group's offset on it, and its target
	// partition: what advance translates through.
	follow map[linkPartition]following

	// store keeps state in the target cluster (nil: memory only), every
	// persistEvery: dirty are the group partitions changed since the last
	// write (groupstate.go).
	store        GroupStateStore
	persistEvery time.Duration
	dirty        map[groupstate.Key]bool
	// writing orders the writes: the run's and a stopped link's report's
	// (Durable), so an older state never lands after a newer one.
	writing sync.Mutex
}

// followEvery is how often a group behind what it read on the source is
// translated again (advance).
const followEvery = time.Second

type linkPartition struct {
	link string
	tp   topicPartition
}

type following struct {
	tr     *translation.Translator
	target groupcommit.TopicPartition
}

// groupState is what the writer knows of a group's sync.
type groupState struct {
	attempted time.Time // last sync
	synced    time.Time // source read time of the last moved or unchanged sync
	outcome   string
	detail    string
	parts     map[topicPartition]*groupPart
	// handedBack: an operator returned the group to the sync after a
	// round trip (HandBackGroups), so its syncs take over offsets its
	// consumers committed on the target, until every partition carries
	// Ferry's marker.
	handedBack bool
}

// groupPart is one partition of a group's state.
type groupPart struct {
	reported int64 // the source offset the fetcher last read
	// reportedAt is when it read it.
	reportedAt time.Time
	// target and standsFor are where Ferry's marker puts the group on the
	// target and the source offset that stands for; -1 when unknown (not
	// synced yet, or the group is someone else's now).
	target, standsFor int64
	// syncedAt is the source read time of the sync that set target.
	syncedAt time.Time
	note     string
}

func newGroupSyncer(commit GroupCommitter, m *metrics.Metrics, log *slog.Logger, refused func(link string) error) *groupSyncer {
	return &groupSyncer{commit: commit, metrics: m, log: log, wake: make(chan struct{}, 1), refused: refused,
		pending: map[groupKey]map[topicPartition]wantPart{}, state: map[groupKey]*groupState{}, perLink: map[string]int{},
		follow: map[linkPartition]following{}}
}

// offer queues a group's partitions as tr translated them, replacing what
// is queued of the same partitions.
func (g *groupSyncer) offer(k groupKey, parts map[topicPartition]wantPart, tr *translation.Translator) {
	g.mu.Lock()
	for tp, w := range parts {
		g.follow[linkPartition{k.link, tp}] = following{tr: tr, target: w.target}
	}
	g.queue(k, parts)
}

// queue is offer's bookkeeping, called with g.mu held; it releases it.
func (g *groupSyncer) queue(k groupKey, parts map[topicPartition]wantPart) {
	if g.state[k] == nil {
		if g.perLink[k.link] >= groupsync.MaxGroups {
			g.mu.Unlock()
			g.metrics.GroupSyncs.WithLabelValues(k.link, outcomeLimit).Inc()
			return
		}
		g.perLink[k.link]++
		g.state[k] = &groupState{parts: map[topicPartition]*groupPart{}}
	}
	st := g.state[k]
	for tp, w := range parts {
		gp := st.parts[tp]
		if gp == nil {
			gp = &groupPart{target: -1, standsFor: -1}
			st.parts[tp] = gp
		}
		if gp.reported != w.reported {
			g.markDirty(k, tp)
		}
		gp.reported, gp.reportedAt = w.reported, w.readAt
	}
	q, queued := g.pending[k]
	if !queued {
		q = map[topicPartition]wantPart{}
		g.pending[k] = q
		g.order = append(g.order, k)
	}
	for tp, w := range parts {
		q[tp] = w
	}
	g.mu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// run syncs what is offered, and every followEvery moves on the groups
// behind what they read, until ctx ends.
func (g *groupSyncer) run(ctx context.Context) {
	tick := time.NewTicker(followEvery)
	defer tick.Stop()
	persisted := time.Now()
	defer g.persistAtEnd()
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.wake:
		case <-tick.C:
			g.advance()
			if time.Since(persisted) >= g.persistEvery {
				_ = g.persist(ctx) // logged, and tried again at the next
				persisted = time.Now()
			}
		}
		for ctx.Err() == nil {
			k, parts, ok := g.next()
			if !ok {
				break
			}
			g.sync(k, parts)
		}
	}
}

// advance queues again every group partition that stands on the target
// for less than what the group last read on the source, where the copy
// has moved on since: translated again, the group moves forward as data
// arrives; and every partition whose translation found the shard's index
// loading, once it has loaded. Partitions not Ferry's (target -1: active
// or owned), queued already, or of a link that does not run are left
// alone.
func (g *groupSyncer) advance() {
	type lagging struct {
		k        groupKey
		tp       topicPartition
		reported int64
		readAt   time.Time
		stands   int64
		f        following
	}
	g.mu.Lock()
	var todo []lagging
	for k, st := range g.state {
		if g.refused != nil && g.refused(k.link) != nil {
			continue
		}
		for tp, gp := range st.parts {
			f, ok := g.follow[linkPartition{k.link, tp}]
			if _, queued := g.pending[k][tp]; queued || !ok {
				continue
			}
			// A partition that found its index loading is translated
			// again once the load is done, rather than at the fetcher's
			// next read of the group (link.groups.interval): a failover
			// in between would find the group without a position there.
			if gp.note != translation.NotLoading && (gp.target < 0 || gp.standsFor >= gp.reported) {
				continue
			}
			todo = append(todo, lagging{k, tp, gp.reported, gp.reportedAt, gp.standsFor, f})
		}
	}
	g.mu.Unlock()
	// Translated without g.mu: the translator has a lock of its own.
	moved := map[groupKey]map[topicPartition]wantPart{}
	for _, l := range todo {
		pos, _, ok := l.f.tr.Translate(l.tp, l.reported)
		if !ok || pos.Source <= l.stands {
			continue // nothing new copied up to what the group read
		}
		if moved[l.k] == nil {
			moved[l.k] = map[topicPartition]wantPart{}
		}
		moved[l.k][l.tp] = wantPart{reported: l.reported, readAt: l.readAt, target: l.f.target, pos: pos, ok: true}
	}
	for k, parts := range moved {
		g.mu.Lock()
		g.queue(k, parts)
	}
}

func (g *groupSyncer) next() (groupKey, map[topicPartition]wantPart, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.order) == 0 {
		return groupKey{}, nil, false
	}
	k := g.order[0]
	g.order = g.order[1:]
	parts := g.pending[k]
	delete(g.pending, k)
	return k, parts, true
}

// sync commits one group's translation and records what it did.
func (g *groupSyncer) sync(k groupKey, parts map[topicPartition]wantPart) {
	want := map[groupcommit.TopicPartition]groupcommit.Position{}
	var readAt time.Time
	beforeIndex := false
	for _, w := range parts {
		if w.readAt.After(readAt) {
			readAt = w.readAt
		}
		if w.ok {
			want[w.target] = w.pos
		}
		beforeIndex = beforeIndex || w.why == translation.NotBeforeIndex
	}
	var (
		res groupcommit.Result
		err error
	)
	g.mu.Lock()
	takeOver := g.state[k] != nil && g.state[k].handedBack
	g.mu.Unlock()
	if len(want) > 0 {
		res, err = g.commit.Move(k.group, want, groupcommit.Options{TakeOver: takeOver})
	} else {
		res.Outcome = groupcommit.Unchanged
	}
	outcome := string(res.Outcome)
	switch {
	case err != nil:
		outcome = outcomeError
	case res.Outcome == groupcommit.Unchanged && beforeIndex:
		outcome = outcomeBeforeIndex
	}
	g.metrics.GroupSyncs.WithLabelValues(k.link, outcome).Inc()
	g.record(k, parts, res, err, outcome, readAt)
}

// record keeps what a sync did in the group's state.
func (g *groupSyncer) record(k groupKey, parts map[topicPartition]wantPart, res groupcommit.Result, err error, outcome string, readAt time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.state[k]
	prev, prevDetail := st.outcome, st.detail
	st.attempted, st.outcome, st.detail = time.Now(), outcome, res.Detail
	if err != nil {
		st.detail = err.Error()
	}
	if st.outcome != prev || st.detail != prevDetail {
		// Every partition's record carries the group's outcome.
		for tp := range st.parts {
			g.markDirty(k, tp)
		}
	}
	// Synced: the group's target position now follows this read (a group
	// with nothing translated, its index loading or its data not copied,
	// follows nothing).
	synced := err == nil && res.At != nil && (res.Outcome == groupcommit.Moved || res.Outcome == groupcommit.Unchanged)
	if synced {
		st.synced = readAt
	}
	for tp, w := range parts {
		gp := st.parts[tp]
		was := *gp
		gp.note = w.why
		switch {
		case res.Outcome == groupcommit.Active || res.Outcome == groupcommit.Owned:
			gp.target, gp.standsFor, gp.syncedAt = -1, -1, time.Time{} // the group's position is not Ferry's
		case synced:
			// A position taken over but left (backwards) stands for no
			// known source offset: it is not Ferry's yet.
			if at, ok := res.At[w.target]; ok && at.Source >= 0 {
				gp.target, gp.standsFor, gp.syncedAt = at.Target, at.Source, readAt
				if at.Source > w.reported {
					gp.note = noteBehind
				}
			}
		}
		if *gp != was {
			g.markDirty(k, tp)
		}
	}
	if st.handedBack && synced && allMarked(st, parts, res) {
		st.handedBack = false
		for tp := range st.parts {
			g.markDirty(k, tp)
		}
		g.log.Info("group taken back by the sync", "link", k.link, "group", k.group)
	}
	if outcome != prev && (err != nil || res.Outcome == groupcommit.Owned) {
		g.log.Warn("group not synced", "link", k.link, "group", k.group, "outcome", outcome, "detail", st.detail)
	}
}

// allMarked is whether, after the sync res of parts, every partition the
// group's state follows carries Ferry's marker on the target: those the
// sync moved, marked or found unchanged, and those it left behind that
// had it already. Called with g.mu held.
func allMarked(st *groupState, parts map[topicPartition]wantPart, res groupcommit.Result) bool {
	for tp := range st.parts {
		w, ok := parts[tp]
		if !ok {
			return false
		}
		step, ok := res.Steps[w.target]
		if !ok || (step.Action == groupcommit.StepBackwards && !groupsync.IsFerry(step.Metadata)) {
			return false
		}
	}
	return true
}

// handBack returns link's groups to the sync (HandBackGroups); known are
// those its sync follows, marked handed back, the rest unknown.
func (g *groupSyncer) handBack(link string, groups []string) (known, unknown []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, name := range groups {
		k := groupKey{link, name}
		st := g.state[k]
		if st == nil || len(st.parts) == 0 {
			unknown = append(unknown, name)
			continue
		}
		if !st.handedBack {
			st.handedBack = true
			for tp := range st.parts {
				g.markDirty(k, tp)
			}
		}
		known = append(known, name)
	}
	return known, unknown
}

// GroupStatus is one group's line in /status.
type GroupStatus struct {
	Link  string `json:"link"`
	Group string `json:"group"`
	// Outcome is what the last sync did (moved, unchanged, active, owned,
	// before_index, error), at LastAttempt.
	Outcome     string    `json:"outcome"`
	Detail      string    `json:"detail,omitempty"`
	LastAttempt time.Time `json:"last_attempt"`
	// SyncAge is the age, in seconds, of the source read the group's
	// target position last followed (a moved or unchanged sync); absent
	// when it never did.
	SyncAge *float64 `json:"sync_age_seconds,omitempty"`
	// RereadRecords is the re-read exposure: the records the group would
	// read again after a failover now, the sum over its partitions of the
	// source offset last read, or the committed end when the group read
	// past what the target holds (the rest would be lost, not read again:
	// the failover meter counts it), minus the source offset its target
	// position stands for (0 when caught up). Offsets: transaction markers
	// and aborted records in the range count. Absent when no partition's
	// target position is Ferry's.
	RereadRecords *int64                 `json:"failover_reread_records,omitempty"`
	Partitions    []GroupPartitionStatus `json:"partitions"`
	// HandedBack: returned to the sync after a round trip
	// (HandBackGroups); its next sync takes its target offsets over.
	HandedBack bool `json:"handed_back,omitempty"`
}

// GroupPartitionStatus is one partition of a group.
type GroupPartitionStatus struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// SourceOffset is the group's committed offset on the source, as the
	// fetcher last read it.
	SourceOffset int64 `json:"source_offset"`
	// TargetOffset is where Ferry's commit puts the group on the target
	// and StandsFor the source offset that position stands for; -1 when
	// not known (not synced, or the group is not Ferry's to move).
	TargetOffset int64 `json:"target_offset"`
	StandsFor    int64 `json:"target_stands_for_source_offset"`
	// Note says why the partition was not synced (before_index,
	// index_loading, not_copied) or is behind (the source group was
	// rewound: the target is left, a group never moves backwards).
	Note string `json:"note,omitempty"`
	// SyncedReadAt is when the fetcher read the source offsets that
	// TargetOffset follows (its clock): a planned failover waits for one
	// after the drain. Absent when unknown.
	SyncedReadAt *time.Time `json:"synced_read_at,omitempty"`
}

// Groups is the group sync's state, by link and group.
func (s *Server) Groups() []GroupStatus {
	if s.groups == nil {
		return nil
	}
	return s.groups.status(time.Now(), func(link string, tp topicPartition) int64 {
		return s.committed(heartbeat.Key{Link: link, Topic: tp.Topic, Partition: tp.Partition})
	})
}

// status is the groups' state; committed is a partition's committed next
// source offset (-1: none), which bounds the re-read exposure.
func (g *groupSyncer) status(now time.Time, committed func(link string, tp topicPartition) int64) []GroupStatus {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]GroupStatus, 0, len(g.state))
	for k, st := range g.state {
		gs := GroupStatus{Link: k.link, Group: k.group, Outcome: st.outcome, Detail: st.detail, LastAttempt: st.attempted, HandedBack: st.handedBack}
		if !st.synced.IsZero() {
			age := max(0, now.Sub(st.synced).Seconds())
			gs.SyncAge = &age
		}
		var reread int64
		known := false
		for tp, gp := range st.parts {
			ps := GroupPartitionStatus{Topic: tp.Topic, Partition: tp.Partition,
				SourceOffset: gp.reported, TargetOffset: gp.target, StandsFor: gp.standsFor, Note: gp.note}
			if !gp.syncedAt.IsZero() {
				at := gp.syncedAt.UTC()
				ps.SyncedReadAt = &at
			}
			gs.Partitions = append(gs.Partitions, ps)
			if gp.standsFor >= 0 {
				known = true
				reread += groupsync.Reread(gp.reported, gp.standsFor, committed(k.link, tp))
			}
		}
		if known {
			gs.RereadRecords = &reread
		}
		slices.SortFunc(gs.Partitions, func(a, b GroupPartitionStatus) int {
			return strings.Compare(a.Topic, b.Topic)*2 + cmpInt(a.Partition, b.Partition)
		})
		out = append(out, gs)
	}
	slices.SortFunc(out, func(a, b GroupStatus) int {
		return strings.Compare(a.Link+"\x00"+a.Group, b.Link+"\x00"+b.Group)
	})
	return out
}

// groupMetrics is the group sync's state as the metrics serve it.
func (s *Server) groupMetrics() []metrics.GroupSync {
	var out []metrics.GroupSync
	for _, gs := range s.Groups() {
		m := metrics.GroupSync{Link: gs.Link, Group: gs.Group}
		if gs.SyncAge != nil {
			m.Age, m.HasAge = *gs.SyncAge, true
		}
		if gs.RereadRecords != nil {
			m.Reread, m.HasReread = *gs.RereadRecords, true
		}
		out = append(out, m)
	}
	return out
}

// RunGroupSync runs the writer's group syncer until ctx ends; it returns
// at once when the writer syncs no groups (Options.Groups nil).
func (s *Server) RunGroupSync(ctx context.Context) {
	if s.groups != nil {
		s.groups.run(ctx)
	}
}
