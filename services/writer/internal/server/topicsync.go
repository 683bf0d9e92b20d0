package server

import (
	"cmp"
	"log/slog"
	"slices"
	"strings"

	"github.com/IBM/sarama"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/services/writer/internal/topics"
)

// syncTopic hands the open's view of a source topic to the writer's
// topic syncer (Options.Syncer), which applies a source config change to
// the existing target topic, reports drift and creates synced ACLs. A
// failure does not fail the open: the syncer tries again each round.
func (ss *session) syncTopic(log *slog.Logger, target string, t *ferryv1.TopicSpec, configs map[string]string) {
	sy, l := ss.s.opts.Syncer, ss.link
	mode := cmp.Or(l.ConfigSync, topics.SyncApply)
	if sy == nil || (mode == topics.SyncOff && !l.SyncACLs) {
		return
	}
	want := topics.Desired{Link: l.Name, Mode: mode, Allow: l.Configs.Allow, Configs: configs}
	if l.SyncACLs {
		want.ACLs = syncedACLs(t.GetAcls())
	}
	if err := sy.Offer(target, want); err != nil {
		log.Warn("target topic sync failed; tried again next round", "topic", target, "err", err)
	}
}

// syncedACLs are the ACLs of an open's topic the writer creates: ALLOW
// Read and Describe only (the proto's operations), for principals of
// Kafka's "Type:name" form, sorted and without repeats. Whatever else a
// fetcher sends is ignored: no Write, no DENY, no other operation.
func syncedACLs(in []*ferryv1.TopicAcl) []topics.ACL {
	var out []topics.ACL
	for _, a := range in {
		var op sarama.AclOperation
		switch a.GetOperation() {
		case ferryv1.AclOperation_ACL_OPERATION_READ:
			op = sarama.AclOperationRead
		case ferryv1.AclOperation_ACL_OPERATION_DESCRIBE:
			op = sarama.AclOperationDescribe
		default:
			continue
		}
		kind, name, ok := strings.Cut(a.GetPrincipal(), ":")
		if !ok || kind == "" || name == "" { // sizes: checkOpen
			continue
		}
		out = append(out, topics.ACL{Principal: a.GetPrincipal(), Host: cmp.Or(a.GetHost(), "*"), Operation: op})
	}
	slices.SortFunc(out, func(a, b topics.ACL) int {
		return cmp.Or(cmp.Compare(a.Principal, b.Principal), cmp.Compare(a.Host, b.Host), cmp.Compare(a.Operation, b.Operation))
	})
	return slices.Compact(out)
}

// TopicDrift returns the target topic configs that drifted from their
// source (for /status); empty without a syncer.
func (s *Server) TopicDrift() []topics.Drift {
	if s.opts.Syncer == nil {
		return []topics.Drift{}
	}
	return s.opts.Syncer.Drift()
}
