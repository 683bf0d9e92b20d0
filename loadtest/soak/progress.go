package soak

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/loadtest/workload"
)

// sample is the copy's progress at one moment, from the durable truth:
// the committed checkpoints in the target (next source offset of each
// partition) against the source's end offsets.
type sample struct {
	at time.Time
	// copied is the sum of the checkpoints' next source offsets.
	copied int64
	// lag is the sum over partitions of source end minus checkpoint.
	lag int64
}

// progress samples the copy once a second.
type progress struct {
	e    *env
	rate int // records per second the producers aim at, both together

	mu      sync.Mutex
	samples []sample
	next    map[string]int64 // "topic/partition" → next source offset
}

func newProgress(e *env, rate int) *progress {
	return &progress{e: e, rate: rate, next: map[string]int64{}}
}

// run tails the checkpoint topic and samples until ctx ends.
func (p *progress) run(ctx context.Context) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.e.dst.Addr()),
		kgo.ConsumeTopics("__ferry_checkpoints"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		p.e.log.Error("progress: checkpoint client", "err", err)
		return
	}
	defer cl.Close()
	src, err := kgo.NewClient(kgo.SeedBrokers(p.e.src.Addr()))
	if err != nil {
		p.e.log.Error("progress: source client", "err", err)
		return
	}
	defer src.Close()
	adm := kadm.NewClient(src)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(p.apply)
		}
	}()
	defer wg.Wait()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ends, err := adm.ListEndOffsets(qctx, topicIdem, topicTxn)
		cancel()
		if err != nil || ends.Error() != nil {
			continue // the source is restarting: no sample
		}
		p.mu.Lock()
		s := sample{at: time.Now()}
		ends.Each(func(o kadm.ListedOffset) {
			n := p.next[o.Topic+"/"+strconv.Itoa(int(o.Partition))]
			s.copied += n
			s.lag += max(0, o.Offset-n)
		})
		p.samples = append(p.samples, s)
		p.mu.Unlock()
	}
}

// apply reads one checkpoint record: key link/topic/partition, JSON value.
func (p *progress) apply(r *kgo.Record) {
	parts := strings.Split(string(r.Key), "/")
	if len(parts) != 3 || parts[0] != link || r.Value == nil {
		return
	}
	var cp struct {
		Next int64 `json:"next_source_offset"`
	}
	if json.Unmarshal(r.Value, &cp) != nil {
		return
	}
	p.mu.Lock()
	p.next[parts[1]+"/"+parts[2]] = cp.Next
	p.mu.Unlock()
}

func (p *progress) all() []sample {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.samples)
}

// waitCaughtUp waits, once the producers have stopped, until the copy has
// stopped moving: the checkpoints unchanged for ten samples. The lag need
// not reach zero: a partition whose last records were an aborted
// transaction keeps its checkpoint before them (nothing more is sent), so
// the verifier, not the lag, says whether everything arrived. It reports
// whether the copy settled within limit.
func (p *progress) waitCaughtUp(ctx context.Context, limit time.Duration) bool {
	const settled = 10
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		s := p.all()
		if n := len(s); n >= settled && s[n-1].copied > 0 && s[n-1].copied == s[n-settled].copied {
			return true
		}
		if sleep(ctx, time.Second) != nil {
			return false
		}
	}
	return false
}

// producers write both topics until stopped: keyed records with headers,
// some null values, from an idempotent producer and from a transactional
// one that aborts every fourth transaction. A producer error (the source
// restarting) ends one chunk; the next chunk starts with a new client, its
// keys continuing. The verifier reads what the source committed, so what
// an error left uncertain needs no bookkeeping.
type producers struct {
	stop   func()
	wg     sync.WaitGroup
	errors atomic.Int64
}

func startProducers(ctx context.Context, addr string, opts Options, log *slog.Logger) *producers {
	p := &producers{}
	// Stopping lets each producer finish its chunk (ten seconds of
	// records), so no source transaction is left open to hold back the
	// source's last stable offset.
	var stopping atomic.Bool
	run := func(o workload.Options) {
		defer p.wg.Done()
		chunk := o.Rate * 10
		for k := 0; ctx.Err() == nil && !stopping.Load(); k++ {
			// The same seed, so the same transactional id: a new chunk's
			// producer fences the one an error left and aborts its open
			// transaction at once, instead of holding back the source's
			// last stable offset until the transaction times out.
			o.Start, o.Records, o.Seed = k*chunk, chunk, opts.Seed
			w, err := workload.NewProducer([]string{addr}, o)
			if err == nil {
				err = w.Run(ctx)
				w.Close()
			}
			if err != nil && ctx.Err() == nil {
				p.errors.Add(1)
				log.Info("producer chunk ended early; continuing", "topic", o.Topic, "err", err)
				_ = sleep(ctx, 500*time.Millisecond)
			}
		}
	}
	p.wg.Add(2)
	go run(workload.Options{Topic: topicIdem, Partitions: partsIdem, ValueBytes: 300, Rate: opts.Rate, NullValueEvery: 37})
	go run(workload.Options{Topic: topicTxn, Partitions: partsTxn, ValueBytes: 300, Rate: max(1, opts.Rate/4),
		Transactional: true, TxnRecords: 20, AbortEvery: 4, NullValueEvery: 41})
	p.stop = func() { stopping.Store(true); p.wg.Wait() }
	return p
}
