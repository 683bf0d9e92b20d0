package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// tail consumes the target topic from its start while a replicator runs
// (read_committed), counting records and bytes, and recording, for records
// whose source timestamp is at or after measureFrom, the end-to-end latency:
// the time the poll returned minus the record's timestamp.
type tail struct {
	cl          *kgo.Client
	cancel      context.CancelFunc
	done        chan struct{}
	count       atomic.Int64
	bytes       atomic.Int64
	measureFrom atomic.Int64 // unix nanoseconds; 0: no latency recorded
	mu          sync.Mutex
	lat         []time.Duration
	lastErr     error
}

// startTail starts reading topic on the cluster at addrs; the topic may not
// exist yet.
func startTail(addrs []string, topic string) (*tail, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(addrs...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxBytes(8<<20),
		kgo.FetchMaxPartitionBytes(1<<20),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.MetadataMinAge(250*time.Millisecond),
		kgo.MetadataMaxAge(time.Second),
	)
	if err != nil {
		return nil, fmt.Errorf("tail %s: %w", topic, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &tail{cl: cl, cancel: cancel, done: make(chan struct{})}
	go t.run(ctx)
	return t, nil
}

func (t *tail) run(ctx context.Context) {
	defer close(t.done)
	for {
		fs := t.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		now := time.Now()
		from := t.measureFrom.Load()
		var lat []time.Duration
		fs.EachError(func(topic string, p int32, err error) {
			t.mu.Lock()
			t.lastErr = fmt.Errorf("tail %s/%d: %w", topic, p, err)
			t.mu.Unlock()
		})
		var n, b int64
		fs.EachRecord(func(r *kgo.Record) {
			n++
			b += recordBytes(r)
			if from != 0 && r.Timestamp.UnixNano() >= from {
				lat = append(lat, now.Sub(r.Timestamp))
			}
		})
		if len(lat) > 0 {
			t.mu.Lock()
			t.lat = append(t.lat, lat...)
			t.mu.Unlock()
		}
		t.bytes.Add(b)
		t.count.Add(n)
	}
}

// recordBytes is the logical size of a record: key, value and headers.
func recordBytes(r *kgo.Record) int64 {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return int64(n)
}

// Count is the number of records read so far.
func (t *tail) Count() int64 { return t.count.Load() }

// Bytes is the logical size of the records read so far.
func (t *tail) Bytes() int64 { return t.bytes.Load() }

// MeasureFrom records latency for records with a timestamp at or after ts.
func (t *tail) MeasureFrom(ts time.Time) { t.measureFrom.Store(ts.UnixNano()) }

// Latencies returns a copy of the latencies recorded so far.
func (t *tail) Latencies() []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]time.Duration(nil), t.lat...)
}

// LastErr is the last fetch error seen, if any (fetch errors are retried).
func (t *tail) LastErr() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastErr
}

// Close stops the reader and waits for it.
func (t *tail) Close() {
	t.cancel()
	<-t.done
	t.cl.Close()
}
