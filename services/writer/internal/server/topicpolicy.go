package server

import (
	"fmt"
	"strings"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/services/writer/internal/topics"
)

// An admitted fetcher names the topics of its Open itself, and the writer
// writes each to its target name. Nothing in the fetcher's settings can be
// trusted to keep it off the writer's own state or Kafka's, so every topic
// of an Open is checked here, before anything is created or produced.
// Checking the Open's topics covers its batches too: a batch's partition
// must be one the Open listed (session.check), and each listed partition
// must belong to one of the Open's topics (newSession).

// kafkaInternal are the topics Kafka keeps its own state in. Writing them
// would corrupt consumer groups, transactions or share groups of the whole
// target cluster.
var kafkaInternal = map[string]bool{
	"__consumer_offsets":    true,
	"__transaction_state":   true,
	"__share_group_state":   true,
	"__cluster_metadata":    true,
	"__remote_log_metadata": true,
}

// ferryReserved is the prefix of Ferry's own topics (the default checkpoint
// topic among them); no link may write a target topic starting with it.
const ferryReserved = "__ferry"

// checkTopic refuses a source topic the link may not replicate: one whose
// target name is reserved, whatever the link's settings, a platform topic
// the link does not name, or one outside the link's allow list.
func (s *Server) checkTopic(link Link, source string) error {
	target := link.Naming.Target(source)
	if why := s.reserved(target); why != "" {
		return fmt.Errorf("%w: link %q, topic %q: target topic %q is %s", errTopicRefused, link.Name, source, target, why)
	}
	if topics.Platform(target) && !link.PlatformTopics[target] {
		return fmt.Errorf("%w: link %q, topic %q: target topic %q is a platform topic (Schema Registry, Kafka Connect, Confluent, MirrorMaker 2) "+
			"that no link writes unless its links[].platform_topics names it", errTopicRefused, link.Name, source, target)
	}
	if err := link.Topics.Check(source); err != nil {
		return fmt.Errorf("%w: link %q, topic %q: %v of the writer's link", errTopicRefused, link.Name, source, err)
	}
	return nil
}

// reserved says why no link may write the target topic, "" if one may.
func (s *Server) reserved(target string) string {
	switch {
	case target == s.store.Topic():
		return "the writer's checkpoint topic"
	case target == s.opts.Index.Name:
		return "the writer's offset index topic"
	case s.opts.HeartbeatsTopic != "" && target == s.opts.HeartbeatsTopic:
		return "the writer's heartbeat topic"
	case kafkaInternal[target]:
		return "a Kafka internal topic"
	case strings.HasPrefix(target, ferryReserved):
		return "reserved for Ferry (prefix " + ferryReserved + ")"
	}
	return ""
}

// checkSpec refuses a topic spec of an Open whose target name is no topic
// Kafka could have, or a topic the Open already described (checkOpen has
// checked the source name). The writer checks names itself rather than
// leaving them to the target: a name becomes part of checkpoint keys,
// which a slash would split, and a fetcher sending one is told it made a
// bad request instead of seeing a target failure it retries forever. A
// topic described twice would leave which partition count holds to the
// order of the specs.
func checkSpec(link Link, t *ferryv1.TopicSpec, counts map[string]int32) error {
	name := t.GetName()
	if err := checkTopicName(link.Naming.Target(name)); err != nil {
		return fmt.Errorf("%w: link %q, target topic of %q: %v", errBadOpen, link.Name, name, err)
	}
	if _, dup := counts[name]; dup {
		return fmt.Errorf("%w: topic %q described twice", errBadOpen, name)
	}
	if t.GetPartitionCount() < 1 {
		return fmt.Errorf("%w: topic %q with %d partitions", errBadOpen, name, t.GetPartitionCount())
	}
	return nil
}

// checkTopicName refuses a name Kafka refuses (Topic.validate): 1 to 249
// ASCII letters, digits, '.', '_' and '-', and neither "." nor "..".
func checkTopicName(name string) error {
	if len(name) == 0 || len(name) > MaxTopicName {
		return fmt.Errorf("name of %d bytes (1 to %d)", len(name), MaxTopicName)
	}
	if name == "." || name == ".." {
		return fmt.Errorf("name %q", name)
	}
	for i := range len(name) {
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return fmt.Errorf("name %q: byte %d is %q (letters, digits, '.', '_' and '-' only)", name, i, c)
		}
	}
	return nil
}
