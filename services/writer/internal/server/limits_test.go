package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/services/writer/internal/topicfilter"
)

// Streams are bounded per peer identity and per writer: each holds a
// Kafka client, a producer id and a __ferry_producers record, so one peer
// opening shards without end would exhaust the writer and the target. A
// stream that ends gives its place back.
func TestStreamsArePerPeerAndPerWriterBounded(t *testing.T) {
	pki := newTestPKI(t)
	topics := mustFilter(t, topicfilter.DefaultInclude, topicfilter.DefaultExclude)
	w := startWriterGRPC(t, []Link{{Name: "east", Topics: topics, Shards: 8}}, func(o *Options) { o.MaxStreams, o.MaxStreamsPerPeer = 3, 2 },
		pki.server(t), pki.client(t, eastFetcher))
	east, west := w.client, w.dial(t, pki.client(t, westFetcher))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	first, err := openShard(ctx, t, east, "east", 0, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openShard(ctx, t, east, "east", 1, 8, 1); err != nil {
		t.Fatal(err)
	}
	_, err = openShard(ctx, t, east, "east", 2, 8, 1)
	wantRefusal(t, err, codes.ResourceExhausted, eastFetcher, "max_streams_per_peer 2")
	if _, err := openShard(ctx, t, west, "east", 2, 8, 1); err != nil {
		t.Fatalf("another peer refused under its own limit: %v", err)
	}
	_, err = openShard(ctx, t, west, "east", 3, 8, 1)
	wantRefusal(t, err, codes.ResourceExhausted, "max_streams 3")
	if got := w.rejected(t, "east", "too_many_streams"); got != 2 {
		t.Errorf("rejected{reason=too_many_streams} = %v, want 2", got)
	}
	closeStream(t, first)
	if _, err := openShard(ctx, t, east, "east", 4, 8, 1); err != nil {
		t.Fatalf("a closed stream did not give its place back: %v", err)
	}
}

// An unknown link is refused before anything is labelled by its name: the
// link is a Prometheus label, and a client-chosen one (up to the message
// size) would create a series per Open. Its name is not echoed whole.
func TestUnknownLinksCreateNoSeries(t *testing.T) {
	w := startWriter(t, passthroughLinks(t, false))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := []string{strings.Repeat("x", 1<<20)}
	for i := range 20 {
		names = append(names, fmt.Sprintf("link-%d", i))
	}
	for _, name := range names {
		_, err := openShard(ctx, t, w.client, name, 0, testShards, 1)
		wantRefusal(t, err, codes.FailedPrecondition, "unknown link")
		if n := len(status.Convert(err).Message()); n > 1024 {
			t.Fatalf("refusal of a %d-byte link name is %d bytes long", len(name), n)
		}
	}
	mfs, err := w.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "link" && l.GetValue() != "" && l.GetValue() != "east" {
					t.Fatalf("series %s{link=%.40q} for an unknown link", mf.GetName(), l.GetValue())
				}
			}
		}
	}
	if got := w.rejected(t, "", "unknown_link"); got != float64(len(names)) {
		t.Errorf("rejected{link=\"\",reason=unknown_link} = %v, want %d", got, len(names))
	}
}

// What an Open names is kept (status, logs, checkpoints, the producer
// registry) or passed on (topic creation), so each of its parts is
// bounded, far below the message size.
func TestOpenIsBounded(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	orders := func() *ferryv1.Open {
		return &ferryv1.Open{Link: "east", Shard: 0, Epoch: 1, Fetcher: "f",
			Topics:     []*ferryv1.TopicSpec{{Name: "orders", PartitionCount: 1}},
			Partitions: []*ferryv1.TopicPartition{{Topic: "orders", Partition: 0}}}
	}
	tests := []struct {
		name string
		edit func(o *ferryv1.Open)
		want string
	}{
		{"fetcher name", func(o *ferryv1.Open) { o.Fetcher = long(10 << 10) }, "fetcher name of 10240 bytes"},
		{"source cluster id", func(o *ferryv1.Open) { o.SourceClusterId = long(10 << 10) }, "source cluster id of 10240 bytes"},
		{"topic id", func(o *ferryv1.Open) { o.Topics[0].TopicId = make([]byte, 17) }, "topic id of 17 bytes"},
		{"topic name", func(o *ferryv1.Open) {
			o.Topics[0].Name, o.Partitions[0].Topic = long(250), long(250)
		}, "topic name of 250 bytes"},
		{"config count", func(o *ferryv1.Open) {
			o.Topics[0].Configs = map[string]string{}
			for i := range 1001 {
				o.Topics[0].Configs[fmt.Sprint("k", i)] = "v"
			}
		}, "1001 configs"},
		{"ACL count", func(o *ferryv1.Open) {
			for i := range 1001 {
				o.Topics[0].Acls = append(o.Topics[0].Acls, &ferryv1.TopicAcl{Principal: fmt.Sprint("User:u", i), Operation: ferryv1.AclOperation_ACL_OPERATION_READ})
			}
		}, "1001 ACLs"},
		{"ACL principal", func(o *ferryv1.Open) {
			o.Topics[0].Acls = []*ferryv1.TopicAcl{{Principal: "User:" + long(8<<10), Operation: ferryv1.AclOperation_ACL_OPERATION_READ}}
		}, "ACL principal of 8197 bytes"},
		{"config value", func(o *ferryv1.Open) { o.Topics[0].Configs = map[string]string{"cleanup.policy": long(8 << 10)} }, "config cleanup.policy: value of 8192 bytes"},
		{"partitions", func(o *ferryv1.Open) {
			o.Topics[0].PartitionCount = 1000
			for p := range int32(1000) {
				for range 101 {
					o.Partitions = append(o.Partitions, &ferryv1.TopicPartition{Topic: "orders", Partition: p})
				}
			}
		}, "101001 partitions"},
	}
	w := startWriter(t, passthroughLinks(t, false))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			stream, err := w.client.Replicate(ctx)
			if err != nil {
				t.Fatal(err)
			}
			open := orders()
			tt.edit(open)
			if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Open{Open: open}}); err != nil {
				t.Fatal(err)
			}
			_, err = stream.Recv()
			wantRefusal(t, err, codes.InvalidArgument, tt.want)
		})
	}
	if w.cluster.TopicInfo("orders") != nil {
		t.Error("a refused open created its topic")
	}
}
