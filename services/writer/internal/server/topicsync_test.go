package server

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/kafkaclient"
	"github.com/ferry-replicator/ferry/pkg/testwait"
	"github.com/ferry-replicator/ferry/services/writer/internal/topicfilter"
	"github.com/ferry-replicator/ferry/services/writer/internal/topics"
)

// syncLink is a link with the default config allow list and floors.
func syncLink(t *testing.T) Link {
	return Link{Name: "east", Configs: topics.ConfigCopy{Allow: allowSet(topics.DefaultConfigAllow...), MinRetentionMs: 3_600_000, MinRetentionBytes: 100 << 20},
		Topics: mustFilter(t, topicfilter.DefaultInclude, topicfilter.DefaultExclude)}
}

// A source config changed after the target topic was created reaches the
// target with the next open that carries it (the fetcher reopens its
// shards when a discovery sees a config change), within the link's allow
// list and floors: a config left out never travels, a retention below
// the floor is raised.
func TestSourceConfigChangeReachesTheTarget(t *testing.T) {
	w := startWriter(t, []Link{syncLink(t)})
	spec := func(configs map[string]string) *ferryv1.TopicSpec {
		return &ferryv1.TopicSpec{Name: "orders", PartitionCount: 1, Configs: configs}
	}
	if err := w.openSpecs(t, "east", spec(map[string]string{"retention.ms": "7200000", "compression.type": "zstd"})); err != nil {
		t.Fatal(err)
	}
	changed := map[string]string{"retention.ms": "10800000", "cleanup.policy": "compact", "segment.bytes": "14", "min.insync.replicas": "1"}
	if err := w.openSpecs(t, "east", spec(changed)); err != nil {
		t.Fatal(err)
	}
	got := w.targetConfigs(t, "orders")
	if got["retention.ms"] != "10800000" || got["cleanup.policy"] != "compact" {
		t.Errorf("target configs %v after the source changed retention.ms and cleanup.policy: want retention.ms=10800000 cleanup.policy=compact", got)
	}
	if _, ok := got["compression.type"]; ok {
		t.Errorf("target configs %v: compression.type, which the source no longer sets, is still set", got)
	}
	for _, k := range []string{"segment.bytes", "min.insync.replicas"} {
		if v, ok := got[k]; ok {
			t.Errorf("target %s = %s: a config outside the allow list travelled", k, v)
		}
	}
	if err := w.openSpecs(t, "east", spec(map[string]string{"retention.ms": "1", "cleanup.policy": "compact"})); err != nil {
		t.Fatal(err)
	}
	if got := w.targetConfigs(t, "orders")["retention.ms"]; got != "3600000" {
		t.Errorf("target retention.ms = %s after the source set 1, want the link's floor 3600000", got)
	}
}

// setByHand sets a target topic config as an operator would.
func (w *testWriter) setByHand(t *testing.T, topic, key, value string) {
	t.Helper()
	base, err := kafkaclient.Defaults("operator").Sarama()
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sarama.NewClusterAdmin(w.cluster.ListenAddrs(), base)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	err = admin.IncrementalAlterConfig(sarama.TopicResource, topic, map[string]sarama.IncrementalAlterConfigsEntry{
		key: {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: &value},
	}, false)
	if err != nil {
		t.Fatal(err)
	}
}

