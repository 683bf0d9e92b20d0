// Package verify compares what a replicator wrote to the target cluster
// with what the source holds, partition by partition, and reports lost,
// duplicated, reordered and corrupt records.
//
// Both sides are read read_committed, so records of aborted source
// transactions are not expected on the target, and one found there counts
// as corrupt (and as leaked). Record identity is a digest of key, value,
// headers and timestamp; the workload makes every record unique.
package verify

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Result is the outcome of a comparison.
type Result struct {
	Produced   int64 `json:"produced"`
	Replicated int64 `json:"replicated"`
	Missing    int64 `json:"missing"`
	Duplicates int64 `json:"duplicates"`
	Reordered  int64 `json:"reordered"`
	Corrupt    int64 `json:"corrupt"`
	// Leaked counts target records whose key the source never committed
	// (aborted transactions); they are part of Corrupt too.
	Leaked int64 `json:"leaked"`
	// Latency percentiles of target receive time minus record timestamp;
	// meaningful only when the target is read while replication runs.
	Latency Percentiles `json:"latency"`
	// FirstDuplicates locates the first few duplicates in the target, so a
	// failed run points at the batches to read with Kafka's log dump tool.
	FirstDuplicates []Duplicate `json:"first_duplicates,omitempty"`
}

// Duplicate is a target record that repeats an earlier one.
type Duplicate struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Offset is the duplicate's target offset, First the original's.
	Offset int64 `json:"offset"`
	First  int64 `json:"first"`
}

// maxDuplicatesListed bounds Result.FirstDuplicates.
const maxDuplicatesListed = 10

// Percentiles of a latency distribution.
type Percentiles struct {
	P50, P99, P999, Max time.Duration
}

// OK reports a perfect copy.
func (r Result) OK() bool {
	return r.Missing == 0 && r.Duplicates == 0 && r.Reordered == 0 && r.Corrupt == 0
}

// Add is r and o counted together (the latency is r's): the result of two
// comparisons of one run, such as a link and the link back.
func (r Result) Add(o Result) Result {
	r.Produced += o.Produced
	r.Replicated += o.Replicated
	r.Missing += o.Missing
	r.Duplicates += o.Duplicates
	r.Reordered += o.Reordered
	r.Corrupt += o.Corrupt
	r.Leaked += o.Leaked
	r.FirstDuplicates = append(r.FirstDuplicates, o.FirstDuplicates...)
	return r
}

// Line is the one-line summary the demo and scenarios print.
func (r Result) Line() string {
	return fmt.Sprintf("verify: produced=%d replicated=%d missing=%d duplicates=%d reordered=%d corrupt=%d",
		r.Produced, r.Replicated, r.Missing, r.Duplicates, r.Reordered, r.Corrupt)
}

// LatencyLine is the second line of the summary.
func (r Result) LatencyLine() string {
	l := r.Latency
	return fmt.Sprintf("latency: p50=%v p99=%v p999=%v max=%v", l.P50, l.P99, l.P999, l.Max)
}

// Pair names a source topic and the target topic it is copied to. Keep,
// when set, picks the records of each side that the copy is about, the
// rest left out of the comparison: of a source topic that a link in the
// other direction writes into too (active-active), only its own records
// are copied, and a target topic it writes into holds others.
type Pair struct {
	Source, Target string
	KeepSource     func(*kgo.Record) bool
	KeepTarget     func(*kgo.Record) bool
}

// Compare reads every partition of each pair on both clusters and compares.
func Compare(ctx context.Context, source, target []string, pairs []Pair) (Result, error) {
	return CompareWith(ctx, source, target, pairs, nil, nil)
}

// CompareWith is Compare with extra client options for each cluster, such
// as TLS (kgo.DialTLSConfig) for a cluster requiring client certificates.
func CompareWith(ctx context.Context, source, target []string, pairs []Pair, sourceOpts, targetOpts []kgo.Opt) (Result, error) {
	var res Result
	seed := maphash.MakeSeed()
	var lat []time.Duration
	for _, pair := range pairs {
		src, err := readAll(ctx, source, sourceOpts, pair.Source, seed, pair.KeepSource, nil)
		if err != nil {
			return res, fmt.Errorf("read source %s: %w", pair.Source, err)
		}
		dst, err := readAll(ctx, target, targetOpts, pair.Target, seed, pair.KeepTarget, &lat)
		if err != nil {
			return res, fmt.Errorf("read target %s: %w", pair.Target, err)
		}
		for p, want := range src {
			compare(&res, pair.Target, p, want, dst[p])
		}
		for p, got := range dst {
			if _, ok := src[p]; !ok { // a target partition the source lacks
				compare(&res, pair.Target, p, nil, got)
			}
		}
	}
	res.Latency = percentiles(lat)
	return res, nil
}

type rec struct {
	digest uint64
	key    uint64
	offset int64
}

func compare(res *Result, topic string, partition int32, src, dst []rec) {
	res.Produced += int64(len(src))
	res.Replicated += int64(len(dst))
	index := make(map[uint64]int, len(src))
	keys := make(map[uint64]bool, len(src))
	for i, r := range src {
		index[r.digest] = i
		keys[r.key] = true
	}
	seen := make([]bool, len(src))
	first := make([]int64, len(src)) // target offset of each source record's first copy
	highest := -1
	for _, r := range dst {
		i, ok := index[r.digest]
		switch {
		case !ok:
			res.Corrupt++
			if !keys[r.key] {
				res.Leaked++
			}
		case seen[i]:
			res.Duplicates++
			if len(res.FirstDuplicates) < maxDuplicatesListed {
				res.FirstDuplicates = append(res.FirstDuplicates, Duplicate{Topic: topic, Partition: partition, Offset: r.offset, First: first[i]})
			}
		default:
			seen[i], first[i] = true, r.offset
			if i < highest {
				res.Reordered++
			}
			highest = max(highest, i)
		}
	}
	for _, s := range seen {
		if !s {
			res.Missing++
		}
	}
}

