package rawfetch

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A position given with Resume is checked with OffsetForLeaderEpoch
// before it is fetched: a leader whose log of the epoch ends below it
// (an unclean election truncated it) gives a Divergence and no batches;
// one whose log reaches it is read on.
func TestResumeValidates(t *testing.T) {
	const topic = "resume"
	c := newCluster(t, kfake.SeedTopics(1, topic))
	ctx := timeout(t, time.Minute)
	cl := newClient(t, c.ListenAddrs())
	produce(t, ctx, cl, valueRecords(topic, 0, numbered("v", 12)...)...)
	p := Partition{topic, 0}
	epoch := c.PartitionInfo(topic, 0).Epoch

	f := New(cl, Options{MaxWait: 20 * time.Millisecond})
	ok := f.Reader()
	ok.Resume(p, 10, epoch)
	if r := roundWithoutRetry(t, ctx, ok, map[Partition]int64{p: 10})[p]; r.Err != nil || len(r.Batches) == 0 || r.LastEpoch != epoch {
		t.Fatalf("a log that reaches the position: Err %v, %d batches, last epoch %d", r.Err, len(r.Batches), r.LastEpoch)
	}

	c.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.OffsetForLeaderEpochRequest)
		resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
		resp.Version = req.Version
		for _, rt := range req.Topics {
			st := kmsg.NewOffsetForLeaderEpochResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
				sp.Partition, sp.LeaderEpoch, sp.EndOffset = rp.Partition, rp.LeaderEpoch, 6
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	cut := f.Reader()
	cut.Resume(p, 10, epoch)
	r := roundWithoutRetry(t, ctx, cut, map[Partition]int64{p: 10})[p]
	var d *Divergence
	if !errors.As(r.Err, &d) || !errors.Is(r.Err, ErrDiverged) || len(r.Batches) != 0 || r.Next != 10 {
		t.Fatalf("a log truncated to 6: Err %v, %d batches, Next %d; want a Divergence and nothing read", r.Err, len(r.Batches), r.Next)
	}
	if d.Position != 10 || d.LastEpoch != epoch || d.Epoch != epoch || d.EndOffset != 6 {
		t.Fatalf("divergence %+v", *d)
	}
}