// drift is ferry_topic_config_drift of east/topic/config, -1 when absent.
func (w *testWriter) drift(t *testing.T, topic, config string) float64 {
	t.Helper()
	mfs, err := w.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "ferry_topic_config_drift" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["link"] == "east" && labels["topic"] == topic && labels["config"] == config {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// waitFor polls cond until it holds or 10s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, 10*time.Second, what, cond)
}

// A target config changed by hand, while the source kept its value, is
// drift: reported (the metric at 1, /status) and left alone, round after
// round. A later change on the source wins, and ends the drift.
func TestHandChangedTargetConfigIsReportedNotOverwritten(t *testing.T) {
	w := startWriter(t, []Link{syncLink(t)})
	spec := func(retention string) *ferryv1.TopicSpec {
		return &ferryv1.TopicSpec{Name: "orders", PartitionCount: 1, Configs: map[string]string{"retention.ms": retention}}
	}
	if err := w.openSpecs(t, "east", spec("7200000")); err != nil {
		t.Fatal(err)
	}
	w.setByHand(t, "orders", "retention.ms", "9999999")
	w.setByHand(t, "orders", "segment.bytes", "1048576") // not in the allow list: the target operator's
	waitFor(t, "ferry_topic_config_drift{east,orders,retention.ms} = 1", func() bool { return w.drift(t, "orders", "retention.ms") == 1 })
	ds := w.srv.TopicDrift()
	if len(ds) != 1 || ds[0].Topic != "orders" || ds[0].Config != "retention.ms" || ds[0].Target != "9999999" || ds[0].Source != "7200000" {
		t.Errorf("status drift %+v, want orders retention.ms target 9999999 source 7200000", ds)
	}
	// Rounds after the drift was seen leave the target alone (the
	// syncer's rounds are 50ms apart; an overwrite would land in one).
	rounds := w.srv.opts.Syncer.Rounds()
	waitFor(t, "three more sync rounds", func() bool { return w.srv.opts.Syncer.Rounds() >= rounds+3 })
	if got := w.targetConfigs(t, "orders")["retention.ms"]; got != "9999999" {
		t.Fatalf("target retention.ms = %s: the hand change was overwritten", got)
	}
	if d := w.drift(t, "orders", "segment.bytes"); d != -1 {
		t.Errorf("drift gauge %v for segment.bytes, outside config_allow: want none", d)
	}
	// The source changes: its new value is applied, the drift ends.
	if err := w.openSpecs(t, "east", spec("10800000")); err != nil {
		t.Fatal(err)
	}
	if got := w.targetConfigs(t, "orders")["retention.ms"]; got != "10800000" {
		t.Errorf("target retention.ms = %s after the source changed it, want 10800000", got)
	}
	if d := w.drift(t, "orders", "retention.ms"); d != -1 {
		t.Errorf("drift gauge %v after the source's change was applied, want none", d)
	}
	if ds := w.srv.TopicDrift(); len(ds) != 0 {
		t.Errorf("status drift %+v after the source's change was applied, want none", ds)
	}
}

// With config_sync: overwrite, a hand change is put back to the source's
// value; with report, even a source change is only reported.
func TestConfigSyncModes(t *testing.T) {
	t.Run("overwrite", func(t *testing.T) {
		l := syncLink(t)
		l.ConfigSync = topics.SyncOverwrite
		w := startWriter(t, []Link{l})
		if err := w.openSpecs(t, "east", &ferryv1.TopicSpec{Name: "orders", PartitionCount: 1, Configs: map[string]string{"retention.ms": "7200000"}}); err != nil {
			t.Fatal(err)
		}
		w.setByHand(t, "orders", "retention.ms", "9999999")
		waitFor(t, "the hand change overwritten with the source's 7200000", func() bool {
			return w.targetConfigs(t, "orders")["retention.ms"] == "7200000"
		})
		if d := w.drift(t, "orders", "retention.ms"); d != -1 {
			t.Errorf("drift gauge %v under overwrite, want none", d)
		}
	})
	t.Run("report", func(t *testing.T) {
		l := syncLink(t)
		l.ConfigSync = topics.SyncReport
		w := startWriter(t, []Link{l})
		if err := w.openSpecs(t, "east", &ferryv1.TopicSpec{Name: "orders", PartitionCount: 1, Configs: map[string]string{"retention.ms": "7200000"}}); err != nil {
			t.Fatal(err)
		}
		if err := w.openSpecs(t, "east", &ferryv1.TopicSpec{Name: "orders", PartitionCount: 1, Configs: map[string]string{"retention.ms": "10800000"}}); err != nil {
			t.Fatal(err)
		}
		if got := w.targetConfigs(t, "orders")["retention.ms"]; got != "7200000" {
			t.Errorf("target retention.ms = %s under report, want 7200000 left alone", got)
		}
		if d := w.drift(t, "orders", "retention.ms"); d != 1 {
			t.Errorf("drift gauge %v under report, want 1", d)
		}
	})
}

// targetACLs are the target's topic ACLs, as "principal host operation
// permission pattern name" lines.
func (w *testWriter) targetACLs(t *testing.T) []string {
	t.Helper()
	base, err := kafkaclient.Defaults("operator").Sarama()
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sarama.NewClusterAdmin(w.cluster.ListenAddrs(), base)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	rs, err := admin.ListAcls(sarama.AclFilter{ResourceType: sarama.AclResourceTopic, ResourcePatternTypeFilter: sarama.AclPatternAny,
		Operation: sarama.AclOperationAny, PermissionType: sarama.AclPermissionAny})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rs {
		for _, a := range r.Acls {
			out = append(out, strings.Join([]string{a.Principal, a.Host, a.Operation.String(), a.PermissionType.String(), r.ResourcePatternType.String(), r.ResourceName}, " "))
		}
	}
	slices.Sort(out)
	return out
}

// With links[].sync_acls, the ALLOW Read and Describe ACLs an open
// carries are created on the target topic, literal, for the same
// principals; whatever else a fetcher sends (an operation the protocol
// does not name, such as Write's number, or a malformed principal) is
// not. Without it, nothing is created.
func TestTopicACLSync(t *testing.T) {
	acls := []*ferryv1.TopicAcl{
		{Principal: "User:alice", Host: "*", Operation: ferryv1.AclOperation_ACL_OPERATION_READ},
		{Principal: "User:alice", Host: "*", Operation: ferryv1.AclOperation_ACL_OPERATION_DESCRIBE},
		{Principal: "User:bob", Operation: ferryv1.AclOperation_ACL_OPERATION_READ},
		{Principal: "User:mallory", Host: "*", Operation: ferryv1.AclOperation(4)}, // Kafka's number for Write
		{Principal: "User:mallory", Host: "*", Operation: ferryv1.AclOperation_ACL_OPERATION_UNSPECIFIED},
		{Principal: "mallory", Host: "*", Operation: ferryv1.AclOperation_ACL_OPERATION_READ},
	}
	tests := []struct {
		name string
		on   bool
		want []string
	}{
		{"on", true, []string{
			"User:alice * Describe Allow Literal orders",
			"User:alice * Read Allow Literal orders",
			"User:bob * Read Allow Literal orders",
		}},
		{"off", false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := syncLink(t)
			l.SyncACLs = tt.on
			w := startWriter(t, []Link{l})
			if err := w.openSpecs(t, "east", &ferryv1.TopicSpec{Name: "orders", PartitionCount: 1, Acls: acls}); err != nil {
				t.Fatal(err)
			}
			if tt.on {
				// The next rounds create nothing more.
				rounds := w.srv.opts.Syncer.Rounds()
				waitFor(t, "two more sync rounds", func() bool { return w.srv.opts.Syncer.Rounds() >= rounds+2 })
			}
			if got := w.targetACLs(t); !slices.Equal(got, tt.want) {
				t.Errorf("target ACLs\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}
