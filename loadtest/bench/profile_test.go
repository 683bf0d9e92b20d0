package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The profiler writes one profile per process from its pprof handler, and
// names the process whose profile failed instead of failing the run.
func TestProfilerWritesAProfilePerProcess(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.Handle("/debug/pprof/heap", pprof.Handler("heap"))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	broken := httptest.NewServer(http.NotFoundHandler())
	defer broken.Close()

	dir := t.TempDir()
	var out strings.Builder
	p := &profiler{dir: dir, name: "03-ferry-catch-up", seconds: 1, out: &out}
	p.start(context.Background(), map[string]string{
		"writer": strings.TrimPrefix(srv.URL, "http://"), "fetcher": strings.TrimPrefix(broken.URL, "http://"),
	})
	p.wait()
	b, err := os.ReadFile(filepath.Join(dir, "03-ferry-catch-up-writer.pprof"))
	if err != nil || len(b) == 0 {
		t.Fatalf("writer profile: %d bytes, %v", len(b), err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "03-ferry-catch-up-writer.heap.pprof")); err != nil || len(b) == 0 {
		t.Fatalf("writer heap profile: %d bytes, %v", len(b), err)
	}
	if _, err := os.Stat(filepath.Join(dir, "03-ferry-catch-up-fetcher.pprof")); err == nil {
		t.Fatal("a profile was written from a 404")
	}
	if !strings.Contains(out.String(), "profile fetcher:") || !strings.Contains(out.String(), "404") {
		t.Fatalf("the failed profile is not reported: %q", out.String())
	}
}
