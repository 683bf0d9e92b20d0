package tracing

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ferry-replicator/ferry/loadtest/jaegeragent"
	"github.com/ferry-replicator/ferry/pkg/config"
	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
)

func TestSetupOffIsNoop(t *testing.T) {
	tp, shutdown, err := Setup(context.Background(), DefaultConfig(), "ferry-test")
	if err != nil {
		t.Fatal(err)
	}
	if Enabled(tp) {
		t.Error("Enabled(no-op provider) = true")
	}
	if ServerOptions(tp) != nil || DialOptions(tp) != nil {
		t.Error("gRPC options for a no-op provider")
	}
	tracer := tp.Tracer("test")
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		_, span := tracer.Start(ctx, "ferry.fetch")
		if span.IsRecording() {
			t.Fatal("no-op span records")
		}
		span.End()
	})
	// The one allocation is the context that Start returns (the API gives a
	// no-op tracer no way around it); see BenchmarkSpanStart.
	if allocs > 1 {
		t.Errorf("%v allocations per no-op span, want at most 1", allocs)
	}
	if err := shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

func TestSetupBadEnvironment(t *testing.T) {
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "not-a-pair")
	_, _, err := Setup(context.Background(), Config{Endpoint: "127.0.0.1:1", Insecure: true}, "ferry-test")
	if err == nil || !strings.Contains(err.Error(), "tracing resource") {
		t.Fatalf("err = %v, want a resource error", err)
	}
}

// TestSampler: new traces at the ratio, spans with a parent as the parent
// decided, so a record its producer sampled is traced at any ratio.
func TestSampler(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler(0)), sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	tracer := tp.Tracer("test")
	ctx := context.Background()

	if _, span := tracer.Start(ctx, "root"); span.IsRecording() {
		t.Error("ratio 0 sampled a new trace")
	}
	sampled := remoteContext(t)
	if _, span := tracer.Start(trace.ContextWithRemoteSpanContext(ctx, sampled), "child"); !span.IsRecording() {
		t.Error("ratio 0 dropped a child of a sampled record")
	}
	unsampled := sampled.WithTraceFlags(0)
	if _, span := tracer.Start(trace.ContextWithRemoteSpanContext(ctx, unsampled), "child"); span.IsRecording() {
		t.Error("child of an unsampled record sampled")
	}

	all := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler(1)))
	defer all.Shutdown(ctx)
	if _, span := all.Tracer("test").Start(ctx, "root"); !span.IsRecording() {
		t.Error("ratio 1 did not sample a new trace")
	}
}

// echoStream answers a Replicate stream's Open, then each batch with an
// ack, and reports the span context its stream's context holds.
type echoStream struct {
	ferryv1.UnimplementedReplicationServiceServer
	got chan trace.SpanContext
}

