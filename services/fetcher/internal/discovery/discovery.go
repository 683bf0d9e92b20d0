// Package discovery finds the source topics a link replicates and splits
// their partitions into shards.
//
// A partition's shard is a stable hash of its topic and number modulo the
// link's fixed shard count, so new topics and partitions join shards without
// moving any partition already placed.
package discovery

import (
	"cmp"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/IBM/sarama"

	"github.com/ferry-replicator/ferry/pkg/shards"
)

// Partition names one source partition.
type Partition struct {
	Topic     string
	Partition int32
}

// Topic describes a selected source topic.
type Topic struct {
	Name       string
	Partitions int32
	// Configs holds the topic's non-default configuration.
	Configs map[string]string
	// ID is the Kafka topic ID (nil when the cluster reports none).
	ID []byte
	// ACLs are the topic's ALLOW Read and Describe ACLs (AddACLs), sorted;
	// nil unless link.sync_acls.
	ACLs []ACL
}

// ACL is an ALLOW ACL that applies to a topic.
type ACL struct {
	Principal, Host string
	Operation       sarama.AclOperation
}

// SameSettings says whether t and u have the same configs and ACLs: a
// shard whose topics' settings changed is reopened, so its writer gets
// them.
func (t Topic) SameSettings(u Topic) bool {
	return maps.Equal(t.Configs, u.Configs) && slices.Equal(t.ACLs, u.ACLs)
}

// ACLLister is the part of sarama's ClusterAdmin AddACLs needs.
type ACLLister interface {
	ListAcls(filter sarama.AclFilter) ([]sarama.ResourceAcls, error)
}

// AddACLs sets each planned topic's ACLs: the source's ALLOW Read and
// Describe topic ACLs whose pattern covers its name (literal on the name
// or on "*", prefixed on a prefix of it). Write and DENY ACLs are never
// taken (as MirrorMaker 2's sync.topic.acls takes no Write), and other
// operations neither: the writers create only what a consumer needs.
func AddACLs(l ACLLister, plan *Plan) error {
	rs, err := l.ListAcls(sarama.AclFilter{
		ResourceType: sarama.AclResourceTopic, ResourcePatternTypeFilter: sarama.AclPatternAny,
		Operation: sarama.AclOperationAny, PermissionType: sarama.AclPermissionAllow,
	})
	if err != nil {
		return fmt.Errorf("list source topic ACLs: %w", err)
	}
	for name, t := range plan.Topics {
		t.ACLs = nil
		for _, r := range rs {
			if !covers(r.Resource, name) {
				continue
			}
			for _, a := range r.Acls {
				if a.PermissionType == sarama.AclPermissionAllow && (a.Operation == sarama.AclOperationRead || a.Operation == sarama.AclOperationDescribe) {
					t.ACLs = append(t.ACLs, ACL{Principal: a.Principal, Host: a.Host, Operation: a.Operation})
				}
			}
		}
		slices.SortFunc(t.ACLs, func(a, b ACL) int {
			return cmp.Or(cmp.Compare(a.Principal, b.Principal), cmp.Compare(a.Host, b.Host), cmp.Compare(a.Operation, b.Operation))
		})
		t.ACLs = slices.Compact(t.ACLs)
		plan.Topics[name] = t
	}
	return nil
}

// covers says whether an ACL resource applies to topic.
func covers(r sarama.Resource, topic string) bool {
	switch r.ResourcePatternType {
	case sarama.AclPatternLiteral:
		return r.ResourceName == topic || r.ResourceName == "*"
	case sarama.AclPatternPrefixed:
		return strings.HasPrefix(topic, r.ResourceName)
	}
	return false
}

// Plan is the link's current view of the source.
type Plan struct {
	Topics map[string]Topic
	// Shards maps each non-empty shard to its partitions, sorted.
	Shards map[int][]Partition
}

// Selector decides which topics a link replicates.
type Selector struct {
	include, exclude []*regexp.Regexp
}

// NewSelector compiles the expressions, anchoring each at both ends as
// MirrorMaker 2 does.
func NewSelector(include, exclude []string) (Selector, error) {
	var s Selector
	for _, re := range include {
		c, err := regexp.Compile("^(?:" + re + ")$")
		if err != nil {
			return Selector{}, fmt.Errorf("include %q: %w", re, err)
		}
		s.include = append(s.include, c)
	}
	for _, re := range exclude {
		c, err := regexp.Compile("^(?:" + re + ")$")
		if err != nil {
			return Selector{}, fmt.Errorf("exclude %q: %w", re, err)
		}
		s.exclude = append(s.exclude, c)
	}
	return s, nil
}

// Match reports whether the link replicates the topic.
func (s Selector) Match(topic string) bool {
	for _, re := range s.exclude {
		if re.MatchString(topic) {
			return false
		}
	}
	for _, re := range s.include {
		if re.MatchString(topic) {
			return true
		}
	}
	return false
}

// Lister is the part of sarama's ClusterAdmin discovery needs.
type Lister interface {
	ListTopics() (map[string]sarama.TopicDetail, error)
	DescribeTopics(topics []string) ([]*sarama.TopicMetadata, error)
}

// Discover lists the source and builds the plan for n shards.
func Discover(l Lister, sel Selector, n int) (Plan, error) {
	details, err := l.ListTopics()
	if err != nil {
		return Plan{}, fmt.Errorf("list source topics: %w", err)
	}
	plan := Plan{Topics: map[string]Topic{}, Shards: map[int][]Partition{}}
	for name, d := range details {
		if !sel.Match(name) || d.NumPartitions < 1 {
			continue
		}
		t := Topic{Name: name, Partitions: d.NumPartitions, Configs: map[string]string{}}
		for k, v := range d.ConfigEntries {
			if v != nil {
				t.Configs[k] = *v
			}
		}
		plan.Topics[name] = t
		for p := range d.NumPartitions {
			s := shards.Of(name, p, n)
			plan.Shards[s] = append(plan.Shards[s], Partition{Topic: name, Partition: p})
		}
	}
	if len(plan.Topics) > 0 {
		names := make([]string, 0, len(plan.Topics))
		for n := range plan.Topics {
			names = append(names, n)
		}
		meta, err := l.DescribeTopics(names)
		if err != nil {
			return Plan{}, fmt.Errorf("describe source topics: %w", err)
		}
		for _, m := range meta {
			if t, ok := plan.Topics[m.Name]; ok && m.Err == sarama.ErrNoError && m.Uuid != (sarama.Uuid{}) {
				t.ID = append([]byte(nil), m.Uuid[:]...)
				plan.Topics[m.Name] = t
			}
		}
	}
	for _, parts := range plan.Shards {
		sort.Slice(parts, func(i, j int) bool {
			if parts[i].Topic != parts[j].Topic {
				return parts[i].Topic < parts[j].Topic
			}
			return parts[i].Partition < parts[j].Partition
		})
	}
	return plan, nil
}
