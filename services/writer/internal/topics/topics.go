// Package topics makes sure target topics exist like their source topics:
// at least as many partitions, so every record keeps its partition number,
// and the source's configuration minus what describes the source cluster.
package topics

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"sync"

	"github.com/IBM/sarama"
)

// Spec is what the target topic must look like.
type Spec struct {
	Name              string
	Partitions        int32
	ReplicationFactor int16
	Configs           map[string]string
}

// Ensurer creates or grows target topics. It remembers what it has seen, so
// an Open for a known topic costs no admin request.
type Ensurer struct {
	admin sarama.ClusterAdmin
	log   *slog.Logger

	mu    sync.Mutex
	known map[string]int32 // topic -> partitions known to exist
}

// New builds an Ensurer on its own admin client.
func New(addrs []string, cfg *sarama.Config, log *slog.Logger) (*Ensurer, error) {
	admin, err := sarama.NewClusterAdmin(addrs, cfg)
	if err != nil {
		return nil, fmt.Errorf("target admin: %w", err)
	}
	return &Ensurer{admin: admin, log: log, known: map[string]int32{}}, nil
}

// Close releases the admin client.
func (e *Ensurer) Close() error { return e.admin.Close() }

// FilterConfigs drops the configs any exclude expression matches.
func FilterConfigs(configs map[string]string, exclude []*regexp.Regexp) map[string]string {
	out := map[string]string{}
next:
	for k, v := range configs {
		for _, re := range exclude {
			if re.MatchString(k) {
				continue next
			}
		}
		out[k] = v
	}
	return out
}

// Ensure makes the topic exist with at least spec.Partitions partitions.
// Concurrent calls for the same topic are safe: losing a creation race to
// another writer is success.
func (e *Ensurer) Ensure(spec Spec) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.known[spec.Name] >= spec.Partitions {
		return nil
	}
	meta, err := e.admin.DescribeTopics([]string{spec.Name})
	if err != nil {
		return fmt.Errorf("describe target topic %s: %w", spec.Name, err)
	}
	have := int32(0)
	if len(meta) == 1 && meta[0].Err == sarama.ErrNoError {
		have = int32(len(meta[0].Partitions))
	}
	switch {
	case have == 0:
		entries := map[string]*string{}
		for k, v := range spec.Configs {
			entries[k] = &v
		}
		err := e.admin.CreateTopic(spec.Name, &sarama.TopicDetail{
			NumPartitions:     spec.Partitions,
			ReplicationFactor: spec.ReplicationFactor,
			ConfigEntries:     entries,
		}, false)
		if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
			return fmt.Errorf("create target topic %s: %w", spec.Name, err)
		}
		e.log.Info("created target topic", "topic", spec.Name, "partitions", spec.Partitions, "configs", len(entries))
	case have < spec.Partitions:
		// The source grew; grow the target so partition numbers still match,
		// as MM2 does.
		err := e.admin.CreatePartitions(spec.Name, spec.Partitions, nil, false)
		if err != nil && !errors.Is(err, sarama.ErrInvalidPartitions) {
			return fmt.Errorf("grow target topic %s to %d partitions: %w", spec.Name, spec.Partitions, err)
		}
		e.log.Info("grew target topic", "topic", spec.Name, "from", have, "to", spec.Partitions)
	}
	e.known[spec.Name] = spec.Partitions
	return nil
}

// MaxMessageBytes is the target topic's max.message.bytes: the largest
// record batch its brokers accept.
func (e *Ensurer) MaxMessageBytes(topic string) (int, error) {
	entries, err := e.admin.DescribeConfig(sarama.ConfigResource{
		Type: sarama.TopicResource, Name: topic, ConfigNames: []string{"max.message.bytes"},
	})
	if err != nil {
		return 0, fmt.Errorf("describe target topic %s: %w", topic, err)
	}
	for _, c := range entries {
		if c.Name == "max.message.bytes" {
			n, err := strconv.Atoi(c.Value)
			if err != nil {
				return 0, fmt.Errorf("target topic %s: max.message.bytes %q: %w", topic, c.Value, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("target topic %s: no max.message.bytes in its configuration", topic)
}
