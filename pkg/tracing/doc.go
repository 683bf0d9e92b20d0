// Package tracing holds Ferry's OpenTelemetry building blocks: the tracing
// section of a service's configuration, Setup of a tracer provider that
// exports over OTLP gRPC (or a no-op one when tracing is off), carriers that
// read W3C trace context from Kafka record headers, and span attributes
// after the OTel messaging semantic conventions.
//
// Nothing here sets the global tracer provider or propagator: a service
// passes what Setup returns to the code that starts spans, so tests can run
// several providers side by side and nothing changes behind a caller's back.
//
// Ferry replicates records with their headers byte for byte. A source
// record's traceparent header belongs to its producer's trace; Ferry reads
// it (to link batch spans to it, or to parent a span for a sampled record),
// and never writes or rewrites it. The carriers enforce that: the record
// carrier is read-only, and the batch carrier never replaces a header that
// exists.
// See docs/tracing.md.
package tracing
