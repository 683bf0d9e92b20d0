package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/ferry-replicator/ferry/loadtest/kafkabroker"
	"github.com/ferry-replicator/ferry/loadtest/workload"
	"github.com/ferry-replicator/ferry/pkg/shards"
)

// TestRealKafkaReplicationSurvivesWriterKill runs the core checks on two
// Apache Kafka brokers (KRaft, from Maven Central): partitions, keys,
// headers and timestamps copied exactly, and a writer killed mid-stream
// losing nothing. It fails, never skips, when Java or the jars are missing.
func TestRealKafkaReplicationSurvivesWriterKill(t *testing.T) {
	ctx := context.Background()
	startCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var addrs [][]string
	for range 2 {
		b, err := kafkabroker.Start(startCtx, kafkabroker.Options{DataDir: t.TempDir()})
		if err != nil {
			t.Fatalf("start Apache Kafka: %v", err)
		}
		t.Cleanup(func() { _ = b.Stop() })
		addrs = append(addrs, []string{b.Addr()})
	}
	e := newEnvOn(t, addrs[0], addrs[1])
	e.delivery = "at_least_once"
	e.createTopic("t.real", 4, map[string]*string{"compression.type": ptr("lz4")})
	e.startWriter()
	e.startFetcher(nil)
	const records = 20000
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		e.produce(ctx, workload.Options{Topic: "t.real", Partitions: 4, Records: records, ValueBytes: 500, Rate: 4000, Seed: 5})
	}()
	e.waitFor(ctx, "src.t.real", records/3)
	e.writer.Kill()
	if err := e.writer.Restart(); err != nil {
		t.Fatal(err)
	}
	<-prodDone
	e.waitFor(ctx, "src.t.real", records)
	res := e.verify(ctx, "t.real")
	recordScenario(t, "at_least_once", res, 0)
	if res.Missing != 0 || res.Reordered != 0 || res.Corrupt != 0 || res.Produced != records {
		t.Fatalf("on Apache Kafka after a writer kill: %+v", res)
	}
}

// TestRealKafkaExactlyOnceSurvivesBrokerRestartAndWriterKill runs the
// exactly-once mode on Apache Kafka: the target broker is restarted and the
// writer killed mid-stream, and the target must hold every record once.
func TestRealKafkaExactlyOnceSurvivesBrokerRestartAndWriterKill(t *testing.T) {
	ctx := context.Background()
	startCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var brokers []*kafkabroker.Broker
	for range 2 {
		b, err := kafkabroker.Start(startCtx, kafkabroker.Options{DataDir: t.TempDir()})
		if err != nil {
			t.Fatalf("start Apache Kafka: %v", err)
		}
		t.Cleanup(func() { _ = b.Stop() })
		brokers = append(brokers, b)
	}
	e := newEnvOn(t, []string{brokers[0].Addr()}, []string{brokers[1].Addr()})
	e.delivery = "exactly_once"
	e.createTopic("t.real", 4, nil)
	e.startWriter()
	e.startFetcher(nil)
	const records = 15000
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		e.produce(ctx, workload.Options{Topic: "t.real", Partitions: 4, Records: records, ValueBytes: 500, Rate: 2000, Seed: 6})
	}()
	e.waitFor(ctx, "src.t.real", records/4)
	if err := brokers[1].Restart(startCtx); err != nil {
		t.Fatalf("restart target broker: %v", err)
	}
	e.waitFor(ctx, "src.t.real", records/2)
	// The writer dies within moments of the broker's restart, while the
	// transaction coordinator may still be recovering.
	e.writer.Kill()
	if err := e.writer.Restart(); err != nil {
		t.Fatal(err)
	}
	<-prodDone
	e.waitFor(ctx, "src.t.real", records)
	res := e.verify(ctx, "t.real")
	recordScenario(t, "", res, 0)
	if !res.OK() || res.Produced != records {
		t.Fatalf("exactly-once on Apache Kafka after a broker restart and a writer kill: %+v", res)
	}
}

