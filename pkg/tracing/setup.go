package tracing

import (
	"context"
	"fmt"
	"sort"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Propagator is the W3C Trace Context propagator (traceparent and
// tracestate), the only format Ferry reads and writes. It is what to give
// otelgrpc or any other instrumentation alongside Setup's provider.
func Propagator() propagation.TextMapPropagator { return propagation.TraceContext{} }

// Setup returns the tracer provider for cfg and the function that flushes
// and stops it. With tracing off (no endpoint) the provider is a no-op one
// and shutdown does nothing.
//
// With an endpoint, spans go through a batching processor (it never blocks
// a caller: when its queue is full, spans are dropped) to an OTLP/gRPC
// exporter. The exporter connects lazily, so Setup does not fail or wait
// when the collector is down; failed exports are reported to the OTel error
// handler (by default the standard logger). shutdown flushes what is queued
// and waits as long as its context allows, so give it a deadline.
//
// The resource holds service.name = serviceName, then attrs, then
// cfg.ResourceAttributes, then OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES,
// each overriding the ones before. The global provider is left alone.
func Setup(ctx context.Context, cfg Config, serviceName string, attrs ...attribute.KeyValue) (trace.TracerProvider, func(context.Context) error, error) {
	if !cfg.Enabled() {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	res, err := newResource(ctx, cfg, serviceName, attrs)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing resource: %w", err)
	}
	// WithEndpointURL rather than WithEndpoint and WithInsecure: its scheme
	// settles plaintext or TLS, overriding OTEL_EXPORTER_OTLP_INSECURE, so
	// the configuration decides (Validate checked it).
	scheme := "https"
	if cfg.Insecure {
		scheme = "http"
	}
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(scheme+"://"+cfg.Endpoint))
	if err != nil {
		return nil, nil, fmt.Errorf("tracing exporter for %s: %w", cfg.Endpoint, err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sampler(cfg.SamplingRatio)),
	)
	return tp, tp.Shutdown, nil
}

// ServiceName is the service.name of Setup's spans for the same
// arguments: serviceName unless resource_attributes or the OTEL_*
// variables name another. The status page searches the Jaeger UI for it.
func ServiceName(ctx context.Context, cfg Config, serviceName string, attrs ...attribute.KeyValue) string {
	res, err := newResource(ctx, cfg, serviceName, attrs)
	if err != nil {
		return serviceName // Setup fails the same way, and says why
	}
	if v, ok := res.Set().Value(semconv.ServiceNameKey); ok {
		return v.AsString()
	}
	return serviceName
}

// Tracer returns tp's tracer of the given name, or nil when tp is the no-op
// provider: Ferry's span code reads a nil tracer as "tracing off" and skips
// even the work of building attributes.
func Tracer(tp trace.TracerProvider, name string) trace.Tracer {
	if !Enabled(tp) {
		return nil
	}
	return tp.Tracer(name)
}

// Stop runs the shutdown Setup returned, giving queued spans a few seconds
// to leave; for a deferred call at the end of a process.
func Stop(shutdown func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = shutdown(ctx)
}

// sampler follows a sampled or unsampled parent (a record's traceparent, a
// batch span) and samples new traces at ratio. The configuration wins over
// OTEL_TRACES_SAMPLER.
func sampler(ratio float64) sdktrace.Sampler {
	return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))
}

func newResource(ctx context.Context, cfg Config, serviceName string, attrs []attribute.KeyValue) (*resource.Resource, error) {
	keys := make([]string, 0, len(cfg.ResourceAttributes))
	for k := range cfg.ResourceAttributes {
		keys = append(keys, k)
	}
	sort.Strings(keys) // a stable order, for stable output in tests and logs
	fromConfig := make([]attribute.KeyValue, 0, len(keys))
	for _, k := range keys {
		fromConfig = append(fromConfig, attribute.String(k, cfg.ResourceAttributes[k]))
	}
	// Later options override earlier ones. No process detector: it would
	// export the command line, which may hold --set values.
	return resource.New(ctx,
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithAttributes(semconv.ServiceName(serviceName)),
		resource.WithAttributes(attrs...),
		resource.WithAttributes(fromConfig...),
		resource.WithFromEnv(),
	)
}
