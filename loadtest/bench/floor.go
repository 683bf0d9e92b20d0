package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// FloorOptions configure the floor copy loop.
type FloorOptions struct {
	Source, Target string // bootstrap addresses
	Topic, Dest    string // source topic, target topic (must exist)
}

// FloorCopy is the floor of the benchmark: the least a replicator must do
// on these brokers, with no checkpoints, no wire hop and no checks. It reads
// the source topic from the start (read_committed, 4 MiB per partition per
// fetch) and produces every record, key, value, headers and timestamp
// intact, to the same partition of the target topic (lz4, acks=all,
// idempotent, 1 MiB batches like Ferry's default link.batch.max_bytes, 20 ms
// linger as Ferry's removed link.batch.linger had, kept so that runs
// compare). It runs
// until ctx ends or a produce fails. ferry-bench runs it as a child process
// so that its CPU and memory are measured like the other replicators'.
func FloorCopy(ctx context.Context, o FloorOptions) error {
	consumer, err := kgo.NewClient(
		kgo.SeedBrokers(o.Source),
		kgo.ConsumeTopics(o.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxPartitionBytes(4<<20),
		kgo.FetchMaxBytes(64<<20),
	)
	if err != nil {
		return fmt.Errorf("floor consumer: %w", err)
	}
	defer consumer.Close()
	producer, err := kgo.NewClient(
		kgo.SeedBrokers(o.Target),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.Lz4Compression()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchMaxBytes(1<<20),
		kgo.ProducerLinger(20*time.Millisecond),
		kgo.MaxBufferedRecords(64<<10),
	)
	if err != nil {
		return fmt.Errorf("floor producer: %w", err)
	}
	defer producer.Close()

	errc := make(chan error, 1)
	for {
		fs := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var ferr error
		fs.EachError(func(t string, p int32, e error) {
			ferr = errors.Join(ferr, fmt.Errorf("fetch %s/%d: %w", t, p, e))
		})
		if ferr != nil {
			return ferr
		}
		select {
		case err := <-errc:
			return err
		default:
		}
		fs.EachRecord(func(r *kgo.Record) {
			out := &kgo.Record{
				Topic: o.Dest, Partition: r.Partition,
				Key: r.Key, Value: r.Value, Headers: r.Headers, Timestamp: r.Timestamp,
			}
			producer.Produce(ctx, out, func(_ *kgo.Record, err error) {
				if err != nil && !errors.Is(err, context.Canceled) {
					select {
					case errc <- fmt.Errorf("floor produce: %w", err):
					default:
					}
				}
			})
		})
	}
}
