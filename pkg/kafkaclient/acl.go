package kafkaclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// WriteACLWarnings says, for each of Ferry's internal topics, who besides
// Ferry may write it: each tier logs them at start. Ferry trusts what it
// reads there (the producer registry tells which batches not to copy back,
// the checkpoints where to resume), so a principal that may write them may
// make Ferry skip or repeat data (docs/security.md lists the ACLs these
// topics need). A cluster without an authorizer lets every client write
// every topic; with one, a principal allowed WRITE (or ALL) on the topic,
// by a literal, prefixed or wildcard ACL, and not denied it, may. self is
// Ferry's own principal when known ("User:<sasl user>"); unknown (mutual
// TLS principals are mapped by the brokers' rules), only the wildcard
// principal User:* is reported. r sends the requests: a kgo.Client, or a
// sarama-free test client.
func WriteACLWarnings(ctx context.Context, r kmsg.Requestor, self string, topics ...string) ([]string, error) {
	// Every topic ACL, matched here: a MATCH filter's prefixed and
	// wildcard matching is not served alike by every broker (kfake matches
	// names exactly).
	req := kmsg.NewPtrDescribeACLsRequest()
	req.ResourceType, req.ResourcePatternType = kmsg.ACLResourceTypeTopic, kmsg.ACLResourcePatternTypeAny
	req.Operation, req.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	resp, err := req.RequestWith(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("describe topic ACLs: %w", err)
	}
	switch err := kerr.ErrorForCode(resp.ErrorCode); {
	case errors.Is(err, kerr.SecurityDisabled):
		return []string{fmt.Sprintf("the cluster has no authorizer: any client may write %v", topics)}, nil
	case err != nil:
		return nil, fmt.Errorf("describe topic ACLs: %w", err)
	}
	var out []string
	for _, topic := range topics {
		allowed, denied := map[string]bool{}, map[string]bool{}
		for _, res := range resp.Resources {
			if !aclCovers(res.ResourceName, res.ResourcePatternType, topic) {
				continue
			}
			for _, a := range res.ACLs {
				if a.Operation != kmsg.ACLOperationWrite && a.Operation != kmsg.ACLOperationAll {
					continue
				}
				switch a.PermissionType {
				case kmsg.ACLPermissionTypeAllow:
					allowed[a.Principal] = true
				case kmsg.ACLPermissionTypeDeny:
					if a.Host == "*" {
						denied[a.Principal] = true
					}
				}
			}
		}
		var others []string
		for p := range allowed {
			if denied[p] || denied["User:*"] || p == self || (self == "" && p != "User:*") {
				continue
			}
			others = append(others, p)
		}
		if len(others) > 0 {
			sort.Strings(others)
			out = append(out, fmt.Sprintf("ACLs let %v write %s", others, topic))
		}
	}
	return out, nil
}

// aclCovers reports whether a topic ACL's resource pattern covers topic,
// as Kafka's authorizer matches them.
func aclCovers(name string, pattern kmsg.ACLResourcePatternType, topic string) bool {
	switch pattern {
	case kmsg.ACLResourcePatternTypeLiteral:
		return name == topic || name == "*"
	case kmsg.ACLResourcePatternTypePrefixed:
		return strings.HasPrefix(topic, name)
	}
	return false
}

// Principal is this client's Kafka principal when the settings tell it
// (SASL: User:<username>), else "" (mutual TLS principals are mapped by
// the brokers' rules).
func (c Config) Principal() string {
	if c.SASL.Mechanism == "" {
		return ""
	}
	return "User:" + c.SASL.Username
}

// aclCheckTimeout bounds the start-up check of the internal topics' ACLs.
const aclCheckTimeout = 10 * time.Second

// WarnWritable logs, at warning level, each WriteACLWarnings of topics in
// this cluster, on a client of its own; a check that cannot be made (the
// principal may not describe ACLs) is logged at info level. It never fails
// a start: the ACLs are the cluster owner's to set.
func (c Config) WarnWritable(ctx context.Context, log *slog.Logger, topics ...string) {
	opts, err := c.Franz()
	if err == nil {
		var cl *kgo.Client
		if cl, err = kgo.NewClient(opts...); err == nil {
			defer cl.Close()
			ctx, cancel := context.WithTimeout(ctx, aclCheckTimeout)
			defer cancel()
			var warnings []string
			warnings, err = WriteACLWarnings(ctx, cl, c.Principal(), topics...)
			for _, w := range warnings {
				log.Warn("Ferry's internal topic is writable by others, who could make Ferry skip or repeat data (docs/security.md)", "acl", w)
			}
		}
	}
	if err != nil {
		log.Info("could not check who may write Ferry's internal topics", "topics", topics, "err", err)
	}
}
