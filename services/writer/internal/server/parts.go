package server

import (
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"github.com/ferry-replicator/ferry/pkg/batch"
	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/pkg/refusal"
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

// targetRecords is the part's records to rebuild into target batches:
// those it decoded (a passing Kafka batch is never rebuilt, build.go).
func (p *part) targetRecords() []recordbatch.Record {
	if p.out == nil {
		p.out = make([]recordbatch.Record, len(p.recs))
		for i := range p.recs {
			p.out[i] = toRecord(&p.recs[i])
		}
	}
	return p.out
}

// count is how many records of the part are copied.
func (p *part) count() int {
	if p.passes() {
		return int(p.kafka.Info.NumRecords)
	}
	return len(p.recs)
}

// decodedRecordBytes is what one decoded record of a source Kafka batch
// holds beside its keys and values until the batch is acknowledged: its
// batch.Record (part.recs) and its recordbatch.Record (part.out), 176
// bytes. A batch of a million empty records is a few hundred bytes of
// zstd and 176 MB decoded.
const decodedRecordBytes = int64(unsafe.Sizeof(batch.Record{}) + unsafe.Sizeof(recordbatch.Record{}))

// parts checks a batch's payload and splits its records into parts, and
// returns the bytes its decoded records hold (decoded), charged to the
// batch (session.charge) before they are decoded. A Kafka batch passes
// through untouched unless the target must see it otherwise; then its
// records are rebuilt:
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
// A batch to rebuild is decoded within bounds (decode): what does not fit
// them is refused as refusal.BatchTooLarge, which stops its partition.
// A target topic whose compression.type differs from a passing batch's
// codec recompresses it in the target broker, which Kafka does on its own.
func (ss *session) parts(b *ferryv1.Batch) (parts []part, decoded int64, err error) {
	if b.GetFormat() != ferryv1.PayloadFormat_PAYLOAD_FORMAT_KAFKA_RECORD_BATCH_V2 {
		decoded, err := ss.reserveRecords(b)
		if err != nil {
			return nil, 0, err
		}
		recs, err := ss.s.codecs.Open(b, ss.s.opts.MaxBatchBytes)
		if err != nil {
			return nil, 0, err
		}
		return []part{{recs: recs}}, decoded, nil
	}
	kbs, err := ss.s.codecs.OpenKafka(b, ss.s.opts.MaxBatchBytes)
	if err != nil {
		return nil, 0, err
	}
	parts = make([]part, 0, len(kbs))
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
		recs, cost, err := ss.decode(b, k, pass)
		if pass && (errors.Is(err, errTooLargeToDecode) || errors.Is(err, errNoRoom)) {
			parts = append(parts, part{kafka: k}) // passes as it is, untraced
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		decoded += cost
		if pass {
			ss.probe.Saw(b.GetTopic(), b.GetPartition(), slices.ContainsFunc(recs, traced))
			parts = append(parts, part{kafka: k, recs: recs})
		} else if len(recs) > 0 {
			parts = append(parts, part{recs: recs})
		}
	}
	return parts, decoded, nil
}

// errTooLargeToDecode marks decode's refusals (refusal.BatchTooLarge).
var errTooLargeToDecode = errors.New("too large to decode")

// decode decodes Kafka batch k of wire batch b from b's first offset on,
// and returns its records and the bytes they hold (decodedRecordBytes
// each, and their keys, values and headers when they were compressed:
// uncompressed, they alias the payload, already charged). Before anything
// is inflated it charges the batch (session.charge) with the records'
// index and, when they are compressed, room to inflate them into; what
// they took less goes back after. Both are bounded, as far as the header
// tells before inflating and then while inflating: the records by
// max_batch_bytes decompressed (a batch the writer rebuilds becomes target
// batches of at most that), and, with what the wire batch holds already,
// by the writer's whole budget, max_buffered_bytes, which one wire batch
// can take at most. A batch over either is refused as
// refusal.BatchTooLarge. Decoded only to be traced (optional), it is not
// decoded when the budget has no room for it now (errNoRoom).
func (ss *session) decode(b *ferryv1.Batch, k batch.KafkaBatch, optional bool) ([]batch.Record, int64, error) {
	c := ss.charge
	n := int64(k.Info.NumRecords)
	compressed := k.Info.Compression() != recordbatch.None
	if least := n * recordbatch.MinRecordSize; compressed && least > int64(ss.s.opts.MaxBatchBytes) {
		return nil, 0, ss.tooLarge(b, k, int64(ss.s.opts.MaxBatchBytes), "max_batch_bytes (a source batch the writer rebuilds, decompressed)",
			fmt.Sprintf("at least %d bytes decompressed", least))
	}
	index, limit := n*decodedRecordBytes, c.limit()
	left := limit - c.used // of the whole budget, for b's records
	if limit > 0 && index > left {
		return nil, 0, ss.tooLarge(b, k, limit, "max_buffered_bytes (the records of one wire batch, decoded)",
			fmt.Sprintf("%d records take %d bytes decoded, %d left of the budget", n, index, max(left, 0)))
	}
	// Room to inflate the records into: max_batch_bytes, or what is left
	// of the whole budget when less (never 0, which the codecs take for
	// no limit).
	var inflate int64
	if compressed {
		inflate = int64(ss.s.opts.MaxBatchBytes)
		if limit > 0 && left-index < inflate {
			inflate = left - index
			if least := n * recordbatch.MinRecordSize; inflate < least {
				return nil, 0, ss.tooLarge(b, k, limit, "max_buffered_bytes (the records of one wire batch, decoded)",
					fmt.Sprintf("%d records take %d bytes decoded and at least %d decompressed, %d left of the budget", n, index, least, max(left, 0)))
			}
		}
	}
	if err := c.reserve(ss.ctx, index+inflate, optional); err != nil {
		return nil, 0, err
	}
	bound := ss.s.opts.MaxBatchBytes
	if compressed {
		bound = int(inflate)
	}
	recs, err := kafkaRecords(k, b.GetFirstOffset(), bound)
	if errors.Is(err, recordbatch.ErrTooLarge) {
		if bound < ss.s.opts.MaxBatchBytes {
			return nil, 0, ss.tooLarge(b, k, limit, "max_buffered_bytes (the records of one wire batch, decoded)",
				fmt.Sprintf("%d records take %d bytes decoded and more than the %d left of the budget decompressed", n, index, bound))
		}
		return nil, 0, ss.tooLarge(b, k, int64(ss.s.opts.MaxBatchBytes), "max_batch_bytes (a source batch the writer rebuilds, decompressed)", err.Error())
	}
	if err != nil {
		return nil, 0, err
	}
	cost := index
	if compressed {
		for i := range recs {
			cost += int64(len(recs[i].Key) + len(recs[i].Value))
			for _, h := range recs[i].Headers {
				cost += int64(len(h.Key) + len(h.Value))
			}
		}
	}
	// What was inflated holds the keys, values and headers: no more than
	// the room reserved for it.
	c.unreserve(index + inflate - cost)
	return recs, cost, nil
}

// reserveRecords charges a batch of Ferry's own format (session.charge)
// with its records' index, before they are decoded: they alias the
// payload, charged already, beside their batch.Record and
// recordbatch.Record (decodedRecordBytes each). A count the payload
// cannot hold (a record takes at least 5 bytes, batch.Decode) is refused
// as malformed, and an index above the whole budget as too large, before
// anything is charged.
func (ss *session) reserveRecords(b *ferryv1.Batch) (int64, error) {
	c := ss.charge
	n := int64(b.GetRecordCount())
	size := int64(len(b.GetPayload()))
	if b.GetCodec() != ferryv1.Codec_CODEC_NONE {
		size = int64(b.GetUncompressedSize())
	}
	if n > size/5 {
		return 0, fmt.Errorf("%w: %d records cannot fit in %d bytes", batch.ErrMalformed, n, size)
	}
	index, limit := n*decodedRecordBytes, c.limit()
	if left := limit - c.used; limit > 0 && index > left {
		return 0, refusal.Refusal{
			Reason: refusal.BatchTooLarge, Topic: b.GetTopic(), Partition: b.GetPartition(), Offset: b.GetFirstOffset(),
			Limit: limit, Setting: "max_buffered_bytes (the records of one wire batch, decoded)",
			Cause: fmt.Sprintf("%d records in %d bytes (%v): %d bytes decoded, %d left of the budget", n, len(b.GetPayload()), b.GetCodec(), index, max(left, 0)),
		}
	}
	return index, c.reserve(ss.ctx, index, false)
}

// tooLarge is the refusal of Kafka batch k of b: its partition stops at
// the batch's first offset to copy.
func (ss *session) tooLarge(b *ferryv1.Batch, k batch.KafkaBatch, limit int64, setting, why string) error {
	ref := refusal.Refusal{
		Reason: refusal.BatchTooLarge, Topic: b.GetTopic(), Partition: b.GetPartition(),
		Offset: max(k.Info.BaseOffset, b.GetFirstOffset()), Limit: limit, Setting: setting,
		Cause: fmt.Sprintf("%d records in %d bytes (%v): %s", k.Info.NumRecords, len(k.Raw), k.Info.Compression(), why),
	}
	return fmt.Errorf("%w: %w", errTooLargeToDecode, ref)
}

// kafkaRecords decodes a Kafka batch's records from offset first on,
// decompressing no more than bound bytes.
func kafkaRecords(k batch.KafkaBatch, first int64, bound int) ([]batch.Record, error) {
	recs, err := recordbatch.Records(k.Raw, bound)
	if errors.Is(err, recordbatch.ErrTooLarge) {
		return nil, err
	}
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