// TestRealKafkaExactlyOnceEndsHangingCheckpointTransaction leaves, on the
// checkpoint partition, an open transaction of the transactional id of each
// shard the topic's partitions fall in, that no coordinator knows: what a target broker leaves behind when it
// loses a commit marker in a restart (seen with Apache Kafka 4.3.1, see
// docs/exactly-once.md). Such a transaction holds back the partition's last
// stable offset for good, so a writer that waited for it would never open
// a shard; each shard's open must end its own leftover and replicate.
func TestRealKafkaExactlyOnceEndsHangingCheckpointTransaction(t *testing.T) {
	ctx := context.Background()
	startCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	src, err := kafkabroker.Start(startCtx, kafkabroker.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatalf("start Apache Kafka: %v", err)
	}
	t.Cleanup(func() { _ = src.Stop() })
	// With partition verification off (KIP-890), the broker appends a
	// transactional batch to a partition its coordinator never added to
	// the transaction: the only way to build the leftover on purpose.
	dst, err := kafkabroker.Start(startCtx, kafkabroker.Options{DataDir: t.TempDir(),
		Props: map[string]string{"transaction.partition.verification.enable": "false"}})
	if err != nil {
		t.Fatalf("start Apache Kafka: %v", err)
	}
	t.Cleanup(func() { _ = dst.Stop() })
	e := newEnvOn(t, []string{src.Addr()}, []string{dst.Addr()})
	e.delivery = "exactly_once"
	e.createTopic("t.hang", 4, nil)
	e.startWriter() // creates the checkpoint topic
	var owned []int
	for p := range int32(4) {
		owned = append(owned, shards.Of("t.hang", p, 64)) // link.shards default
	}
	hangCheckpointTransactions(t, dst.Addr(), "test", owned)
	e.startFetcher(nil)
	const records = 3000
	e.produce(ctx, workload.Options{Topic: "t.hang", Partitions: 4, Records: records, ValueBytes: 200, Seed: 8})
	e.waitFor(ctx, "src.t.hang", records)
	res := e.verify(ctx, "t.hang")
	recordScenario(t, "", res, 0)
	if !res.OK() || res.Produced != records {
		t.Fatalf("exactly-once past hanging checkpoint transactions: %+v", res)
	}
}

// hangCheckpointTransactions opens, on partition 0 of the checkpoint topic,
// a transaction of the transactional id of each shard of link given,
// without adding the partition to it at the coordinator.
func hangCheckpointTransactions(t *testing.T, addr, link string, ids []int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Produce version 11 at most: version 12 (transactions v2, KIP-890)
	// adds the partition to the transaction at the coordinator by itself.
	versions := kversion.Stable()
	versions.SetMaxKeyVersion(0, 11)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.MaxVersions(versions))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, shard := range ids {
		id := fmt.Sprintf("ferry-%s-%d", link, shard)
		pid, epoch := initProducerID(ctx, t, cl, id)
		produce := kmsg.NewPtrProduceRequest()
		produce.TransactionID, produce.Acks, produce.TimeoutMillis = &id, -1, 30_000
		topic := kmsg.NewProduceRequestTopic()
		topic.Topic = "__ferry_checkpoints"
		part := kmsg.NewProduceRequestTopicPartition()
		part.Partition = 0
		part.Records = transactionalBatch(pid, epoch, []byte("barrier/leftover"))
		topic.Partitions = append(topic.Partitions, part)
		produce.Topics = append(produce.Topics, topic)
		presp, err := produce.RequestWith(ctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(presp.Topics[0].Partitions[0].ErrorCode)
		}
		if err != nil {
			t.Fatalf("produce leftover of %s: %v", id, err)
		}
		// A later session of the shard bumps the epoch, as the writer that
		// outlived the broker restart did; the coordinator still knows
		// nothing of the leftover.
		initProducerID(ctx, t, cl, id)
	}
}

func initProducerID(ctx context.Context, t *testing.T, cl *kgo.Client, id string) (int64, int16) {
	t.Helper()
	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionalID, init.TransactionTimeoutMillis = &id, 900_000 // the broker maximum: no timeout ends it during the test
	resp, err := init.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		t.Fatalf("init producer id of %s: %v", id, err)
	}
	return resp.ProducerID, resp.ProducerEpoch
}

// transactionalBatch encodes a one-record, uncompressed, transactional
// record batch (magic 2) of producer id/epoch.
func transactionalBatch(id int64, epoch int16, key []byte) []byte {
	rec := kmsg.Record{Key: key, Value: []byte("{}")}
	body := rec.AppendTo(nil)
	rec.Length = int32(len(body) - 1) // the zero length took one byte
	body = rec.AppendTo(nil)
	now := time.Now().UnixMilli()
	b := kmsg.RecordBatch{
		Magic: 2, Attributes: 0x10, // transactional
		FirstTimestamp: now, MaxTimestamp: now,
		ProducerID: id, ProducerEpoch: epoch, FirstSequence: 0,
		NumRecords: 1, Records: body,
	}
	raw := b.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	// The CRC covers everything from the attributes on.
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}
