package server

import (
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

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
