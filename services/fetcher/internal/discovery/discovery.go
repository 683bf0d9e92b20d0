// Package discovery finds the source topics a link replicates and splits
// their partitions into shards.
//
// A partition's shard is a stable hash of its topic and number modulo the
// link's fixed shard count, so new topics and partitions join shards without
// moving any partition already placed.
package discovery

import (
	"fmt"
	"regexp"
	"sort"

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
