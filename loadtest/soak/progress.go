package soak

import (
	"context"
	"encoding/json"
	"fmt"
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
// the source positions committed in the target (next source offset of each
// partition) against the source's end offsets. Exactly-once, both systems
// commit their positions in the same transactions as the records: Ferry
// its checkpoints in __ferry_checkpoints, MM2 its source offsets in its
// Connect offsets topic. So the lag means the same for both: what the
// source holds that the target has not committed. (The target's own end
// offsets would not do: they count transaction markers, and their rate
// cannot tell a copy held back from producers held back by a source
// restart.)
type sample struct {
	at time.Time
	// copied is the sum of the positions' next source offsets.
	copied int64
	// lag is the sum over partitions of source end minus position.
	lag int64
	// idemLag is lag over the idempotent topic only, which has no
	// transactions, so it is 0 once everything has been copied.
	idemLag int64
}

// positionFunc reads one record of a system's positions topic: the source
// partition ("topic/partition") and the next source offset to copy.
type positionFunc func(r *kgo.Record) (tp string, next int64, ok bool)

// positions returns the topic holding the system's committed source
// positions, in the target cluster, and how to read it.
func positions(system string) (string, positionFunc) {
	if system == SystemMM2EOS {
		// MirrorMakerConfig names the offsets topic of the flow's herder
		// after the source alias.
		return "mm2-offsets." + mm2Source + ".internal", mm2Position
	}
	return "__ferry_checkpoints", ferryPosition
}

// progress samples the copy once a second.
type progress struct {
	e    *env
	rate int // records per second the producers aim at, both together
	// topic and position: where and how the system commits its positions.
	topic    string
	position positionFunc

	mu      sync.Mutex
	samples []sample
	next    map[string]int64 // "topic/partition" → next source offset
}

func newProgress(e *env, rate int) *progress {
	topic, position := positions(e.opts.System)
	return &progress{e: e, rate: rate, topic: topic, position: position, next: map[string]int64{}}
}

// run tails the positions topic and samples until ctx ends.
func (p *progress) run(ctx context.Context) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.e.dst.Addr()),
		kgo.ConsumeTopics(p.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		p.e.log.Error("progress: positions client", "err", err)
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
			if o.Topic == topicIdem {
				s.idemLag += max(0, o.Offset-n)
			}
		})
		p.samples = append(p.samples, s)
		p.mu.Unlock()
	}
}

// apply reads one record of the positions topic.
func (p *progress) apply(r *kgo.Record) {
	tp, next, ok := p.position(r)
	if !ok {
		return
	}
	p.mu.Lock()
	p.next[tp] = next
	p.mu.Unlock()
}

// ferryPosition reads one of Ferry's checkpoints: key
// link/topic/partition, JSON value with the next source offset.
func ferryPosition(r *kgo.Record) (string, int64, bool) {
	parts := strings.Split(string(r.Key), "/")
	if len(parts) != 3 || parts[0] != link || r.Value == nil {
		return "", 0, false
	}
	var cp struct {
		Next int64 `json:"next_source_offset"`
	}
	if json.Unmarshal(r.Value, &cp) != nil {
		return "", 0, false
	}
	return parts[1] + "/" + parts[2], cp.Next, true
}

