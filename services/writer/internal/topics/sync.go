package topics

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
)

// ConfigSync is what a link does with the configs of a target topic that
// exists (links[].config_sync); a topic it creates takes the copied source
// configs whatever the mode.
type ConfigSync string

const (
	// SyncApply applies source changes and reports drift: the default.
	SyncApply ConfigSync = "apply"
	// SyncOverwrite applies source changes and overwrites drift.
	SyncOverwrite ConfigSync = "overwrite"
	// SyncReport changes nothing and reports every difference as drift.
	SyncReport ConfigSync = "report"
	// SyncOff reads no target config: configs are copied at creation only.
	SyncOff ConfigSync = "off"
)

// ParseConfigSync checks a links[].config_sync value.
func ParseConfigSync(s string) (ConfigSync, error) {
	switch m := ConfigSync(s); m {
	case SyncApply, SyncOverwrite, SyncReport, SyncOff:
		return m, nil
	}
	return "", fmt.Errorf("%q: want apply, overwrite, report or off", s)
}

// ACL is a source topic's ALLOW ACL to create on the target topic.
type ACL struct {
	Principal string
	Host      string
	Operation sarama.AclOperation
}

// Drift is a target config that differs from the source's copied value
// while the source has not changed it since Ferry last looked: someone
// changed the target by hand (or before Ferry synced configs).
type Drift struct {
	Link   string `json:"link"`
	Topic  string `json:"topic"`
	Config string `json:"config"`
	// Target is the target topic's value; Source the copied source value,
	// empty when the source leaves the config at its default (SourceSet
	// false).
	Target    string    `json:"target"`
	Source    string    `json:"source"`
	SourceSet bool      `json:"source_set"`
	Since     time.Time `json:"since"`
}

// Desired is what a link's open says a target topic should have.
type Desired struct {
	Link string
	Mode ConfigSync
	// Allow are the configs Ferry looks after (ConfigCopy.Allow): any
	// other target config is the target operator's, never read.
	Allow map[string]bool
	// Configs are the source's configs as ConfigCopy.Copy keeps them.
	Configs map[string]string
	// ACLs are created on the target topic; nil creates none.
	ACLs []ACL
}

// Syncer keeps existing target topics' configs like their source's
// (docs/configuration.md, links[].config_sync): a config the source
// changed is applied with IncrementalAlterConfigs; one that differs
// although the source did not change since the last sync is drift, set
// on the target by hand, and is reported (metric, /status, a log line)
// rather than overwritten, unless the link overwrites. It also creates
// the topics' synced ACLs.
//
// What the source had at the last sync (seen) lives in memory: after a
// writer restarts, a difference it finds is drift until the source
// changes again, so a restart never overwrites a hand change.
type Syncer struct {
	admin sarama.ClusterAdmin
	drift *prometheus.GaugeVec // link, topic, config
	log   *slog.Logger

	// mu serialises syncs, held for one topic's: they are rare, and
	// two of a topic must not interleave.
	mu     sync.Mutex
	topics map[string]*synced // by target topic
	rounds atomic.Int64       // SyncAll rounds completed
}

type synced struct {
	want Desired
	// seen are want.Configs at the last sync that completed; nil before
	// the first.
	seen map[string]string
	// aclsDone are the ACLs created on the target.
	aclsDone map[ACL]bool
	drift    map[string]Drift
}

// NewSyncer syncs through e's admin client; drift is the gauge
// ferry_topic_config_drift{link,topic,config}.
func NewSyncer(e *Ensurer, drift *prometheus.GaugeVec, log *slog.Logger) *Syncer {
	return &Syncer{admin: e.admin, drift: drift, log: log, topics: map[string]*synced{}}
}

// Offer records what topic (a target topic that exists) should have, and
// syncs it at once when that changed: an open after a source change
// applies it without waiting for the next round.
func (s *Syncer) Offer(topic string, want Desired) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.topics[topic]
	if t == nil {
		t = &synced{aclsDone: map[ACL]bool{}, drift: map[string]Drift{}}
		s.topics[topic] = t
	} else if sameDesired(t.want, want) {
		return nil
	}
	t.want = want
	return s.syncLocked(topic, t)
}

func sameDesired(a, b Desired) bool {
	return a.Link == b.Link && a.Mode == b.Mode && maps.Equal(a.Allow, b.Allow) && maps.Equal(a.Configs, b.Configs) && slices.Equal(a.ACLs, b.ACLs)
}

// Run syncs every offered topic each interval until ctx ends, so drift is
// seen without any open.
func (s *Syncer) Run(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			s.SyncAll()
		}
	}
}

// SyncAll syncs every offered topic once; a topic that fails is logged and
// tried again next round.
func (s *Syncer) SyncAll() {
	s.mu.Lock()
	names := slices.Sorted(maps.Keys(s.topics))
	s.mu.Unlock()
	for _, topic := range names {
		// One topic at a time, so an open waits for one topic's sync at
		// most, not the round's.
		s.mu.Lock()
		err := s.syncLocked(topic, s.topics[topic])
		s.mu.Unlock()
		if err != nil {
			s.log.Warn("topic sync failed; trying again next round", "topic", topic, "err", err)
		}
	}
	s.rounds.Add(1)
}

// Rounds is how many SyncAll rounds have completed.
func (s *Syncer) Rounds() int64 { return s.rounds.Load() }

// Drift returns the drifted configs, sorted by topic and config.
func (s *Syncer) Drift() []Drift {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []Drift{}
	for _, t := range s.topics {
		for _, d := range t.drift {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b Drift) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Config, b.Config))
	})
	return out
}

func (s *Syncer) syncLocked(topic string, t *synced) error {
	if err := s.syncACLs(topic, t); err != nil {
		return err
	}
	if t.want.Mode == SyncOff {
		s.clearDrift(topic, t, nil)
		return nil
	}
	return s.syncConfigs(topic, t)
}

