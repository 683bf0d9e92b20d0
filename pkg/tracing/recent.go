package tracing

import (
	"sync"

	"go.opentelemetry.io/otel/trace"
)

// RecentSize is how many sampled traces RecentTraces keeps: enough for a
// look at the last few seconds of a busy process, few enough to list.
const RecentSize = 20

// RecentTraces keeps the IDs of the last sampled traces a process
// recorded spans of, for the status page's links into the Jaeger UI. It
// is written where the spans start, once per sampled batch, so at a
// sampling ratio of 0.01 its lock is taken once in a hundred batches, and
// held for a copy of 16 bytes. A nil *RecentTraces keeps nothing: a
// process without a UI to link to (tracing.ui_url empty) holds nil.
type RecentTraces struct {
	mu   sync.Mutex
	ids  [RecentSize]trace.TraceID
	next int // where the next ID goes
	n    int // IDs kept, up to RecentSize
}

// Add keeps sc's trace ID when sc is sampled (an unsampled trace was
// never exported: a link to it would lead nowhere), unless it is the one
// added last.
func (r *RecentTraces) Add(sc trace.SpanContext) {
	if r == nil || !sc.IsSampled() || !sc.TraceID().IsValid() {
		return
	}
	id := sc.TraceID()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n > 0 && r.ids[(r.next+RecentSize-1)%RecentSize] == id {
		return
	}
	r.ids[r.next] = id
	r.next = (r.next + 1) % RecentSize
	r.n = min(r.n+1, RecentSize)
}

// IDs are the kept trace IDs in hex, newest first; nil for a nil
// RecentTraces.
func (r *RecentTraces) IDs() []string {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	ids, next, n := r.ids, r.next, r.n
	r.mu.Unlock()
	out := make([]string, 0, n)
	for i := 1; i <= n; i++ {
		out = append(out, ids[(next-i+RecentSize)%RecentSize].String())
	}
	return out
}
