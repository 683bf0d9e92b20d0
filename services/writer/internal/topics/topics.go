// Package topics makes sure target topics exist like their source topics:
// at least as many partitions, so every record keeps its partition number,
// and the source configs that are safe to take from a fetcher (an allow
// list). It also knows the platform topics no link writes by default.
package topics

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Spec is what the target topic must look like.
type Spec struct {
	Name              string
	Partitions        int32
	ReplicationFactor int16
	Configs           map[string]string
	// Dropped names the source configs not copied (CopyConfigs), for the
	// creation log.
	Dropped []string
}

// Ensurer creates or grows target topics. It remembers what it has seen, so
// an Open for a known topic costs no admin request; a topic the target
// says is gone (Forget) is looked at again by the next Ensure, which
// creates it anew if it was deleted.
type Ensurer struct {
	admin     sarama.ClusterAdmin
	recreated *prometheus.CounterVec // topic
	log       *slog.Logger

	mu    sync.Mutex
	known map[string]int32 // topic -> partitions known to exist
	// lost are known topics the target has since said do not exist: one
	// Ensure finds missing was deleted under the writer.
	lost map[string]bool
}

// New builds an Ensurer on its own admin client; recreated is the counter
// ferry_writer_target_topics_recreated_total{topic}.
func New(addrs []string, cfg *sarama.Config, recreated *prometheus.CounterVec, log *slog.Logger) (*Ensurer, error) {
	admin, err := sarama.NewClusterAdmin(addrs, cfg)
	if err != nil {
		return nil, fmt.Errorf("target admin: %w", err)
	}
	return &Ensurer{admin: admin, recreated: recreated, log: log, known: map[string]int32{}, lost: map[string]bool{}}, nil
}

// Missing reports whether err is the target saying a topic does not exist:
// UNKNOWN_TOPIC_OR_PARTITION or UNKNOWN_TOPIC_ID from a franz-go request
// (the shards' producers), UNKNOWN_TOPIC_OR_PARTITION from a sarama one
// (the admin client, which names topics, never ids).
func Missing(err error) bool {
	return errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID) ||
		errors.Is(err, sarama.ErrUnknownTopicOrPartition)
}

// Forget drops topic from what the Ensurer knows, after the target said
// it does not exist (Missing): otherwise a topic deleted under a running
// writer would be known forever, never created again, and every stream
// writing it would fail until a restart. The next Ensure of it describes
// it, and creates it if it is gone. Forgetting a topic that still exists
// costs that one describe.
func (e *Ensurer) Forget(topic string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.known[topic]; ok {
		delete(e.known, topic)
		e.lost[topic] = true
	}
}

// Close releases the admin client.
func (e *Ensurer) Close() error { return e.admin.Close() }

// DefaultConfigAllow are the source topic configs a created target topic
// takes by default (links[].config_allow). The fetcher reports them, so
// each is one a hostile or mistaken fetcher may set: kept are those that
// describe the data (compaction, compression, record size, retention) and
// whose worst value costs availability, never records; retention is kept
// as the source has it (what users of MirrorMaker 2 expect, and what sizes
// the target's disks) but never below the link's floor (ConfigCopy).
// Left out: segment.* (tiny segments
// exhaust file handles), remote.storage.enable and local.retention.*
// (tiered storage is the target's operator's choice), min.insync.replicas
// and unclean.leader.election.enable (durability of the target),
// message.timestamp.* (the target would refuse old records being
// copied), follower/leader throttles (they describe the source cluster).
var DefaultConfigAllow = []string{
	"cleanup.policy",
	"compression.type",
	"delete.retention.ms",
	"max.compaction.lag.ms",
	"max.message.bytes",
	"min.compaction.lag.ms",
	"retention.bytes",
	"retention.ms",
}

// ConfigCopy is a link's policy for the configs of the target topics it
// creates.
type ConfigCopy struct {
	// Allow are the source configs a created topic takes.
	Allow map[string]bool
	// MinRetentionMs and MinRetentionBytes are the floors of a copied
	// retention.ms and retention.bytes (-1, keep forever, is above every
	// floor): a lower one is raised to the floor, so no fetcher can make
	// the target delete what was copied at once (retention.ms=1), while
	// the target keeps a bound where the source had one (dropping the
	// value instead would leave the target's default, perhaps unbounded,
	// to fill its disks).
	MinRetentionMs, MinRetentionBytes int64
}

// floor is the floor of a retention config, 0 for any other key.
func (c ConfigCopy) floor(key string) int64 {
	switch key {
	case "retention.ms":
		return c.MinRetentionMs
	case "retention.bytes":
		return c.MinRetentionBytes
	}
	return 0
}

