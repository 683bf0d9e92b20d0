package shard

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/ferry-replicator/ferry/pkg/groupsync"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/discovery"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/groups"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/metrics"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/writertest"
)

// commitGroup commits offset on topic/0 for group in the source, with
// metadata.
func (s *source) commitGroup(t *testing.T, group, topic string, offset int64, metadata string) {
	t.Helper()
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: topic, Partition: 0, At: offset, LeaderEpoch: -1, Metadata: metadata})
	resp, err := kadm.NewClient(s.producer).CommitOffsets(context.Background(), group, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// startPoller reads the source's groups every 20ms, every topic copied,
// until the test ends.
func startPoller(t *testing.T, src *source) *groups.Poller {
	t.Helper()
	admin, err := sarama.NewClusterAdminFromClient(src.client)
	if err != nil {
		t.Fatal(err)
	}
	r, err := groups.NewReader(admin, src.client, groups.Options{Include: groupsync.DefaultInclude, Exclude: groupsync.DefaultExclude, Max: 100})
	if err != nil {
		t.Fatal(err)
	}
	p := groups.NewPoller(r, 20*time.Millisecond, func(groups.Partition) bool { return true }, testLog(), groups.NewMetrics(prometheus.NewRegistry()))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); p.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return p
}

// sentOffset is the last offset of group on topic/0 the writer received,
// and whether it received any; every message must carry epoch 1.
func sentOffset(t *testing.T, w *writertest.Writer, group, topic string) (int64, bool) {
	t.Helper()
	off, ok := int64(-1), false
	for _, m := range w.GroupOffsets() {
		if m.GetEpoch() != 1 || m.GetReadAt() <= 0 {
			t.Fatalf("group offsets %v: want epoch 1 and a read time", m)
		}
		for _, g := range m.GetGroups() {
			for _, p := range g.GetPartitions() {
				if g.GetGroup() == group && p.GetTopic() == topic && p.GetPartition() == 0 {
					off, ok = p.GetOffset(), true
				}
			}
		}
	}
	return off, ok
}

// A source group's committed offset of the shard's partition reaches the
// writer, and again after it moves; offsets Ferry committed (its marker:
// another link's copies, active-active) never do, nor offsets of topics
// the shard does not carry.
func TestGroupOffsetsReachTheWriter(t *testing.T) {
	const topic = "t"
	src := newSource(t, topic, "other")
	src.produce(t, topic, 10)
	src.commitGroup(t, "app", topic, 3, "")
	src.commitGroup(t, "mirrored", topic, 7, groupsync.Marker(1007))
	src.commitGroup(t, "elsewhere", "other", 1, "")
	writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
	writer.TakeGroupOffsets()
	poller := startPoller(t, src)
	startRunnerDeps(t, src, newWriters(t, writer.Addr()), metrics.New(prometheus.NewRegistry()), func(*Settings) {},
		func(d *Deps) { d.Groups = poller }, make(chan struct{}), topic)

	writertest.WaitFor(t, 10*time.Second, "app at 3 sent", func() bool { o, _ := sentOffset(t, writer, "app", topic); return o == 3 })
	src.commitGroup(t, "app", topic, 8, "")
	writertest.WaitFor(t, 10*time.Second, "app at 8 sent", func() bool { o, _ := sentOffset(t, writer, "app", topic); return o == 8 })
	if _, ok := sentOffset(t, writer, "mirrored", topic); ok {
		t.Fatal("an offset Ferry committed (its marker) was sent as a consumer's")
	}
	for _, m := range writer.GroupOffsets() {
		for _, g := range m.GetGroups() {
			if g.GetGroup() == "elsewhere" {
				t.Fatalf("group offsets of a topic the shard does not carry sent: %v", g)
			}
		}
	}
}

// A writer older than group sync (its Opened does not set group_offsets)
// ends the stream at anything but a batch: the fetcher sends it none, and
// copies as before.
func TestNoGroupOffsetsToOlderWriter(t *testing.T) {
	const topic = "t"
	src := newSource(t, topic)
	src.commitGroup(t, "app", topic, 0, "")
	cps := writertest.NewCheckpoints()
	writer := writertest.Start(t, "127.0.0.1:0", cps) // no TakeGroupOffsets: an older writer
	poller := startPoller(t, src)
	r, _, _ := startRunnerDeps(t, src, newWriters(t, writer.Addr()), metrics.New(prometheus.NewRegistry()), func(*Settings) {},
		func(d *Deps) { d.Groups = poller }, make(chan struct{}), topic)
	src.produce(t, topic, 5)
	writertest.WaitFor(t, 10*time.Second, "5 records committed", func() bool { n, _ := cps.Next(topic, 0); return n == 5 })
	// Several snapshots, each of which would have been sent.
	for range 3 {
		_, _, next := poller.Latest()
		select {
		case <-next:
		case <-time.After(10 * time.Second):
			t.Fatal("no read of the source's groups within 10s")
		}
	}
	if st := r.Status(); writer.Opens() != 1 || st.Restarts != 0 || !st.Connected {
		t.Fatalf("%d opens, %d restarts, connected %v: the older writer's stream must stay up", writer.Opens(), st.Restarts, st.Connected)
	}
}

// groupMessages splits a snapshot into messages of at most
// groupsync.MaxEntries offsets and leaves out a group whose id the
// writer would refuse.
func TestGroupMessagesAreBounded(t *testing.T) {
	r := &Runner{epoch: 4}
	snap := groups.Snapshot{At: time.UnixMilli(1000), Offsets: map[string]map[groups.Partition]int64{"bad\x00id": {{Topic: "p0", Partition: 0}: 1}}}
	opened := map[discovery.Partition]bool{}
	for i := range groupsync.MaxEntries + 5 {
		p := discovery.Partition{Topic: "p" + strconv.Itoa(i), Partition: 0}
		r.parts = append(r.parts, p)
		opened[p] = true
		if snap.Offsets["big"] == nil {
			snap.Offsets["big"] = map[groups.Partition]int64{}
		}
		snap.Offsets["big"][groups.Partition{Topic: p.Topic, Partition: 0}] = int64(i)
	}
	msgs := r.groupMessages(snap, opened)
	if len(msgs) != 2 {
		t.Fatalf("%d messages, want 2", len(msgs))
	}
	total := 0
	for _, m := range msgs {
		n := 0
		for _, g := range m.GetGroups() {
			if g.GetGroup() != "big" {
				t.Fatalf("group %q sent", g.GetGroup())
			}
			n += len(g.GetPartitions())
		}
		if n > groupsync.MaxEntries || m.GetEpoch() != 4 || m.GetReadAt() != 1000 {
			t.Fatalf("message of %d offsets, epoch %d, read at %d", n, m.GetEpoch(), m.GetReadAt())
		}
		total += n
	}
	if total != groupsync.MaxEntries+5 {
		t.Fatalf("%d offsets sent, want %d", total, groupsync.MaxEntries+5)
	}
}
