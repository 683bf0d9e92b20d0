package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/kafkaclient"
	"github.com/ferry-replicator/ferry/services/writer/internal/checkpoint"
	"github.com/ferry-replicator/ferry/services/writer/internal/metrics"
	"github.com/ferry-replicator/ferry/services/writer/internal/naming"
	"github.com/ferry-replicator/ferry/services/writer/internal/topicfilter"
)

// FuzzCheckOpen feeds the writer's checks of an Open (checkOpen, then
// newSession) what an
// admitted fetcher chooses: topic names and partition counts, and the
// partitions of the shard. names is the topics, comma separated; counts
// gives each a partition count (a signed byte, 1 if missing); parts is
// pairs of bytes, a topic's index (one past the last: a topic the Open
// does not describe) and a partition (signed). The check must accept
// exactly the Opens the rules below allow, and refuse the others with an
// error the fetcher sees as InvalidArgument or PermissionDenied.
func FuzzCheckOpen(f *testing.F) {
	srv, links := fuzzServer(f)
	f.Add("orders,payments", []byte{3, 1}, []byte{0, 0, 0, 2, 1, 0}, false)
	f.Add("orders", []byte{1}, []byte{0, 1}, true)            // partition past the count
	f.Add("orders,orders", []byte{1, 4}, []byte{0, 3}, false) // a topic twice
	f.Add("orders", []byte{0xff}, []byte{0, 0xff}, false)     // negative count and partition
	for _, bad := range []string{"a/b", "x y", "..", "ferry-state", "__consumer_offsets", "__ferry_x", strings.Repeat("t", 250)} {
		f.Add(bad, []byte{}, []byte{0, 0}, false) // names no Kafka topic has, reserved names
	}
	f.Add("secret.keys", []byte{}, []byte{0, 0}, true)
	f.Add(strings.Repeat("t", 246), []byte{}, []byte{0, 0}, true)               // a target name too long
	f.Add("orders", []byte{2}, []byte{0, 1, 0, 1}, false)                       // a partition twice
	f.Add("orders", []byte{101}, []byte{0, 0}, false)                           // above max_partitions
	f.Add("_schemas,mm2-offsets.a.internal", []byte{1, 1}, []byte{0, 0}, false) // platform topics
	f.Fuzz(func(t *testing.T, names string, counts, parts []byte, prefixed bool) {
		link := links[0]
		if prefixed {
			link = links[1]
		}
		open := fuzzedOpen(names, counts, parts)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// In the server's order: the Open's bounds, then the session.
		err := checkOpen(open)
		var sess *session
		if err == nil {
			sess, err = newSession(ctx, srv, link, open)
		}
		want := openAllowed(link, open)
		if err != nil {
			if want == nil {
				t.Fatalf("open refused: %v", err)
			}
			if !errors.Is(err, errBadRequest) && !errors.Is(err, errTopicRefused) {
				t.Fatalf("open refused with %v: neither a bad request nor a refused topic", err)
			}
			return
		}
		defer sess.cancel(nil)
		if want != nil {
			t.Fatalf("open accepted, yet %v", want)
		}
		if len(sess.next) != len(open.GetPartitions()) {
			t.Fatalf("session of %d partitions for an Open of %d", len(sess.next), len(open.GetPartitions()))
		}
	})
}

