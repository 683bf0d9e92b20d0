// Package provenance records which Kafka producer ids Ferry's writers
// produce with, in the cluster they write to, and answers, for a cluster
// Ferry reads, whether a batch's producer id is one of them. That is how a
// link never copies back what another link wrote (active-active A→B and
// B→A, identity naming included): the fetcher skips such batches by their
// header alone, with no record header and nothing decoded.
//
// The order that makes the check exact: a writer records a producer id,
// acknowledged by all in-sync replicas, before it produces anything with
// it. So when a fetcher reads a batch of an id it does not know, the
// record is already below the topic's end, and one read of the topic to
// its end settles the id for good (Kafka never gives an id to two
// producers).
package provenance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Topic is where writers record their producer ids: compacted, keyed by id,
// in each cluster Ferry writes to. Writers need to write it; fetchers of a
// link that skips Ferry's writes, to read it in their source cluster.
const Topic = "__ferry_producers"

// Configs are the topic's settings when a writer creates it.
var Configs = map[string]string{"cleanup.policy": "compact"}

// Entry is one recorded producer id.
type Entry struct {
	ProducerID int64     `json:"producer_id"`
	Link       string    `json:"link"`
	Writer     string    `json:"writer"`
	Time       time.Time `json:"time"`
}

func key(id int64) []byte { return strconv.AppendInt(nil, id, 10) }

// Recorder writes a writer's producer ids. It is safe for concurrent use.
type Recorder struct {
	cl     *kgo.Client
	writer string

	mu   sync.Mutex
	done map[int64]bool // recorded by this process
}

// NewRecorder makes a Recorder on a client of its own built from opts (the
// target cluster's seeds, TLS and SASL). Its produce is not idempotent, so
// it takes no producer id of its own.
func NewRecorder(opts []kgo.Opt, writer string) (*Recorder, error) {
	cl, err := kgo.NewClient(append(opts,
		kgo.DefaultProduceTopic(Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.DisableIdempotentWrite(),
		kgo.ProducerLinger(0),
	)...)
	if err != nil {
		return nil, fmt.Errorf("producer id recorder: %w", err)
	}
	return &Recorder{cl: cl, writer: writer, done: map[int64]bool{}}, nil
}

// Close releases the client.
func (r *Recorder) Close() { r.cl.Close() }

// Record writes that link's writer produces with id, and returns once all
// in-sync replicas have it. An id this process recorded already (an
// exactly-once shard's producer keeps its id across streams) costs nothing.
func (r *Recorder) Record(ctx context.Context, id int64, link string) error {
	r.mu.Lock()
	done := r.done[id]
	r.mu.Unlock()
	if done {
		return nil
	}
	value, err := json.Marshal(Entry{ProducerID: id, Link: link, Writer: r.writer, Time: time.Now().UTC()})
	if err != nil {
		return err
	}
	if err := r.cl.ProduceSync(ctx, &kgo.Record{Key: key(id), Value: value}).FirstErr(); err != nil {
		return fmt.Errorf("record producer id %d in %s: %w", id, Topic, err)
	}
	r.mu.Lock()
	r.done[id] = true
	r.mu.Unlock()
	return nil
}

// maxForeign bounds the ids remembered as not Ferry's (every idempotent
// producer of the source has one); past it they are forgotten, which costs
// one more read of the topic each.
const maxForeign = 1 << 20

// View tells a cluster's Ferry producer ids from the rest. It is safe for
// concurrent use: the shards of a fetcher share one.
type View struct {
	cl  *kgo.Client
	adm *kadm.Client

	mu      sync.Mutex
	ferry   map[int64]Entry
	foreign map[int64]bool
	// next is the offset the next read of each of the topic's partitions
	// starts at; partitions are added to the client's consumer as the
	// topic's end offsets name them.
	next map[int32]int64
	// Reads counts reads of the topic to its end, for tests and metrics.
	reads int
}

// NewView makes a View on a client of its own built from opts (the source
// cluster's seeds, TLS and SASL). It reads nothing until asked.
func NewView(opts []kgo.Opt) (*View, error) {
	// Each read must see the topic as it is now: a topic a writer created
	// a moment ago, after this client found it missing, holds the record
	// of the id being asked about. A missing topic is asked of a broker
	// again (exists), and the cache's minimum age is kept short so the
	// end offsets that follow see the topic; reads are rare.
	cl, err := kgo.NewClient(append(opts, kgo.MetadataMinAge(10*time.Millisecond))...)
	if err != nil {
		return nil, fmt.Errorf("producer id view: %w", err)
	}
	return &View{cl: cl, adm: kadm.NewClient(cl), ferry: map[int64]Entry{}, foreign: map[int64]bool{}, next: map[int32]int64{}}, nil
}

// Close releases the client.
func (v *View) Close() { v.cl.Close() }

// Reads is how many times the View has read the topic to its end.
func (v *View) Reads() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.reads
}

