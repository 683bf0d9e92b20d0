// Package jaegeragent runs a real Jaeger (v2, built on the OpenTelemetry
// collector, from tools/jaeger) for tests and load tools, on free loopback
// ports, and reads traces back through its query API.
//
// The agent runs with a configuration of its own rather than Jaeger's
// built-in all-in-one one: that one listens on a dozen fixed ports (Jaeger
// and Zipkin receivers, remote sampling, health check, expvar, zpages,
// Prometheus metrics), which would clash between agents of parallel test
// packages. Ours opens only OTLP gRPC, OTLP HTTP and the query API (HTTP and
// gRPC), each on a free loopback port, and keeps traces in memory. Each agent
// runs in its own process group, and Stop and Kill signal the whole group, so
// no process outlives them.
package jaegeragent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ferry-replicator/ferry/loadtest/ports"
	"github.com/ferry-replicator/ferry/loadtest/procgroup"
	"github.com/ferry-replicator/ferry/loadtest/toolbin"
)

// Defaults for Options.
const (
	DefaultMaxTraces    = 100000
	DefaultStartTimeout = 60 * time.Second
	// Jaeger stops within milliseconds with this package's configuration;
	// the margin is for a loaded machine.
	DefaultStopTimeout = 15 * time.Second
)

// ErrTraceNotFound is returned (wrapped) by Trace when the query API does not
// know the trace, which is also the case shortly after export: spans reach
// storage asynchronously. WaitTrace polls past that.
var ErrTraceNotFound = errors.New("trace not found")

// Options configures an agent. The zero value is usable.
type Options struct {
	// Binary is the jaeger executable; empty means Binary().
	Binary string
	// MaxTraces bounds the in-memory store (default DefaultMaxTraces); the
	// oldest traces are dropped beyond it.
	MaxTraces int
	// LogFile receives the agent's output. Empty means a new file in the
	// system temp directory (see Agent.LogFile).
	LogFile string
	// StartTimeout bounds the wait for the query API on top of the context
	// (default DefaultStartTimeout).
	StartTimeout time.Duration
	// StopTimeout is how long Stop waits after SIGTERM before SIGKILL
	// (default DefaultStopTimeout).
	StopTimeout time.Duration
}

// Agent is a running (or stopped) Jaeger. Its methods are safe for concurrent
// use.
type Agent struct {
	bin        string
	args       []string
	otlpGRPC   string
	otlpHTTP   string
	queryHTTP  string
	queryGRPC  string
	logPath    string
	configPath string
	opts       Options
	client     *http.Client

	mu   sync.Mutex
	proc *procgroup.Proc // set by a successful start
}

// Binary returns the path of the jaeger executable: $FERRY_JAEGER_BIN if set,
// else the one tools/jaeger/build.sh keeps in the Ferry cache (see
// toolbin.Path; a cold build takes about 3 minutes, far more on a busy
// machine).
func Binary() (string, error) { return toolbin.Path("jaeger", "FERRY_JAEGER_BIN") }

// Start runs Jaeger on free loopback ports and returns once its query API
// answers. ctx bounds only the start-up: the agent runs until Stop or Kill.
func Start(ctx context.Context, opts Options) (*Agent, error) {
	if opts.Binary == "" {
		bin, err := Binary()
		if err != nil {
			return nil, err
		}
		opts.Binary = bin
	}
	if opts.MaxTraces <= 0 {
		opts.MaxTraces = DefaultMaxTraces
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = DefaultStopTimeout
	}
	if opts.LogFile == "" {
		f, err := os.CreateTemp("", "jaeger-*.log")
		if err != nil {
			return nil, fmt.Errorf("jaeger log file: %w", err)
		}
		opts.LogFile = f.Name()
		f.Close()
	}

	// A port chosen free can still be taken before Jaeger binds it (by another
	// test's agent picking at the same moment); then Jaeger exits at once,
	// and new ports are tried.
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		var a *Agent
		a, err = start(ctx, opts)
		if err == nil {
			return a, nil
		}
		if !errors.Is(err, errExited) {
			break
		}
	}
	return nil, err
}

