package tracing

import (
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
)

// Enabled reports whether tp records anything: false for the no-op provider
// Setup returns with tracing off.
func Enabled(tp trace.TracerProvider) bool {
	_, off := tp.(noop.TracerProvider)
	return !off
}

// ServerOptions instrument a gRPC server with otelgrpc: one server span per
// RPC, child of the client's span (W3C trace context in the metadata). With
// tracing off it returns none, so the stats handler costs nothing either.
//
// A Ferry stream lives for hours and carries many batches, and its span is
// exported only when the stream ends: it shows when streams opened, ended
// and how. Metadata crosses once, when the stream opens, so per-batch spans
// are made by hand, with their context in the batch message
// (FormatTraceparent), and link to the stream's span.
func ServerOptions(tp trace.TracerProvider) []grpc.ServerOption {
	if !Enabled(tp) {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(handlerOptions(tp)...))}
}

// DialOptions instrument a gRPC client with otelgrpc, as ServerOptions does
// a server.
func DialOptions(tp trace.TracerProvider) []grpc.DialOption {
	if !Enabled(tp) {
		return nil
	}
	return []grpc.DialOption{grpc.WithStatsHandler(otelgrpc.NewClientHandler(handlerOptions(tp)...))}
}

// handlerOptions leave out WithMessageEvents on purpose: a stream carries
// millions of messages, and an event per message would grow its one span
// without bound (the SDK keeps 128 events and drops the rest, after paying
// for them). Without it (otelgrpc v0.72) a message costs the handler a type
// switch. Health checks are not traced: a probe every few seconds would
// start a trace of its own each time.
func handlerOptions(tp trace.TracerProvider) []otelgrpc.Option {
	return []otelgrpc.Option{
		otelgrpc.WithTracerProvider(tp),
		otelgrpc.WithPropagators(Propagator()),
		otelgrpc.WithFilter(filters.Not(filters.HealthCheck())),
		// otelgrpc would otherwise take the global meter provider; Ferry's
		// metrics are Prometheus (pkg/telemetry), so none here.
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
	}
}
