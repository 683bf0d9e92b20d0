package jaegeragent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-replicator/ferry/loadtest/jaegeragent"
)

// TestAgentRoundTrip starts the real Jaeger, sends a parent and a child span
// with the OTel SDK over OTLP gRPC, and reads them back through the query
// API. It fails, never skips, when the binary cannot be had: Jaeger is part
// of the project's own build (tools/jaeger/build.sh).
func TestAgentRoundTrip(t *testing.T) {
	bin, err := jaegeragent.Binary()
	if err != nil {
		t.Fatalf("jaeger binary: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	logFile := filepath.Join(t.TempDir(), "jaeger.log")
	// Jaeger's output stays out of the test's; show it only on failure.
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("jaeger log tail:\n%s", lastLines(string(b), 60))
		}
	})
	began := time.Now()
	a, err := jaegeragent.Start(ctx, jaegeragent.Options{Binary: bin, LogFile: logFile})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(a.Kill)
	t.Logf("jaeger up in %s: otlp %s, query %s", time.Since(began).Round(time.Millisecond), a.OTLPGRPCAddr(), a.QueryAddr())
	for _, addr := range []string{a.OTLPGRPCAddr(), a.OTLPHTTPAddr(), a.QueryAddr()} {
		if !strings.HasPrefix(addr, "127.0.0.1:") {
			t.Errorf("address %q is not on loopback", addr)
		}
	}

	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(a.OTLPGRPCAddr()), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatalf("exporter: %v", err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "jaegeragent-test"), attribute.String("region", "test-east"))
	// A syncer exports each span as it ends: nothing waits for a batch.
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(res))
	defer tp.Shutdown(context.Background())

	tracer := tp.Tracer("jaegeragent_test")
	pctx, parent := tracer.Start(ctx, "parent")
	_, child := tracer.Start(pctx, "child", trace.WithAttributes(attribute.Int64("n", 42), attribute.String("topic", "orders")))
	time.Sleep(2 * time.Millisecond) // a duration Jaeger cannot round to zero
	child.End()
	parent.End()
	traceID := parent.SpanContext().TraceID().String()

	got, err := a.WaitTrace(ctx, traceID, 2)
	if err != nil {
		t.Fatalf("read back: %v", err)
	}
	if got.TraceID != traceID {
		t.Errorf("TraceID = %s, want %s", got.TraceID, traceID)
	}
	p, ok := got.SpanByName("parent")
	if !ok {
		t.Fatalf("no span parent in %+v", got)
	}
	c, ok := got.SpanByName("child")
	if !ok {
		t.Fatalf("no span child in %+v", got)
	}
	if p.SpanID != parent.SpanContext().SpanID().String() || c.SpanID != child.SpanContext().SpanID().String() {
		t.Errorf("span IDs = %s, %s, want %s, %s", p.SpanID, c.SpanID, parent.SpanContext().SpanID(), child.SpanContext().SpanID())
	}
	if ref, ok := c.Parent(); !ok || ref.SpanID != p.SpanID || ref.TraceID != traceID {
		t.Errorf("child references = %+v, want CHILD_OF %s", c.References, p.SpanID)
	}
	if _, ok := p.Parent(); ok {
		t.Errorf("parent has a parent: %+v", p.References)
	}
	if c.Process.ServiceName != "jaegeragent-test" {
		t.Errorf("serviceName = %q", c.Process.ServiceName)
	}
	if v, ok := c.Process.Tag("region"); !ok || v != "test-east" {
		t.Errorf("process tag region = %v, %v", v, ok)
	}
	if v, ok := c.Tag("n"); !ok || v != float64(42) {
		t.Errorf("tag n = %v (%T), %v", v, v, ok)
	}
	if v, ok := c.Tag("topic"); !ok || v != "orders" {
		t.Errorf("tag topic = %v, %v", v, ok)
	}
	if c.Elapsed() < 2*time.Millisecond || c.Start().Before(began) {
		t.Errorf("child start %s duration %s", c.Start(), c.Elapsed())
	}

	services, err := a.Services(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(services, "jaegeragent-test") {
		t.Errorf("services = %v", services)
	}
	found, err := a.FindTraces(ctx, "jaegeragent-test", time.Hour, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].TraceID != traceID {
		t.Errorf("FindTraces = %d traces, want the one %s", len(found), traceID)
	}

	// An unknown trace is ErrTraceNotFound, which WaitTrace polls past.
	if _, err := a.Trace(ctx, "0123456789abcdef0123456789abcdef"); !errors.Is(err, jaegeragent.ErrTraceNotFound) {
		t.Errorf("unknown trace: err = %v, want ErrTraceNotFound", err)
	}

	// The exporter's connection must not hold up Jaeger's stop.
	if err := tp.Shutdown(ctx); err != nil {
		t.Errorf("provider shutdown: %v", err)
	}
	stopped := time.Now()
	if err := a.Stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	// Jaeger's self-tracing, if it were on, would hold a stop for its 10 s
	// export timeout.
	if took := time.Since(stopped); took > 5*time.Second {
		t.Errorf("stop took %s", took)
	}
	if _, err := a.Services(ctx); err == nil {
		t.Error("query API still answers after Stop")
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
