package checkpoint

import (
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferry-replicator/ferry/pkg/kafkaclient"
)

// A topic just created is not yet known to every broker: the store waits
// for its metadata instead of failing the writer's start. The cluster
// answers UNKNOWN_TOPIC_OR_PARTITION for the checkpoint topic more times
// than sarama's own metadata retries cover.
func TestOpenWaitsForANewTopicsMetadata(t *testing.T) {
	const topic, unknownFor = "__ferry_checkpoints", 8
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	host, port, err := net.SplitHostPort(cluster.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	portN, _ := strconv.Atoi(port)
	var refused atomic.Int32
	cluster.ControlKey(int16(kmsg.Metadata), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		req := kreq.(*kmsg.MetadataRequest)
		if len(req.Topics) != 1 || req.Topics[0].Topic == nil || *req.Topics[0].Topic != topic || refused.Load() >= unknownFor {
			return nil, nil, false
		}
		refused.Add(1)
		resp := req.ResponseKind().(*kmsg.MetadataResponse)
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host, b.Port = 0, host, int32(portN)
		resp.Brokers = append(resp.Brokers, b)
		resp.ControllerID = 0
		rt := kmsg.NewMetadataResponseTopic()
		rt.Topic, rt.ErrorCode = kmsg.StringPtr(topic), 3 // UNKNOWN_TOPIC_OR_PARTITION
		resp.Topics = append(resp.Topics, rt)
		return resp, nil, true
	})
	base, err := kafkaclient.Defaults("ferry-test").Sarama()
	if err != nil {
		t.Fatal(err)
	}
	store, err := Open(cluster.ListenAddrs(), base, Options{Topic: topic, Partitions: 1, ReplicationFactor: -1, Writer: "w"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("open after %d unknown-topic answers: %v", refused.Load(), err)
	}
	t.Cleanup(store.Close)
	if n := refused.Load(); n != unknownFor {
		t.Fatalf("the cluster refused the topic's metadata %d times, want %d: the test did not exercise the wait", n, unknownFor)
	}
}
