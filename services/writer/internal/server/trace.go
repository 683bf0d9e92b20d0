package server

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-replicator/ferry/pkg/batch"
	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/tracing"
)

// The writer's spans, per batch the fetcher traced (its Batch message holds
// the traceparent of the fetcher's ferry.batch span), one a child of the
// other (docs/tracing.md):
//
//	ferry.receive  server    batch off the stream ... decoded, CRC and
//	                         sequence checked; child of ferry.batch, linked
//	                         to the stream's otelgrpc server span
//	ferry.produce  producer  round sent ... its records acknowledged by the
//	                         target (in the open transaction, exactly-once)
//	ferry.commit   client    checkpoint write begun ... batch acknowledged
//	                         upstream: the transaction commit (exactly-once),
//	                         or the next round's checkpoint (at-least-once)
//
// and per record carrying a sampled traceparent, "ferry.write" in the
// record's own trace. A round that fails ends its batches with an error
// span of the stage that failed (traceFailed). A batch the fetcher did not trace has no span here:
// the writer follows the fetcher's sampling decision, and with tracing off
// (nil tracer) nothing happens.

// traceStream describes the stream's otelgrpc server span with the shard
// the Open named.
func (ss *session) traceStream() {
	if ss.s.opts.Tracer == nil {
		return
	}
	if span := trace.SpanFromContext(ss.ctx); span.IsRecording() {
		span.SetAttributes(tracing.Stream(ss.link.Name, int(ss.shard), ss.epoch)...)
		span.SetAttributes(tracing.Fetcher(ss.fetcher), tracing.Delivery(ss.link.ExactlyOnce))
	}
}

// checkTraced is check in a "ferry.receive" span when the batch is traced;
// the returned work then holds the span's context, the parent of the
// batch's next stage. A batch refused is traced too, with the error.
func (ss *session) checkTraced(b *ferryv1.Batch, wantSeq uint64) (work, error) {
	tracer := ss.s.opts.Tracer
	if tracer == nil || b.GetTraceparent() == "" {
		return ss.check(b, wantSeq)
	}
	start := time.Now()
	w, err := ss.check(b, wantSeq)
	sc := tracing.ParseTraceparent(b.GetTraceparent())
	if !sc.IsSampled() { // the fetcher sends only sampled contexts; a bad one starts no trace
		return w, err
	}
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(start),
		trace.WithAttributes(tracing.Batch(b.GetTopic(), b.GetPartition(), b.GetFirstOffset(), b.GetLastOffset(), int(b.GetRecordCount()), int(b.GetUncompressedSize()))...),
		trace.WithAttributes(tracing.OpReceive, tracing.CompressedBytes(len(b.GetPayload())), tracing.Sequence(b.GetSequence())),
		trace.WithAttributes(tracing.Stream(ss.link.Name, int(ss.shard), ss.epoch)...),
	}
	if stream := trace.SpanContextFromContext(ss.ctx); stream.IsSampled() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: stream}))
	}
	_, span := tracer.Start(trace.ContextWithRemoteSpanContext(ss.ctx, sc), "ferry.receive", opts...)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	w.span = span.SpanContext()
	return w, err
}

// trace emits the "ferry.produce" span of each traced batch of a round,
// from start to produced, and keeps its context in the work for the
// batch's commit span; and "ferry.write" for each record carrying a sampled
// traceparent, a child of the record's own context, so one trace shows
// producer, fetcher, writer and the target consumer. The record's
// traceparent header itself is copied to the target untouched.
func (ss *session) trace(ctx context.Context, group []work, start, produced time.Time) {
	tracer := ss.s.opts.Tracer
	if tracer == nil {
		return
	}
	for i := range group {
		w := &group[i]
		b := w.b
		target := ss.link.Naming.Target(b.GetTopic())
		if w.span.IsValid() {
			_, span := tracer.Start(trace.ContextWithSpanContext(ctx, w.span), "ferry.produce",
				trace.WithSpanKind(trace.SpanKindProducer),
				trace.WithTimestamp(start),
				trace.WithAttributes(tracing.Batch(target, b.GetPartition(), b.GetFirstOffset(), b.GetLastOffset(), w.count(), int(b.GetUncompressedSize()))...),
				trace.WithAttributes(tracing.OpSend, tracing.Delivery(ss.link.ExactlyOnce)),
				trace.WithAttributes(tracing.Stream(ss.link.Name, int(ss.shard), ss.epoch)...))
			span.End(trace.WithTimestamp(produced))
			w.span = span.SpanContext()
			ss.s.log.Debug("batch written", "link", ss.link.Name, "topic", b.GetTopic(), "partition", b.GetPartition(),
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
					tracing.Offset(r.Offset), tracing.LinkName(ss.link.Name)))
			span.End(trace.WithTimestamp(produced))
		})
	}
}

// traceCommit emits the "ferry.commit" span of each traced batch whose
// checkpoint is committed and acknowledged upstream, a child of the batch's
// ferry.produce span: from start (the checkpoint's write began) to now.
func (ss *session) traceCommit(ctx context.Context, group []work, start time.Time) {
	tracer := ss.s.opts.Tracer
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
			trace.WithAttributes(tracing.Kafka(), tracing.Topic(ss.link.Naming.Target(b.GetTopic())), tracing.Partition(b.GetPartition()),
				tracing.LastOffset(b.GetLastOffset()), tracing.OpSettle, tracing.Delivery(ss.link.ExactlyOnce)),
			trace.WithAttributes(tracing.Stream(ss.link.Name, int(ss.shard), ss.epoch)...))
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
func (ss *session) traceFailed(ctx context.Context, group []work, name string, start time.Time, err error) {
	tracer := ss.s.opts.Tracer
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
			trace.WithAttributes(tracing.Batch(ss.link.Naming.Target(b.GetTopic()), b.GetPartition(), b.GetFirstOffset(), b.GetLastOffset(), w.count(), int(b.GetUncompressedSize()))...),
			trace.WithAttributes(tracing.Delivery(ss.link.ExactlyOnce)),
			trace.WithAttributes(tracing.Stream(ss.link.Name, int(ss.shard), ss.epoch)...))
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.End()
	}
}
