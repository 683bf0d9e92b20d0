package shard

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferry-replicator/ferry/services/fetcher/internal/metrics"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/writertest"
)

// answerFetchOnce makes the source answer its next Fetch naming topic at
// an offset of at least from itself: topic's partitions as edit sets them,
// every other partition of the request empty (a valid answer with nothing
// new). The answers after it are the cluster's own.
func answerFetchOnce(src *source, topic string, from int64, edit func(*kmsg.FetchResponseTopicPartition)) {
	id := src.cluster.TopicInfo(topic).TopicID // not from inside the control function: it runs in the cluster's loop
	src.cluster.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.FetchRequest)
		names := slices.ContainsFunc(req.Topics, func(rt kmsg.FetchRequestTopic) bool {
			return slices.ContainsFunc(rt.Partitions, func(rp kmsg.FetchRequestTopicPartition) bool {
				return (rt.Topic == topic || rt.TopicID == id) && rp.FetchOffset >= from
			})
		})
		if !names {
			src.cluster.KeepControl()
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		resp.Version = req.Version
		for _, rt := range req.Topics {
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition, sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = rp.Partition, -1, -1, -1
				if rt.Topic == topic || rt.TopicID == id {
					edit(&sp)
				}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

// An unclean leader election truncated t/0 below what the shard copied
// (to 6, after ten records copied) and producers pushed it past the old
// end: the leader's Fetch answer names the diverging epoch (KIP-320). The
// partition stops as source_truncated, nothing of t past the divergence
// is sent, and the shard's other partition goes on.
func TestPassThroughSourceTruncatedStops(t *testing.T) {
	const topic = "t"
	src := newSource(t, topic, "other")
	src.produce(t, topic, 10)
	m := metrics.New(prometheus.NewRegistry())
	writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
	r, _ := startRunnerOn(t, src, newWriters(t, writer.Addr()), m, func(*Settings) {}, topic, "other")
	writertest.WaitFor(t, 10*time.Second, "t/0's ten records committed", func() bool { return committedOf(m, topic)() >= 10 })

	epoch := src.cluster.PartitionInfo(topic, 0).Epoch
	answerFetchOnce(src, topic, 10, func(sp *kmsg.FetchResponseTopicPartition) {
		sp.DivergingEpoch.Epoch, sp.DivergingEpoch.EndOffset = epoch, 6
	})
	src.produce(t, topic, 5) // the source's new records, past the old end
	writertest.WaitFor(t, 10*time.Second, "t/0 stopped as source_truncated, or copied on", func() bool {
		return stops(m, topic, "source_truncated")() == 1 || committedOf(m, topic)() > 10
	})
	if n := stops(m, topic, "source_truncated")(); n != 1 {
		t.Fatalf("t/0 stops as source_truncated: %v, want 1 (committed %v: copied on past the divergence)", n, committedOf(m, topic)())
	}
	st := r.Status().Partitions["t/0"].Stopped
	for _, want := range []string{"source_truncated", "[6, 10)"} {
		if !strings.Contains(st, want) {
			t.Fatalf("t/0's status %q does not name %q", st, want)
		}
	}

	src.produce(t, "other", 3)
	writertest.WaitFor(t, 10*time.Second, "other/0 copied after t/0 stopped", func() bool { return committedOf(m, "other")() >= 3 })
	if got := firstOffsets(writer, topic); slices.ContainsFunc(got, func(o int64) bool { return o >= 10 }) {
		t.Fatalf("batches of t from %v: something past the divergence was sent", got)
	}
	if n := committedOf(m, topic)(); n != 10 {
		t.Fatalf("t/0 committed %v, want 10", n)
	}
}

// A leader change without truncation (the fetcher's leader epoch fenced,
// FENCED_LEADER_EPOCH, then a fetch that succeeds) stops nothing: the
// records that follow are copied.
func TestPassThroughFencedLeaderEpochGoesOn(t *testing.T) {
	const topic = "t"
	src := newSource(t, topic)
	src.produce(t, topic, 4)
	m := metrics.New(prometheus.NewRegistry())
	writer := writertest.Start(t, "127.0.0.1:0", writertest.NewCheckpoints())
	startRunner(t, src, newWriters(t, writer.Addr()), m, topic)
	writertest.WaitFor(t, 10*time.Second, "t/0's four records committed", func() bool { return committedOf(m, topic)() >= 4 })

	answerFetchOnce(src, topic, 4, func(sp *kmsg.FetchResponseTopicPartition) { sp.ErrorCode = kerr.FencedLeaderEpoch.Code })
	answerFetchOnce(src, topic, 4, func(sp *kmsg.FetchResponseTopicPartition) { sp.ErrorCode = kerr.UnknownLeaderEpoch.Code })
	src.produce(t, topic, 4)
	writertest.WaitFor(t, 10*time.Second, "t/0's eight records committed", func() bool { return committedOf(m, topic)() >= 8 })
	for _, reason := range []string{"source_truncated", ReasonOutOfRange, ReasonSourceUnreadable} {
		if n := testutil.ToFloat64(m.PartitionStops.WithLabelValues(testLink, topic, "0", reason)); n != 0 {
			t.Fatalf("t/0 stopped as %s after a leader change", reason)
		}
	}
}