// syncConfigs compares each config Ferry looks after on the target with
// the source's copied value, and applies or reports each difference.
func (s *Syncer) syncConfigs(topic string, t *synced) error {
	entries, err := s.admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic})
	if err != nil {
		return fmt.Errorf("describe target topic %s configs: %w", topic, err)
	}
	have := map[string]sarama.ConfigEntry{}
	for _, e := range entries {
		have[e.Name] = e
	}
	alter := map[string]sarama.IncrementalAlterConfigsEntry{}
	inSync := map[string]bool{}
	for _, k := range slices.Sorted(maps.Keys(t.want.Allow)) {
		want, wantSet := t.want.Configs[k]
		h, ok := have[k]
		// A config the source leaves at its default is in sync while the
		// target does not set it on the topic either (a broker-wide value
		// is the target operator's).
		if (wantSet && ok && h.Value == want) || (!wantSet && (!ok || h.Source != sarama.SourceTopic)) {
			inSync[k] = true
			continue
		}
		if t.want.Mode == SyncOverwrite || (t.want.Mode == SyncApply && sourceChanged(t.seen, t.want.Configs, k)) {
			alter[k] = alterEntry(want, wantSet)
			continue
		}
		s.setDrift(topic, t, Drift{Link: t.want.Link, Topic: topic, Config: k, Target: h.Value, Source: want, SourceSet: wantSet})
	}
	if len(alter) > 0 {
		if err := s.admin.IncrementalAlterConfig(sarama.TopicResource, topic, alter, false); err != nil {
			return fmt.Errorf("alter target topic %s configs %v: %w", topic, slices.Sorted(maps.Keys(alter)), err)
		}
		s.log.Info("applied source configs to the target topic", "link", t.want.Link, "topic", topic, "configs", describeAlter(alter))
		for k := range alter {
			inSync[k] = true
		}
	}
	s.clearDrift(topic, t, inSync)
	t.seen = maps.Clone(t.want.Configs)
	return nil
}

// sourceChanged says whether the source's copied value of k differs from
// the one seen at the last sync; never before the first, so a writer that
// restarts reports a difference instead of undoing a hand change.
func sourceChanged(seen, now map[string]string, k string) bool {
	if seen == nil {
		return false
	}
	a, aok := seen[k]
	b, bok := now[k]
	return aok != bok || a != b
}

func alterEntry(value string, set bool) sarama.IncrementalAlterConfigsEntry {
	if !set {
		// The source went back to its default: so does the target.
		return sarama.IncrementalAlterConfigsEntry{Operation: sarama.IncrementalAlterConfigsOperationDelete}
	}
	return sarama.IncrementalAlterConfigsEntry{Operation: sarama.IncrementalAlterConfigsOperationSet, Value: &value}
}

func describeAlter(alter map[string]sarama.IncrementalAlterConfigsEntry) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(alter)) {
		if e := alter[k]; e.Value != nil {
			out = append(out, k+"="+*e.Value)
		} else {
			out = append(out, k+" (deleted: default)")
		}
	}
	return out
}

// setDrift records a drifted config: the gauge at 1, and a log line when
// it is new or its values changed.
func (s *Syncer) setDrift(topic string, t *synced, d Drift) {
	old, ok := t.drift[d.Config]
	if ok && old.Target == d.Target && old.Source == d.Source && old.SourceSet == d.SourceSet {
		return
	}
	d.Since = time.Now()
	t.drift[d.Config] = d
	s.drift.WithLabelValues(d.Link, topic, d.Config).Set(1)
	s.log.Warn("target topic config drifted from the source: reported, not overwritten (links[].config_sync: overwrite would)",
		"link", d.Link, "topic", topic, "config", d.Config, "target", d.Target, "source", d.Source, "source_set", d.SourceSet)
}

// clearDrift forgets the drift of each config in inSync and of any the
// link no longer looks after; of every config when inSync is nil.
func (s *Syncer) clearDrift(topic string, t *synced, inSync map[string]bool) {
	for k, d := range t.drift {
		if inSync != nil && !inSync[k] && t.want.Allow[k] {
			continue
		}
		delete(t.drift, k)
		s.drift.DeleteLabelValues(d.Link, topic, k)
		s.log.Info("target topic config no longer drifts", "link", d.Link, "topic", topic, "config", k)
	}
}

// syncACLs creates the wanted ACLs not created yet. Kafka keeps one copy
// of an ACL created twice, and an ACL removed on the source is left on
// the target (as MirrorMaker 2 does): revoking is the target operator's
// decision.
func (s *Syncer) syncACLs(topic string, t *synced) error {
	var todo []*sarama.ResourceAcls
	var created []ACL
	for _, a := range t.want.ACLs {
		if t.aclsDone[a] {
			continue
		}
		created = append(created, a)
		todo = append(todo, &sarama.ResourceAcls{
			Resource: sarama.Resource{ResourceType: sarama.AclResourceTopic, ResourceName: topic, ResourcePatternType: sarama.AclPatternLiteral},
			Acls:     []*sarama.Acl{{Principal: a.Principal, Host: a.Host, Operation: a.Operation, PermissionType: sarama.AclPermissionAllow}},
		})
	}
	if len(todo) == 0 {
		return nil
	}
	if err := s.admin.CreateACLs(todo); err != nil {
		return fmt.Errorf("create ACLs on target topic %s: %w", topic, err)
	}
	for _, a := range created {
		t.aclsDone[a] = true
		s.log.Info("created target topic ACL", "link", t.want.Link, "topic", topic, "principal", a.Principal, "host", a.Host, "operation", a.Operation.String(), "permission", "Allow")
	}
	return nil
}
