package topics

import (
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferry-replicator/ferry/pkg/kafkaclient"
)

// A topic EnsureOwn just created may not be described yet: Apache Kafka's
// brokers learn it from the controller a moment later, and said it did not
// exist (an e2e run on real Kafka failed the writer's start so). EnsureOwn
// waits for it.
func TestEnsureOwnWaitsForTheNewTopic(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const topic = "__own"
	var created atomic.Bool
	var unknown atomic.Int32
	c.ControlKey(int16(kmsg.CreateTopics), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		created.Store(true)
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.Metadata), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.MetadataRequest)
		if !created.Load() || len(r.Topics) != 1 || r.Topics[0].Topic == nil || *r.Topics[0].Topic != topic || unknown.Load() >= 3 {
			return nil, nil, false
		}
		unknown.Add(1)
		// The broker does not know the topic yet.
		resp := r.ResponseKind().(*kmsg.MetadataResponse)
		host, port, _ := net.SplitHostPort(c.ListenAddrs()[0])
		p, _ := strconv.Atoi(port)
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host, b.Port = 0, host, int32(p)
		resp.Brokers = append(resp.Brokers, b)
		resp.ControllerID = 0
		rt := kmsg.NewMetadataResponseTopic()
		rt.Topic = r.Topics[0].Topic
		rt.ErrorCode = kerr.UnknownTopicOrPartition.Code
		resp.Topics = append(resp.Topics, rt)
		return resp, nil, true
	})
	base, err := kafkaclient.Defaults("ferry-test").Sarama()
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(c.ListenAddrs(), base, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	n, err := e.EnsureOwn(Spec{Name: topic, Partitions: 2, ReplicationFactor: -1})
	if err != nil || n != 2 {
		t.Fatalf("EnsureOwn = %d, %v; want 2 partitions once the topic is known", n, err)
	}
	if unknown.Load() < 2 {
		t.Fatalf("the broker said the topic was unknown %d times: the test did not test the wait", unknown.Load())
	}
}