// Copy returns the source configs a created target topic takes: those
// allowed, a retention below its floor raised to it. dropped names those
// left out or changed, sorted, for the log.
func (c ConfigCopy) Copy(configs map[string]string) (kept map[string]string, dropped []string) {
	kept = map[string]string{}
	for k, v := range configs {
		if !c.Allow[k] {
			dropped = append(dropped, k)
			continue
		}
		if floor := c.floor(k); floor > 0 {
			n, err := strconv.ParseInt(v, 10, 64)
			switch {
			case err != nil || n < -1:
				dropped = append(dropped, k)
				continue
			case n != -1 && n < floor:
				v = strconv.FormatInt(floor, 10)
				dropped = append(dropped, k+" (raised to the link's floor "+v+")")
			}
		}
		kept[k] = v
	}
	slices.Sort(dropped)
	return kept, dropped
}

// platformTopics are topics other platforms keep their state in on a
// Kafka cluster, which a link writing them under identity naming would
// corrupt: Schema Registry's schemas, Kafka Connect's configs, offsets and
// status. platformPrefixes extends the list to whole families.
var platformTopics = map[string]bool{
	"_schemas":        true,
	"connect-configs": true,
	"connect-offsets": true,
	"connect-status":  true,
}

var platformPrefixes = []string{
	"_confluent", // Confluent Platform: metrics, license, ksqlDB, command topics
	"mm2-",       // MirrorMaker 2's configs, offsets, status and offset syncs
}

// Platform says whether name is a known platform topic (platformTopics):
// no link writes one unless its links[].platform_topics names it.
func Platform(name string) bool {
	if platformTopics[name] {
		return true
	}
	for _, p := range platformPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
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
		if e.lost[spec.Name] {
			// Copying goes on from the checkpoints, which still count the
			// deleted records as copied: they went with the topic, as
			// the operator who deleted it asked (docs/operations.md).
			e.recreated.WithLabelValues(spec.Name).Inc()
			e.log.Warn("target topic deleted under the writer: created again; the records copied to it before are gone, copying goes on from the checkpoints",
				"topic", spec.Name, "partitions", spec.Partitions, "configs", len(entries), "configs_not_copied", spec.Dropped)
			break
		}
		e.log.Info("created target topic", "topic", spec.Name, "partitions", spec.Partitions, "configs", len(entries), "configs_not_copied", spec.Dropped)
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
	delete(e.lost, spec.Name)
	return nil
}

// EnsureOwn makes one of Ferry's own topics exist and returns its
// partition count as the target has it. Unlike Ensure it never grows an
// existing topic: the writer places each key's records by the count (as
// the checkpoint topic does), and growing it would move a key's records
// to another partition from then on.
func (e *Ensurer) EnsureOwn(spec Spec) (int32, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	have, err := e.partitions(spec.Name)
	if err != nil || have > 0 {
		return have, err
	}
	entries := map[string]*string{}
	for k, v := range spec.Configs {
		entries[k] = &v
	}
	err = e.admin.CreateTopic(spec.Name, &sarama.TopicDetail{
		NumPartitions: spec.Partitions, ReplicationFactor: spec.ReplicationFactor, ConfigEntries: entries,
	}, false)
	if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		return 0, fmt.Errorf("create topic %s: %w", spec.Name, err)
	}
	e.log.Info("created topic", "topic", spec.Name, "partitions", spec.Partitions, "configs", spec.Configs)
	// A topic just created is known to the controller before every
	// broker's metadata has it: Apache Kafka answers that it does not
	// exist for a moment (e2e on real Kafka, 2026-12-03).
	deadline := time.Now().Add(ownTopicWait)
	for {
		if have, err = e.partitions(spec.Name); err != nil || have > 0 {
			return have, err
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("topic %s not described within %v of its creation", spec.Name, ownTopicWait)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// ownTopicWait bounds the wait for a topic EnsureOwn created to be
// described.
const ownTopicWait = 30 * time.Second

// partitions is the topic's partition count, 0 when it does not exist.
func (e *Ensurer) partitions(topic string) (int32, error) {
	meta, err := e.admin.DescribeTopics([]string{topic})
	if err != nil {
		return 0, fmt.Errorf("describe topic %s: %w", topic, err)
	}
	if len(meta) == 1 && meta[0].Err == sarama.ErrNoError {
		return int32(len(meta[0].Partitions)), nil
	}
	return 0, nil
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