// errExited marks an agent process that ended before its query API answered.
var errExited = errors.New("exited before its query API answered")

func start(ctx context.Context, opts Options) (*Agent, error) {
	free, err := ports.Free(4, false)
	if err != nil {
		return nil, err
	}
	addr := func(i int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(free[i])) }
	a := &Agent{
		bin:       opts.Binary,
		otlpGRPC:  addr(0),
		otlpHTTP:  addr(1),
		queryHTTP: addr(2),
		queryGRPC: addr(3),
		logPath:   opts.LogFile,
		opts:      opts,
		client:    &http.Client{Timeout: 10 * time.Second},
	}
	cfg, err := os.CreateTemp("", "jaeger-*.yaml")
	if err != nil {
		return nil, fmt.Errorf("jaeger config: %w", err)
	}
	a.configPath = cfg.Name()
	_, err = cfg.WriteString(a.config())
	if cerr := cfg.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(a.configPath)
		return nil, fmt.Errorf("jaeger config: %w", err)
	}
	a.args = []string{"--config", a.configPath}

	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.startLocked(ctx); err != nil {
		os.Remove(a.configPath)
		return nil, err
	}
	return a, nil
}

// config is the collector configuration: memory storage, OTLP in, query API
// out, no other listener and no outgoing connection. Internal metrics are
// off because their Prometheus endpoint would need one more port and nothing
// reads it.
func (a *Agent) config() string {
	return fmt.Sprintf(`service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: info
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: %d
  jaeger_query:
    # Jaeger's query service traces itself to OTLP on 127.0.0.1:4317 by
    # default: spans of the agent in whatever listens there, and a 10 s
    # export timeout on every stop when nothing does.
    enable_tracing: false
    storage:
      traces: memstore
    http:
      endpoint: %q
    grpc:
      endpoint: %q
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %q
      http:
        endpoint: %q
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`, a.opts.MaxTraces, a.queryHTTP, a.queryGRPC, a.otlpGRPC, a.otlpHTTP)
}

// OTLPGRPCAddr is the OTLP/gRPC receiver's address, host:port (plaintext).
func (a *Agent) OTLPGRPCAddr() string { return a.otlpGRPC }

// OTLPHTTPAddr is the OTLP/HTTP receiver's address, host:port (plaintext).
func (a *Agent) OTLPHTTPAddr() string { return a.otlpHTTP }

// QueryAddr is the query service's HTTP address, host:port: the UI at /
// and the JSON API under /api.
func (a *Agent) QueryAddr() string { return a.queryHTTP }

// LogFile is the path of the file that holds the agent's output.
func (a *Agent) LogFile() string { return a.logPath }

// Stop sends SIGTERM and waits up to Options.StopTimeout for Jaeger to exit,
// then kills it. It is a no-op on an agent that has already exited. A non-nil
// error means the agent had to be killed.
func (a *Agent) Stop() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	defer os.Remove(a.configPath)
	if err := a.proc.Stop(a.opts.StopTimeout); err != nil {
		return fmt.Errorf("jaeger: %w", err)
	}
	return nil
}

// Kill ends Jaeger at once with SIGKILL and waits for it to be gone.
func (a *Agent) Kill() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.proc.Kill()
	os.Remove(a.configPath)
}

func (a *Agent) startLocked(ctx context.Context) error {
	p, err := procgroup.Start(a.bin, a.args, a.logPath)
	if err != nil {
		return fmt.Errorf("jaeger: %w", err)
	}
	a.proc = p
	if err := a.waitReady(ctx); err != nil {
		p.Kill()
		return fmt.Errorf("jaeger on %s: %w (log %s)\n%s", a.queryHTTP, err, a.logPath, procgroup.LogTail(a.logPath, 20))
	}
	return nil
}

