package tracing

import (
	"context"

	"github.com/IBM/sarama"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-replicator/ferry/pkg/batch"
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
// To read a span context, prefer ConsumerSpanContext, ProducerSpanContext
// and BatchSpanContext: they look for the traceparent key first and return
// without allocating when a record has none, the common case.

// ConsumerHeaderCarrier reads the headers of a record consumed with sarama
// (ConsumerMessage.Headers). It is read-only: Set does nothing, since a
// consumed record is never changed.
type ConsumerHeaderCarrier []*sarama.RecordHeader

var _ propagation.TextMapCarrier = ConsumerHeaderCarrier(nil)

// Get returns the value of the first header named key, or "".
func (c ConsumerHeaderCarrier) Get(key string) string {
	for _, h := range c {
		if h != nil && string(h.Key) == key {
			return string(h.Value)
		}
	}
	return ""
}

// Set does nothing: consumed records are read, never written.
func (c ConsumerHeaderCarrier) Set(string, string) {}

// Keys returns every header key, in order.
func (c ConsumerHeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for _, h := range c {
		if h != nil {
			keys = append(keys, string(h.Key))
		}
	}
	return keys
}

// ProducerHeaderCarrier carries the headers of a record to be produced with
// sarama (ProducerMessage.Headers): ProducerHeaderCarrier{&msg.Headers}.
type ProducerHeaderCarrier struct {
	Headers *[]sarama.RecordHeader
}

var _ propagation.TextMapCarrier = ProducerHeaderCarrier{}

// Get returns the value of the first header named key, or "".
func (c ProducerHeaderCarrier) Get(key string) string {
	for _, h := range *c.Headers {
		if string(h.Key) == key {
			return string(h.Value)
		}
	}
	return ""
}

// Set appends the header unless the record already has key or a
// traceparent: an existing trace context is never replaced.
func (c ProducerHeaderCarrier) Set(key, value string) {
	for _, h := range *c.Headers {
		if string(h.Key) == key || string(h.Key) == TraceparentHeader {
			return
		}
	}
	*c.Headers = append(*c.Headers, sarama.RecordHeader{Key: []byte(key), Value: []byte(value)})
}

// Keys returns every header key, in order.
func (c ProducerHeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(*c.Headers))
	for _, h := range *c.Headers {
		keys = append(keys, string(h.Key))
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

// ConsumerSpanContext returns the remote span context in a consumed record's
// traceparent (and tracestate) headers, or an invalid one when there is none
// or it does not parse. Without a traceparent header it does not allocate.
//
// Use it as a span link, trace.Link{SpanContext: sc}, or as the parent of a
// span for the record, trace.ContextWithRemoteSpanContext(ctx, sc).
func ConsumerSpanContext(hs []*sarama.RecordHeader) trace.SpanContext {
	for _, h := range hs {
		if h != nil && string(h.Key) == TraceparentHeader {
			return extract(ConsumerHeaderCarrier(hs))
		}
	}
	return trace.SpanContext{}
}

// ProducerSpanContext is ConsumerSpanContext for a record to be produced.
func ProducerSpanContext(hs []sarama.RecordHeader) trace.SpanContext {
	for _, h := range hs {
		if string(h.Key) == TraceparentHeader {
			// A copy declared here, so that only this path moves it to the heap
			// (the carrier needs its address).
			hs := hs
			return extract(ProducerHeaderCarrier{&hs})
		}
	}
	return trace.SpanContext{}
}

// BatchSpanContext is ConsumerSpanContext for a record of a Ferry batch.
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
