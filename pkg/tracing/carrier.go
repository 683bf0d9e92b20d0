package tracing

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-replicator/ferry/pkg/batch"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
)

// The W3C Trace Context header names. Kafka header keys are case-sensitive
// bytes and every OTel Kafka instrumentation writes them in lower case, so
// only these exact spellings are read.
const (
	TraceparentHeader = "traceparent"
	TracestateHeader  = "tracestate"
)

// Carriers adapt Kafka record headers to propagation.TextMapCarrier. A record
// may hold a key twice; Get returns the first.
//
// None of them ever replaces a header: Set adds a header only when the
// record has neither that key nor a traceparent, so the trace context a
// source record arrived with reaches the target byte for byte, and a
// tracestate is never paired with someone else's traceparent. Ferry itself
// only reads trace headers; Set exists for records Ferry makes (load tests,
// probes).
//
// To read a span context, prefer RecordSpanContext and BatchSpanContext:
// they look for the traceparent key first and return without allocating
// when a record has none, the common case.

// RecordHeaderCarrier reads the headers of a record decoded from a Kafka
// record batch (recordbatch.Records), as the fetcher decodes the source's
// batches it traces. It is read-only: Set does nothing, since a source
// record is never changed.
type RecordHeaderCarrier []recordbatch.Header

var _ propagation.TextMapCarrier = RecordHeaderCarrier(nil)

// Get returns the value of the first header named key, or "".
func (c RecordHeaderCarrier) Get(key string) string {
	for _, h := range c {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Set does nothing: source records are read, never written.
func (c RecordHeaderCarrier) Set(string, string) {}

// Keys returns every header key, in order.
func (c RecordHeaderCarrier) Keys() []string {
	keys := make([]string, len(c))
	for i, h := range c {
		keys[i] = h.Key
	}
	return keys
}

// BatchHeaderCarrier carries the headers of a record in a Ferry batch
// (batch.Record's headers): BatchHeaderCarrier{&headers}.
type BatchHeaderCarrier struct {
	Headers *[]batch.Header
}

var _ propagation.TextMapCarrier = BatchHeaderCarrier{}

// Get returns the value of the first header named key, or "".
func (c BatchHeaderCarrier) Get(key string) string {
	for _, h := range *c.Headers {
		if string(h.Key) == key {
			return string(h.Value)
		}
	}
	return ""
}

// Set appends the header unless the record already has key or a
// traceparent: an existing trace context is never replaced.
func (c BatchHeaderCarrier) Set(key, value string) {
	for _, h := range *c.Headers {
		if string(h.Key) == key || string(h.Key) == TraceparentHeader {
			return
		}
	}
	*c.Headers = append(*c.Headers, batch.Header{Key: []byte(key), Value: []byte(value)})
}

// Keys returns every header key, in order.
func (c BatchHeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(*c.Headers))
	for _, h := range *c.Headers {
		keys = append(keys, string(h.Key))
	}
	return keys
}

// RecordSpanContext returns the remote span context in a decoded record's
// traceparent (and tracestate) headers, or an invalid one when there is none
// or it does not parse. Without a traceparent header it does not allocate.
//
// Use it as a span link, trace.Link{SpanContext: sc}, or as the parent of a
// span for the record, trace.ContextWithRemoteSpanContext(ctx, sc).
func RecordSpanContext(hs []recordbatch.Header) trace.SpanContext {
	for _, h := range hs {
		if h.Key == TraceparentHeader {
			return extract(RecordHeaderCarrier(hs))
		}
	}
	return trace.SpanContext{}
}

// BatchSpanContext is RecordSpanContext for a record of a Ferry batch.
func BatchSpanContext(hs []batch.Header) trace.SpanContext {
	for _, h := range hs {
		if string(h.Key) == TraceparentHeader {
			// A copy declared here, so that only this path moves it to the heap
			// (the carrier needs its address).
			hs := hs
			return extract(BatchHeaderCarrier{&hs})
		}
	}
	return trace.SpanContext{}
}

func extract(c propagation.TextMapCarrier) trace.SpanContext {
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), c))
}

// FormatTraceparent returns sc as a W3C traceparent value, or "" when sc is
// not valid. It is meant for a single message field, such as a batch's trace
// context on the gRPC stream; the tracestate is not carried.
func FormatTraceparent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	var f field
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), &f)
	return f.traceparent
}

// ParseTraceparent returns the remote span context in a traceparent value,
// or an invalid one when s is empty or malformed.
func ParseTraceparent(s string) trace.SpanContext {
	if s == "" {
		return trace.SpanContext{}
	}
	return extract(&field{traceparent: s})
}

// field is a carrier of a traceparent alone.
type field struct{ traceparent string }

func (f *field) Get(key string) string {
	if key == TraceparentHeader {
		return f.traceparent
	}
	return ""
}

func (f *field) Set(key, value string) {
	if key == TraceparentHeader {
		f.traceparent = value
	}
}

func (f *field) Keys() []string { return []string{TraceparentHeader} }
