package tracing

import (
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
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
// and how; per-batch spans must be made by hand, with their context in the
// batch message (FormatTraceparent).
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

func handlerOptions(tp trace.TracerProvider) []otelgrpc.Option {
	return []otelgrpc.Option{
		otelgrpc.WithTracerProvider(tp),
		otelgrpc.WithPropagators(Propagator()),
		// otelgrpc would otherwise take the global meter provider; Ferry's
		// metrics are Prometheus (pkg/telemetry), so none here.
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
	}
}
