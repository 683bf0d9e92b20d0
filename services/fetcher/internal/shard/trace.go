package shard

import (
	"context"
	"log/slog"
	"time"

	"github.com/IBM/sarama"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/tracing"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/discovery"
)

// batchTracer follows one partition's batches. For every record carrying
// a sampled W3C traceparent it emits a "ferry.fetch" span as a child of the
// record's own context (so the producer's trace continues into Ferry), and
// the batch's "ferry.batch" span links to those records. With tracing off
// (nil tracer) every method returns at once.
type batchTracer struct {
	tracer trace.Tracer
	link   string
	shard  int
	part   discovery.Partition

	log *slog.Logger

	first time.Time // when the batch's first record was read
	links []trace.Link
}

func newBatchTracer(t trace.Tracer, link string, shard int, p discovery.Partition, log *slog.Logger) *batchTracer {
	return &batchTracer{tracer: t, link: link, shard: shard, part: p, log: log}
}

func (t *batchTracer) record(ctx context.Context, m *sarama.ConsumerMessage) {
	if t.tracer == nil {
		return
	}
	now := time.Now()
	if t.first.IsZero() {
		t.first = now
	}
	sc := tracing.ConsumerSpanContext(m.Headers) // no allocation without a traceparent
	if !sc.IsValid() || !sc.IsSampled() {
		return
	}
	t.links = append(t.links, trace.Link{SpanContext: sc})
	_, span := t.tracer.Start(trace.ContextWithRemoteSpanContext(ctx, sc), "ferry.fetch",
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(m.Timestamp),
		trace.WithAttributes(tracing.Kafka(), tracing.Topic(m.Topic), tracing.Partition(m.Partition), tracing.Offset(m.Offset), tracing.LinkName(t.link)))
	span.End(trace.WithTimestamp(now))
}

// seal ends the batch: a "ferry.batch" span from its first record to its
// compression, linked to its sampled records, whose context then travels
// with the batch to the writer.
func (t *batchTracer) seal(ctx context.Context, b *ferryv1.Batch, rawBytes int) {
	if t.tracer == nil {
		return
	}
	_, span := t.tracer.Start(ctx, "ferry.batch",
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithTimestamp(t.first),
		trace.WithLinks(t.links...),
		trace.WithAttributes(tracing.Batch(b.Topic, b.Partition, b.FirstOffset, b.LastOffset, int(b.RecordCount), rawBytes)...),
		trace.WithAttributes(tracing.CompressedBytes(len(b.Payload)), tracing.LinkName(t.link), tracing.Shard(t.shard)))
	span.End()
	if sc := span.SpanContext(); sc.IsSampled() {
		b.Traceparent = tracing.FormatTraceparent(sc)
		t.log.Debug("batch sealed", "topic", b.Topic, "partition", b.Partition, "last_offset", b.LastOffset,
			"trace_id", sc.TraceID().String(), "span_id", sc.SpanID().String())
	}
	t.first, t.links = time.Time{}, t.links[:0]
}

// traceSend wraps the gRPC send of a traced batch in a "ferry.send" span.
func traceSend(ctx context.Context, tracer trace.Tracer, b *ferryv1.Batch) func(error) {
	if tracer == nil || b.Traceparent == "" {
		return func(error) {}
	}
	sc := tracing.ParseTraceparent(b.Traceparent)
	_, span := tracer.Start(trace.ContextWithSpanContext(ctx, sc), "ferry.send",
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(tracing.CompressedBytes(len(b.Payload))))
	return func(err error) {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}
