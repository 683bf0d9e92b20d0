package tracing

import (
	"bytes"
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-replicator/ferry/pkg/batch"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
)

// remoteContext is a sampled span context with a tracestate, as a producer's
// instrumentation would put on a record.
func remoteContext(t testing.TB) trace.SpanContext {
	t.Helper()
	ts, err := trace.ParseTraceState("vendor=abc")
	if err != nil {
		t.Fatal(err)
	}
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x0a, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
		SpanID:     trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
		TraceFlags: trace.FlagsSampled,
		TraceState: ts,
		Remote:     true,
	})
}

func inject(sc trace.SpanContext, c propagation.TextMapCarrier) {
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), c)
}

const wantTraceparent = "00-0a0102030405060708090a0b0c0d0e0f-0102030405060708-01"

func TestRecordCarrierRoundTrip(t *testing.T) {
	sc := remoteContext(t)
	produced := []batch.Header{{Key: []byte("app"), Value: []byte("x")}}
	inject(sc, BatchHeaderCarrier{&produced})
	// What the fetcher decodes from the source's batch: the same headers.
	var decoded []recordbatch.Header
	for _, h := range produced {
		decoded = append(decoded, recordbatch.Header{Key: string(h.Key), Value: h.Value})
	}
	if got := RecordSpanContext(decoded); !got.Equal(sc) {
		t.Errorf("extracted %v, want %v", got, sc)
	}
	c := RecordHeaderCarrier(decoded)
	if got := c.Get(TracestateHeader); got != "vendor=abc" {
		t.Errorf("tracestate = %q", got)
	}
	if got := c.Keys(); len(got) != 3 || got[0] != "app" {
		t.Errorf("keys = %q, want app, tracestate, traceparent", got)
	}
	// Through the generic propagator API too.
	ctx := propagation.TraceContext{}.Extract(context.Background(), c)
	if got := trace.SpanContextFromContext(ctx); !got.Equal(sc) {
		t.Errorf("propagator extracted %v, want %v", got, sc)
	}
	// Read-only: injecting another context changes nothing.
	other := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{9}, TraceFlags: trace.FlagsSampled})
	inject(other, c)
	if len(decoded) != 3 || c.Get(TraceparentHeader) != wantTraceparent {
		t.Errorf("record carrier was written: %v", c.Keys())
	}
}

func TestBatchCarrierRoundTrip(t *testing.T) {
	sc := remoteContext(t)
	hs := []batch.Header{{Key: []byte("app"), Value: []byte("x")}}
	inject(sc, BatchHeaderCarrier{&hs})
	if got := (BatchHeaderCarrier{&hs}).Get(TraceparentHeader); got != wantTraceparent {
		t.Fatalf("traceparent = %q, want %q", got, wantTraceparent)
	}
	if got := BatchSpanContext(hs); !got.Equal(sc) {
		t.Errorf("extracted %v, want %v", got, sc)
	}
	if got := (BatchHeaderCarrier{&hs}).Keys(); len(got) != 3 || got[0] != "app" {
		t.Errorf("keys = %q, want app, tracestate, traceparent", got)
	}
}

// TestCarriersNeverOverwrite: a record's traceparent must reach the target
// byte for byte, even one that is not valid W3C (another vendor's, upper
// case, extra fields), and no tracestate may be added beside it.
func TestCarriersNeverOverwrite(t *testing.T) {
	original := []byte("00-0A0102030405060708090A0B0C0D0E0F-0102030405060708-01-extra")
	other := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{9}, TraceFlags: trace.FlagsSampled, TraceState: mustTraceState(t, "k=v")})

	bh := []batch.Header{{Key: []byte(TraceparentHeader), Value: bytes.Clone(original)}}
	inject(other, BatchHeaderCarrier{&bh})
	if len(bh) != 1 || !bytes.Equal(bh[0].Value, original) {
		t.Errorf("batch headers changed: %q", bh)
	}
	// A key that exists is never replaced, trace header or not.
	bh = []batch.Header{{Key: []byte(TracestateHeader), Value: []byte("mine=1")}}
	BatchHeaderCarrier{&bh}.Set(TracestateHeader, "k=v")
	if len(bh) != 1 || string(bh[0].Value) != "mine=1" {
		t.Errorf("tracestate replaced: %q", bh)
	}
	// Such a traceparent is not one Ferry can parse: no span context, no
	// panic, and the header is still there untouched.
	if sc := BatchSpanContext([]batch.Header{{Key: []byte(TraceparentHeader), Value: original}}); sc.IsValid() {
		t.Errorf("parsed %v from a malformed traceparent", sc)
	}
}

func mustTraceState(t *testing.T, s string) trace.TraceState {
	ts, err := trace.ParseTraceState(s)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// TestExtractWithoutTraceparentDoesNotAllocate: most records carry no trace
// context, and the fetcher looks at every one.
func TestExtractWithoutTraceparentDoesNotAllocate(t *testing.T) {
	decoded := []recordbatch.Header{{Key: "content-type", Value: []byte("json")}, {Key: "tracestate", Value: []byte("a=b")}}
	batched := []batch.Header{{Key: []byte("content-type"), Value: []byte("json")}, {Key: []byte("traceparentx"), Value: []byte("x")}}
	allocs := testing.AllocsPerRun(1000, func() {
		if RecordSpanContext(decoded).IsValid() || RecordSpanContext(nil).IsValid() ||
			BatchSpanContext(batched).IsValid() || BatchSpanContext(nil).IsValid() {
			t.Fatal("span context from records without traceparent")
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per extract without traceparent, want 0", allocs)
	}
}

func TestTraceparentField(t *testing.T) {
	sc := remoteContext(t)
	s := FormatTraceparent(sc)
	if s != wantTraceparent {
		t.Fatalf("FormatTraceparent = %q, want %q", s, wantTraceparent)
	}
	got := ParseTraceparent(s)
	if got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsSampled() || !got.IsRemote() {
		t.Errorf("ParseTraceparent = %v, want %v", got, sc)
	}
	if FormatTraceparent(trace.SpanContext{}) != "" {
		t.Error("invalid span context formatted")
	}
	for _, bad := range []string{"", "garbage", "00-00000000000000000000000000000000-0102030405060708-01"} {
		if ParseTraceparent(bad).IsValid() {
			t.Errorf("ParseTraceparent(%q) is valid", bad)
		}
	}
}