// mm2Position reads one record of MM2's Connect offsets topic (JSON,
// schemas off): key [connector name, source partition], value the source
// offset of the last record copied, so the next is one more. The
// checkpoint and heartbeat connectors keep their offsets there too, under
// their own names.
//
//	key   ["MirrorSourceConnector",{"cluster":"src","partition":0,"topic":"soak.idem"}]
//	value {"offset":41}
func mm2Position(r *kgo.Record) (string, int64, bool) {
	var key []json.RawMessage
	if r.Value == nil || json.Unmarshal(r.Key, &key) != nil || len(key) != 2 {
		return "", 0, false
	}
	var connector string
	var part struct {
		Cluster   string `json:"cluster"`
		Topic     string `json:"topic"`
		Partition *int32 `json:"partition"`
	}
	if json.Unmarshal(key[0], &connector) != nil || connector != "MirrorSourceConnector" ||
		json.Unmarshal(key[1], &part) != nil || part.Cluster != mm2Source || part.Topic == "" || part.Partition == nil {
		return "", 0, false
	}
	var off struct {
		Offset *int64 `json:"offset"`
	}
	if json.Unmarshal(r.Value, &off) != nil || off.Offset == nil {
		return "", 0, false
	}
	return part.Topic + "/" + strconv.Itoa(int(*part.Partition)), *off.Offset + 1, true
}

func (p *progress) all() []sample {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.samples)
}

// waitMoving waits until the copy has committed a position, and returns an
// error if it has not within limit.
func (p *progress) waitMoving(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		if s := p.all(); len(s) > 0 && s[len(s)-1].copied > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no copy progress in %s: no positions in the target's %s", limit, p.topic)
		}
		if err := sleep(ctx, time.Second); err != nil {
			return err
		}
	}
}

// waitCaughtUp waits, once the producers have stopped, until the copy has
// stopped moving: the positions unchanged for ten samples, and the
// idempotent topic copied to its end. The lag of the transactional topic
// need not reach zero: a partition whose last records were an aborted
// transaction keeps its position before them (nothing more is sent), so
// the verifier, not that lag, says whether everything arrived. The
// idempotent topic's lag tells a copy that has finished from one that has
// not started again yet (MM2 restarted by the last fault, or by heal,
// copies nothing for 10 to 40 s). It reports whether the copy settled
// within limit.
func (p *progress) waitCaughtUp(ctx context.Context, limit time.Duration) bool {
	const settled = 10
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		s := p.all()
		if n := len(s); n >= settled && s[n-1].copied > 0 && s[n-1].idemLag == 0 && s[n-1].copied == s[n-settled].copied {
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

// headers are added to every record.
func startProducers(ctx context.Context, addr string, opts Options, headers []kgo.RecordHeader, log *slog.Logger) *producers {
	p := &producers{}
	// A chunk that cannot finish (the source down for good) is given up
	// a minute after the stop, so a broken run ends instead of hanging.
	ctx, giveUp := context.WithCancel(ctx)
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
				// Closing the client is what ends a produce waiting for
				// a source that never comes back (ferry-dr's lost region):
				// franz-go keeps retrying a buffered record whatever ctx.
				stopClose := context.AfterFunc(ctx, w.Close)
				err = w.Run(ctx)
				if stopClose() {
					w.Close()
				}
			}
			if err != nil && ctx.Err() == nil {
				p.errors.Add(1)
				log.Info("producer chunk ended early; continuing", "topic", o.Topic, "err", err)
				_ = sleep(ctx, 500*time.Millisecond)
			}
		}
	}
	p.wg.Add(2)
	go run(workload.Options{Topic: topicIdem, Partitions: partsIdem, ValueBytes: 300, Rate: opts.Rate, NullValueEvery: 37, Headers: headers})
	// The transactional producer's batches are uncompressed: passed through,
	// they travel in the link codec, while the idempotent producer's lz4
	// batches travel as they are; both paths run under the faults.
	go run(workload.Options{Topic: topicTxn, Partitions: partsTxn, ValueBytes: 300, Rate: max(1, opts.Rate/4),
		Transactional: true, TxnRecords: 20, AbortEvery: 4, NullValueEvery: 41, Headers: headers,
		ClientOpts: []kgo.Opt{kgo.ProducerBatchCompression(kgo.NoCompression())}})
	p.stop = func() {
		stopping.Store(true)
		done := make(chan struct{})
		go func() { p.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			log.Warn("producers did not finish their chunks within a minute of the stop; giving up")
			giveUp()
			<-done
		}
		giveUp()
	}
	return p
}
