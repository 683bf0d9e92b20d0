package tracing

import (
	"context"
	"slices"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// RecentTraces keeps the last RecentSize sampled traces, newest first,
// and ignores spans that are not sampled; a nil one keeps nothing (tracing
// off or no ui_url) and costs its callers nothing.
func TestRecentTraces(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	sampled := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSyncer(exp))
	unsampled := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	defer sampled.Shutdown(context.Background())
	defer unsampled.Shutdown(context.Background())

	var r RecentTraces
	if got := r.IDs(); len(got) != 0 {
		t.Fatalf("a new ring holds %q", got)
	}
	var started []string
	for range RecentSize + 5 {
		_, span := sampled.Tracer("test").Start(context.Background(), "ferry.batch")
		r.Add(span.SpanContext())
		r.Add(span.SpanContext()) // the same trace again is kept once
		span.End()
		_, skip := unsampled.Tracer("test").Start(context.Background(), "ferry.batch")
		r.Add(skip.SpanContext())
		started = append(started, span.SpanContext().TraceID().String())
	}
	slices.Reverse(started)
	want := started[:RecentSize]
	if got := r.IDs(); !slices.Equal(got, want) {
		t.Errorf("IDs = %q,\nwant the last %d sampled, newest first: %q", got, RecentSize, want)
	}
	exported := map[string]bool{}
	for _, s := range exp.GetSpans() {
		exported[s.SpanContext.TraceID().String()] = true
	}
	for _, id := range r.IDs() {
		if !exported[id] {
			t.Errorf("trace %s kept but never exported", id)
		}
	}

	var none *RecentTraces
	none.Add(remoteContext(t))
	if got := none.IDs(); got != nil {
		t.Errorf("a nil ring holds %q", got)
	}
}

// The status page searches the Jaeger UI for the name the spans carry,
// which OTEL_SERVICE_NAME overrides.
func TestServiceName(t *testing.T) {
	if got := ServiceName(context.Background(), DefaultConfig(), "ferry-writer"); got != "ferry-writer" {
		t.Errorf("ServiceName = %q, want ferry-writer", got)
	}
	t.Setenv("OTEL_SERVICE_NAME", "writer-eu")
	if got := ServiceName(context.Background(), DefaultConfig(), "ferry-writer"); got != "writer-eu" {
		t.Errorf("ServiceName under OTEL_SERVICE_NAME = %q, want writer-eu", got)
	}
}
