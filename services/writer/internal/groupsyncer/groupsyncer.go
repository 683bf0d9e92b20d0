// Package groupsyncer is the writer's half of consumer-group sync: it
// commits each group's latest translated offsets to the target group
// (package groupcommit) on a goroutine of its own, follows the groups
// behind what they read as the copy moves on, keeps what every sync did
// for the failover and failback reports, and writes that state to the
// target cluster (package groupstate) so it outlives the writer.
//
// The replication stream only offers it translations (Offer): a slow or
// unreachable group coordinator never holds up copying. The syncer keeps
// only the latest translation of each (link, group, partition): a group
// read again before the syncer reached it is synced once, with the newer
// offsets.
package groupsyncer

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ferry-replicator/ferry/pkg/groupcommit"
	"github.com/ferry-replicator/ferry/pkg/groupsync"
	"github.com/ferry-replicator/ferry/services/writer/internal/groupstate"
	"github.com/ferry-replicator/ferry/services/writer/internal/metrics"
	"github.com/ferry-replicator/ferry/services/writer/internal/partkey"
	"github.com/ferry-replicator/ferry/services/writer/internal/translation"
)

// Committer commits translated positions to one target group
// (groupcommit.Committer).
type Committer interface {
	Move(group string, want map[groupcommit.TopicPartition]groupcommit.Position, o groupcommit.Options) (groupcommit.Result, error)
}

