package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
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
	var addrs [][]string
	for _, b := range startKafkas(t, "source", "target") {
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
	brokers := startKafkas(t, "source", "target")
	e := newEnvOn(t, []string{brokers[0].Addr()}, []string{brokers[1].Addr()})
	e.delivery = "exactly_once"
	e.createTopic("t.real", 4, nil)
	e.writerExtra = map[string]any{"log": map[string]any{"level": "debug"}}
	e.startWriter()
	// lz4 makes the batches and timing under which the duplicates of
	// docs/exactly-once.md were seen most often.
	e.startFetcher(map[string]any{"codec": "lz4"})
	const records = 15000
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		e.produce(ctx, workload.Options{Topic: "t.real", Partitions: 4, Records: records, ValueBytes: 500, Rate: 2000, Seed: 6})
	}()
	e.waitFor(ctx, "src.t.real", records/4)
	restartCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := brokers[1].Restart(restartCtx); err != nil {
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

// TestRealKafkaExactlyOnceEndsTransactionsLeftOpen leaves, for the
// transactional id of each shard in use, a transaction open that no
// coordinator knows of, on the checkpoint partition and on the shard's
// target data partition, holding copies of the first records the shard is
// about to copy. That is what Apache Kafka 4.x leaves when a commit reaches
// a broker whose partitions have no leader (the only in-sync replica in
// controlled shutdown): the commit is acknowledged and recorded, and its
// markers are never written (docs/exactly-once.md). A writer that only
// waited would never open (the open transaction holds back the checkpoint
// partition's last stable offset); one that then committed on the data
// partition would end the leftover as committed, and the target would hold
// those records twice. Each open must end both as aborted.
func TestRealKafkaExactlyOnceEndsTransactionsLeftOpen(t *testing.T) {
	ctx := context.Background()
	startCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	src, err := kafkabroker.Start(startCtx, kafkabroker.Options{DataDir: keptDir(t, "kafka")})
	if err != nil {
		t.Fatalf("start Apache Kafka: %v", err)
	}
	t.Cleanup(func() { _ = src.Stop() })
	// With partition verification off (KIP-890), the broker appends a
	// transactional batch to a partition its coordinator never added to
	// the transaction: the only way to build the leftover on purpose.
	dst, err := kafkabroker.Start(startCtx, kafkabroker.Options{DataDir: keptDir(t, "kafka"),
		Props: map[string]string{"transaction.partition.verification.enable": "false"}})
	if err != nil {
		t.Fatalf("start Apache Kafka: %v", err)
	}
	t.Cleanup(func() { _ = dst.Stop() })
	e := newEnvOn(t, []string{src.Addr()}, []string{dst.Addr()})
	e.delivery = "exactly_once"
	const partitions, records, leftover = 4, 3000, 50
	e.createTopic("t.hang", partitions, nil)
	e.produce(ctx, workload.Options{Topic: "t.hang", Partitions: partitions, Records: records, ValueBytes: 200, Seed: 8})
	e.startWriter() // creates the checkpoint topic
	// The target topic as the writer would create it, so the leftovers
	// have somewhere to be.
	cl, err := kgo.NewClient(kgo.SeedBrokers(dst.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, nil, "src.t.hang"); err != nil {
		t.Fatal(err)
	}
	heads := firstRecords(t, src.Addr(), "t.hang", partitions, leftover)
	for p := range int32(partitions) {
		shard := shards.Of("t.hang", p, shards.Default)
		leaveOpenTransaction(t, dst.Addr(), fmt.Sprintf("ferry-test-%d", shard), map[string]map[int32][]*kgo.Record{
			"__ferry_checkpoints": {0: {{Key: []byte("barrier/leftover"), Value: []byte("{}"), Timestamp: time.Now()}}},
			"src.t.hang":          {p: heads[p]},
		})
	}
	e.startFetcher(nil)
	e.waitFor(ctx, "src.t.hang", records+partitions*leftover)
	res := e.verify(ctx, "t.hang")
	recordScenario(t, "", res, 0)
	if !res.OK() || res.Produced != records {
		t.Fatalf("exactly-once past transactions left open: %+v", res)
	}
}

// firstRecords reads the first n records of each partition of topic.
func firstRecords(t *testing.T, addr, topic string, partitions int32, n int) map[int32][]*kgo.Record {
	t.Helper()
	offsets := map[int32]kgo.Offset{}
	for p := range partitions {
		offsets[p] = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := map[int32][]*kgo.Record{}
	for full := int32(0); full < partitions; {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("read the head of %s: %v", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if len(out[r.Partition]) < n {
				out[r.Partition] = append(out[r.Partition], r)
				if len(out[r.Partition]) == n {
					full++
				}
			}
		})
	}
	return out
}

// leaveOpenTransaction writes, as transactional id id, one transactional
// batch of the records given to each partition, without adding the
// partitions to the transaction at the coordinator, then bumps the id's
// epoch, as the writer that outlived the broker restart did: the
// coordinator knows nothing of what is left open.
func leaveOpenTransaction(t *testing.T, addr, id string, batches map[string]map[int32][]*kgo.Record) {
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
	pid, epoch := initProducerID(ctx, t, cl, id)
	produce := kmsg.NewPtrProduceRequest()
	produce.TransactionID, produce.Acks, produce.TimeoutMillis = &id, -1, 30_000
	for topic, parts := range batches {
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = topic
		for p, recs := range parts {
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Partition, rp.Records = p, transactionalBatch(pid, epoch, recs)
			rt.Partitions = append(rt.Partitions, rp)
		}
		produce.Topics = append(produce.Topics, rt)
	}
	presp, err := produce.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("produce leftover of %s: %v", id, err)
	}
	for _, rt := range presp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				t.Fatalf("produce leftover of %s to %s/%d: %v", id, rt.Topic, rp.Partition, err)
			}
		}
	}
	initProducerID(ctx, t, cl, id)
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

// transactionalBatch encodes recs as one uncompressed, transactional record
// batch (magic 2) of producer id/epoch, sequence 0, keeping each record's
// key, value, headers and timestamp.
func transactionalBatch(id int64, epoch int16, recs []*kgo.Record) []byte {
	base := recs[0].Timestamp.UnixMilli()
	last := base
	var body []byte
	for i, r := range recs {
		ts := r.Timestamp.UnixMilli()
		last = max(last, ts)
		kr := kmsg.Record{TimestampDelta64: ts - base, OffsetDelta: int32(i), Key: r.Key, Value: r.Value}
		for _, h := range r.Headers {
			kr.Headers = append(kr.Headers, kmsg.Header{Key: h.Key, Value: h.Value})
		}
		// The length counts what follows it; encoded with length zero,
		// that is all but the zero's one byte.
		kr.Length = int32(len(kr.AppendTo(nil)) - 1)
		body = kr.AppendTo(body)
	}
	b := kmsg.RecordBatch{
		Magic: 2, Attributes: 0x10, // transactional
		FirstTimestamp: base, MaxTimestamp: last,
		ProducerID: id, ProducerEpoch: epoch, FirstSequence: 0,
		LastOffsetDelta: int32(len(recs) - 1), NumRecords: int32(len(recs)), Records: body,
	}
	raw := b.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	// The CRC covers everything from the attributes on.
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}