// readAll reads a topic's partitions to their committed end.
func readAll(ctx context.Context, addrs []string, opts []kgo.Opt, topic string, seed maphash.Seed, keep func(*kgo.Record) bool, lat *[]time.Duration) (map[int32][]rec, error) {
	adm, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...)}, opts...)...)
	if err != nil {
		return nil, err
	}
	ends, err := kadm.NewClient(adm).ListCommittedOffsets(ctx, topic)
	adm.Close()
	if err != nil {
		return nil, fmt.Errorf("end offsets: %w", err)
	}
	if err := ends.Error(); err != nil {
		return nil, fmt.Errorf("end offsets: %w", err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	out := map[int32][]rec{}
	if len(want) == 0 {
		return out, nil
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(addrs...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: startOffsets(want)}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxBytes(64 << 20),
	}, opts...)...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	// A partition is done when its last record is at the committed end, or,
	// when the end is a transaction marker no record can reach, when the
	// partition has been quiet for a while.
	last := map[int32]int64{}
	began := time.Now()
	quiet := began
	for len(want) > 0 {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			// Say how far the read got, so a run that ran out of time
			// tells a slow read from one that stopped (ci-d's soak ended
			// on a bare "context deadline exceeded").
			return nil, fmt.Errorf("%w after %v: %s", ctx.Err(), time.Since(began).Round(time.Millisecond), gaps(want, last))
		}
		now := time.Now()
		got := false
		fs.EachError(func(_ string, _ int32, e error) {
			if e != context.DeadlineExceeded && err == nil {
				err = e
			}
		})
		if err != nil {
			return nil, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			got = true
			last[r.Partition] = r.Offset
			if r.Offset+1 >= want[r.Partition] {
				delete(want, r.Partition)
			}
			if keep != nil && !keep(r) {
				return
			}
			out[r.Partition] = append(out[r.Partition], rec{digest: digest(seed, r), key: maphash.Bytes(seed, r.Key), offset: r.Offset})
			if lat != nil {
				*lat = append(*lat, now.Sub(r.Timestamp))
			}
		})
		if got {
			quiet = now
			continue
		}
		limit, done := quietLimit(want, last)
		if now.Sub(quiet) <= limit {
			continue
		}
		if !done {
			// A partition far from its end went quiet: the read stalled
			// (a loaded machine, a slow broker). Counting what was read
			// would report every later target record as corrupt.
			return nil, fmt.Errorf("reading stalled for %v short of the committed end: %s", limit, gaps(want, last))
		}
		// Only partitions whose committed end is a transaction marker or
		// a few aborted records remain: no record will reach their end.
		break
	}
	return out, nil
}

// tailGap is the most offsets between a partition's last record and its
// committed end that markers and aborted records explain: a few
// transactions' worth. A larger gap is records not read yet.
const tailGap = 200

// quietLimit is how long reading may see nothing before it ends, and
// whether the remaining partitions then count as done: short once each has
// yielded records and is within tailGap of its end (its end is a marker or
// aborted records), long otherwise (a busy machine can take seconds to
// answer a fetch), after which the read failed.
func quietLimit(want map[int32]int64, last map[int32]int64) (time.Duration, bool) {
	for p, end := range want {
		l, ok := last[p]
		if !ok || end-(l+1) > tailGap {
			return 2 * time.Minute, false
		}
	}
	return 10 * time.Second, true
}

// gaps names the partitions not read to their end.
func gaps(want map[int32]int64, last map[int32]int64) string {
	var b strings.Builder
	for p, end := range want {
		l, ok := last[p]
		if !ok {
			l = -1
		}
		fmt.Fprintf(&b, " partition %d read to %d of %d;", p, l+1, end)
	}
	return strings.TrimSuffix(strings.TrimSpace(b.String()), ";")
}

func startOffsets(parts map[int32]int64) map[int32]kgo.Offset {
	m := map[int32]kgo.Offset{}
	for p := range parts {
		m[p] = kgo.NewOffset().AtStart()
	}
	return m
}

// digest identifies a record by all it carries: key, value, headers and
// timestamp, keeping null apart from empty.
func digest(seed maphash.Seed, r *kgo.Record) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	field := func(b []byte) {
		var n [9]byte
		if b == nil {
			h.Write(n[:1])
			return
		}
		n[0] = 1
		binary.LittleEndian.PutUint64(n[1:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	field(r.Key)
	field(r.Value)
	for _, hd := range r.Headers {
		field([]byte(hd.Key))
		field(hd.Value)
	}
	var ts [8]byte
	binary.LittleEndian.PutUint64(ts[:], uint64(r.Timestamp.UnixMilli()))
	h.Write(ts[:])
	return h.Sum64()
}

func percentiles(d []time.Duration) Percentiles {
	if len(d) == 0 {
		return Percentiles{}
	}
	slices.Sort(d)
	at := func(q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))))] }
	return Percentiles{P50: at(0.50), P99: at(0.99), P999: at(0.999), Max: d[len(d)-1]}
}
