// Package otlptest is an OTLP/gRPC trace receiver for tests of a whole
// service with tracing on: the service's real exporter (tracing.Setup)
// sends its spans to it over loopback, and the test reads which traces
// arrived. It keeps trace IDs only; tests of what a span holds use a real
// Jaeger (loadtest/jaegeragent).
package otlptest

import (
	"context"
	"encoding/hex"
	"net"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// Receiver collects the trace IDs of the spans exported to it.
type Receiver struct {
	coltracepb.UnimplementedTraceServiceServer
	// Addr is its host:port, for tracing.endpoint (plaintext, loopback).
	Addr string

	mu     sync.Mutex
	traces map[string]bool
}

// Start serves a Receiver on a free loopback port until the test ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Receiver{Addr: ln.Addr().String(), traces: map[string]bool{}}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, r)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return r
}

// Export keeps the trace ID of every span in req.
func (r *Receiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.traces[hex.EncodeToString(s.GetTraceId())] = true
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// Has reports whether a span of the trace (32 hex digits) has arrived.
func (r *Receiver) Has(traceID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.traces[traceID]
}
