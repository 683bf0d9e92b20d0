package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-replicator/ferry/loadtest/jaegeragent"
	"github.com/ferry-replicator/ferry/loadtest/workload"
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
// the producer, ferry-fetcher, ferry-writer and the target consumer. The
// batch that carried it has a trace of its stages, and the stream a client
// and a server span, in both delivery modes.
func TestTraceCrossesFetcherAndWriter(t *testing.T) {
	agent := startJaeger(t)
	for _, delivery := range []string{"at_least_once", "exactly_once"} {
		t.Run(delivery, func(t *testing.T) { traceCrossesFetcherAndWriter(t, agent, delivery) })
	}
}

func traceCrossesFetcherAndWriter(t *testing.T, agent *jaegeragent.Agent, delivery string) {
	ctx := context.Background()
	e := newEnv(t)
	e.delivery = delivery
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

	// A stream's spans end with the stream: stop the fetcher (it drains and
	// closes its streams), then the writer; each flushes its spans on exit.
	e.stop(e.fetcher)
	e.stop(e.writer)

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

	bt := batchTraceOf(t, wctx, agent, producer)
	checkBatchTrace(t, bt, producer, delivery)
	checkStreamTrace(t, wctx, agent, bt)
}

// batchTraceOf finds the trace of the batch that carried the record whose
// producer span is producer: its ferry.batch span links to that span.
func batchTraceOf(t *testing.T, ctx context.Context, agent *jaegeragent.Agent, producer string) jaegeragent.Trace {
	t.Helper()
	for {
		traces, err := agent.FindTraces(ctx, "ferry-fetcher", time.Hour, 500)
		if err != nil {
			t.Fatal(err)
		}
		for _, bt := range traces {
			b, ok := bt.SpanByName("ferry.batch")
			if !ok {
				continue
			}
			for _, r := range b.References {
				if r.RefType == "FOLLOWS_FROM" && r.SpanID == producer {
					return bt
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no batch trace with a ferry.batch span linked to the record's span %s (%d traces)", producer, len(traces))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// checkBatchTrace checks a batch's trace: the fetcher's ferry.batch is its
// root, with the fetch, encode and send stages as children; the writer's
// receive is the batch span's child (its context crossed in the Batch
// message), produce the receive's, commit the produce's; each stage starts
// after the one before, and the spans carry the messaging attributes.
func checkBatchTrace(t *testing.T, bt jaegeragent.Trace, producer, delivery string) {
	t.Helper()
	span := func(op, service string) jaegeragent.Span {
		t.Helper()
		var found []jaegeragent.Span
		for _, s := range bt.Spans {
			if s.OperationName == op {
				found = append(found, s)
			}
		}
		if len(found) != 1 {
			t.Fatalf("batch trace has %d %s spans, want 1; it has %v", len(found), op, names(bt))
		}
		if found[0].Process.ServiceName != service {
			t.Errorf("%s reported by %q, want %q", op, found[0].Process.ServiceName, service)
		}
		return found[0]
	}
	childOf := func(child, parent jaegeragent.Span) {
		t.Helper()
		if p, ok := child.Parent(); !ok || p.SpanID != parent.SpanID {
			t.Errorf("%s parent = %+v, want %s (%s)", child.OperationName, p, parent.OperationName, parent.SpanID)
		}
		// Both ends are on this host's clock; Jaeger keeps microseconds.
		if child.Start().Before(parent.Start().Add(-time.Millisecond)) {
			t.Errorf("%s starts at %v, before %s at %v", child.OperationName, child.Start(), parent.OperationName, parent.Start())
		}
	}
	after := func(later, earlier jaegeragent.Span) {
		t.Helper()
		if later.Start().Before(earlier.Start()) {
			t.Errorf("%s starts at %v, before %s at %v", later.OperationName, later.Start(), earlier.OperationName, earlier.Start())
		}
	}
	tags := func(s jaegeragent.Span, want map[string]any) {
		t.Helper()
		for k, w := range want {
			if v, ok := s.Tag(k); !ok || (w != nil && v != w) {
				t.Errorf("%s tag %s = %v (%T), want %v", s.OperationName, k, v, v, w)
			}
		}
	}

	batch := span("ferry.batch", "ferry-fetcher")
	fetch := span("ferry.fetch", "ferry-fetcher")
	encode := span("ferry.encode", "ferry-fetcher")
	send := span("ferry.send", "ferry-fetcher")
	receive := span("ferry.receive", "ferry-writer")
	produce := span("ferry.produce", "ferry-writer")
	commit := span("ferry.commit", "ferry-writer")

	if p, ok := batch.Parent(); ok {
		t.Errorf("ferry.batch has a parent %+v, want a root", p)
	}
	childOf(fetch, batch)
	childOf(encode, batch)
	childOf(send, batch)
	childOf(receive, batch)
	childOf(produce, receive)
	childOf(commit, produce)
	after(encode, fetch)
	after(send, encode)
	after(receive, send)

	count, _ := batch.Tag("messaging.batch.message_count")
	if n, ok := count.(float64); !ok || n < 1 {
		t.Errorf("ferry.batch message count %v", count)
	}
	shard := map[string]any{"ferry.link": "test", "ferry.shard": nil, "ferry.epoch": nil}
	source := map[string]any{"messaging.system": "kafka", "messaging.destination.name": "t.traced", "messaging.destination.partition.id": nil,
		"messaging.kafka.offset": nil, "ferry.batch.last_offset": nil}
	target := map[string]any{"messaging.system": "kafka", "messaging.destination.name": "src.t.traced", "messaging.destination.partition.id": nil}
	for _, s := range []jaegeragent.Span{batch, send, receive, produce, commit} {
		tags(s, shard)
	}
	for _, s := range []jaegeragent.Span{batch, fetch, send, receive} {
		tags(s, source)
	}
	for _, s := range []jaegeragent.Span{produce, commit} {
		tags(s, target)
		tags(s, map[string]any{"ferry.delivery": delivery})
	}
	tags(batch, map[string]any{"span.kind": "producer", "messaging.operation.type": "create"})
	tags(fetch, map[string]any{"span.kind": "consumer", "messaging.operation.type": "receive", "messaging.batch.message_count": count})
	tags(encode, map[string]any{"messaging.batch.message_count": count, "ferry.batch.bytes": nil, "ferry.batch.compressed_bytes": nil, "ferry.batch.codec": nil})
	tags(send, map[string]any{"span.kind": "client", "ferry.batch.sequence": nil, "ferry.batch.compressed_bytes": nil})
	tags(receive, map[string]any{"span.kind": "server", "messaging.operation.type": "receive", "messaging.batch.message_count": count, "ferry.batch.sequence": nil})
	tags(produce, map[string]any{"span.kind": "producer", "messaging.operation.type": "send", "messaging.batch.message_count": count, "ferry.batch.bytes": nil})
	tags(commit, map[string]any{"span.kind": "client", "messaging.operation.type": "settle"})
	if seq, _ := send.Tag("ferry.batch.sequence"); seq != mustTag(t, receive, "ferry.batch.sequence") {
		t.Errorf("ferry.send sequence %v, ferry.receive %v", seq, mustTag(t, receive, "ferry.batch.sequence"))
	}
	// The batch span is linked to the record's span, as before.
	linked := false
	for _, r := range batch.References {
		linked = linked || (r.RefType == "FOLLOWS_FROM" && r.SpanID == producer)
	}
	if !linked {
		t.Errorf("ferry.batch references %+v, want FOLLOWS_FROM %s", batch.References, producer)
	}
}

// checkStreamTrace follows the links of the batch's send and receive spans
// to their stream: an otelgrpc client span of ferry-fetcher for the
// Replicate call, and a server span of ferry-writer, its child, so the
// trace context crossed in the stream's gRPC metadata.
func checkStreamTrace(t *testing.T, ctx context.Context, agent *jaegeragent.Agent, bt jaegeragent.Trace) {
	t.Helper()
	const method = "ferry.v1.ReplicationService/Replicate"
	link := func(op string) jaegeragent.Reference {
		t.Helper()
		s, _ := bt.SpanByName(op)
		for _, r := range s.References {
			if r.RefType == "FOLLOWS_FROM" && r.TraceID != bt.TraceID {
				return r
			}
		}
		t.Fatalf("%s has no link to a stream span: %+v", op, s.References)
		return jaegeragent.Reference{}
	}
	toClient, toServer := link("ferry.send"), link("ferry.receive")
	if toClient.TraceID != toServer.TraceID {
		t.Fatalf("send links to trace %s, receive to %s: want one stream trace", toClient.TraceID, toServer.TraceID)
	}
	st, err := agent.WaitTrace(ctx, toClient.TraceID, 2)
	if err != nil {
		t.Fatalf("stream trace: %v", err)
	}
	var client, server jaegeragent.Span
	for _, s := range st.Spans {
		switch s.SpanID {
		case toClient.SpanID:
			client = s
		case toServer.SpanID:
			server = s
		}
	}
	if client.SpanID == "" || server.SpanID == "" {
		t.Fatalf("stream trace %s lacks the linked spans %s and %s: %v", st.TraceID, toClient.SpanID, toServer.SpanID, names(st))
	}
	for _, c := range []struct {
		s             jaegeragent.Span
		service, kind string
	}{{client, "ferry-fetcher", "client"}, {server, "ferry-writer", "server"}} {
		if c.s.OperationName != method || c.s.Process.ServiceName != c.service {
			t.Errorf("stream span %s of %s, want %s of %s", c.s.OperationName, c.s.Process.ServiceName, method, c.service)
		}
		if k, _ := c.s.Tag("span.kind"); k != c.kind {
			t.Errorf("%s stream span kind %v", c.service, k)
		}
		for k, want := range map[string]any{"ferry.link": "test", "ferry.fetcher": "fetcher-1", "rpc.system.name": "grpc"} {
			if v, ok := c.s.Tag(k); !ok || v != want {
				t.Errorf("%s stream span tag %s = %v, want %v", c.service, k, v, want)
			}
		}
	}
	if p, ok := server.Parent(); !ok || p.SpanID != client.SpanID {
		t.Errorf("writer's stream span parent = %+v, want the fetcher's client span %s", p, client.SpanID)
	}
	if p, ok := client.Parent(); ok {
		t.Errorf("fetcher's stream span has a parent %+v, want a root", p)
	}
}

func mustTag(t *testing.T, s jaegeragent.Span, key string) any {
	t.Helper()
	v, ok := s.Tag(key)
	if !ok {
		t.Errorf("%s has no tag %s", s.OperationName, key)
	}
	return v
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

// TestFailedRoundIsTraced: when the target refuses a round (records above
// the writer's producer.max_message_bytes), each traced batch of it ends
// with an error ferry.produce span, a child of its ferry.receive, whose
// status names the failure; nothing is written and the batches are sent
// again (each attempt traced anew).
func TestFailedRoundIsTraced(t *testing.T) {
	agent := startJaeger(t)
	for _, delivery := range []string{"at_least_once", "exactly_once"} {
		t.Run(delivery, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			e.delivery = delivery
			e.writerExtra = tracingConfig(agent, 1)
			e.fetcherExtra = tracingConfig(agent, 1)
			topic := "t.refused-" + strings.ReplaceAll(delivery, "_", "-")
			// The target refuses every produce to the topic, at the exact
			// request, with an error no retry cures: each round fails.
			failProduce(e, "src."+topic, kerr.InvalidRecord)
			e.createTopic(topic, 1, nil)
			e.produce(ctx, workload.Options{Topic: topic, Partitions: 1, Records: 5, ValueBytes: 400, Seed: 9})
			e.startWriter()
			e.startFetcher(nil)

			wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
			defer cancel()
			for {
				traces, err := agent.FindTraces(wctx, "ferry-writer", time.Hour, 200)
				if err != nil {
					t.Fatal(err)
				}
				if checkFailedProduce(t, traces, "src."+topic) {
					break
				}
				select {
				case <-wctx.Done():
					t.Fatalf("no failed ferry.produce span for src.%s in %d writer traces", topic, len(traces))
				case <-time.After(500 * time.Millisecond):
				}
			}
			if n := e.targetRecords(ctx, "src."+topic); n != 0 {
				t.Fatalf("the refused round wrote %d records", n)
			}
		})
	}
}

// failProduce makes the in-process target answer every produce request
// that writes topic with code on each of the request's partitions.
func failProduce(e *env, topic string, code *kerr.Error) {
	e.dstCluster.ControlKey(kmsg.Produce.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		e.dstCluster.KeepControl()
		req := kreq.(*kmsg.ProduceRequest)
		if !slices.ContainsFunc(req.Topics, func(t kmsg.ProduceRequestTopic) bool { return t.Topic == topic }) {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, code.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

// checkFailedProduce reports whether one of traces holds an error
// ferry.produce span for topic, checking its parent and status when so.
func checkFailedProduce(t *testing.T, traces []jaegeragent.Trace, topic string) bool {
	t.Helper()
	for _, tr := range traces {
		for _, s := range tr.Spans {
			if s.OperationName != "ferry.produce" {
				continue
			}
			if dest, _ := s.Tag("messaging.destination.name"); dest != topic {
				continue
			}
			if code, _ := s.Tag("otel.status_code"); code != "ERROR" {
				t.Fatalf("ferry.produce for %s has status %v, want ERROR (the round failed)", topic, code)
			}
			if desc, _ := s.Tag("otel.status_description"); !strings.Contains(fmt.Sprint(desc), "produce") {
				t.Errorf("ferry.produce status description %q does not name the failed produce", desc)
			}
			p, ok := s.Parent()
			if !ok {
				t.Fatalf("failed ferry.produce has no parent")
			}
			for _, q := range tr.Spans {
				if q.SpanID == p.SpanID && q.OperationName != "ferry.receive" {
					t.Errorf("failed ferry.produce's parent is %s, want ferry.receive", q.OperationName)
				}
			}
			return true
		}
	}
	return false
}
