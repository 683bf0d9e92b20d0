package server

import (
	"context"
	"io"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/services/writer/internal/heartbeat"
)

// testSource is a kfake source cluster holding n records in orders/0.
func testSource(t *testing.T, n int) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range n {
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "orders", Value: []byte{byte(i)}}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// sourceHeartbeat reads orders/0's offsets from the source as a fetcher
// does (ListOffsets earliest, latest and max timestamp).
func sourceHeartbeat(t *testing.T, src *kfake.Cluster) *ferryv1.PartitionHeartbeat {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(src.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	at := func(ts int64) (int64, int64) {
		req := kmsg.NewPtrListOffsetsRequest()
		req.ReplicaID = -1
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "orders"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp, rp.CurrentLeaderEpoch = ts, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(context.Background(), cl)
		if err != nil || resp.Topics[0].Partitions[0].ErrorCode != 0 {
			t.Fatalf("list offsets %d: %v %v", ts, err, resp)
		}
		p := resp.Topics[0].Partitions[0]
		return p.Offset, p.Timestamp
	}
	start, _ := at(-2)
	end, _ := at(-1)
	head, headTs := at(-3)
	return &ferryv1.PartitionHeartbeat{Topic: "orders", Partition: 0, HighWatermark: end, LogStartOffset: start,
		HeadOffset: head, HeadTimestamp: headTs, ObservedAt: time.Now().UnixMilli()}
}

func sendHeartbeat(t *testing.T, stream ferryv1.ReplicationService_ReplicateClient, epoch uint64, ps ...*ferryv1.PartitionHeartbeat) {
	t.Helper()
	hb := &ferryv1.Heartbeat{Epoch: epoch, Partitions: ps}
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Heartbeat{Heartbeat: hb}}); err != nil {
		t.Fatal(err)
	}
}

