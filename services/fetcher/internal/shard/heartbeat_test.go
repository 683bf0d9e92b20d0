package shard

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/metrics"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/writertest"
)

// lastHeartbeat is the last heartbeat entry of topic/0 the writer has.
func lastHeartbeat(w *writertest.Writer, topic string) *ferryv1.PartitionHeartbeat {
	hbs := w.Heartbeats()
	for i := len(hbs) - 1; i >= 0; i-- {
		for _, p := range hbs[i].GetPartitions() {
			if p.GetTopic() == topic && p.GetPartition() == 0 {
				return p
			}
		}
	}
	return nil
}

// Heartbeats flow on an open stream whether or not data does: an idle
// partition is reported, and once records are produced to the source
// while copying is held back (the fetch loop is paused), its
// heartbeat carries the new high watermark, log start and head, and the
// epoch of the stream.
func TestHeartbeatsFlowWithoutData(t *testing.T) {
	const topic = "idle"
	src := newSource(t, topic)
	writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
	writer.TakeHeartbeats()
	pause := make(chan struct{})
	startRunnerDeps(t, src, newWriters(t, writer.Addr()), metrics.New(prometheus.NewRegistry()), func(*Settings) {},
		func(d *Deps) { d.pauseFetch = pause }, make(chan struct{}), topic)

	writertest.WaitFor(t, 10*time.Second, "three heartbeats of the idle partition", func() bool { return len(writer.Heartbeats()) >= 3 })
	if hb := lastHeartbeat(writer, topic); hb.GetHighWatermark() != 0 || hb.GetLogStartOffset() != 0 || hb.GetHeadOffset() != -1 || hb.GetHeadTimestamp() != -1 {
		t.Fatalf("idle partition's heartbeat %v, want high watermark 0, log start 0, no head", hb)
	}
	if writer.Batches() != 0 {
		t.Fatalf("%d batches from an empty partition", writer.Batches())
	}

	// Timestamps one millisecond apart: the head is the first record of
	// the newest timestamp (ListOffsets -3), so records sharing a
	// millisecond would make it an earlier offset than the last.
	before := time.Now().Add(-time.Second).UnixMilli()
	base := time.Now()
	for i := range 7 {
		r := &kgo.Record{Topic: topic, Value: []byte("v" + strconv.Itoa(i)), Timestamp: base.Add(time.Duration(i) * time.Millisecond)}
		if err := src.producer.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	writertest.WaitFor(t, 10*time.Second, "a heartbeat with high watermark 7", func() bool { return lastHeartbeat(writer, topic).GetHighWatermark() == 7 })
	hb := lastHeartbeat(writer, topic)
	if hb.GetLogStartOffset() != 0 || hb.GetHeadOffset() != 6 || hb.GetHeadTimestamp() < before || hb.GetObservedAt() < hb.GetHeadTimestamp() {
		t.Errorf("heartbeat %v: want log start 0, head offset 6 with the last record's timestamp, observed after it", hb)
	}
	for _, h := range writer.Heartbeats() {
		if h.GetEpoch() != 1 {
			t.Fatalf("heartbeat of epoch %d on a stream of epoch 1", h.GetEpoch())
		}
	}
	if writer.Batches() != 0 {
		t.Fatalf("%d batches sent while the fetch loop was paused", writer.Batches())
	}
	close(pause) // and copying goes on with heartbeats flowing
	writertest.WaitFor(t, 10*time.Second, "a batch after the pause", func() bool { return writer.Batches() > 0 })
}

// A writer older than heartbeats (its Opened does not set heartbeats) ends
// the stream at anything but a batch: the fetcher sends it none, and
// copies as before.
func TestNoHeartbeatsToOlderWriter(t *testing.T) {
	const topic = "t"
	src := newSource(t, topic)
	cps := writertest.NewCheckpoints()
	writer := writertest.Start(t, "127.0.0.1:0", cps) // no TakeHeartbeats: an older writer
	r, _ := startRunnerOn(t, src, newWriters(t, writer.Addr()), metrics.New(prometheus.NewRegistry()), func(*Settings) {}, topic)
	src.produce(t, topic, 5)
	writertest.WaitFor(t, 10*time.Second, "5 records committed", func() bool { n, _ := cps.Next(topic, 0); return n == 5 })
	// Several reads of the source's offsets, each of which would have
	// been a heartbeat.
	for range 3 {
		_, next := r.lastRead()
		select {
		case <-next:
		case <-time.After(10 * time.Second):
			t.Fatal("no read of the source's offsets within 10s")
		}
	}
	if st := r.Status(); writer.Opens() != 1 || st.Restarts != 0 || !st.Connected {
		t.Fatalf("%d opens, %d restarts, connected %v: the older writer's stream must stay up", writer.Opens(), st.Restarts, st.Connected)
	}
}

// Heartbeats and group offsets do not wait behind batches the writer is
// holding (a slow target): with the writer holding the first batch
// unacknowledged, the source's new high watermark and a group's new
// offset still reach it within about their interval.
func TestReportsOvertakeHeldBatches(t *testing.T) {
	const topic = "t"
	src := newSource(t, topic)
	cps := writertest.NewCheckpoints()
	writer := writertest.Start(t, "127.0.0.1:0", cps)
	writer.TakeHeartbeats()
	writer.TakeGroupOffsets()
	writer.HoldAcks()
	poller := startPoller(t, src)
	startRunnerDeps(t, src, newWriters(t, writer.Addr()), metrics.New(prometheus.NewRegistry()), func(*Settings) {},
		func(d *Deps) { d.Groups = poller }, make(chan struct{}), topic)

	src.produce(t, topic, 5)
	writertest.WaitFor(t, 10*time.Second, "a batch held at the writer", func() bool { return writer.Batches() > 0 })
	src.produce(t, topic, 5)
	src.commitGroup(t, "app", topic, 7, "")
	writertest.WaitFor(t, 3*time.Second, "a heartbeat with high watermark 10 while the batch is held", func() bool {
		return lastHeartbeat(writer, topic).GetHighWatermark() == 10
	})
	writertest.WaitFor(t, 3*time.Second, "app at 7 while the batch is held", func() bool { o, _ := sentOffset(t, writer, "app", topic); return o == 7 })
	if n, _ := cps.Next(topic, 0); n != 0 {
		t.Fatalf("committed to %d while the writer held the batch", n)
	}
	if writer.ReportStreams() != 1 {
		t.Fatalf("%d report streams, want the session's one", writer.ReportStreams())
	}
	writer.ReleaseAcks()
	writertest.WaitFor(t, 10*time.Second, "10 records committed", func() bool { n, _ := cps.Next(topic, 0); return n == 10 })
}

// To a writer older than the Report stream (its Opened does not offer
// it), heartbeats and group offsets go on the Replicate stream, as
// before, and the stream stays up.
func TestReportsInStreamToOlderWriter(t *testing.T) {
	const topic = "t"
	src := newSource(t, topic)
	src.commitGroup(t, "app", topic, 0, "")
	writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
	writer.TakeHeartbeats()
	writer.TakeGroupOffsets()
	writer.NoReports()
	poller := startPoller(t, src)
	r, _, _ := startRunnerDeps(t, src, newWriters(t, writer.Addr()), metrics.New(prometheus.NewRegistry()), func(*Settings) {},
		func(d *Deps) { d.Groups = poller }, make(chan struct{}), topic)
	src.produce(t, topic, 3)
	writertest.WaitFor(t, 10*time.Second, "a heartbeat with high watermark 3", func() bool { return lastHeartbeat(writer, topic).GetHighWatermark() == 3 })
	writertest.WaitFor(t, 10*time.Second, "app at 0", func() bool { _, ok := sentOffset(t, writer, "app", topic); return ok })
	if st := r.Status(); writer.ReportStreams() != 0 || writer.Opens() != 1 || st.Restarts != 0 {
		t.Fatalf("%d report streams, %d opens, %d restarts: want the one Replicate stream only", writer.ReportStreams(), writer.Opens(), st.Restarts)
	}
}

// A Report stream the writer refuses ends the session, as a refused data
// stream does: it reconnects, counting the restart under the refusal's
// code.
func TestRefusedReportsEndTheSession(t *testing.T) {
	const topic = "t"
	src := newSource(t, topic)
	writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
	writer.TakeHeartbeats()
	writer.RefuseReports()
	m := metrics.New(prometheus.NewRegistry())
	startRunnerOn(t, src, newWriters(t, writer.Addr()), m, func(*Settings) {}, topic)
	writertest.WaitFor(t, 10*time.Second, "a second open after the refused report stream", func() bool { return writer.Opens() >= 2 })
	writertest.WaitFor(t, 10*time.Second, "the restart counted as invalid_argument", func() bool {
		return testutil.ToFloat64(m.StreamRestarts.WithLabelValues(testLink, "invalid_argument")) >= 1
	})
}

// A partition whose fetch answers show that nothing moved is not asked
// again: once a still topic is copied, the shard sends its leader no
// ListOffsets, yet heartbeats keep coming, observed anew, with the head
// read before. Records arriving move the high watermark, and the next
// heartbeat carries it and the new head, read from the leader.
func TestStillPartitionsAreNotAskedAgain(t *testing.T) {
	const topic = "still"
	src := newSource(t, topic)
	var lists atomic.Int64
	src.cluster.ControlKey(int16(kmsg.ListOffsets), func(kmsg.Request) (kmsg.Response, error, bool) {
		src.cluster.KeepControl()
		lists.Add(1)
		return nil, nil, false
	})
	produce := func(from, n int) {
		base := time.Now()
		for i := range n {
			r := &kgo.Record{Topic: topic, Value: []byte("v" + strconv.Itoa(from+i)), Timestamp: base.Add(time.Duration(i) * time.Millisecond)}
			if err := src.producer.ProduceSync(context.Background(), r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce(0, 5)
	cps := writertest.NewCheckpoints()
	writer := writertest.Start(t, "127.0.0.1:0", cps)
	writer.TakeHeartbeats()
	startRunnerOn(t, src, newWriters(t, writer.Addr()), metrics.New(prometheus.NewRegistry()),
		func(s *Settings) { s.HeartbeatInterval = 300 * time.Millisecond }, topic)
	writertest.WaitFor(t, 10*time.Second, "5 records committed and a heartbeat of head 4", func() bool {
		n, _ := cps.Next(topic, 0)
		return n == 5 && lastHeartbeat(writer, topic).GetHeadOffset() == 4
	})

	asked, beats, still := lists.Load(), len(writer.Heartbeats()), time.Now()
	writertest.WaitFor(t, 10*time.Second, "five more heartbeats", func() bool { return len(writer.Heartbeats()) >= beats+5 })
	if n := lists.Load() - asked; n != 0 {
		t.Errorf("%d ListOffsets requests for a partition that did not move", n)
	}
	hb := lastHeartbeat(writer, topic)
	if hb.GetHighWatermark() != 5 || hb.GetLogStartOffset() != 0 || hb.GetHeadOffset() != 4 || hb.GetHeadTimestamp() < 0 || hb.GetObservedAt() < still.UnixMilli() {
		t.Fatalf("heartbeat %v: want high watermark 5, log start 0, head 4 with its timestamp, observed after %v", hb, still)
	}

	produce(5, 3)
	writertest.WaitFor(t, 10*time.Second, "a heartbeat of high watermark 8 and head 7", func() bool {
		hb := lastHeartbeat(writer, topic)
		return hb.GetHighWatermark() == 8 && hb.GetHeadOffset() == 7
	})
	if lists.Load() == asked {
		t.Error("the new head came without a ListOffsets request")
	}
}