// fuzzServer is a Server with a real checkpoint store (its topic is
// reserved) and two links: identity naming accepting every topic, and
// prefix naming ("src.") excluding secret.* topics.
func fuzzServer(f *testing.F) (*Server, []Link) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(cluster.Close)
	base, err := kafkaclient.Defaults("ferry-test").Sarama()
	if err != nil {
		f.Fatal(err)
	}
	store, err := checkpoint.Open(cluster.ListenAddrs(), base, checkpoint.Options{Topic: cpTopic, Partitions: 1, ReplicationFactor: -1, Writer: "w1"}, log)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(store.Close)
	all, err := topicfilter.Parse([]string{".*"}, nil)
	if err != nil {
		f.Fatal(err)
	}
	notSecret, err := topicfilter.Parse([]string{".*"}, []string{`secret\..*`})
	if err != nil {
		f.Fatal(err)
	}
	prefix, err := naming.Parse("prefix", "src.")
	if err != nil {
		f.Fatal(err)
	}
	// One shard: every partition is the open's (shard placement is
	// TestOpenOfAnotherShardsPartitionIsRefused's).
	links := []Link{{Name: "id", Topics: all, Shards: 1}, {Name: "pre", Naming: prefix, Topics: notSecret, Shards: 1}}
	srv := New(Options{ID: "w1", MaxGroupBytes: 1 << 20, MaxPartitions: fuzzMaxPartitions}, links, nil, store, nil, metrics.New(prometheus.NewRegistry()), log)
	return srv, links
}

func fuzzedOpen(names string, counts, parts []byte) *ferryv1.Open {
	open := &ferryv1.Open{Link: "id", Shard: 0, Epoch: 1, Fetcher: "f1"}
	topicNames := strings.Split(names, ",")
	for i, name := range topicNames {
		n := int32(1)
		if i < len(counts) {
			n = int32(int8(counts[i]))
		}
		open.Topics = append(open.Topics, &ferryv1.TopicSpec{Name: name, PartitionCount: n})
	}
	for ; len(parts) >= 2; parts = parts[2:] {
		name := "undescribed"
		if i := int(parts[0]) % (len(topicNames) + 1); i < len(topicNames) {
			name = topicNames[i]
		}
		open.Partitions = append(open.Partitions, &ferryv1.TopicPartition{Topic: name, Partition: int32(int8(parts[1]))})
	}
	return open
}

// legalTopic is what Kafka accepts as a topic name (Topic.validate).
var legalTopic = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

// openAllowed says why the writer must refuse open on link, nil if it must
// accept it: the rules written out apart from the code that applies them.
// fuzzMaxPartitions is the fuzzed writer's max_partitions, below the 127
// a fuzzed count reaches.
const fuzzMaxPartitions = 100

func openAllowed(link Link, open *ferryv1.Open) error {
	if len(open.GetPartitions()) == 0 {
		return errors.New("no partitions")
	}
	counts := map[string]int32{}
	for _, t := range open.GetTopics() {
		name, target := t.GetName(), link.Naming.Target(t.GetName())
		switch _, dup := counts[name]; {
		case dup:
			return errors.New("a topic listed twice")
		case t.GetPartitionCount() < 1:
			return errors.New("no partitions in a topic")
		case !legalTopic.MatchString(name) || name == "." || name == "..":
			return errors.New("a source topic name Kafka does not allow")
		case !legalTopic.MatchString(target):
			return errors.New("a target topic name Kafka does not allow")
		case target == cpTopic || target == "__consumer_offsets" || target == "__transaction_state" ||
			target == "__share_group_state" || target == "__cluster_metadata" || target == "__remote_log_metadata" ||
			strings.HasPrefix(target, "__ferry"):
			return errors.New("a reserved target topic")
		case (target == "_schemas" || target == "connect-configs" || target == "connect-offsets" || target == "connect-status" ||
			strings.HasPrefix(target, "_confluent") || strings.HasPrefix(target, "mm2-")) && !link.PlatformTopics[target]:
			return errors.New("a platform topic the link does not name")
		case t.GetPartitionCount() > fuzzMaxPartitions:
			return errors.New("more partitions than max_partitions")
		case link.Topics.Check(name) != nil:
			return errors.New("a topic outside the link's allow list")
		}
		counts[name] = t.GetPartitionCount()
	}
	seen := map[topicPartition]bool{}
	for _, p := range open.GetPartitions() {
		tp := topicPartition{Topic: p.GetTopic(), Partition: p.GetPartition()}
		n, ok := counts[tp.Topic]
		switch {
		case !ok || tp.Partition < 0 || tp.Partition >= n:
			return errors.New("a partition outside the Open's topics")
		case seen[tp]:
			return errors.New("a partition listed twice")
		}
		seen[tp] = true
	}
	return nil
}
