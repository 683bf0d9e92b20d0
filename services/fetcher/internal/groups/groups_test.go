package groups

import (
	"context"
	"maps"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferry-replicator/ferry/pkg/groupsync"
)

// sourceCluster is a kfake cluster with topics "orders" (3 partitions)
// and "private" (1), listening on port (0: any), closed when the test
// ends.
func sourceCluster(t *testing.T, port int) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(3, "orders"), kfake.SeedTopics(1, "private"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// newReader returns a Reader on a sarama client of addrs, as the fetcher
// builds it (one client for the admin and the reader), and the client.
func newReader(t *testing.T, addrs []string, opts Options) (*Reader, sarama.Client) {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	client, err := sarama.NewClient(addrs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(admin, client, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r, client
}

// client is a franz-go client of addrs, closed when the test ends.
func client(t *testing.T, addrs []string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// source is sourceCluster on any port with records in orders, a client
// to commit with and its addresses.
func source(t *testing.T) (*kgo.Client, []string) {
	t.Helper()
	c := sourceCluster(t, 0)
	cl := client(t, c.ListenAddrs())
	// Records, so committed offsets point inside the log.
	for p := range int32(3) {
		for range 10 {
			if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "orders", Partition: p, Value: []byte("x")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return cl, c.ListenAddrs()
}

// commit commits offsets for group as an admin (generation -1): a simple
// group, protocol type "".
func commit(t *testing.T, cl *kgo.Client, group string, offsets map[Partition]int64, metadata string) {
	t.Helper()
	os := kadm.Offsets{}
	for tp, o := range offsets {
		os.Add(kadm.Offset{Topic: tp.Topic, Partition: tp.Partition, At: o, LeaderEpoch: -1, Metadata: metadata})
	}
	resp, err := kadm.NewClient(cl).CommitOffsets(context.Background(), group, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("commit %s: %v", group, err)
	}
}

// join makes group a classic group of protocol type kind with one member
// that commits offset o on orders/0, as Kafka Connect or a consumer would.
func join(t *testing.T, cl *kgo.Client, group, kind string, o int64) {
	t.Helper()
	ctx := context.Background()
	jreq := kmsg.NewPtrJoinGroupRequest()
	jreq.Group, jreq.ProtocolType, jreq.SessionTimeoutMillis, jreq.RebalanceTimeoutMillis = group, kind, 30000, 30000
	jreq.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0}}}
	var jresp *kmsg.JoinGroupResponse
	for {
		r, err := jreq.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		if r.ErrorCode == 79 { // MEMBER_ID_REQUIRED: join again with the id
			jreq.MemberID = r.MemberID
			continue
		}
		if r.ErrorCode != 0 {
			t.Fatalf("join %s: error %d", group, r.ErrorCode)
		}
		jresp = r
		break
	}
	sreq := kmsg.NewPtrSyncGroupRequest()
	sreq.Group, sreq.Generation, sreq.MemberID, sreq.ProtocolType, sreq.Protocol = group, jresp.Generation, jresp.MemberID, &kind, jresp.Protocol
	sreq.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: jresp.MemberID, MemberAssignment: []byte{0}}}
	if r, err := sreq.RequestWith(ctx, cl); err != nil || r.ErrorCode != 0 {
		t.Fatalf("sync %s: %v %v", group, err, r)
	}
	creq := kmsg.NewPtrOffsetCommitRequest()
	creq.Group, creq.Generation, creq.MemberID = group, jresp.Generation, jresp.MemberID
	topics, err := kadm.NewClient(cl).ListTopics(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	ct := kmsg.NewOffsetCommitRequestTopic()
	ct.Topic, ct.TopicID = "orders", topics["orders"].ID // v10 names topics by ID
	cp := kmsg.NewOffsetCommitRequestTopicPartition()
	cp.Partition, cp.Offset = 0, o
	ct.Partitions = append(ct.Partitions, cp)
	creq.Topics = append(creq.Topics, ct)
	r, err := creq.RequestWith(ctx, cl)
	if err != nil || r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("commit in %s: %v %+v", group, err, r)
	}
}

func onlyOrders(tp Partition) bool { return tp.Topic == "orders" }

func TestReadSelectsGroupsByNameAndKind(t *testing.T) {
	cl, addrs := source(t)
	commit(t, cl, "billing", map[Partition]int64{{"orders", 0}: 4, {"orders", 2}: 9, {"private", 0}: 1}, "")
	commit(t, cl, "audit", map[Partition]int64{{"orders", 1}: 7}, "")
	commit(t, cl, "__internal", map[Partition]int64{{"orders", 0}: 1}, "")
	commit(t, cl, "console-consumer-4711", map[Partition]int64{{"orders", 0}: 1}, "")
	commit(t, cl, "only-private", map[Partition]int64{{"private", 0}: 1}, "")
	join(t, cl, "shipping", "consumer", 6)
	join(t, cl, "connect-sink", "connect", 3)

	r, _ := newReader(t, addrs, Options{Include: groupsync.DefaultInclude, Exclude: groupsync.DefaultExclude, Max: 100})
	snap, err := r.Read(onlyOrders)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[Partition]int64{
		"billing":  {{"orders", 0}: 4, {"orders", 2}: 9}, // private is not copied
		"audit":    {{"orders", 1}: 7},
		"shipping": {{"orders", 0}: 6},
		// connect-sink: protocol "connect" (and excluded by name);
		// __internal, console-consumer-*: excluded by name;
		// only-private: nothing the link copies.
	}
	if !maps.EqualFunc(snap.Offsets, want, maps.Equal) {
		t.Fatalf("offsets %v, want %v", snap.Offsets, want)
	}
	if time.Since(snap.At) > time.Minute {
		t.Errorf("At %v", snap.At)
	}
}

func TestReadSkipsOtherKinds(t *testing.T) {
	cl, addrs := source(t)
	join(t, cl, "sink-app", "connect", 3)
	join(t, cl, "app", "consumer", 5)
	r, _ := newReader(t, addrs, Options{Include: []string{".*"}, Max: 100})
	snap, err := r.Read(onlyOrders)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := snap.Offsets["sink-app"]; ok || snap.Skipped["kind"] != 1 {
		t.Fatalf("a Connect group was synced or not counted: offsets %v, skipped %v", snap.Offsets, snap.Skipped)
	}
	if snap.Offsets["app"][Partition{"orders", 0}] != 5 {
		t.Fatalf("app: %v", snap.Offsets)
	}
}

// Offsets Ferry committed carry its marker: never read back, or groups
// would go round an active-active pair.
func TestReadLeavesOutFerrysOwnCommits(t *testing.T) {
	cl, addrs := source(t)
	commit(t, cl, "app", map[Partition]int64{{"orders", 0}: 3}, "")
	commit(t, cl, "app", map[Partition]int64{{"orders", 1}: 8}, groupsync.Marker(12345))
	r, _ := newReader(t, addrs, Options{Include: []string{".*"}, Max: 100})
	snap, err := r.Read(onlyOrders)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[Partition]int64{{"orders", 0}: 3}; !maps.Equal(snap.Offsets["app"], want) {
		t.Fatalf("app: %v, want %v", snap.Offsets["app"], want)
	}
}

func TestReadIsBounded(t *testing.T) {
	cl, addrs := source(t)
	for _, g := range []string{"a", "b", "c", "d"} {
		commit(t, cl, g, map[Partition]int64{{"orders", 0}: 1}, "")
	}
	r, _ := newReader(t, addrs, Options{Include: []string{".*"}, Max: 3})
	snap, err := r.Read(onlyOrders)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Offsets) != 3 || snap.Skipped["limit"] != 1 {
		t.Fatalf("read %d groups, skipped %v; want 3 and limit 1", len(snap.Offsets), snap.Skipped)
	}
	if _, err := NewReader(nil, nil, Options{Include: []string{"("}, Max: 1}); err == nil {
		t.Error("a bad expression was accepted")
	}
}

