package toolbin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The environment variable wins, and must name a file that exists.
func TestPathFromEnvironment(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "tool")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FERRY_TEST_TOOL_BIN", bin)
	if got, err := Path("no-such-tool", "FERRY_TEST_TOOL_BIN"); err != nil || got != bin {
		t.Fatalf("Path = %q, %v; want %q", got, err, bin)
	}
	t.Setenv("FERRY_TEST_TOOL_BIN", bin+".missing")
	if _, err := Path("no-such-tool", "FERRY_TEST_TOOL_BIN"); err == nil || !strings.Contains(err.Error(), "FERRY_TEST_TOOL_BIN") {
		t.Fatalf("Path with a missing file = %v, want an error naming the variable", err)
	}
}

// In the repository, tools/<name>/build.sh is run and the last line it
// prints is the binary; outside it, only the cache is looked at.
func TestPathBuildsAndFallsBackToTheCache(t *testing.T) {
	root := t.TempDir()
	bin := filepath.Join(root, "built")
	if err := os.WriteFile(bin, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "tools", "demo", "build.sh")
	if err := os.MkdirAll(filepath.Dir(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, []byte("echo building\necho "+bin+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(root, "a", "b")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(sub)
	if got, err := Path("demo", "FERRY_TEST_UNSET"); err != nil || got != bin {
		t.Fatalf("Path = %q, %v; want %q from build.sh", got, err, bin)
	}

	cache := t.TempDir()
	t.Setenv("FERRY_CACHE", cache)
	t.Chdir(cache)
	if _, err := Path("demo", "FERRY_TEST_UNSET"); err == nil || !strings.Contains(err.Error(), "not built") {
		t.Fatalf("Path outside the repository with an empty cache = %v, want not built", err)
	}
	cached := filepath.Join(cache, "bin", "demo")
	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cached, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := Path("demo", "FERRY_TEST_UNSET"); err != nil || got != cached {
		t.Fatalf("Path = %q, %v; want the cached %q", got, err, cached)
	}
}
