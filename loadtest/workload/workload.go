// Package workload produces the records Ferry's demo, tests and benchmarks
// replicate: realistic, compressible JSON-like values of a chosen size, with
// keys and headers, spread evenly over a topic's partitions. Every record is
// unique (its key carries partition and sequence), which lets the verifier
// tell a duplicate from a legitimately equal record.
package workload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Options shape a workload.
type Options struct {
	Topic      string
	Partitions int32
	Records    int
	// ValueBytes is the approximate size of each value.
	ValueBytes int
	// Rate is records per second; 0 produces as fast as possible.
	Rate int
	// Seed makes the values repeatable.
	Seed uint64
	// Start is the index of the first record: a workload continued by a
	// new producer keeps its keys unique.
	Start int
	// NullValueEvery makes every n-th record's value null (0: none), as a
	// tombstone of a compacted topic is.
	NullValueEvery int
	// Transactional produces in transactions of TxnRecords records, aborting
	// every AbortEvery-th one (0: none aborted).
	Transactional bool
	TxnRecords    int
	AbortEvery    int
	// ClientOpts are added to the client's options: TLS or SASL to reach
	// a secured cluster.
	ClientOpts []kgo.Opt
	// Headers are added to every record's (after seq and source).
	Headers []kgo.RecordHeader
}

// Producer writes a workload to a cluster.
type Producer struct {
	opts     Options
	client   *kgo.Client
	produced atomic.Int64 // records acknowledged (committed if transactional)
	aborted  atomic.Int64
}

// NewProducer connects to the cluster at addrs.
func NewProducer(addrs []string, opts Options) (*Producer, error) {
	kopts := []kgo.Opt{
		kgo.SeedBrokers(addrs...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.Lz4Compression()),
		kgo.ProducerLinger(5 * time.Millisecond),
		kgo.MaxBufferedRecords(20000),
	}
	kopts = append(kopts, opts.ClientOpts...)
	if opts.Transactional {
		kopts = append(kopts, kgo.TransactionalID(fmt.Sprintf("ferry-workload-%s-%d", opts.Topic, opts.Seed)))
		if opts.TxnRecords <= 0 {
			opts.TxnRecords = 100
		}
	}
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, fmt.Errorf("workload client: %w", err)
	}
	return &Producer{opts: opts, client: cl}, nil
}

// Close releases the client.
func (p *Producer) Close() { p.client.Close() }

// Produced is the number of records acknowledged so far (committed ones only
// in transactional mode).
func (p *Producer) Produced() int64 { return p.produced.Load() }

// Aborted is the number of records in aborted transactions.
func (p *Producer) Aborted() int64 { return p.aborted.Load() }

// Record builds the i-th record of the workload.
func Record(o Options, rng *rand.Rand, i int) *kgo.Record {
	part := int32(i) % o.Partitions
	seq := i / int(o.Partitions)
	v := value(rng, i, o.ValueBytes)
	if o.NullValueEvery > 0 && i%o.NullValueEvery == o.NullValueEvery-1 {
		v = nil
	}
	return &kgo.Record{
		Topic:     o.Topic,
		Partition: part,
		Key:       []byte("k-" + strconv.Itoa(int(part)) + "-" + strconv.Itoa(seq)),
		Value:     v,
		Headers: append([]kgo.RecordHeader{
			{Key: "seq", Value: []byte(strconv.Itoa(seq))},
			{Key: "source", Value: []byte("ferry-workload")},
		}, o.Headers...),
		Timestamp: time.Now(),
	}
}

var words = []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima"}

// value is a JSON-like document of about n bytes: repeated field names and a
// small vocabulary compress as real event payloads do (roughly 3-5x).
func value(rng *rand.Rand, i, n int) []byte {
	b := make([]byte, 0, n+64)
	b = fmt.Appendf(b, `{"id":%d,"ts":%d,"user":"user-%d","items":[`, i, time.Now().UnixMilli(), rng.IntN(100000))
	for len(b) < n-40 {
		b = fmt.Appendf(b, `{"sku":"%s-%d","qty":%d,"price":%d.%02d},`,
			words[rng.IntN(len(words))], rng.IntN(1000), rng.IntN(10)+1, rng.IntN(500), rng.IntN(100))
	}
	b = append(b[:len(b)-1], `],"ok":true}`...)
	return b
}

// Run produces the workload and returns when every record is acknowledged.
func (p *Producer) Run(ctx context.Context) error {
	o := p.opts
	rng := rand.New(rand.NewPCG(o.Seed, 7))
	var interval time.Duration
	if o.Rate > 0 {
		interval = time.Second / time.Duration(o.Rate)
	}
	start := time.Now()
	// pace waits until the i-th record of this run is due.
	pace := func(i int) error {
		if interval == 0 {
			return nil
		}
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	if o.Transactional {
		return p.runTransactional(ctx, rng, pace)
	}
	errc := make(chan error, 1)
	for i := range o.Records {
		if err := pace(i); err != nil {
			return err
		}
		select {
		case err := <-errc:
			return err
		default:
		}
		p.client.Produce(ctx, Record(o, rng, o.Start+i), func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errc <- fmt.Errorf("produce: %w", err):
				default:
				}
				return
			}
			p.produced.Add(1)
		})
	}
	if err := p.client.Flush(ctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

func (p *Producer) runTransactional(ctx context.Context, rng *rand.Rand, pace func(int) error) error {
	o := p.opts
	for txn, i := 0, 0; i < o.Records; txn++ {
		if err := pace(i); err != nil {
			return err
		}
		if err := p.client.BeginTransaction(); err != nil {
			return fmt.Errorf("begin transaction: %w", err)
		}
		n := min(o.TxnRecords, o.Records-i)
		for j := range n {
			if err := p.client.ProduceSync(ctx, Record(o, rng, o.Start+i+j)).FirstErr(); err != nil {
				return fmt.Errorf("produce in transaction: %w", err)
			}
		}
		abort := o.AbortEvery > 0 && txn%o.AbortEvery == o.AbortEvery-1
		if err := p.client.EndTransaction(ctx, kgo.TransactionEndTry(!abort)); err != nil {
			return fmt.Errorf("end transaction: %w", err)
		}
		if abort {
			p.aborted.Add(int64(n))
		} else {
			p.produced.Add(int64(n))
		}
		i += n
	}
	return nil
}