// waitReady polls the query API, and then the OTLP gRPC port, until both
// answer, the process exits, or the start-up deadline passes. The receivers
// start after the extensions, so a query API that answers does not yet mean
// spans can be sent.
func (a *Agent) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, a.opts.StartTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		_, err := a.Services(ctx)
		if err == nil {
			err = dialable(ctx, a.otlpGRPC)
		}
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-a.proc.Done():
			return fmt.Errorf("%w: %v", errExited, a.proc.Err())
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w (last: %v)", ctx.Err(), last)
		case <-tick.C:
		}
	}
}

func dialable(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// Trace is one trace as the query API returns it.
type Trace struct {
	TraceID string `json:"traceID"`
	Spans   []Span `json:"spans"`
	// Processes maps a span's ProcessID to the process (service) that
	// reported it.
	Processes map[string]Process `json:"processes"`
	Warnings  []string           `json:"warnings"`
}

// Span is one span of a Trace. IDs are lower-case hex, padded to 32 (trace)
// and 16 (span) digits, as the W3C traceparent and the OTel API print them.
type Span struct {
	TraceID       string      `json:"traceID"`
	SpanID        string      `json:"spanID"`
	OperationName string      `json:"operationName"`
	References    []Reference `json:"references"`
	// StartTime is in microseconds since the Unix epoch; see Start.
	StartTime int64 `json:"startTime"`
	// Duration is in microseconds; see Elapsed.
	Duration  int64      `json:"duration"`
	Tags      []KeyValue `json:"tags"`
	ProcessID string     `json:"processID"`
	// Process is filled from Trace.Processes when the span names only its
	// ProcessID, so a span can be read on its own.
	Process  Process  `json:"process"`
	Warnings []string `json:"warnings"`
}

// Reference ties a span to another: RefType is CHILD_OF (its parent) or
// FOLLOWS_FROM (an OTel span link).
type Reference struct {
	RefType string `json:"refType"`
	TraceID string `json:"traceID"`
	SpanID  string `json:"spanID"`
}

// Process is the reporter of a span: its service name and resource
// attributes.
type Process struct {
	ServiceName string     `json:"serviceName"`
	Tags        []KeyValue `json:"tags"`
}

// KeyValue is a tag: Type is string, bool, int64, float64 or binary, and
// Value holds what encoding/json makes of it (numbers are float64).
type KeyValue struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"`
}

// Start is the span's start time.
func (s Span) Start() time.Time { return time.UnixMicro(s.StartTime) }

// Elapsed is the span's duration.
func (s Span) Elapsed() time.Duration { return time.Duration(s.Duration) * time.Microsecond }

// Tag returns the value of the tag key and whether the span has it.
func (s Span) Tag(key string) (any, bool) { return findTag(s.Tags, key) }

// Tag returns the value of the resource attribute key and whether the
// process has it.
func (p Process) Tag(key string) (any, bool) { return findTag(p.Tags, key) }

func findTag(tags []KeyValue, key string) (any, bool) {
	for _, kv := range tags {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return nil, false
}

// Parent returns the span's CHILD_OF reference, if it has one.
func (s Span) Parent() (Reference, bool) {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r, true
		}
	}
	return Reference{}, false
}

// SpanByName returns the first span named op.
func (t Trace) SpanByName(op string) (Span, bool) {
	for _, s := range t.Spans {
		if s.OperationName == op {
			return s, true
		}
	}
	return Span{}, false
}

// Services lists the service names Jaeger has received spans from.
func (a *Agent) Services(ctx context.Context) ([]string, error) {
	var out []string
	if err := a.get(ctx, "/api/services", nil, &out); err != nil {
		return nil, fmt.Errorf("jaeger services: %w", err)
	}
	return out, nil
}

