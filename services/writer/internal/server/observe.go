package server

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-replicator/ferry/pkg/batch"
	"github.com/ferry-replicator/ferry/pkg/tracing"
	"github.com/ferry-replicator/ferry/services/writer/internal/heartbeat"
	"github.com/ferry-replicator/ferry/services/writer/internal/metrics"
)

// observer is what a shard's committers report to: the metrics and trace
// spans (trace.go describes them) of the rounds they write and commit, and
// the refusals the target makes of a round's records.
type observer struct {
	link    Link
	shard   uint32
	epoch   uint64
	metrics *metrics.Metrics
	// tracer is nil with tracing off.
	tracer trace.Tracer
	// recent keeps the traces of the last traced batches written, for the
	// status page; nil keeps none.
	recent *tracing.RecentTraces
	log    *slog.Logger
	// beats keeps the source timestamp each partition's commits reach,
	// for the failover meter (heartbeat.go).
	beats *heartbeat.Table
	// commitStage observes the commit stage of the link's batches.
	commitStage prometheus.Observer
	// records are the records of each partition the stream committed, the
	// other half of a heartbeat's read count (heartbeat.go, beat); mu
	// orders a round's count against a heartbeat's.
	mu      sync.Mutex
	records map[heartbeat.Key]int64
}

// written records a round whose records the target acknowledged at
// produced (and, exactly-once, committed at now).
func (o *observer) written(ctx context.Context, group []work, start, produced, now time.Time) {
	o.metrics.ProduceSeconds.Observe(now.Sub(start).Seconds())
	o.observe(group, now)
	o.trace(ctx, group, start, produced)
}

// committed records batches acknowledged upstream with their checkpoints.
func (o *observer) committed(ctx context.Context, done committed) {
	o.metrics.Checkpoints.WithLabelValues(o.link.Name).Add(float64(len(done.cps)))
	o.commitTimes(done)
	o.traceCommit(ctx, done.batches, done.since)
}

// observe records the metrics of a group the target has acknowledged (and,
// in exactly-once mode, committed).
func (o *observer) observe(group []work, now time.Time) {
	m := o.metrics
	for _, w := range group {
		// Once per batch, from its receipt: the stage ends when the target
		// acknowledged its records (exactly-once: committed them).
		o.commitStage.Observe(max(0, now.Sub(w.received).Seconds()))
		part := strconv.Itoa(int(w.b.GetPartition()))
		m.Records.WithLabelValues(o.link.Name, w.b.GetTopic(), part).Add(float64(w.count()))
		m.Bytes.WithLabelValues(o.link.Name, w.b.GetTopic(), part).Add(float64(w.b.GetUncompressedSize()))
		m.WireBytes.WithLabelValues(o.link.Name, w.b.GetTopic(), part).Add(float64(len(w.b.GetPayload())))
		lat := m.Latency.WithLabelValues(o.link.Name, w.b.GetTopic())
		traced := o.tracer != nil
		for i := range w.parts {
			p := &w.parts[i]
			if p.passes() && p.recs == nil {
				// Not decoded: every record of the batch is as late as
				// its newest, which Kafka keeps in the batch header.
				v := now.Sub(time.UnixMilli(p.kafka.Info.MaxTimestamp)).Seconds()
				for range p.kafka.Info.NumRecords {
					lat.Observe(v)
				}
				continue
			}
			for _, r := range p.recs {
				v := now.Sub(time.UnixMilli(r.Timestamp)).Seconds()
				if traced {
					// A sampled record's trace id rides on the histogram as
					// an exemplar, from a latency bucket straight to its
					// trace.
					if sc := tracing.BatchSpanContext(r.Headers); sc.IsValid() && sc.IsSampled() {
						lat.(prometheus.ExemplarObserver).ObserveWithExemplar(v, prometheus.Labels{"trace_id": sc.TraceID().String()})
						continue
					}
				}
				lat.Observe(v)
			}
		}
	}
}