// A sarama client drops a broker whose metadata request failed (a
// network cut, a broker restart) until a refresh succeeds, and sarama's
// ListConsumerGroups asks only the brokers its client still has: without
// a check, every read in that window found no group and said nothing, so
// a group that started then was not synced until the client's next
// metadata refresh (a minute). A read after the broker is back finds the
// group.
func TestReadAfterTheClientDroppedTheBroker(t *testing.T) {
	first := sourceCluster(t, 0)
	addrs := first.ListenAddrs()
	_, port, err := net.SplitHostPort(addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	r, sc := newReader(t, addrs, Options{Include: []string{".*"}, Max: 100})
	if _, err := r.Read(onlyOrders); err != nil {
		t.Fatal(err)
	}
	first.Close()
	// What the fetcher's discovery does during the cut.
	if err := sc.RefreshMetadata(); err == nil {
		t.Fatal("a metadata refresh of a closed cluster succeeded")
	}
	if n := len(sc.Brokers()); n != 0 {
		t.Fatalf("the client still has %d brokers after a failed refresh: the case this test covers does not arise", n)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	again := sourceCluster(t, p)
	commit(t, client(t, again.ListenAddrs()), "app", map[Partition]int64{{"orders", 0}: 0}, "")
	snap, err := r.Read(onlyOrders)
	if err != nil {
		t.Fatalf("read after the broker came back: %v", err)
	}
	if want := map[Partition]int64{{"orders", 0}: 0}; !maps.Equal(snap.Offsets["app"], want) {
		t.Fatalf("app: %v, want %v (snapshot %v)", snap.Offsets["app"], want, snap.Offsets)
	}
}
