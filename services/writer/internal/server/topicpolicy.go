package server

import (
	"fmt"
	"strings"

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
	case kafkaInternal[target]:
		return "a Kafka internal topic"
	case strings.HasPrefix(target, ferryReserved):
		return "reserved for Ferry (prefix " + ferryReserved + ")"
	}
	return ""
}
