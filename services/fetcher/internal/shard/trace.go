package shard

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/pkg/tracing"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/discovery"
)

// The fetcher's spans, per batch (docs/tracing.md):
//
//	ferry.batch    producer  first record read ... batch sent; a new trace,
//	                         sampled at the configured ratio, linked to the
//	                         batch's sampled records
//	  ferry.fetch  consumer  first record read ... batch cut (the source read)
//	  ferry.encode internal  batch cut ... encoded and compressed
//	  ferry.send   client    taken from the session's queue ... written to
//	                         the stream (the wait for credit included); linked
//	                         to the stream's otelgrpc client span
//
// and per record carrying a sampled traceparent, a "ferry.fetch" consumer
// span in the record's own trace, a child of its producer's span. The
// batch span's context travels to the writer in the Batch message's
// traceparent field: the stream's metadata crossed once, hours ago.
//
// With tracing off (nil tracer) every method returns at once; with a batch
// not sampled only ferry.batch is started, and nothing is recorded.

// batchTracer follows one partition's batches.
type batchTracer struct {
	tracer trace.Tracer
	recent *tracing.RecentTraces // nil keeps none
	link   string
	shard  int
	epoch  uint64

	log *slog.Logger

	first time.Time // when the batch's first record was read
	links []trace.Link
}

func newBatchTracer(t trace.Tracer, recent *tracing.RecentTraces, link string, shard int, epoch uint64, log *slog.Logger) *batchTracer {
	return &batchTracer{tracer: t, recent: recent, link: link, shard: shard, epoch: epoch, log: log}
}

// recordKafka notes a record decoded from a fetched Kafka batch.
func (t *batchTracer) recordKafka(ctx context.Context, p discovery.Partition, offset int64, rec recordbatch.Record) {
	if t.tracer == nil {
		return
	}
	t.note(ctx, tracing.RecordSpanContext(rec.Headers), p.Topic, p.Partition, offset, time.UnixMilli(rec.Timestamp))
}

// note marks when the batch's first record was read and, for a record
// carrying a sampled trace context (sc, invalid for none), makes its
// "ferry.fetch" span and links the batch to it.
func (t *batchTracer) note(ctx context.Context, sc trace.SpanContext, topic string, partition int32, offset int64, ts time.Time) {
	if t.first.IsZero() {
		t.first = time.Now()
	}
	if !sc.IsValid() || !sc.IsSampled() {
		return // no clock read per record: only sampled ones need one
	}
	now := time.Now()
	t.links = append(t.links, trace.Link{SpanContext: sc})
	_, span := t.tracer.Start(trace.ContextWithRemoteSpanContext(ctx, sc), "ferry.fetch",
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(ts),
		trace.WithAttributes(tracing.Kafka(), tracing.Topic(topic), tracing.Partition(partition), tracing.Offset(offset), tracing.LinkName(t.link)))
	span.End(trace.WithTimestamp(now))
}

// read marks the batch's first read, as its first noted record does: a
// batch whose records are not decoded is timed from here.
func (t *batchTracer) read() {
	if t.tracer != nil && t.first.IsZero() {
		t.first = time.Now()
	}
}

// carriesTraceparent is whether a decoded record has a trace context.
func carriesTraceparent(hs []recordbatch.Header) bool {
	for _, h := range hs {
		if h.Key == tracing.TraceparentHeader {
			return true
		}
	}
	return false
}

// cut is when the batch's source read ended, just before it is encoded;
// the zero time with tracing off, which spares the clock.
func (t *batchTracer) cut() time.Time {
	if t.tracer == nil {
		return time.Time{}
	}
	return time.Now()
}