// Trace returns the trace with the given ID (hex, as trace.TraceID.String
// prints it). A trace Jaeger does not have gives an error wrapping
// ErrTraceNotFound.
func (a *Agent) Trace(ctx context.Context, traceID string) (Trace, error) {
	var out []Trace
	err := a.get(ctx, "/api/traces/"+url.PathEscape(traceID), nil, &out)
	if errors.Is(err, errNotFound) {
		return Trace{}, fmt.Errorf("jaeger trace %s: %w", traceID, ErrTraceNotFound)
	}
	if err != nil {
		return Trace{}, fmt.Errorf("jaeger trace %s: %w", traceID, err)
	}
	if len(out) == 0 {
		return Trace{}, fmt.Errorf("jaeger trace %s: %w", traceID, ErrTraceNotFound)
	}
	return out[0], nil
}

// WaitTrace polls Trace until the trace has at least minSpans spans or ctx
// ends. Spans reach storage some time after the exporter sent them.
func (a *Agent) WaitTrace(ctx context.Context, traceID string, minSpans int) (Trace, error) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		t, err := a.Trace(ctx, traceID)
		if err == nil && len(t.Spans) >= minSpans {
			return t, nil
		}
		if err != nil && !errors.Is(err, ErrTraceNotFound) {
			return Trace{}, err
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("jaeger trace %s: %d spans, want %d", traceID, len(t.Spans), minSpans)
			}
			return Trace{}, fmt.Errorf("%w (%v)", err, ctx.Err())
		case <-tick.C:
		}
	}
}

// FindTraces returns up to limit recent traces that hold a span of service,
// newest first, searched over the last lookback (the query API's default is
// one hour when lookback is 0).
func (a *Agent) FindTraces(ctx context.Context, service string, lookback time.Duration, limit int) ([]Trace, error) {
	q := url.Values{"service": {service}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if lookback > 0 {
		q.Set("lookback", lookback.String())
	}
	var out []Trace
	if err := a.get(ctx, "/api/traces", q, &out); err != nil {
		return nil, fmt.Errorf("jaeger traces of %s: %w", service, err)
	}
	return out, nil
}

// apiResponse is the envelope of every query API answer.
type apiResponse struct {
	Data   json.RawMessage `json:"data"`
	Errors []struct {
		Code int    `json:"code"`
		Msg  string `json:"msg"`
	} `json:"errors"`
}

// errNotFound is a 404 from the query API.
var errNotFound = errors.New("not found")

// get reads path from the query API and decodes the envelope's data into
// out.
func (a *Agent) get(ctx context.Context, path string, q url.Values, out any) error {
	u := "http://" + a.queryHTTP + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode == http.StatusNotFound {
		return errNotFound
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s: %s", resp.Status, bytes.TrimSpace(body))
	}
	var env apiResponse
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	if len(env.Errors) > 0 {
		return fmt.Errorf("query API error %d: %s", env.Errors[0].Code, env.Errors[0].Msg)
	}
	if err := json.Unmarshal(env.Data, out); err != nil {
		return fmt.Errorf("decode data: %w", err)
	}
	if traces, ok := out.(*[]Trace); ok {
		for i := range *traces {
			normalize(&(*traces)[i])
		}
	}
	return nil
}

// normalize pads IDs and fills each span's Process. Jaeger prints a trace ID
// without its leading zeros (one random 128-bit ID in sixteen starts with a
// zero digit), so a caller comparing with trace.TraceID.String() would miss
// such a trace otherwise.
func normalize(t *Trace) {
	t.TraceID = pad(t.TraceID, 32)
	for i := range t.Spans {
		s := &t.Spans[i]
		s.TraceID = pad(s.TraceID, 32)
		s.SpanID = pad(s.SpanID, 16)
		for j := range s.References {
			s.References[j].TraceID = pad(s.References[j].TraceID, 32)
			s.References[j].SpanID = pad(s.References[j].SpanID, 16)
		}
		if s.Process.ServiceName == "" {
			s.Process = t.Processes[s.ProcessID]
		}
	}
}

func pad(id string, n int) string {
	if len(id) >= n || id == "" {
		return id
	}
	return strings.Repeat("0", n-len(id)) + id
}