// meterOf waits for orders/0's line of w's failover meter to satisfy ok.
func meterOf(t *testing.T, w *testWriter, what string, ok func(heartbeat.Exposure) bool) heartbeat.Exposure {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var last []heartbeat.Exposure
	for time.Now().Before(deadline) {
		last = w.srv.Failover()
		for _, e := range last {
			if e.Link == "east" && e.Topic == "orders" && e.Partition == 0 && ok(e) {
				return e
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("not within 10s: %s; meter %+v", what, last)
	return heartbeat.Exposure{}
}

// gauge is the writer's metric name for east/orders/0, -1 when absent.
func (w *testWriter) gauge(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := w.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["link"] == "east" && labels["topic"] == "orders" && labels["partition"] == "0" {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// The failover meter is, exactly, the source's high watermark per the last
// heartbeat minus the next source offset committed on the target: 25
// records in the source, 10 copied, the rest held back, 15 at risk; its
// seconds are the head's timestamp minus that of the last record
// committed. Both modes, in /status and the metrics.
func TestFailoverMeterIsHighWatermarkMinusCommitted(t *testing.T) {
	for _, exactly := range []bool{false, true} {
		t.Run(map[bool]string{false: "at-least-once", true: "exactly-once"}[exactly], func(t *testing.T) {
			src := testSource(t, 25)
			w := startWriter(t, passthroughLinks(t, exactly))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			stream, opened := w.openOrdersFrom(ctx, t, "east", "")
			if !opened.GetHeartbeats() {
				t.Fatal("the writer's Opened does not say it takes heartbeats")
			}
			raw := sourceBatch(t, 0, 10, nil, recordbatch.None, 0)
			if err := sendKafka(t, stream, 1, 0, raw); err != nil {
				t.Fatalf("stream ended: %v", err)
			}
			hb := sourceHeartbeat(t, src)
			// The head is the first record of the largest timestamp: records
			// produced within a millisecond share it.
			if hb.GetHighWatermark() != 25 || hb.GetHeadOffset() < 0 || hb.GetHeadOffset() > 24 || hb.GetHeadTimestamp() <= 0 {
				t.Fatalf("source heartbeat %v, want high watermark 25 and a head", hb)
			}
			sendHeartbeat(t, stream, 1, hb)
			e := meterOf(t, w, "15 records at risk", func(e heartbeat.Exposure) bool { return e.Records == 15 })
			info, err := recordbatch.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			wantSec := max(0, float64(hb.GetHeadTimestamp()-info.MaxTimestamp)/1000)
			if e.Committed != 10 || e.SourceHighWatermark != 25 || e.Seconds == nil || *e.Seconds != wantSec || e.HeartbeatAge < 0 || e.HeartbeatAge > 60 {
				t.Fatalf("meter %+v, want committed 10, high watermark 25, %v s", e, wantSec)
			}
			if got := w.gauge(t, "ferry_failover_exposure_records"); got != 15 {
				t.Errorf("ferry_failover_exposure_records %v, want 15", got)
			}
			if got := w.gauge(t, "ferry_failover_exposure_seconds"); got != wantSec {
				t.Errorf("ferry_failover_exposure_seconds %v, want %v", got, wantSec)
			}
			if got := w.gauge(t, "ferry_heartbeat_age_seconds"); got < 0 {
				t.Error("no ferry_heartbeat_age_seconds")
			}
			// The rest copied: nothing at risk.
			if _, err := sendWire(t, stream, 2, wireKafka(t, 10, sourceBatch(t, 10, 15, nil, recordbatch.None, 0))); err != nil {
				t.Fatalf("stream ended: %v", err)
			}
			meterOf(t, w, "nothing at risk once all is copied", func(e heartbeat.Exposure) bool {
				return e.Records == 0 && e.Committed == 25 && e.Seconds != nil && *e.Seconds == 0
			})
		})
	}
}

// The meter states the tail after the last heartbeat, which the lag
// cannot count: the source's append rate at the last heartbeat (the high
// watermark's growth between heartbeats over the time between their
// reads) times the heartbeat's age. Unknown after a single heartbeat.
func TestFailoverMeterEstimatesTheTailAfterTheLastHeartbeat(t *testing.T) {
	w := startWriter(t, passthroughLinks(t, true))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, _ := w.openOrdersFrom(ctx, t, "east", "")
	if err := sendKafka(t, stream, 1, 0, sourceBatch(t, 0, 10, nil, recordbatch.None, 0)); err != nil {
		t.Fatalf("stream ended: %v", err)
	}
	now := time.Now()
	hb := func(hw int64, ago time.Duration) *ferryv1.PartitionHeartbeat {
		return &ferryv1.PartitionHeartbeat{Topic: "orders", Partition: 0, HighWatermark: hw, LogStartOffset: 0,
			HeadOffset: hw - 1, HeadTimestamp: now.Add(-ago).UnixMilli(), ObservedAt: now.Add(-ago).UnixMilli()}
	}
	sendHeartbeat(t, stream, 1, hb(25, 3*time.Second))
	e := meterOf(t, w, "the first heartbeat", func(e heartbeat.Exposure) bool { return e.SourceHighWatermark == 25 })
	if e.AppendRate != nil || e.AfterHeartbeat != nil {
		t.Errorf("after one heartbeat: rate %v, estimate %v; want both unknown", e.AppendRate, e.AfterHeartbeat)
	}
	sendHeartbeat(t, stream, 1, hb(85, time.Second)) // 60 offsets in 2 s
	e = meterOf(t, w, "the second heartbeat", func(e heartbeat.Exposure) bool { return e.SourceHighWatermark == 85 })
	if e.AppendRate == nil || *e.AppendRate != 30 {
		t.Fatalf("append rate %v, want 30 offsets a second", e.AppendRate)
	}
	if e.AfterHeartbeat == nil || *e.AfterHeartbeat < 30 || *e.AfterHeartbeat != int64(math.Ceil(30*e.HeartbeatAge)) {
		t.Errorf("after-heartbeat estimate %v with the heartbeat %.3fs old, want 30 a second times that, rounded up", e.AfterHeartbeat, e.HeartbeatAge)
	}
	if e.Records != 75 {
		t.Errorf("lag %d, want 75 (the estimate is apart)", e.Records)
	}
}

// The meter survives a writer restart: a new writer reads the last
// heartbeats from the heartbeat topic and answers, with the source
// cluster gone and no fetcher, what the old one did.
func TestFailoverMeterSurvivesRestart(t *testing.T) {
	const topic = "__ferry_heartbeats"
	target, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(target.Close)
	opts := []kgo.Opt{kgo.SeedBrokers(target.ListenAddrs()...)}
	adm, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := kadm.NewClient(adm).CreateTopic(context.Background(), 1, -1, map[string]*string{"cleanup.policy": new("compact")}, topic); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	newStore := func() (*heartbeat.Table, *heartbeat.Store) {
		table := heartbeat.NewTable()
		store, err := heartbeat.NewStore(opts, topic, table, time.Hour, log)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(store.Close)
		return table, store
	}
	withTable := func(table *heartbeat.Table) func(*Options) {
		return func(o *Options) { o.Heartbeats, o.HeartbeatsTopic = table, topic }
	}

	src := testSource(t, 25)
	table1, store1 := newStore()
	w1 := startWriterOn(t, target, passthroughLinks(t, true), withTable(table1), nil, nil, insecure.NewCredentials())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, _ := w1.openOrdersFrom(ctx, t, "east", "")
	if err := sendKafka(t, stream, 1, 0, sourceBatch(t, 0, 10, nil, recordbatch.None, 0)); err != nil {
		t.Fatalf("stream ended: %v", err)
	}
	sendHeartbeat(t, stream, 1, sourceHeartbeat(t, src))
	before := meterOf(t, w1, "15 records at risk", func(e heartbeat.Exposure) bool { return e.Records == 15 && e.Seconds != nil })
	if err := store1.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	src.Close() // the source region is gone

	table2, store2 := newStore()
	loaded, refused, err := store2.Load(ctx, map[string]bool{"east": true})
	if err != nil || loaded != 1 || refused != 0 {
		t.Fatalf("read back %d heartbeats, %d refused, %v; want 1", loaded, refused, err)
	}
	w2 := startWriterOn(t, target, passthroughLinks(t, true), withTable(table2), nil, nil, insecure.NewCredentials())
	after := meterOf(t, w2, "the meter after the restart", func(e heartbeat.Exposure) bool { return e.Committed == 10 })
	if after.Records != 15 || after.Seconds == nil || *after.Seconds != *before.Seconds || !after.ObservedAt.Equal(before.ObservedAt) {
		t.Fatalf("meter after the restart %+v, want %+v", after, before)
	}
}

// A heartbeat for a partition the Open does not list, or with offsets
// that make no sense, ends the stream with an error naming the field, and
// nothing of it is kept.
func TestInvalidHeartbeatsAreRefused(t *testing.T) {
	now := time.Now().UnixMilli()
	good := func() *ferryv1.PartitionHeartbeat {
		return &ferryv1.PartitionHeartbeat{Topic: "orders", Partition: 0, HighWatermark: 10, LogStartOffset: 2, HeadOffset: 9, HeadTimestamp: now, ObservedAt: now}
	}
	edit := func(f func(*ferryv1.PartitionHeartbeat)) []*ferryv1.PartitionHeartbeat {
		p := good()
		f(p)
		return []*ferryv1.PartitionHeartbeat{p}
	}
	for _, tc := range []struct {
		name  string
		epoch uint64
		ps    []*ferryv1.PartitionHeartbeat
		code  codes.Code
		says  string
	}{
		{"partition not in the open", 1, edit(func(p *ferryv1.PartitionHeartbeat) { p.Partition = 1 }), codes.InvalidArgument, "heartbeat.partitions[0]: orders/1 is not in shard 0"},
		{"topic not in the open", 1, edit(func(p *ferryv1.PartitionHeartbeat) { p.Topic = "payments" }), codes.InvalidArgument, "payments/0 is not in shard 0"},
		{"negative high watermark", 1, edit(func(p *ferryv1.PartitionHeartbeat) { p.HighWatermark, p.LogStartOffset, p.HeadOffset = -5, 0, -1 }), codes.InvalidArgument, "heartbeat.partitions[0].high_watermark -5"},
		{"log start above the high watermark", 1, edit(func(p *ferryv1.PartitionHeartbeat) { p.LogStartOffset = 11 }), codes.InvalidArgument, "heartbeat.partitions[0].log_start_offset 11 is above high_watermark 10"},
		{"negative log start", 1, edit(func(p *ferryv1.PartitionHeartbeat) { p.LogStartOffset = -1 }), codes.InvalidArgument, "log_start_offset -1 is negative"},
		{"head at the high watermark", 1, edit(func(p *ferryv1.PartitionHeartbeat) { p.HeadOffset = 10 }), codes.InvalidArgument, "head_offset 10"},
		{"head offset without timestamp", 1, edit(func(p *ferryv1.PartitionHeartbeat) { p.HeadTimestamp = -1 }), codes.InvalidArgument, "both or neither"},
		{"no observation time", 1, edit(func(p *ferryv1.PartitionHeartbeat) { p.ObservedAt = 0 }), codes.InvalidArgument, "observed_at 0"},
		{"partition twice", 1, []*ferryv1.PartitionHeartbeat{good(), good()}, codes.InvalidArgument, "heartbeat.partitions[1]: orders/0 listed twice"},
		{"another epoch", 2, []*ferryv1.PartitionHeartbeat{good()}, codes.FailedPrecondition, "heartbeat epoch 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := startWriter(t, passthroughLinks(t, false))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			stream, _ := w.openOrdersFrom(ctx, t, "east", "")
			sendHeartbeat(t, stream, tc.epoch, tc.ps...)
			_, err := stream.Recv()
			wantRefusal(t, err, tc.code, tc.says)
			if got := w.srv.Failover(); len(got) != 0 {
				t.Errorf("a refused heartbeat was kept: %+v", got)
			}
			if tc.code == codes.InvalidArgument && w.rejected(t, "east", "bad_heartbeat") != 1 {
				t.Error("refusal not counted as bad_heartbeat")
			}
		})
	}
}

// A fetcher older than heartbeats sends none: it still copies, and the
// meter has nothing to say of its partitions.
func TestFetcherWithoutHeartbeatsCopies(t *testing.T) {
	w := startWriter(t, passthroughLinks(t, false))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, _ := w.openOrdersFrom(ctx, t, "east", "")
	ack, err := sendWire(t, stream, 1, wireKafka(t, 0, sourceBatch(t, 0, 5, nil, recordbatch.None, 0)))
	if err != nil || len(ack.GetCommitted()) != 1 || ack.GetCommitted()[0].GetNextOffset() != 5 {
		t.Fatalf("ack %v, %v; want orders/0 committed to 5", ack, err)
	}
	if got := w.srv.Failover(); len(got) != 0 {
		t.Fatalf("meter %+v without any heartbeat", got)
	}
}

// A request of a fetcher newer than this writer, carrying a message the
// writer does not know (a oneof field it was built without), is passed
// over: the stream goes on.
func TestUnknownRequestIsIgnored(t *testing.T) {
	w := startWriter(t, passthroughLinks(t, false))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, _ := w.openOrdersFrom(ctx, t, "east", "")
	req := &ferryv1.ReplicateRequest{}
	unknown := protowire.AppendTag(nil, 99, protowire.BytesType)
	req.ProtoReflect().SetUnknown(protowire.AppendBytes(unknown, []byte("from the future")))
	if err := stream.Send(req); err != nil {
		t.Fatal(err)
	}
	if _, err := sendWire(t, stream, 1, wireKafka(t, 0, sourceBatch(t, 0, 5, nil, recordbatch.None, 0))); err != nil {
		t.Fatalf("stream ended after an unknown request: %v", err)
	}
}

// The meter says the loss in records, not only offsets: of what the
// fetcher had read at its last heartbeat, the records not committed,
// exactly (transaction markers and aborted records take offsets, not
// records), and apart the offsets no one read. Each round the stream
// commits after the heartbeat takes its records off.
func TestFailoverMeterCountsRecordsNotOffsets(t *testing.T) {
	w := startWriter(t, passthroughLinks(t, true))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, _ := w.openOrdersFrom(ctx, t, "east", "")
	if err := sendKafka(t, stream, 1, 0, sourceBatch(t, 0, 10, nil, recordbatch.None, 0)); err != nil {
		t.Fatalf("stream ended: %v", err)
	}
	// The source: records 0-14, a marker at 15, an aborted transaction
	// at 16-19, its marker at 20, records 21-25, and 26-29 not read yet.
	// The fetcher has read to 26: 10 + 5 + 5 records.
	now := time.Now().UnixMilli()
	sendHeartbeat(t, stream, 1, &ferryv1.PartitionHeartbeat{Topic: "orders", Partition: 0, HighWatermark: 30, LogStartOffset: 0,
		HeadOffset: 29, HeadTimestamp: now, ObservedAt: now, ReadNext: 26, RecordsRead: 20, ReadsCounted: true})
	e := meterOf(t, w, "the heartbeat", func(e heartbeat.Exposure) bool { return e.SourceHighWatermark == 30 })
	if e.Records != 20 || e.LostRecords == nil || *e.LostRecords != 10 || e.UnreadOffsets == nil || *e.UnreadOffsets != 4 {
		t.Fatalf("offsets %d, records %v, unread %v; want 20 offsets at risk: 10 records read and not committed, 4 offsets unread", e.Records, e.LostRecords, e.UnreadOffsets)
	}
	if err := sendKafka(t, stream, 2, 10, sourceBatch(t, 10, 5, nil, recordbatch.None, 0)); err != nil {
		t.Fatalf("stream ended: %v", err)
	}
	e = meterOf(t, w, "records 10-14 committed", func(e heartbeat.Exposure) bool { return e.Committed == 15 })
	if e.Records != 15 || e.LostRecords == nil || *e.LostRecords != 5 || *e.UnreadOffsets != 4 {
		t.Fatalf("offsets %d, records %v, unread %v; want 15 offsets at risk: 5 records (21-25), 4 offsets unread", e.Records, e.LostRecords, e.UnreadOffsets)
	}
	// A fetcher that does not count its reads: offsets only.
	sendHeartbeat(t, stream, 1, &ferryv1.PartitionHeartbeat{Topic: "orders", Partition: 0, HighWatermark: 31, LogStartOffset: 0,
		HeadOffset: 30, HeadTimestamp: now, ObservedAt: now + 1})
	e = meterOf(t, w, "an uncounted heartbeat", func(e heartbeat.Exposure) bool { return e.SourceHighWatermark == 31 })
	if e.LostRecords != nil || e.UnreadOffsets != nil {
		t.Fatalf("records %v, unread %v after an uncounted heartbeat, want both unknown", e.LostRecords, e.UnreadOffsets)
	}
}
