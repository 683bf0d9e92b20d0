package topics

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
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
	e, err := New(c.ListenAddrs(), base, recreatedCounter(), slog.New(slog.NewTextHandler(io.Discard, nil)))
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

// recreatedCounter is a fresh ferry_writer_target_topics_recreated_total.
func recreatedCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "recreated"}, []string{"topic"})
}

// A known topic deleted on the target is created again once the target's
// "does not exist" is routed to Forget, with the spec's partitions and
// configs, and counted; without Forget it stays known, and a topic
// forgotten that still exists is not counted.
func TestForgottenDeletedTopicIsCreatedAgain(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	base, err := kafkaclient.Defaults("ferry-test").Sarama()
	if err != nil {
		t.Fatal(err)
	}
	recreated := recreatedCounter()
	e, err := New(c.ListenAddrs(), base, recreated, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	spec := Spec{Name: "orders", Partitions: 3, ReplicationFactor: -1, Configs: map[string]string{"retention.ms": "123456789"}}
	state := func() string {
		info := c.TopicInfo("orders")
		if info == nil {
			return "absent"
		}
		v := info.Configs["retention.ms"]
		if v == nil {
			return fmt.Sprintf("%d partitions, retention.ms unset", len(c.PartitionInfos("orders")))
		}
		return fmt.Sprintf("%d partitions, retention.ms %s", len(c.PartitionInfos("orders")), *v)
	}
	const want = "3 partitions, retention.ms 123456789"

	if err := e.Ensure(spec); err != nil {
		t.Fatal(err)
	}
	resps, err := adm.DeleteTopics(context.Background(), "orders")
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Ensure(spec); err != nil || state() != "absent" {
		t.Fatalf("Ensure of a known topic = %v, topic %s; want no request, so still absent", err, state())
	}
	e.Forget("orders")
	if err := e.Ensure(spec); err != nil || state() != want {
		t.Fatalf("Ensure after Forget = %v, topic %s; want %s", err, state(), want)
	}
	if got := testutil.ToFloat64(recreated.WithLabelValues("orders")); got != 1 {
		t.Errorf("recreated{topic=orders} = %v after the recreation, want 1", got)
	}
	e.Forget("orders") // exists: a lagging broker's answer
	if err := e.Ensure(spec); err != nil || state() != want {
		t.Fatalf("Ensure of an existing forgotten topic = %v, topic %s; want %s", err, state(), want)
	}
	if got := testutil.ToFloat64(recreated.WithLabelValues("orders")); got != 1 {
		t.Errorf("recreated{topic=orders} = %v after forgetting a topic that exists, want still 1", got)
	}
}

func TestMissing(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("produce to orders/0: %w", kerr.UnknownTopicOrPartition), true},
		{fmt.Errorf("metadata of orders: %w", kerr.UnknownTopicID), true},
		{fmt.Errorf("describe target topic orders: %w", &sarama.DescribeConfigError{Err: sarama.ErrUnknownTopicOrPartition}), true},
		{fmt.Errorf("produce to orders/0: %w", kerr.NotLeaderForPartition), false},
		{sarama.ErrTopicAlreadyExists, false},
		{nil, false},
	} {
		if got := Missing(tt.err); got != tt.want {
			t.Errorf("Missing(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