// seal starts the span of a batch just encoded and records its fetch and
// encode stages (their times are known by now, so they are made after the
// fact). It puts the span's context in the batch and returns the span, to
// end once the batch is sent; nil when the batch is not traced.
func (t *batchTracer) seal(ctx context.Context, b *ferryv1.Batch, rawBytes int, cut time.Time) trace.Span {
	if t.tracer == nil {
		return nil
	}
	first, links := t.first, t.links
	t.first, t.links = time.Time{}, t.links[:0] // Start copied the links
	bctx, span := t.tracer.Start(ctx, "ferry.batch",
		trace.WithNewRoot(), // a trace per batch, whatever ctx holds
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithTimestamp(first),
		trace.WithLinks(links...))
	if !span.IsRecording() {
		span.End()
		return nil
	}
	attrs := tracing.Batch(b.Topic, b.Partition, b.FirstOffset, b.LastOffset, int(b.RecordCount), rawBytes)
	span.SetAttributes(attrs...)
	span.SetAttributes(tracing.OpCreate, tracing.CompressedBytes(len(b.Payload)))
	span.SetAttributes(tracing.Stream(t.link, t.shard, t.epoch)...)

	_, fetch := t.tracer.Start(bctx, "ferry.fetch",
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(first),
		trace.WithAttributes(attrs...),
		trace.WithAttributes(tracing.OpReceive, tracing.LinkName(t.link)))
	fetch.End(trace.WithTimestamp(cut))
	_, enc := t.tracer.Start(bctx, "ferry.encode",
		trace.WithTimestamp(cut),
		trace.WithAttributes(tracing.MessageCount(int(b.RecordCount)), tracing.BatchBytes(rawBytes), tracing.CompressedBytes(len(b.Payload)),
			tracing.Codec(strings.ToLower(strings.TrimPrefix(b.Codec.String(), "CODEC_")))))
	enc.End()

	sc := span.SpanContext()
	b.Traceparent = tracing.FormatTraceparent(sc)
	t.recent.Add(sc) // once per sampled batch: the status page links to it
	t.log.Debug("batch sealed", "topic", b.Topic, "partition", b.Partition, "last_offset", b.LastOffset,
		"trace_id", sc.TraceID().String(), "span_id", sc.SpanID().String())
	return span
}

// traceStream describes the stream's otelgrpc client span (a root of its
// own, sampled at the ratio) with the shard it carries, and returns its
// context for the batches' send spans to link to: invalid when the span is
// not sampled, since a link to it would lead nowhere.
func (r *Runner) traceStream(stream ferryv1.ReplicationService_ReplicateClient) trace.SpanContext {
	if r.deps.Tracer == nil {
		return trace.SpanContext{}
	}
	span := trace.SpanFromContext(stream.Context())
	if !span.IsRecording() {
		return trace.SpanContext{}
	}
	span.SetAttributes(tracing.Stream(r.set.Link, r.shard, r.epoch)...)
	span.SetAttributes(tracing.Fetcher(r.set.FetcherID))
	return span.SpanContext()
}

// startSend starts the "ferry.send" span of a traced batch, a child of its
// batch span; nil when the batch is not traced.
func (s *session) startSend(q queued) trace.Span {
	if q.span == nil {
		return nil
	}
	b := q.b
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(tracing.Kafka(), tracing.Topic(b.Topic), tracing.Partition(b.Partition),
			tracing.Offset(b.FirstOffset), tracing.LastOffset(b.LastOffset), tracing.CompressedBytes(len(b.Payload))),
		trace.WithAttributes(tracing.Stream(s.r.set.Link, s.r.shard, s.r.epoch)...),
	}
	if s.streamSpan.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: s.streamSpan}))
	}
	_, span := s.r.deps.Tracer.Start(trace.ContextWithSpan(context.Background(), q.span), "ferry.send", opts...)
	return span
}

// endSend ends a traced batch's send and batch spans.
func endSend(q queued, send trace.Span, err error) {
	if send == nil {
		return
	}
	send.SetAttributes(tracing.Sequence(q.b.Sequence))
	if err != nil {
		send.SetStatus(codes.Error, err.Error())
		q.span.SetStatus(codes.Error, "send failed")
	}
	send.End()
	q.span.End()
}