// Translator answers where a source offset lands on the target
// (translation.Translator): the syncer asks the translator of the stream
// that last reported a group partition again as the copy moves on.
type Translator interface {
	Translate(tp partkey.Partition, s int64) (pos groupcommit.Position, why string, ok bool)
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

// NoteBehind marks a partition whose group stands on the target for a
// later source offset than the source group now has: the group was
// rewound on the source, and the target is left where it is (a group
// never moves backwards).
const NoteBehind = "behind"

// Key names a group of a link.
type Key struct{ Link, Group string }

// Want is one partition of a group as a stream translated it.
type Want struct {
	Reported int64     // the source offset the fetcher read
	ReadAt   time.Time // when it read it
	Target   groupcommit.TopicPartition
	Pos      groupcommit.Position // valid when OK
	OK       bool
	Why      string // when not OK: translation's reason
}

// Syncer commits the latest translation of each group, one group at
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
type Syncer struct {
	commit  Committer
	metrics *metrics.Metrics
	log     *slog.Logger
	wake    chan struct{}
	// refused is nil while a link runs (the writer's link state): a link failed
	// over or paused is not followed, so its groups stay where the failover
	// report found them.
	refused func(link string) error

	mu sync.Mutex
	// pending are the translations not synced yet, latest per partition;
	// order, their groups in the order they came.
	pending map[Key]map[partkey.Partition]Want
	order   []Key
	// state is what the syncs did, per group; perLink counts its groups,
	// bounded by groupsync.MaxGroups.
	state   map[Key]*groupState
	perLink map[string]int
	// follow is, per link and source partition, the translator of the
	// stream that last reported a group's offset on it, and its target
	// partition: what advance translates through.
	follow map[linkPartition]following

	// store keeps state in the target cluster (nil: memory only), every
	// persistEvery: dirty are the group partitions changed since the last
	// write (state.go).
	store        Store
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
	tp   partkey.Partition
}

type following struct {
	tr     Translator
	target groupcommit.TopicPartition
}

// groupState is what the writer knows of a group's sync.
type groupState struct {
	attempted time.Time // last sync
	synced    time.Time // source read time of the last moved or unchanged sync
	outcome   string
	detail    string
	parts     map[partkey.Partition]*groupPart
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

// Config is what a Syncer needs.
type Config struct {
	Commit Committer
	// Store keeps the state in the target cluster, written every
	// PersistEvery (5 s when 0) and read back by Restore; nil: memory
	// only (tests).
	Store        Store
	PersistEvery time.Duration
	// Refused says why a link does not run (nil while it runs): its
	// groups are not followed.
	Refused func(link string) error
	Metrics *metrics.Metrics
	Log     *slog.Logger
}

// New is a syncer; Run runs it.
func New(c Config) *Syncer {
	every := c.PersistEvery
	if every <= 0 {
		every = 5 * time.Second
	}
	return &Syncer{commit: c.Commit, metrics: c.Metrics, log: c.Log, wake: make(chan struct{}, 1), refused: c.Refused,
		store: c.Store, persistEvery: every,
		pending: map[Key]map[partkey.Partition]Want{}, state: map[Key]*groupState{}, perLink: map[string]int{},
		follow: map[linkPartition]following{}}
}

// offer queues a group's partitions as tr translated them, replacing what
// is queued of the same partitions.
func (g *Syncer) Offer(k Key, parts map[partkey.Partition]Want, tr Translator) {
	g.mu.Lock()
	for tp, w := range parts {
		g.follow[linkPartition{k.Link, tp}] = following{tr: tr, target: w.Target}
	}
	g.queue(k, parts)
}

// queue is offer's bookkeeping, called with g.mu held; it releases it.
func (g *Syncer) queue(k Key, parts map[partkey.Partition]Want) {
	if g.state[k] == nil {
		if g.perLink[k.Link] >= groupsync.MaxGroups {
			g.mu.Unlock()
			g.metrics.GroupSyncs.WithLabelValues(k.Link, outcomeLimit).Inc()
			return
		}
		g.perLink[k.Link]++
		g.state[k] = &groupState{parts: map[partkey.Partition]*groupPart{}}
	}
	st := g.state[k]
	for tp, w := range parts {
		gp := st.parts[tp]
		if gp == nil {
			gp = &groupPart{target: -1, standsFor: -1}
			st.parts[tp] = gp
		}
		if gp.reported != w.Reported {
			g.markDirty(k, tp)
		}
		gp.reported, gp.reportedAt = w.Reported, w.ReadAt
	}
	q, queued := g.pending[k]
	if !queued {
		q = map[partkey.Partition]Want{}
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
func (g *Syncer) Run(ctx context.Context) {
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
			g.Advance()
			if time.Since(persisted) >= g.persistEvery {
				_ = g.Persist(ctx) // logged, and tried again at the next
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
func (g *Syncer) Advance() {
	type lagging struct {
		k        Key
		tp       partkey.Partition
		reported int64
		readAt   time.Time
		stands   int64
		f        following
	}
	g.mu.Lock()
	var todo []lagging
	for k, st := range g.state {
		if g.refused != nil && g.refused(k.Link) != nil {
			continue
		}
		for tp, gp := range st.parts {
			f, ok := g.follow[linkPartition{k.Link, tp}]
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
	moved := map[Key]map[partkey.Partition]Want{}
	for _, l := range todo {
		pos, _, ok := l.f.tr.Translate(l.tp, l.reported)
		if !ok || pos.Source <= l.stands {
			continue // nothing new copied up to what the group read
		}
		if moved[l.k] == nil {
			moved[l.k] = map[partkey.Partition]Want{}
		}
		moved[l.k][l.tp] = Want{Reported: l.reported, ReadAt: l.readAt, Target: l.f.target, Pos: pos, OK: true}
	}
	for k, parts := range moved {
		g.mu.Lock()
		g.queue(k, parts)
	}
}

// SyncQueued syncs every group queued, on the caller's goroutine: what
// Run does as groups arrive, for a syncer that does not run (tests drive
// one so).
func (g *Syncer) SyncQueued() {
	for {
		k, parts, ok := g.next()
		if !ok {
			return
		}
		g.sync(k, parts)
	}
}

func (g *Syncer) next() (Key, map[partkey.Partition]Want, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.order) == 0 {
		return Key{}, nil, false
	}
	k := g.order[0]
	g.order = g.order[1:]
	parts := g.pending[k]
	delete(g.pending, k)
	return k, parts, true
}

// sync commits one group's translation and records what it did.
func (g *Syncer) sync(k Key, parts map[partkey.Partition]Want) {
	want := map[groupcommit.TopicPartition]groupcommit.Position{}
	var readAt time.Time
	beforeIndex := false
	for _, w := range parts {
		if w.ReadAt.After(readAt) {
			readAt = w.ReadAt
		}
		if w.OK {
			want[w.Target] = w.Pos
		}
		beforeIndex = beforeIndex || w.Why == translation.NotBeforeIndex
	}
	var (
		res groupcommit.Result
		err error
	)
	g.mu.Lock()
	takeOver := g.state[k] != nil && g.state[k].handedBack
	g.mu.Unlock()
	if len(want) > 0 {
		res, err = g.commit.Move(k.Group, want, groupcommit.Options{TakeOver: takeOver})
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
	g.metrics.GroupSyncs.WithLabelValues(k.Link, outcome).Inc()
	g.record(k, parts, res, err, outcome, readAt)
}

// record keeps what a sync did in the group's state.
func (g *Syncer) record(k Key, parts map[partkey.Partition]Want, res groupcommit.Result, err error, outcome string, readAt time.Time) {
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
		gp.note = w.Why
		switch {
		case res.Outcome == groupcommit.Active || res.Outcome == groupcommit.Owned:
			gp.target, gp.standsFor, gp.syncedAt = -1, -1, time.Time{} // the group's position is not Ferry's
		case synced:
			// A position taken over but left (backwards) stands for no
			// known source offset: it is not Ferry's yet.
			if at, ok := res.At[w.Target]; ok && at.Source >= 0 {
				gp.target, gp.standsFor, gp.syncedAt = at.Target, at.Source, readAt
				if at.Source > w.Reported {
					gp.note = NoteBehind
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
		g.log.Info("group taken back by the sync", "link", k.Link, "group", k.Group)
	}
	if outcome != prev && (err != nil || res.Outcome == groupcommit.Owned) {
		g.log.Warn("group not synced", "link", k.Link, "group", k.Group, "outcome", outcome, "detail", st.detail)
	}
}

// allMarked is whether, after the sync res of parts, every partition the
// group's state follows carries Ferry's marker on the target: those the
// sync moved, marked or found unchanged, and those it left behind that
// had it already. Called with g.mu held.
func allMarked(st *groupState, parts map[partkey.Partition]Want, res groupcommit.Result) bool {
	for tp := range st.parts {
		w, ok := parts[tp]
		if !ok {
			return false
		}
		step, ok := res.Steps[w.Target]
		if !ok || (step.Action == groupcommit.StepBackwards && !groupsync.IsFerry(step.Metadata)) {
			return false
		}
	}
	return true
}

// handBack returns link's groups to the sync (HandBackGroups); known are
// those its sync follows, marked handed back, the rest unknown.
func (g *Syncer) HandBack(link string, groups []string) (known, unknown []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, name := range groups {
		k := Key{Link: link, Group: name}
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

// Status is one group's line in /status.
type Status struct {
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
	RereadRecords *int64            `json:"failover_reread_records,omitempty"`
	Partitions    []PartitionStatus `json:"partitions"`
	// HandedBack: returned to the sync after a round trip
	// (HandBackGroups); its next sync takes its target offsets over.
	HandedBack bool `json:"handed_back,omitempty"`
}

// PartitionStatus is one partition of a group.
type PartitionStatus struct {
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

// status is the groups' state; committed is a partition's committed next
// source offset (-1: none), which bounds the re-read exposure.
func (g *Syncer) Status(now time.Time, committed func(link string, tp partkey.Partition) int64) []Status {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]Status, 0, len(g.state))
	for k, st := range g.state {
		gs := Status{Link: k.Link, Group: k.Group, Outcome: st.outcome, Detail: st.detail, LastAttempt: st.attempted, HandedBack: st.handedBack}
		if !st.synced.IsZero() {
			age := max(0, now.Sub(st.synced).Seconds())
			gs.SyncAge = &age
		}
		var reread int64
		known := false
		for tp, gp := range st.parts {
			ps := PartitionStatus{Topic: tp.Topic, Partition: tp.Partition,
				SourceOffset: gp.reported, TargetOffset: gp.target, StandsFor: gp.standsFor, Note: gp.note}
			if !gp.syncedAt.IsZero() {
				at := gp.syncedAt.UTC()
				ps.SyncedReadAt = &at
			}
			gs.Partitions = append(gs.Partitions, ps)
			if gp.standsFor >= 0 {
				known = true
				reread += groupsync.Reread(gp.reported, gp.standsFor, committed(k.Link, tp))
			}
		}
		if known {
			gs.RereadRecords = &reread
		}
		slices.SortFunc(gs.Partitions, func(a, b PartitionStatus) int {
			return strings.Compare(a.Topic, b.Topic)*2 + cmp.Compare(a.Partition, b.Partition)
		})
		out = append(out, gs)
	}
	slices.SortFunc(out, func(a, b Status) int {
		return strings.Compare(a.Link+"\x00"+a.Group, b.Link+"\x00"+b.Group)
	})
	return out
}
