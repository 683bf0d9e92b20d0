package topics

import (
	"io"
	"log/slog"
	"testing"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/ferry-replicator/ferry/pkg/kafkaclient"
)

// A writer that starts (or first meets a topic) cannot tell a hand change
// from a source change it missed: it reports the difference as drift and
// changes nothing, so a restart never undoes an operator's change. The
// next source change is applied.
func TestFirstSyncReportsDifferencesWithoutChangingThem(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	base, err := kafkaclient.Defaults("ferry-test").Sarama()
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := New(c.ListenAddrs(), base, recreatedCounter(), log)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	// The target topic as an operator left it before this writer started.
	if err := e.Ensure(Spec{Name: "orders", Partitions: 1, ReplicationFactor: -1, Configs: map[string]string{"retention.ms": "9999999"}}); err != nil {
		t.Fatal(err)
	}
	drift := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ferry_topic_config_drift"}, []string{"link", "topic", "config"})
	s := NewSyncer(e, drift, log)
	want := Desired{Link: "east", Mode: SyncApply, Allow: map[string]bool{"retention.ms": true, "cleanup.policy": true}, Configs: map[string]string{"retention.ms": "7200000"}}
	if err := s.Offer("orders", want); err != nil {
		t.Fatal(err)
	}
	if got := retention(t, e); got != "9999999" {
		t.Errorf("target retention.ms = %s after the first sync, want 9999999 left alone", got)
	}
	if v := testutil.ToFloat64(drift.WithLabelValues("east", "orders", "retention.ms")); v != 1 {
		t.Errorf("drift gauge %v, want 1", v)
	}
	if ds := s.Drift(); len(ds) != 1 || ds[0].Target != "9999999" || ds[0].Source != "7200000" || !ds[0].SourceSet {
		t.Errorf("Drift() = %+v, want retention.ms target 9999999 source 7200000", ds)
	}
	want.Configs = map[string]string{"retention.ms": "10800000"}
	if err := s.Offer("orders", want); err != nil {
		t.Fatal(err)
	}
	if got := retention(t, e); got != "10800000" {
		t.Errorf("target retention.ms = %s after the source changed it, want 10800000", got)
	}
	if ds := s.Drift(); len(ds) != 0 {
		t.Errorf("Drift() = %+v after the source's change was applied, want none", ds)
	}
}

func retention(t *testing.T, e *Ensurer) string {
	t.Helper()
	entries, err := e.admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: "orders", ConfigNames: []string{"retention.ms"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range entries {
		if c.Name == "retention.ms" {
			return c.Value
		}
	}
	t.Fatal("no retention.ms")
	return ""
}
