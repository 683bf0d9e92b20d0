package admin

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"time"
)

// The status page at GET / is for people: the tier's Options.Page
// renders, inside the layout below, the very value Status returns for
// /status, so the page and the JSON cannot disagree and there is no second
// status table to keep. html/template escapes every value for where it
// lands (topic, group and fetcher names come from users and peers), and
// the page's Content-Security-Policy runs no script at all, so a name that
// slipped through could still not run. It refreshes itself (meta refresh):
// no script is needed, and none is allowed. The one thing the page shows
// that /status does not is its links into the Jaeger UI (TraceLinks,
// with tracing.ui_url): navigation for people, not status.

// refreshSeconds is how often the page reloads itself.
const refreshSeconds = 5

// pagePolicy allows the page its inline style and nothing else: no
// script, no image, no frame, no form.
const pagePolicy = "default-src 'none'; script-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

const layout = `{{define "page"}}<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="{{.Refresh}}">
<title>{{.Title}}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; margin: 0 0 .2em; } h2 { font-size: 1.1em; margin: 1.4em 0 .4em; }
table { border-collapse: collapse; } th, td { padding: .2em .7em; border-bottom: 1px solid #ddd; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.meta { color: #666; } .bad { color: #b00; font-weight: bold; } .warn { color: #a60; } .ok { color: #070; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<p class="meta">Rendered {{.Now}}; reloads every {{.Refresh}} s. The same data as <a href="/status">/status</a> (JSON); metrics at <a href="/metrics">/metrics</a>.</p>
{{template "body" .Status}}
{{with .Traces}}<h2>Traces</h2>
<p class="meta">In the Jaeger UI: <a id="trace-search" href="{{.Search}}" rel="noreferrer">the traces of {{.Service}}</a>; the last sampled ones this process recorded, newest first:</p>
<ul id="traces">
{{range .Recent}}<li><a class="trace" href="{{.URL}}" rel="noreferrer">{{.ID}}</a></li>
{{else}}<li class="meta">no sampled trace yet</li>
{{end}}</ul>
{{end}}</body>
</html>
{{end}}`

// pageFuncs format the values both tiers' pages show.
var pageFuncs = template.FuncMap{
	"seconds": seconds,
	"lag":     lag,
	"when":    when,
}

// seconds formats a duration in seconds (a float64, or a *float64 that
// is nil when unknown).
func seconds(v any) string {
	switch s := v.(type) {
	case float64:
		return fmt.Sprintf("%.3f s", s)
	case *float64:
		if s != nil {
			return fmt.Sprintf("%.3f s", *s)
		}
	}
	return "–"
}

// lag is a partition's lag in records: its high watermark minus its
// committed next offset, "–" while either is unknown (< 0).
func lag(highWater, committed int64) string {
	if highWater < 0 || committed < 0 {
		return "–"
	}
	return fmt.Sprint(max(0, highWater-committed))
}

// when formats a time (or a *time.Time, nil when none) in UTC.
func when(v any) string {
	switch t := v.(type) {
	case time.Time:
		if !t.IsZero() {
			return t.UTC().Format(time.DateTime)
		}
	case *time.Time:
		if t != nil && !t.IsZero() {
			return t.UTC().Format(time.DateTime)
		}
	}
	return "–"
}

// parsePage builds the page from the layout and a tier's body, a template
// defining "body" that is executed on what Status returns.
func parsePage(body string) (*template.Template, error) {
	t, err := template.New("page").Funcs(pageFuncs).Parse(layout)
	if err == nil {
		t, err = t.Parse(body)
	}
	if err != nil {
		return nil, fmt.Errorf("admin status page: %w", err)
	}
	return t, nil
}

// TraceLinks link the status page into a Jaeger UI: to its search for
// the service's traces and to each of the last sampled traces the
// process started. The links are built with net/url and the page escapes
// them again for the attribute they land in (html/template), so neither
// a service name nor a trace ID can become markup.
type TraceLinks struct {
	// UI is the Jaeger UI's base URL (tracing.ui_url, validated by the
	// tracing config); empty links to nothing.
	UI string
	// Service is the service name the spans carry.
	Service string
	// Recent returns the last sampled trace IDs, newest first.
	Recent func() []string

	base *url.URL // UI, parsed by Listen
}

func (l *TraceLinks) parse() error {
	if l.UI == "" {
		return nil
	}
	u, err := url.Parse(l.UI)
	if err != nil {
		return fmt.Errorf("admin status page: tracing.ui_url: %w", err)
	}
	l.base = u
	return nil
}

// traceView is what the page shows of the links.
type traceView struct {
	Service, Search string
	Recent          []traceLink
}

type traceLink struct{ ID, URL string }

// view is the links as of now; nil without a UI, which leaves the
// section out of the page.
func (l TraceLinks) view() *traceView {
	if l.base == nil {
		return nil
	}
	search := l.base.JoinPath("search")
	search.RawQuery = url.Values{"service": {l.Service}}.Encode()
	v := &traceView{Service: l.Service, Search: search.String()}
	if l.Recent != nil {
		for _, id := range l.Recent() {
			v.Recent = append(v.Recent, traceLink{ID: id, URL: l.base.JoinPath("trace", id).String()})
		}
	}
	return v
}

// servePage renders the page into memory first, so a failure is a 500
// rather than half a page.
func servePage(page *template.Template, title string, status func() any, traces TraceLinks) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		var buf bytes.Buffer
		err := page.ExecuteTemplate(&buf, "page", struct {
			Title, Now string
			Refresh    int
			Status     any
			Traces     *traceView
		}{title, time.Now().UTC().Format(time.DateTime), refreshSeconds, status(), traces.view()})
		if err != nil {
			http.Error(w, "status page: "+err.Error(), http.StatusInternalServerError)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Content-Security-Policy", pagePolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-store")
		_, _ = w.Write(buf.Bytes())
	}
}
