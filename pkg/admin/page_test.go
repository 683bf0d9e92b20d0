package admin

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// GET / renders the tier's page from what /status serves, inside the
// shared layout: refreshed by the browser, and with every value escaped
// (names come from users and peers) under a policy that runs no script.
func TestPageRendersStatusEscaped(t *testing.T) {
	status := map[string]any{"name": `<img src=x onerror=alert(1)>`, "lag": 42}
	s, err := Listen(Config{Listen: "127.0.0.1:0"}, prometheus.NewRegistry(), Options{
		Status: func() any { return status },
		Page:   `{{define "body"}}<p id="name">{{.name}}</p><p id="lag">{{.lag}}</p><p>{{seconds 1.5}} {{seconds nil}}</p>{{end}}`,
		Title:  "ferry test",
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	resp, err := http.Get("http://" + s.Addr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	page := string(body)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET / = %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{
		`<p id="name">&lt;img src=x onerror=alert(1)&gt;</p>`, `<p id="lag">42</p>`, "1.500 s", "–",
		`http-equiv="refresh"`, "<title>ferry test</title>",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'none'") {
		t.Errorf("Content-Security-Policy %q, want script-src 'none'", csp)
	}
	resp, err = http.Get("http://" + s.Addr() + "/nothing")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nothing = %d, want 404", resp.StatusCode)
	}
}

// With a Jaeger UI configured (tracing.ui_url), the page links to the
// UI's search for the service and to each recent sampled trace, every
// part escaped; without one it links to no trace at all.
func TestPageLinksToJaeger(t *testing.T) {
	recent := []string{"0af7651916cd43dd8448eb211c80319c", "4bf92f3577b34da6a3ce929d0e0e4736"}
	links := TraceLinks{UI: "http://jaeger:16686/ui/", Service: `ferry-writer&x="<b>`, Recent: func() []string { return recent }}
	page := getPage(t, Options{Traces: links})
	for _, want := range []string{
		`href="http://jaeger:16686/ui/search?service=ferry-writer%26x%3D%22%3Cb%3E"`,
		`href="http://jaeger:16686/ui/trace/0af7651916cd43dd8448eb211c80319c"`,
		`href="http://jaeger:16686/ui/trace/4bf92f3577b34da6a3ce929d0e0e4736"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s:\n%s", want, page)
		}
	}
	if strings.Contains(page, "<b>") {
		t.Errorf("the service name was rendered as markup:\n%s", page)
	}

	recent = nil
	if page := getPage(t, Options{Traces: links}); !strings.Contains(page, "no sampled trace yet") || strings.Contains(page, "/trace/") {
		t.Errorf("page without sampled traces:\n%s", page)
	}
	if page := getPage(t, Options{}); strings.Contains(page, "jaeger") || strings.Contains(page, "/trace/") || strings.Contains(page, "/search?") {
		t.Errorf("page without tracing.ui_url links to traces:\n%s", page)
	}
}

// getPage serves a status page with opts and returns GET /.
func getPage(t *testing.T, opts Options) string {
	t.Helper()
	opts.Status = func() any { return map[string]any{"x": 1} }
	opts.Page = `{{define "body"}}<p>{{.x}}</p>{{end}}`
	s, err := Listen(Config{Listen: "127.0.0.1:0"}, prometheus.NewRegistry(), opts, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	resp, err := http.Get("http://" + s.Addr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET / = %d: %s", resp.StatusCode, body)
	}
	return string(body)
}
