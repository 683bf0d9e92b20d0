// Package naming maps source topic names to target topic names, the
// ReplicationPolicy of MirrorMaker 2.
package naming

import (
	"fmt"
	"strings"
)

// Policy renames topics for one link.
type Policy struct {
	prefix string
}

// Parse builds a policy from its configuration: "identity" keeps names,
// "prefix" puts prefix (for example "east.") before them, as MM2's
// DefaultReplicationPolicy does with "<source-alias>.".
func Parse(policy, prefix string) (Policy, error) {
	switch policy {
	case "identity":
		if prefix != "" {
			return Policy{}, fmt.Errorf("prefix %q is set but the policy is identity", prefix)
		}
		return Policy{}, nil
	case "prefix":
		if prefix == "" {
			return Policy{}, fmt.Errorf("policy prefix needs a non-empty prefix")
		}
		if strings.ContainsAny(prefix, "/\\ ") {
			return Policy{}, fmt.Errorf("prefix %q has characters Kafka topic names cannot hold", prefix)
		}
		return Policy{prefix: prefix}, nil
	}
	return Policy{}, fmt.Errorf("unknown policy %q (want identity or prefix)", policy)
}

// Target returns the target topic for a source topic.
func (p Policy) Target(source string) string { return p.prefix + source }

// Source returns the source topic of a target topic, the inverse of
// Target; ok is false for a topic the policy cannot have named.
func (p Policy) Source(target string) (source string, ok bool) {
	source, ok = strings.CutPrefix(target, p.prefix)
	return source, ok && source != ""
}
