package server

import (
	"fmt"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
)

// Bounds of an Open's parts. The message as a whole is bounded by gRPC's
// limit (max_batch_bytes plus 64 KiB), but what an Open names is kept
// (status, logs, checkpoints, the producer registry) or passed on (topic
// creation), so each part is bounded far below it, before anything is
// looked up or allocated.
const (
	// maxOpenName bounds the fetcher name and the source cluster id (the
	// producer registry's own limit for the latter).
	maxOpenName = 255
	// MaxTopicName is Kafka's limit for a topic name, which the control
	// verbs hold their requests to as well.
	MaxTopicName = 249
	// topicIDBytes is a Kafka topic id's size; an Open may also send none.
	topicIDBytes = 16
	// maxOpenTopics and maxOpenPartitions bound one shard's lists.
	maxOpenTopics     = 10000
	maxOpenPartitions = 100000
	// maxTopicConfigs and maxConfigBytes bound a topic spec's configs
	// (Kafka has a few hundred topic configs, each value short).
	maxTopicConfigs = 1000
	maxConfigBytes  = 4096
	// maxTopicACLs, maxACLPrincipal and maxACLHost bound a topic spec's
	// ACLs (link.sync_acls): a topic's readers, a principal's name, a
	// host name or address.
	maxTopicACLs    = 1000
	maxACLPrincipal = 1024
	maxACLHost      = 255
)

// checkOpen refuses an Open whose parts are above their bounds, naming the
// part and its size.
func checkOpen(open *ferryv1.Open) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: open of shard %d: "+format, append([]any{errBadOpen, open.GetShard()}, args...)...)
	}
	switch {
	case len(open.GetFetcher()) > maxOpenName:
		return bad("fetcher name of %d bytes, above %d", len(open.GetFetcher()), maxOpenName)
	case len(open.GetSourceClusterId()) > maxOpenName:
		return bad("source cluster id of %d bytes, above %d", len(open.GetSourceClusterId()), maxOpenName)
	case len(open.GetTopics()) > maxOpenTopics:
		return bad("%d topics, above %d", len(open.GetTopics()), maxOpenTopics)
	case len(open.GetPartitions()) > maxOpenPartitions:
		return bad("%d partitions, above %d", len(open.GetPartitions()), maxOpenPartitions)
	}
	for _, t := range open.GetTopics() {
		if err := checkTopicSpec(t); err != nil {
			return bad("%v", err)
		}
	}
	for _, p := range open.GetPartitions() {
		if n := len(p.GetTopic()); n > MaxTopicName {
			return bad("partition of a topic name of %d bytes, above %d", n, MaxTopicName)
		}
	}
	return nil
}

func checkTopicSpec(t *ferryv1.TopicSpec) error {
	name := t.GetName()
	if err := checkTopicName(name); err != nil {
		return fmt.Errorf("source topic %v", err)
	}
	switch {
	case len(t.GetTopicId()) != 0 && len(t.GetTopicId()) != topicIDBytes:
		return fmt.Errorf("topic %q: topic id of %d bytes, want %d or none", name, len(t.GetTopicId()), topicIDBytes)
	case len(t.GetConfigs()) > maxTopicConfigs:
		return fmt.Errorf("topic %q: %d configs, above %d", name, len(t.GetConfigs()), maxTopicConfigs)
	}
	for k, v := range t.GetConfigs() {
		switch {
		case len(k) > maxConfigBytes:
			return fmt.Errorf("topic %q: config key %s of %d bytes, above %d", name, Clip(k), len(k), maxConfigBytes)
		case len(v) > maxConfigBytes:
			return fmt.Errorf("topic %q: config %s: value of %d bytes, above %d", name, k, len(v), maxConfigBytes)
		}
	}
	if len(t.GetAcls()) > maxTopicACLs {
		return fmt.Errorf("topic %q: %d ACLs, above %d", name, len(t.GetAcls()), maxTopicACLs)
	}
	for _, a := range t.GetAcls() {
		switch {
		case len(a.GetPrincipal()) > maxACLPrincipal:
			return fmt.Errorf("topic %q: ACL principal of %d bytes, above %d", name, len(a.GetPrincipal()), maxACLPrincipal)
		case len(a.GetHost()) > maxACLHost:
			return fmt.Errorf("topic %q: ACL host of %d bytes, above %d", name, len(a.GetHost()), maxACLHost)
		}
	}
	return nil
}
