package server

import (
	"fmt"
	"slices"

	"github.com/ferry-replicator/ferry/pkg/batch"
	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/pkg/tracing"
)

// part is a run of a checked batch's records, in offset order: a Kafka
// record batch of the source that passes to the target as it is, or
// records the writer rebuilds into target batches.
type part struct {
	// kafka.Raw is set for a batch that passes through; its recs are then
	// decoded only when tracing needs their headers.
	kafka batch.KafkaBatch
	recs  []batch.Record
	// out is the part's records as the target producer builds them,
	// converted once: oversized checks their sizes, build then uses them.
	out []recordbatch.Record
}

func (p *part) passes() bool { return p.kafka.Raw != nil }

// targetRecords is the part's records to rebuild into target batches. A
// passing Kafka batch merged with its neighbours (see passMin) is decoded
// straight into them: all its records are at or past the batch's first
// offset, or it would not pass.
func (p *part) targetRecords() ([]recordbatch.Record, error) {
	if p.out != nil {
		return p.out, nil
	}
	if p.passes() {
		out, err := recordbatch.Records(p.kafka.Raw, maxInflated)
		if err != nil {
			return nil, fmt.Errorf("%w: Kafka batch at %d: %v", batch.ErrMalformed, p.kafka.Info.BaseOffset, err)
		}
		p.out = out
		return out, nil
	}
	p.out = make([]recordbatch.Record, len(p.recs))
	for i := range p.recs {
		p.out[i] = toRecord(&p.recs[i])
	}
	return p.out, nil
}

// count is how many records of the part are copied.
func (p *part) count() int {
	if p.passes() {
		return int(p.kafka.Info.NumRecords)
	}
	return len(p.recs)
}

// maxInflated bounds what one source Kafka batch may decompress to when it
// must be rebuilt: a compression bomb is refused before it fills memory.
const maxInflated = 64 << 20

// parts checks a batch's payload and splits its records into parts. A
// Kafka batch passes through untouched unless the target must see it
// otherwise; then its records are rebuilt:
//   - it starts before the batch's first offset (its earlier records were
//     copied already; Kafka fetches return whole batches);
//   - its offsets have gaps (a compacted source: Kafka refuses a batch whose
//     records' offsets are not consecutive, and the producer's sequence
//     numbers count records);
//   - its timestamps are the source broker's (LogAppendTime): the records
//     keep them as CreateTime, as a rebuilt record's timestamp;
//   - it carries the delete horizon a compacted source's cleaner set
//     (recordbatch.Info.DeleteHorizon): passed on, the target's cleaner
//     would drop its tombstones by the source's horizon, maybe already
//     past, before a lagging target consumer saw them; rebuilt, it has no
//     horizon and the target's cleaner sets its own;
//   - it is larger than the target takes (ss.maxBatch).
//
// A target topic whose compression.type differs from a passing batch's
// codec recompresses it in the target broker, which Kafka does on its own.
func (ss *session) parts(b *ferryv1.Batch) ([]part, error) {
	if b.GetFormat() != ferryv1.PayloadFormat_PAYLOAD_FORMAT_KAFKA_RECORD_BATCH_V2 {
		recs, err := ss.s.codecs.Open(b, ss.s.opts.MaxBatchBytes)
		if err != nil {
			return nil, err
		}
		return []part{{recs: recs}}, nil
	}
	kbs, err := ss.s.codecs.OpenKafka(b, ss.s.opts.MaxBatchBytes)
	if err != nil {
		return nil, err
	}
	parts := make([]part, 0, len(kbs))
	for _, k := range kbs {
		info := k.Info
		_, horizon := info.DeleteHorizon()
		pass := info.BaseOffset >= b.GetFirstOffset() &&
			info.NumRecords == info.LastOffsetDelta+1 &&
			!info.LogAppendTime() && !horizon &&
			len(k.Raw) <= ss.maxBatch
		// With tracing on, a passing batch is decoded only when the probe
		// picks it (records carrying trace contexts get spans of their
		// own; tracing.RecordProbe).
		if pass && (ss.s.opts.Tracer == nil || !ss.probe.Look(b.GetTopic(), b.GetPartition())) {
			parts = append(parts, part{kafka: k})
			continue
		}
		recs, err := kafkaRecords(k, b.GetFirstOffset())
		if err != nil {
			return nil, err
		}
		if pass {
			ss.probe.Saw(b.GetTopic(), b.GetPartition(), slices.ContainsFunc(recs, traced))
			parts = append(parts, part{kafka: k, recs: recs})
		} else if len(recs) > 0 {
			parts = append(parts, part{recs: recs})
		}
	}
	return parts, nil
}

// kafkaRecords decodes a Kafka batch's records from offset first on.
func kafkaRecords(k batch.KafkaBatch, first int64) ([]batch.Record, error) {
	recs, err := recordbatch.Records(k.Raw, maxInflated)
	if err != nil {
		return nil, fmt.Errorf("%w: Kafka batch at %d: %v", batch.ErrMalformed, k.Info.BaseOffset, err)
	}
	out := make([]batch.Record, 0, len(recs))
	for _, r := range recs {
		off := k.Info.BaseOffset + int64(r.OffsetDelta)
		if off < first {
			continue
		}
		rec := batch.Record{Offset: off, Timestamp: r.Timestamp, Key: r.Key, Value: r.Value}
		if len(r.Headers) > 0 {
			rec.Headers = make([]batch.Header, len(r.Headers))
			for i, h := range r.Headers {
				rec.Headers[i] = batch.Header{Key: []byte(h.Key), Value: h.Value}
			}
		}
		out = append(out, rec)
	}
	return out, nil
}

// records calls f with each of w's records that the writer has decoded:
// all of them, except those of passing Kafka batches when tracing is off.
func (w *work) records(f func(*batch.Record)) {
	for i := range w.parts {
		for j := range w.parts[i].recs {
			f(&w.parts[i].recs[j])
		}
	}
}

// count is how many of w's records are copied.
func (w *work) count() int {
	n := 0
	for i := range w.parts {
		n += w.parts[i].count()
	}
	return n
}

// traced is whether a record carries a trace context.
func traced(r batch.Record) bool {
	return slices.ContainsFunc(r.Headers, func(h batch.Header) bool { return string(h.Key) == tracing.TraceparentHeader })
}
