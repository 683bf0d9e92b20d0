package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-replicator/ferry/loadtest/jaegeragent"
	"github.com/ferry-replicator/ferry/pkg/tracing"
)

func startJaeger(t *testing.T) *jaegeragent.Agent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute) // a cold build is slow
	defer cancel()
	agent, err := jaegeragent.Start(ctx, jaegeragent.Options{})
	if err != nil {
		t.Fatalf("start Jaeger: %v", err)
	}
	t.Cleanup(func() { _ = agent.Stop() })
	return agent
}

func tracingConfig(agent *jaegeragent.Agent, ratio float64) map[string]any {
	return map[string]any{"tracing": map[string]any{"endpoint": agent.OTLPGRPCAddr(), "insecure": true, "sampling_ratio": ratio}}
}

// produceTraced writes one record inside a producer span of service
// "test-producer", plus untraced records, and returns the record's
// traceparent.
func produceTraced(t *testing.T, e *env, agent *jaegeragent.Agent, topic string, sampled bool) string {
	t.Helper()
	ctx := context.Background()
	cfg := tracing.DefaultConfig()
	cfg.Endpoint, cfg.SamplingRatio = agent.OTLPGRPCAddr(), 1
	tp, shutdown, err := tracing.Setup(ctx, cfg, "test-producer")
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("test").Start(ctx, "produce", trace.WithSpanKind(trace.SpanKindProducer))
	sc := span.SpanContext()
	if !sampled {
		sc = sc.WithTraceFlags(0)
	}
	tpHeader := tracing.FormatTraceparent(sc)
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.src...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	recs := []*kgo.Record{{Topic: topic, Key: []byte("traced"), Value: []byte("hello"), Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte(tpHeader)}}}}
	for i := range 50 {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(i % 2), Value: []byte("plain-" + strconv.Itoa(i))}) // unique, as the verifier needs
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	span.End()
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	return tpHeader
}

// TestTraceCrossesFetcherAndWriter: a record produced inside a trace keeps
// its traceparent byte for byte on the target, and one Jaeger trace shows
// the producer, ferry-fetcher, ferry-writer and the target consumer.
func TestTraceCrossesFetcherAndWriter(t *testing.T) {
	ctx := context.Background()
	agent := startJaeger(t)
	e := newEnv(t)
	e.writerExtra, e.fetcherExtra = tracingConfig(agent, 1), tracingConfig(agent, 1)
	e.createTopic("t.traced", 2, nil)
	e.startWriter()
	e.startFetcher(nil)
	header := produceTraced(t, e, agent, "t.traced", true)
	e.waitFor(ctx, "src.t.traced", 51)
	if res := e.verify(ctx, "t.traced"); !res.OK() || res.Produced != 51 {
		t.Fatalf("replication: %+v", res)
	}

	// The target consumer finds the header unchanged and continues the trace.
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.dst...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"src.t.traced": {0: kgo.NewOffset().AtStart(), 1: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []byte
	for deadline := time.Now().Add(30 * time.Second); got == nil; {
		if time.Now().After(deadline) {
			t.Fatal("the traced record never reached the target")
		}
		fctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(fctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == "traceparent" {
					got = h.Value
				}
			}
		})
	}
	if !bytes.Equal(got, []byte(header)) {
		t.Fatalf("traceparent on the target is %q, the source had %q", got, header)
	}
	cfg := tracing.DefaultConfig()
	cfg.Endpoint, cfg.SamplingRatio = agent.OTLPGRPCAddr(), 1
	tp, shutdown, err := tracing.Setup(ctx, cfg, "test-consumer")
	if err != nil {
		t.Fatal(err)
	}
	sc := tracing.ParseTraceparent(string(got))
	_, cspan := tp.Tracer("test").Start(trace.ContextWithRemoteSpanContext(ctx, sc), "consume", trace.WithSpanKind(trace.SpanKindConsumer))
	cspan.End()
	_ = shutdown(ctx)

	// The latency histogram carries the record's trace id as an exemplar.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.writerAdmin+"/metrics", nil)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `trace_id="`+sc.TraceID().String()+`"`) {
		t.Errorf("no exemplar with trace_id %s on the writer's metrics", sc.TraceID())
	}

	// Ferry's services export in batches every few seconds.
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	traceID := sc.TraceID().String()
	tr, err := agent.WaitTrace(wctx, traceID, 4)
	if err != nil {
		t.Fatalf("trace %s: %v", traceID, err)
	}
	producer := sc.SpanID().String()
	want := map[string]string{"ferry.fetch": "ferry-fetcher", "ferry.write": "ferry-writer", "consume": "test-consumer"}
	var fetchStart, writeStart time.Time
	for op, service := range want {
		s, ok := tr.SpanByName(op)
		if !ok {
			t.Fatalf("trace has no %s span; it has %v", op, names(tr))
		}
		if s.Process.ServiceName != service {
			t.Errorf("%s reported by %q, want %q", op, s.Process.ServiceName, service)
		}
		if p, ok := s.Parent(); !ok || p.SpanID != producer {
			t.Errorf("%s parent = %+v, want the producer span %s", op, p, producer)
		}
		if d := s.Elapsed(); d < 0 || d > time.Minute {
			t.Errorf("%s lasted %v", op, d)
		}
		switch op {
		case "ferry.fetch":
			fetchStart = s.Start()
		case "ferry.write":
			writeStart = s.Start()
		}
	}
	if writeStart.Before(fetchStart.Add(-time.Second)) {
		t.Errorf("write span starts at %v, before the fetch span at %v", writeStart, fetchStart)
	}

	// The batch that carried the record: a fetcher batch span linked to the
	// record, and the writer's produce span as its child.
	traces, err := agent.FindTraces(wctx, "ferry-writer", time.Hour, 50)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, bt := range traces {
		b, ok := bt.SpanByName("ferry.batch")
		if !ok {
			continue
		}
		linked := false
		for _, r := range b.References {
			if r.RefType == "FOLLOWS_FROM" && r.SpanID == producer {
				linked = true
			}
		}
		p, ok := bt.SpanByName("ferry.produce")
		if linked && ok {
			if parent, _ := p.Parent(); parent.SpanID == b.SpanID {
				found = true
			}
		}
	}
	if !found {
		t.Fatal("no batch trace with a ferry.batch span linked to the record and a ferry.produce child")
	}
}

// TestUnsampledTrafficCreatesNoSpans: with sampling at 0 and records whose
// traceparent is not sampled, Ferry exports nothing.
func TestUnsampledTrafficCreatesNoSpans(t *testing.T) {
	ctx := context.Background()
	agent := startJaeger(t)
	e := newEnv(t)
	e.writerExtra, e.fetcherExtra = tracingConfig(agent, 0), tracingConfig(agent, 0)
	e.createTopic("t.quiet", 2, nil)
	e.startWriter()
	e.startFetcher(nil)
	produceTraced(t, e, agent, "t.quiet", false)
	e.waitFor(ctx, "src.t.quiet", 51)
	if res := e.verify(ctx, "t.quiet"); !res.OK() || res.Produced != 51 {
		t.Fatalf("replication: %+v", res)
	}
	// Stopping the services flushes anything they might have queued.
	e.stop(e.fetcher)
	e.stop(e.writer)
	services, err := agent.Services(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range services {
		if strings.HasPrefix(s, "ferry-") {
			t.Fatalf("unsampled traffic produced spans from %s (services: %v)", s, services)
		}
	}
}

func names(t jaegeragent.Trace) []string {
	var out []string
	for _, s := range t.Spans {
		out = append(out, s.Process.ServiceName+"/"+s.OperationName)
	}
	return out
}
