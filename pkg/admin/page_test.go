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
