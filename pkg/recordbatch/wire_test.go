package recordbatch

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// wire speaks raw Kafka requests to one cluster, as Ferry's producer will.
type wire struct {
	t  testing.TB
	cl *kgo.Client
}

func newWire(t testing.TB, addrs ...string) *wire {
	t.Helper()
	// Raw produce requests take the client's acks: all in-sync replicas.
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &wire{t: t, cl: cl}
}

// partition finds a partition's topic id and leader, waiting for a newly
// created topic to have one.
func (w *wire) partition(ctx context.Context, topic string, partition int32) (id [16]byte, leader int32) {
	w.t.Helper()
	for {
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, w.cl)
		if err == nil && len(resp.Topics) == 1 && resp.Topics[0].ErrorCode == 0 {
			for _, p := range resp.Topics[0].Partitions {
				if p.Partition == partition && p.ErrorCode == 0 && p.Leader >= 0 {
					return resp.Topics[0].TopicID, p.Leader
				}
			}
		}
		select {
		case <-ctx.Done():
			w.t.Fatalf("no leader for %s/%d: %v (last error %v)", topic, partition, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// produce sends batch in a raw produce request to the partition's leader.
// It retries only while the partition is not ready yet, so a refusal of the
// batch itself comes back in the response.
func (w *wire) produce(ctx context.Context, topic string, partition int32, batch []byte) kmsg.ProduceResponseTopicPartition {
	w.t.Helper()
	for {
		id, leader := w.partition(ctx, topic, partition)
		req := kmsg.NewPtrProduceRequest()
		req.Acks = -1
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic, rt.TopicID = topic, id // by name before v13, by id after
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = partition, batch
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, w.cl.Broker(int(leader)))
		if err != nil {
			w.t.Fatalf("produce to %s/%d: %v", topic, partition, err)
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			w.t.Fatalf("produce to %s/%d: response for %d topics", topic, partition, len(resp.Topics))
		}
		p := resp.Topics[0].Partitions[0]
		switch p.ErrorCode {
		case kerr.UnknownTopicOrPartition.Code, kerr.LeaderNotAvailable.Code, kerr.NotLeaderForPartition.Code:
		default:
			return p
		}
		select {
		case <-ctx.Done():
			w.t.Fatalf("produce to %s/%d: %v, last %v", topic, partition, ctx.Err(), kerr.ErrorForCode(p.ErrorCode))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// mustProduce produces batch and fails the test unless the broker takes it.
func (w *wire) mustProduce(ctx context.Context, topic string, partition int32, batch []byte) int64 {
	w.t.Helper()
	p := w.produce(ctx, topic, partition, batch)
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		msg := ""
		if p.ErrorMessage != nil {
			msg = *p.ErrorMessage
		}
		w.t.Fatalf("produce to %s/%d refused: %v %s", topic, partition, err, msg)
	}
	return p.BaseOffset
}

// fetch returns the raw batches of a partition from offset 0 until they
// hold at least want records, as a replicator's fetcher sees them.
func (w *wire) fetch(ctx context.Context, topic string, partition int32, want int) [][]byte {
	w.t.Helper()
	var (
		batches [][]byte
		got     int
		offset  int64
	)
	for got < want {
		id, leader := w.partition(ctx, topic, partition)
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis, req.MinBytes = 500, 1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, id
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = partition, offset, 8<<20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, w.cl.Broker(int(leader)))
		if err != nil {
			w.t.Fatalf("fetch %s/%d: %v", topic, partition, err)
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			w.t.Fatalf("fetch %s/%d: %v", topic, partition, err)
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					w.t.Fatalf("fetch %s/%d: %v", topic, partition, err)
				}
				split, _, err := Split(p.RecordBatches)
				if err != nil {
					w.t.Fatalf("fetch %s/%d: %v", topic, partition, err)
				}
				for _, b := range split {
					info, err := Parse(b)
					if err != nil {
						w.t.Fatal(err)
					}
					batches = append(batches, b)
					if !info.Control() {
						got += int(info.NumRecords)
					}
					offset = info.BaseOffset + int64(info.LastOffsetDelta) + 1
				}
			}
		}
		if ctx.Err() != nil {
			w.t.Fatalf("fetch %s/%d: %d of %d records: %v", topic, partition, got, want, ctx.Err())
		}
	}
	return batches
}

// consume reads want records of topic with an ordinary kgo consumer.
func consume(t testing.TB, ctx context.Context, addr []string, topic string, want int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []*kgo.Record
	for len(got) < want {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consume %s: %d of %d records: %v", topic, len(got), want, err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("consume %s/%d: %v", topic, p, err) })
		got = append(got, fs.Records()...)
	}
	if len(got) != want {
		t.Fatalf("consumed %d records of %s, want %d", len(got), topic, want)
	}
	return got
}

// fromKgo is r as a Record (offset delta left zero).
func fromKgo(r *kgo.Record) Record {
	rec := Record{Timestamp: r.Timestamp.UnixMilli(), Key: r.Key, Value: r.Value}
	for _, h := range r.Headers {
		rec.Headers = append(rec.Headers, Header{Key: h.Key, Value: h.Value})
	}
	return rec
}

// sameRecords compares records field by field, null and empty apart, and
// ignores offset deltas.
func sameRecords(t testing.TB, what string, got, want []Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", what, len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		g.OffsetDelta, w.OffsetDelta = 0, 0
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("%s: record %d:\n got %s\nwant %s", what, i, describe(g), describe(w))
		}
	}
}

func describe(r Record) string {
	b := func(v []byte) string {
		if v == nil {
			return "null"
		}
		if len(v) > 40 {
			return fmt.Sprintf("%q...(%d bytes)", v[:40], len(v))
		}
		return fmt.Sprintf("%q", v)
	}
	s := fmt.Sprintf("ts %d key %s value %s", r.Timestamp, b(r.Key), b(r.Value))
	for _, h := range r.Headers {
		s += fmt.Sprintf(" [%q=%s]", h.Key, b(h.Value))
	}
	return s
}
