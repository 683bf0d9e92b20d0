package server

import (
	"context"
	"strings"
	"testing"
	"time"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
)

// A source topic that keeps its records longer than the offset index
// keeps their runs is named, with why: compacted, retention.ms -1 or
// above the index's, or no retention.ms where the index keeps less than
// Kafka's default.
func TestIndexGap(t *testing.T) {
	week := 7 * 24 * time.Hour
	for _, tc := range []struct {
		name    string
		configs map[string]string
		index   time.Duration
		says    string // "" when covered
	}{
		{"compacted", map[string]string{"cleanup.policy": "compact"}, week, "compacted"},
		{"compacted and deleted", map[string]string{"cleanup.policy": "compact,delete", "retention.ms": "3600000"}, week, ""},
		{"infinite", map[string]string{"retention.ms": "-1"}, week, "no time limit"},
		{"longer", map[string]string{"retention.ms": "1209600000"}, week, "retention.ms 1209600000 keeps records 336h0m0s"},
		{"shorter", map[string]string{"retention.ms": "86400000"}, week, ""},
		{"equal", map[string]string{"retention.ms": "604800000"}, week, ""},
		{"broker default under a shorter index", nil, 24 * time.Hour, "brokers' default retention"},
		{"broker default", nil, week, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := indexGap(tc.configs, tc.index)
			if (tc.says == "") != (got == "") || !strings.Contains(got, tc.says) {
				t.Errorf("indexGap(%v, %v) = %q, want %q", tc.configs, tc.index, got, tc.says)
			}
		})
	}
}

// An open names its topics' configs: the writer's status lists the
// link's topics the index cannot cover, and drops one whose retention
// was brought within it at a later open.
func TestStatusNamesTopicsTheIndexCannotCover(t *testing.T) {
	pki := newControlPKI(t)
	w := startControlWriter(t, pki, nil, true, operatorID)
	w.srv.opts.Index.Retention = 24 * time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func(epoch uint64, retention string) {
		t.Helper()
		stream, err := w.client.Replicate(ctx)
		if err != nil {
			t.Fatal(err)
		}
		o := &ferryv1.Open{Link: "east", Shard: 0, Epoch: epoch, Fetcher: "f",
			Topics:     []*ferryv1.TopicSpec{{Name: "orders", PartitionCount: 1, Configs: map[string]string{"retention.ms": retention}}},
			Partitions: []*ferryv1.TopicPartition{{Topic: "orders", Partition: 0}}}
		if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Open{Open: o}}); err != nil {
			t.Fatal(err)
		}
		if resp, err := stream.Recv(); err != nil || resp.GetOpened() == nil {
			t.Fatalf("open: %v, %v", resp, err)
		}
		closeStream(t, stream)
	}
	gaps := func() []*ferryv1.LinkIndexGap {
		t.Helper()
		resp, err := w.ctl.Status(ctx, &ferryv1.StatusRequest{Link: "east"})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetLinks()[0].GetIndexGaps()
	}
	open(1, "-1")
	if g := gaps(); len(g) != 1 || g[0].GetTopic() != "orders" || !strings.Contains(g[0].GetReason(), "retention.ms -1") {
		t.Fatalf("index gaps %v, want orders named for its retention.ms -1", g)
	}
	if ls := w.srv.LinkStates(); len(ls[0].IndexGaps) != 1 {
		t.Errorf("/status link states %+v, want orders's gap", ls)
	}
	open(2, "3600000")
	if g := gaps(); len(g) != 0 {
		t.Fatalf("index gaps %v after the topic's retention came within the index's, want none", g)
	}
}
