package app

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/writertest"
)

// runTestSupervisor starts a supervisor over a kfake source holding topic
// t; edit changes it, or the source through admin, before it runs.
func runTestSupervisor(t *testing.T, edit func(*supervisor, sarama.ClusterAdmin)) (*writertest.Writer, sarama.ClusterAdmin) {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
	sup, admin := newTestSupervisor(t, cluster.ListenAddrs(), writer.Addr())
	edit(sup, admin)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = sup.run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return writer, admin
}

// openedWith reports whether an Open the writer received describes topic
// t so that ok says yes.
func openedWith(w *writertest.Writer, ok func(*ferryv1.TopicSpec) bool) bool {
	for _, o := range w.OpenRequests() {
		for _, ts := range o.GetTopics() {
			if ts.GetName() == "t" && ok(ts) {
				return true
			}
		}
	}
	return false
}

// A config changed on the source after its shard opened reaches the
// writer within a discovery interval, without a restart: the shard is
// reopened, and its Open carries the new configs.
func TestSourceConfigChangeReachesTheWriter(t *testing.T) {
	writer, admin := runTestSupervisor(t, func(*supervisor, sarama.ClusterAdmin) {})
	writertest.WaitFor(t, 10*time.Second, "the shard opened", func() bool { return writer.Opens() > 0 })
	v := "7200000"
	err := admin.IncrementalAlterConfig(sarama.TopicResource, "t", map[string]sarama.IncrementalAlterConfigsEntry{
		"retention.ms": {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: &v},
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	writertest.WaitFor(t, 10*time.Second, "an open carrying retention.ms=7200000", func() bool {
		return openedWith(writer, func(ts *ferryv1.TopicSpec) bool { return ts.GetConfigs()["retention.ms"] == v })
	})
}

// With link.sync_acls, the Open describes each topic with the source's
// ALLOW Read and Describe ACLs that cover it (literal on its name or on
// "*", prefixed on a prefix of it): no Write, no DENY, none of another
// topic. Without it, none.
func TestSourceTopicACLsReachTheWriter(t *testing.T) {
	acl := func(name string, pattern sarama.AclResourcePatternType, principal string, op sarama.AclOperation, perm sarama.AclPermissionType) *sarama.ResourceAcls {
		return &sarama.ResourceAcls{
			Resource: sarama.Resource{ResourceType: sarama.AclResourceTopic, ResourceName: name, ResourcePatternType: pattern},
			Acls:     []*sarama.Acl{{Principal: principal, Host: "*", Operation: op, PermissionType: perm}},
		}
	}
	source := []*sarama.ResourceAcls{
		acl("t", sarama.AclPatternLiteral, "User:alice", sarama.AclOperationRead, sarama.AclPermissionAllow),
		acl("t", sarama.AclPatternLiteral, "User:mallory", sarama.AclOperationWrite, sarama.AclPermissionAllow),
		acl("t", sarama.AclPatternLiteral, "User:eve", sarama.AclOperationRead, sarama.AclPermissionDeny),
		acl("t", sarama.AclPatternPrefixed, "User:bob", sarama.AclOperationDescribe, sarama.AclPermissionAllow),
		acl("*", sarama.AclPatternLiteral, "User:carol", sarama.AclOperationRead, sarama.AclPermissionAllow),
		acl("u", sarama.AclPatternLiteral, "User:zed", sarama.AclOperationRead, sarama.AclPermissionAllow),
		acl("tx", sarama.AclPatternPrefixed, "User:yan", sarama.AclOperationRead, sarama.AclPermissionAllow),
	}
	want := []string{"User:alice * ACL_OPERATION_READ", "User:bob * ACL_OPERATION_DESCRIBE", "User:carol * ACL_OPERATION_READ"}
	for _, on := range []bool{true, false} {
		t.Run(map[bool]string{true: "on", false: "off"}[on], func(t *testing.T) {
			writer, _ := runTestSupervisor(t, func(s *supervisor, admin sarama.ClusterAdmin) {
				if err := admin.CreateACLs(source); err != nil {
					t.Fatal(err)
				}
				if on {
					s.acls = admin
				}
			})
			writertest.WaitFor(t, 10*time.Second, "the shard opened", func() bool { return writer.Opens() > 0 })
			var got []string
			for _, ts := range writer.OpenRequests()[0].GetTopics() {
				for _, a := range ts.GetAcls() {
					got = append(got, a.GetPrincipal()+" "+a.GetHost()+" "+a.GetOperation().String())
				}
			}
			wantNow := want
			if !on {
				wantNow = nil
			}
			if !slices.Equal(got, wantNow) {
				t.Errorf("the open's ACLs of t: %v, want %v", got, wantNow)
			}
		})
	}
}
