package recordbatch

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferry-replicator/ferry/loadtest/kafkabroker"
)

// TestApacheKafkaDeleteHorizon has a real Apache Kafka broker's log cleaner
// stamp a batch holding a tombstone with its delete horizon (KIP-534), and
// checks what Ferry's writer makes of that batch (Records, then a Builder,
// as its rebuild path does): no horizon, the first record's timestamp as
// base, the records' own timestamps, the tombstone still null; and the
// broker stores the rebuilt batch so. It fails, never skips, when the
// broker cannot start.
func TestApacheKafkaDeleteHorizon(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skips starting a real Apache Kafka broker (a JVM, tens of seconds); CI runs without -short")
	}
	// The cleaner looks for dirty logs every 100 ms instead of 15 s.
	broker := kafkabroker.StartT(t, kafkabroker.Options{Name: "recordbatch-horizon", Props: map[string]string{"log.cleaner.backoff.ms": "100"}})
	addrs := []string{broker.Addr()}
	w := newWire(t, addrs...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	compacted := map[string]*string{
		"cleanup.policy":            kadm.StringPtr("compact"),
		"segment.ms":                kadm.StringPtr("100"), // the next append rolls the segment, making it cleanable
		"min.cleanable.dirty.ratio": kadm.StringPtr("0"),
		"delete.retention.ms":       kadm.StringPtr("86400000"), // the horizon: a day after cleaning
	}
	adm := kadm.NewClient(w.cl)
	for _, topic := range []string{"cleaned", "copied"} {
		resp, err := adm.CreateTopic(ctx, 1, 1, compacted, topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			t.Fatalf("create topic %s: %v", topic, err)
		}
	}

	now := time.Now().UnixMilli()
	recs := []Record{
		{Timestamp: now - 3000, Key: []byte("k1"), Value: []byte("old")},
		{Timestamp: now - 2000, Key: []byte("k2"), Value: []byte("kept")},
		{Timestamp: now - 1000, Key: []byte("k1"), Value: nil}, // deletes k1
	}
	w.mustProduce(ctx, "cleaned", 0, mustBuild(t, recs, LZ4))
	kept := recs[1:] // what the cleaner leaves of the batch

	// Appends roll the segment; the cleaner then rewrites the batch with
	// its horizon. Polled, filler after filler, until it has.
	var cleaned []byte
	for cleaned == nil {
		filler := mustBuild(t, []Record{{Timestamp: time.Now().UnixMilli(), Key: []byte("filler"), Value: []byte("x")}}, None)
		w.mustProduce(ctx, "cleaned", 0, filler)
		for _, b := range fetchOnce(t, ctx, w, "cleaned") {
			if info, _ := Parse(b); info.BaseOffset == 0 {
				if _, ok := info.DeleteHorizon(); ok {
					cleaned = b
				}
			}
		}
		if cleaned == nil {
			select {
			case <-ctx.Done():
				t.Fatalf("the broker's cleaner set no delete horizon on the tombstone's batch: %v (broker log %s)", ctx.Err(), broker.LogPath())
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	info, _ := Parse(cleaned)
	horizon, _ := info.DeleteHorizon()
	if horizon < now+86_400_000-60_000 {
		t.Fatalf("horizon %d, want about a day from now (%d)", horizon, now+86_400_000)
	}
	got, err := Records(cleaned, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	sameRecords(t, "records the cleaner kept", got, kept) // their own timestamps, not the horizon

	// The writer's rebuild path: records decoded, added one by one, built.
	var b Builder
	for _, r := range got {
		if !b.AddRecord(r, 1<<20) {
			t.Fatal("AddRecord refused a record")
		}
	}
	rebuilt, err := b.Build(LZ4)
	if err != nil {
		t.Fatal(err)
	}
	w.mustProduce(ctx, "copied", 0, rebuilt)
	stored := fetchOnce(t, ctx, w, "copied")
	if len(stored) != 1 {
		t.Fatalf("copied holds %d batches, want 1", len(stored))
	}
	si, _ := Parse(stored[0])
	if h, ok := si.DeleteHorizon(); ok {
		t.Fatalf("the rebuilt batch carries a delete horizon %d (attributes %#x)", h, si.Attributes)
	}
	if si.FirstTimestamp != kept[0].Timestamp {
		t.Errorf("rebuilt batch's base timestamp %d, want the first record's %d", si.FirstTimestamp, kept[0].Timestamp)
	}
	back, err := Records(stored[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	sameRecords(t, "records of the rebuilt batch", back, kept)
}

// fetchOnce returns the batches one fetch from offset 0 of topic's
// partition 0 returns.
func fetchOnce(t *testing.T, ctx context.Context, w *wire, topic string) [][]byte {
	t.Helper()
	id, leader := w.partition(ctx, topic, 0)
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis, req.MinBytes = 100, 1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = topic, id
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.PartitionMaxBytes = 0, 8<<20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, w.cl.Broker(int(leader)))
	if err != nil {
		t.Fatalf("fetch %s: %v", topic, err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("fetch %s: response for %d topics", topic, len(resp.Topics))
	}
	p := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		t.Fatalf("fetch %s: %v", topic, err)
	}
	batches, _, err := Split(p.RecordBatches)
	if err != nil {
		t.Fatalf("fetch %s: %v", topic, err)
	}
	return batches
}
