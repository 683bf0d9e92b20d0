package app

import (
	"context"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/writertest"
)

// runTestSupervisor starts a supervisor over a kfake source holding topic
// t; edit changes it before it runs.
func runTestSupervisor(t *testing.T, edit func(*supervisor)) (*writertest.Writer, sarama.ClusterAdmin) {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
	sup, admin := newTestSupervisor(t, cluster.ListenAddrs(), writer.Addr())
	edit(sup)
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
	writer, admin := runTestSupervisor(t, func(*supervisor) {})
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
