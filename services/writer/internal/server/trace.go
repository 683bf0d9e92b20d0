package server

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-replicator/ferry/pkg/tracing"
)

// trace emits the spans of a produced round: "ferry.produce" for each
// traced batch, a child of the fetcher's batch span (its context travels
// in the batch), from receipt to the target's acknowledgement (and commit);
// and "ferry.write" for each record carrying a sampled traceparent, a
// child of the record's own context, so one trace shows producer, fetcher,
// writer and the target consumer. The record's traceparent header itself
// is copied to the target untouched. Nothing happens with tracing off.
func (ss *session) trace(ctx context.Context, group []work, start, done time.Time) {
	tracer := ss.s.opts.Tracer
	if tracer == nil {
		return
	}
	for _, w := range group {
		b := w.b
		if b.GetTraceparent() != "" {
			parent := trace.ContextWithRemoteSpanContext(ctx, tracing.ParseTraceparent(b.GetTraceparent()))
			_, span := tracer.Start(parent, "ferry.produce",
				trace.WithSpanKind(trace.SpanKindServer),
				trace.WithTimestamp(w.received),
				trace.WithAttributes(tracing.Batch(ss.link.Naming.Target(b.GetTopic()), b.GetPartition(), b.GetFirstOffset(), b.GetLastOffset(), len(w.recs), int(b.GetUncompressedSize()))...),
				trace.WithAttributes(tracing.LinkName(ss.link.Name), tracing.Shard(int(ss.shard)), tracing.Epoch(int64(ss.epoch))))
			span.End(trace.WithTimestamp(done))
			ss.s.log.Debug("batch written", "link", ss.link.Name, "topic", b.GetTopic(), "partition", b.GetPartition(),
				"last_offset", b.GetLastOffset(), "trace_id", span.SpanContext().TraceID().String(), "span_id", span.SpanContext().SpanID().String())
		}
		for i := range w.recs {
			sc := tracing.BatchSpanContext(w.recs[i].Headers) // no allocation without a traceparent
			if !sc.IsValid() || !sc.IsSampled() {
				continue
			}
			_, span := tracer.Start(trace.ContextWithRemoteSpanContext(ctx, sc), "ferry.write",
				trace.WithSpanKind(trace.SpanKindProducer),
				trace.WithTimestamp(start),
				trace.WithAttributes(tracing.Kafka(), tracing.Topic(ss.link.Naming.Target(b.GetTopic())), tracing.Partition(b.GetPartition()),
					tracing.Offset(w.recs[i].Offset), tracing.LinkName(ss.link.Name)))
			span.End(trace.WithTimestamp(done))
		}
	}
}