func (e *echoStream) Replicate(stream ferryv1.ReplicationService_ReplicateServer) error {
	e.got <- trace.SpanContextFromContext(stream.Context())
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		resp := &ferryv1.ReplicateResponse{Msg: &ferryv1.ReplicateResponse_Ack{Ack: &ferryv1.Ack{Sequence: req.GetBatch().GetSequence()}}}
		if req.GetOpen() != nil {
			resp = &ferryv1.ReplicateResponse{Msg: &ferryv1.ReplicateResponse_Opened{Opened: &ferryv1.Opened{Writer: "w"}}}
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// TestGRPCOptions runs a Replicate stream through the otelgrpc handlers:
// the stream has a client and a server span, the server's the client's
// child (trace context crossed in the metadata), each side's stream context
// holds its span, the spans hold no event per message, and health checks
// make no span.
func TestGRPCOptions(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	if !Enabled(tp) {
		t.Fatal("Enabled(sdk provider) = false")
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(ServerOptions(tp)...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	echo := &echoStream{got: make(chan trace.SpanContext, 1)}
	ferryv1.RegisterReplicationServiceServer(srv, echo)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	defer func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()

	conn, err := grpc.NewClient(l.Addr().String(), append(DialOptions(tp), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}

	const batches = 300
	stream, err := ferryv1.NewReplicationServiceClient(conn).Replicate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Open{Open: &ferryv1.Open{Link: "l"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	clientCtx := trace.SpanContextFromContext(stream.Context())
	for i := range batches {
		if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Batch{Batch: &ferryv1.Batch{Sequence: uint64(i + 1)}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("end of stream: %v", err)
	}
	serverCtx := <-echo.got

	// The server span ends after the status is written, a moment after
	// the client has it.
	deadline := time.Now().Add(5 * time.Second)
	for len(rec.Ended()) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // room for a wrong third span to show
	var client, server sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.SpanKind() {
		case trace.SpanKindClient:
			client = s
		case trace.SpanKindServer:
			server = s
		}
		if strings.Contains(s.Name(), "Health") {
			t.Errorf("health check traced: %s", s.Name())
		}
		if n := len(s.Events()); n != 0 {
			t.Errorf("%s has %d events, want none (no event per message)", s.Name(), n)
		}
	}
	if client == nil || server == nil || len(rec.Ended()) != 2 {
		t.Fatalf("spans = %d, want a client and a server span", len(rec.Ended()))
	}
	if server.Parent().SpanID() != client.SpanContext().SpanID() || server.SpanContext().TraceID() != client.SpanContext().TraceID() {
		t.Errorf("server span parent %v, want client span %v", server.Parent(), client.SpanContext())
	}
	if client.Name() != "ferry.v1.ReplicationService/Replicate" {
		t.Errorf("client span name %q", client.Name())
	}
	if !clientCtx.Equal(client.SpanContext()) {
		t.Errorf("client stream context holds %v, want the client span %v", clientCtx, client.SpanContext())
	}
	if !serverCtx.Equal(server.SpanContext()) {
		t.Errorf("server stream context holds %v, want the server span %v", serverCtx, server.SpanContext())
	}
}

// TestSetupExportsToJaeger sends spans through Setup's provider to the real
// Jaeger and reads them back from its query API: resource, attributes, a
// parent taken from a record's traceparent (CHILD_OF) and a span link
// (FOLLOWS_FROM). It fails, never skips, when Jaeger cannot be built.
func TestSetupExportsToJaeger(t *testing.T) {
	bin, err := jaegeragent.Binary()
	if err != nil {
		t.Fatalf("jaeger binary: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	logFile := filepath.Join(t.TempDir(), "jaeger.log")
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("jaeger log:\n%s", b)
		}
	})
	agent, err := jaegeragent.Start(ctx, jaegeragent.Options{Binary: bin, LogFile: logFile})
	if err != nil {
		t.Fatalf("start jaeger: %v", err)
	}
	defer agent.Kill()

	cfg := DefaultConfig()
	cfg.Endpoint = agent.OTLPGRPCAddr()
	cfg.SamplingRatio = 1
	cfg.ResourceAttributes = map[string]string{"region": "eu-test-1"}
	var problems config.Problems
	cfg.Validate("tracing", &problems)
	if err := problems.Err(); err != nil {
		t.Fatal(err)
	}
	tp, shutdown, err := Setup(ctx, cfg, "ferry-fetcher", attribute.String("ferry.instance", "f1"))
	if err != nil {
		t.Fatal(err)
	}
	// Shutdown runs before the agent stops even on failure: Jaeger waits
	// for open OTLP connections when it stops.
	shutdownOnce := func() error {
		err := shutdown(context.Background())
		shutdown = func(context.Context) error { return nil }
		return err
	}
	defer shutdownOnce()

	// A record whose producer traced it, and one from another trace.
	producer := remoteContext(t)
	record := []recordbatch.Header{{Key: TraceparentHeader, Value: []byte(FormatTraceparent(producer))}}
	other := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0xbb, 1}, SpanID: trace.SpanID{0xbb, 2}, TraceFlags: trace.FlagsSampled, Remote: true})

	tracer := tp.Tracer("github.com/ferry-replicator/ferry/pkg/tracing")
	// A batch span: a root of its own, linked to the record contexts.
	bctx, batchSpan := tracer.Start(ctx, "ferry.fetch",
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithLinks(trace.Link{SpanContext: other}))
	if !batchSpan.IsRecording() {
		t.Fatal("ratio 1 span not recording")
	}
	batchSpan.SetAttributes(Batch("orders", 3, 100, 149, 50, 51200)...)
	batchSpan.SetAttributes(LinkName("east-to-west"), Shard(7), Epoch(2), CompressedBytes(9000))
	_, send := tracer.Start(bctx, "ferry.send")
	send.End()
	batchSpan.End()
	// A record span: the child of the producer's span, in the producer's trace.
	_, recSpan := tracer.Start(trace.ContextWithRemoteSpanContext(ctx, RecordSpanContext(record)), "ferry.fetch record",
		trace.WithAttributes(Kafka(), Topic("orders"), Partition(3), Offset(120), BodySize(1024)))
	recSpan.End()

	// Flush now rather than wait for the batch processor's interval.
	if err := shutdownOnce(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}

	got, err := agent.WaitTrace(ctx, batchSpan.SpanContext().TraceID().String(), 2)
	if err != nil {
		t.Fatal(err)
	}
	fetch, ok := got.SpanByName("ferry.fetch")
	if !ok {
		t.Fatalf("no ferry.fetch span in %+v", got)
	}
	if fetch.Process.ServiceName != "ferry-fetcher" {
		t.Errorf("service = %q", fetch.Process.ServiceName)
	}
	for k, want := range map[string]any{"region": "eu-test-1", "ferry.instance": "f1"} {
		if v, ok := fetch.Process.Tag(k); !ok || v != want {
			t.Errorf("resource %s = %v, want %v", k, v, want)
		}
	}
	for k, want := range map[string]any{
		"messaging.system":                   "kafka",
		"messaging.destination.name":         "orders",
		"messaging.destination.partition.id": "3",
		"messaging.kafka.offset":             float64(100),
		"ferry.batch.last_offset":            float64(149),
		"messaging.batch.message_count":      float64(50),
		"ferry.batch.bytes":                  float64(51200),
		"ferry.batch.compressed_bytes":       float64(9000),
		"ferry.link":                         "east-to-west",
		"ferry.shard":                        float64(7),
		"ferry.epoch":                        float64(2),
	} {
		if v, ok := fetch.Tag(k); !ok || v != want {
			t.Errorf("tag %s = %v (%T), want %v", k, v, v, want)
		}
	}
	var linked bool
	for _, r := range fetch.References {
		if r.RefType == "FOLLOWS_FROM" && r.TraceID == other.TraceID().String() && r.SpanID == other.SpanID().String() {
			linked = true
		}
	}
	if !linked {
		t.Errorf("ferry.fetch references = %+v, want FOLLOWS_FROM %s", fetch.References, other.SpanID())
	}
	sendSpan, ok := got.SpanByName("ferry.send")
	if ref, isChild := sendSpan.Parent(); !ok || !isChild || ref.SpanID != fetch.SpanID {
		t.Errorf("ferry.send = %+v, want a child of ferry.fetch", sendSpan)
	}

	// The record span joined the producer's trace.
	rt, err := agent.WaitTrace(ctx, producer.TraceID().String(), 1)
	if err != nil {
		t.Fatal(err)
	}
	rs, ok := rt.SpanByName("ferry.fetch record")
	if !ok {
		t.Fatalf("no record span in the producer's trace: %+v", rt)
	}
	if ref, ok := rs.Parent(); !ok || ref.SpanID != producer.SpanID().String() {
		t.Errorf("record span references = %+v, want CHILD_OF %s", rs.References, producer.SpanID())
	}
	// The traceID with a leading zero digit came back padded.
	if rt.TraceID != "0a0102030405060708090a0b0c0d0e0f" {
		t.Errorf("trace ID = %q", rt.TraceID)
	}

	if err := agent.Stop(); err != nil {
		t.Errorf("stop jaeger: %v", err)
	}
}