// Ferry reports which of ids a Ferry writer recorded in the cluster. Ids it
// has not settled yet cost one read of the topic to its end, together;
// the -1 of a producer without an id is never Ferry's.
func (v *View) Ferry(ctx context.Context, ids []int64) (map[int64]bool, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	unsettled := false
	for _, id := range ids {
		if _, ok := v.ferry[id]; !ok && id >= 0 && !v.foreign[id] {
			unsettled = true
			break
		}
	}
	if unsettled {
		if err := v.readToEnd(ctx); err != nil {
			return nil, err
		}
		if len(v.foreign) > maxForeign {
			clear(v.foreign)
		}
	}
	out := make(map[int64]bool, len(ids))
	for _, id := range ids {
		_, ok := v.ferry[id]
		out[id] = ok
		if !ok && id >= 0 {
			v.foreign[id] = true
		}
	}
	return out, nil
}

// readToEnd reads every partition of the topic from where the last read
// stopped to the end it has now. A missing topic holds nothing: no Ferry
// writer has written to this cluster.
func (v *View) readToEnd(ctx context.Context) error {
	ends, err := v.endOffsets(ctx)
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		// The client's metadata may predate the topic: only a broker's
		// answer now says it is missing.
		exists, merr := v.exists(ctx)
		if merr != nil {
			return fmt.Errorf("metadata of %s: %w", Topic, merr)
		}
		if !exists {
			v.reads++
			return nil
		}
		ends, err = v.endOffsets(ctx)
	}
	if err != nil {
		return fmt.Errorf("end of %s: %w", Topic, err)
	}
	want := map[int32]int64{}
	add := map[string]map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		next, known := v.next[o.Partition]
		if !known {
			if add[Topic] == nil {
				add[Topic] = map[int32]kgo.Offset{}
			}
			add[Topic][o.Partition] = kgo.NewOffset().AtStart()
			v.next[o.Partition] = 0
		}
		if o.Offset > next {
			want[o.Partition] = o.Offset
		}
	})
	if len(add) > 0 {
		v.cl.AddConsumePartitions(add)
	}
	for len(want) > 0 {
		fs := v.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("read %s: %w", Topic, ctx.Err())
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = errors.Join(ferr, err) })
		if ferr != nil {
			return fmt.Errorf("read %s: %w", Topic, ferr)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			var e Entry
			if json.Unmarshal(rec.Value, &e) == nil && e.ProducerID >= 0 {
				v.ferry[e.ProducerID] = e
				delete(v.foreign, e.ProducerID)
			}
			v.next[rec.Partition] = rec.Offset + 1
			if end, ok := want[rec.Partition]; ok && rec.Offset+1 >= end {
				delete(want, rec.Partition)
			}
		})
	}
	v.reads++
	return nil
}

func (v *View) endOffsets(ctx context.Context) (kadm.ListedOffsets, error) {
	ends, err := v.adm.ListEndOffsets(ctx, Topic)
	if err == nil {
		err = ends.Error()
	}
	return ends, err
}

// exists asks a broker whether the topic exists, past the client's cache.
func (v *View) exists(ctx context.Context) (bool, error) {
	req := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = kmsg.StringPtr(Topic)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, v.cl)
	if err != nil {
		return false, err
	}
	if len(resp.Topics) != 1 {
		return false, fmt.Errorf("%d topics in the answer", len(resp.Topics))
	}
	switch err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); {
	case err == nil:
		return true, nil
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return false, nil
	default:
		return false, err
	}
}
