package tracing

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-replicator/ferry/pkg/batch"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
)

// BenchmarkSpanStart measures what a per-batch span costs the hot path:
// none (no tracing code at all), the no-op provider Setup returns with
// tracing off, and the SDK with a batch not sampled (ratio 0.01 is 99 in a
// hundred of them) or sampled (recording, without an exporter).
// docs/tracing.md "Overhead" quotes its results.
func BenchmarkSpanStart(b *testing.B) {
	ctx := context.Background()
	attrsFor := func(i int) int { return i } // the work a traced span would describe

	b.Run("none", func(b *testing.B) {
		b.ReportAllocs()
		sink := 0
		for i := range b.N {
			sink += attrsFor(i)
		}
		_ = sink
	})
	noopTP, _, err := Setup(ctx, DefaultConfig(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("noop", func(b *testing.B) {
		benchSpans(b, ctx, noopTP.Tracer("bench"))
	})
	unsampled := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler(0)))
	defer unsampled.Shutdown(ctx)
	b.Run("sdk_not_sampled", func(b *testing.B) {
		benchSpans(b, ctx, unsampled.Tracer("bench"))
	})
	sampled := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler(1)))
	defer sampled.Shutdown(ctx)
	b.Run("sdk_sampled", func(b *testing.B) {
		benchSpans(b, ctx, sampled.Tracer("bench"))
	})
}

// benchSpans starts and ends a span per iteration, with the batch attributes
// set only when it records, as the services should.
func benchSpans(b *testing.B, ctx context.Context, tracer trace.Tracer) {
	b.ReportAllocs()
	for i := range b.N {
		_, span := tracer.Start(ctx, "ferry.fetch")
		if span.IsRecording() {
			span.SetAttributes(Batch("orders", 3, int64(i), int64(i)+99, 100, 102400)...)
		}
		span.End()
	}
}

// BenchmarkRecordSpanContext is the per-record cost of looking for a trace
// context: most records have none.
func BenchmarkRecordSpanContext(b *testing.B) {
	plain := []recordbatch.Header{{Key: "content-type", Value: []byte("application/json")}, {Key: "schema-id", Value: []byte("42")}}
	var traced []batch.Header
	inject(remoteContext(b), BatchHeaderCarrier{&traced})
	b.Run("no_traceparent", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if RecordSpanContext(plain).IsValid() {
				b.Fatal("valid")
			}
		}
	})
	b.Run("traceparent", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if !BatchSpanContext(traced).IsValid() {
				b.Fatal("invalid")
			}
		}
	})
}