// trace emits the "ferry.produce" span of each traced batch of a round,
// from start to produced, and keeps its context in the work for the
// batch's commit span; and "ferry.write" for each record carrying a sampled
// traceparent, a child of the record's own context, so one trace shows
// producer, fetcher, writer and the target consumer. The record's
// traceparent header itself is copied to the target untouched.
func (o *observer) trace(ctx context.Context, group []work, start, produced time.Time) {
	tracer := o.tracer
	if tracer == nil {
		return
	}
	for i := range group {
		w := &group[i]
		b := w.b
		target := o.link.Naming.Target(b.GetTopic())
		if w.span.IsValid() {
			_, span := tracer.Start(trace.ContextWithSpanContext(ctx, w.span), "ferry.produce",
				trace.WithSpanKind(trace.SpanKindProducer),
				trace.WithTimestamp(start),
				trace.WithAttributes(tracing.Batch(target, b.GetPartition(), b.GetFirstOffset(), b.GetLastOffset(), w.count(), int(b.GetUncompressedSize()))...),
				trace.WithAttributes(tracing.OpSend, tracing.Delivery(o.link.ExactlyOnce)),
				trace.WithAttributes(tracing.Stream(o.link.Name, int(o.shard), o.epoch)...))
			span.End(trace.WithTimestamp(produced))
			w.span = span.SpanContext()
			o.recent.Add(w.span) // once per traced batch of the round
			o.log.Debug("batch written", "link", o.link.Name, "topic", b.GetTopic(), "partition", b.GetPartition(),
				"last_offset", b.GetLastOffset(), "trace_id", w.span.TraceID().String(), "span_id", w.span.SpanID().String())
		}
		w.records(func(r *batch.Record) {
			sc := tracing.BatchSpanContext(r.Headers) // no allocation without a traceparent
			if !sc.IsValid() || !sc.IsSampled() {
				return
			}
			_, span := tracer.Start(trace.ContextWithRemoteSpanContext(ctx, sc), "ferry.write",
				trace.WithSpanKind(trace.SpanKindProducer),
				trace.WithTimestamp(start),
				trace.WithAttributes(tracing.Kafka(), tracing.Topic(target), tracing.Partition(b.GetPartition()),
					tracing.Offset(r.Offset), tracing.LinkName(o.link.Name)))
			span.End(trace.WithTimestamp(produced))
		})
	}
}

// traceCommit emits the "ferry.commit" span of each traced batch whose
// checkpoint is committed and acknowledged upstream, a child of the batch's
// ferry.produce span: from start (the checkpoint's write began) to now.
func (o *observer) traceCommit(ctx context.Context, group []work, start time.Time) {
	tracer := o.tracer
	if tracer == nil {
		return
	}
	now := time.Now()
	for _, w := range group {
		if !w.span.IsValid() {
			continue
		}
		b := w.b
		_, span := tracer.Start(trace.ContextWithSpanContext(ctx, w.span), "ferry.commit",
			trace.WithSpanKind(trace.SpanKindClient),
			trace.WithTimestamp(start),
			trace.WithAttributes(tracing.Kafka(), tracing.Topic(o.link.Naming.Target(b.GetTopic())), tracing.Partition(b.GetPartition()),
				tracing.LastOffset(b.GetLastOffset()), tracing.OpSettle, tracing.Delivery(o.link.ExactlyOnce)),
			trace.WithAttributes(tracing.Stream(o.link.Name, int(o.shard), o.epoch)...))
		span.End(trace.WithTimestamp(now))
	}
}

// traceFailed ends each traced batch of a failed round with an error span
// of the stage that failed: name is ferry.produce (the records were not
// all written) or ferry.commit (the checkpoint write or the commit failed),
// from start to now, a child of the batch's last span. Without it a failed
// round would leave its batches' traces ending at ferry.receive, and only
// the logs would say why. The batches are not acknowledged: the fetcher
// resends them after the session ends, in new traces.
func (o *observer) traceFailed(ctx context.Context, group []work, name string, start time.Time, err error) {
	tracer := o.tracer
	if tracer == nil {
		return
	}
	kind := trace.SpanKindProducer
	if name == "ferry.commit" {
		kind = trace.SpanKindClient
	}
	for _, w := range group {
		if !w.span.IsValid() {
			continue
		}
		b := w.b
		_, span := tracer.Start(trace.ContextWithSpanContext(ctx, w.span), name,
			trace.WithSpanKind(kind),
			trace.WithTimestamp(start),
			trace.WithAttributes(tracing.Batch(o.link.Naming.Target(b.GetTopic()), b.GetPartition(), b.GetFirstOffset(), b.GetLastOffset(), w.count(), int(b.GetUncompressedSize()))...),
			trace.WithAttributes(tracing.Delivery(o.link.ExactlyOnce)),
			trace.WithAttributes(tracing.Stream(o.link.Name, int(o.shard), o.epoch)...))
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.End()
	}
}

// refusedBy finds, in a failed produce of round r of group, a batch of
// records the target refused for good (producer.Permanent): as too large
// (the target topic's max.message.bytes, or the brokers'
// message.max.bytes), the refusal of its largest record; for anything
// else (INVALID_RECORD, INVALID_TIMESTAMP, ...), the refusal of the record
// the target named, or of the batch's first. The refusal is counted; any
// other error is returned unchanged, and the fetcher reopens the stream.
func (o *observer) refusedBy(err error, group []work, r *round) error {
	if ref, ok := refusedRecord(err, group, r); ok {
		return reject(o.metrics, o.link.Name, ref)
	}
	if ref, ok := refusedByTarget(err, group, r); ok {
		return reject(o.metrics, o.link.Name, ref)
	}
	return err
}
