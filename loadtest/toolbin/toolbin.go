// Package toolbin finds the executables the test suite builds from pinned Go
// modules under tools/ (consul-dev, jaeger): each tools/<name>/build.sh keeps
// its binary in the Ferry cache ($FERRY_CACHE or ~/.cache/ferry) and prints
// its path last.
package toolbin

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Path returns the executable of tool: $envVar if set; else, when
// tools/<tool>/build.sh is found above the working directory, the binary
// that script makes current (it returns at once when it already is, and
// otherwise builds it: minutes on a cold Go cache); else the cached binary
// from an earlier build.
func Path(tool, envVar string) (string, error) {
	if bin := os.Getenv(envVar); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("%s: %w", envVar, err)
		}
		return bin, nil
	}
	if script, err := findScript(tool); err == nil {
		return build(tool, script)
	}
	// Outside the repository nothing can be built; use what is cached.
	cache := os.Getenv("FERRY_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("ferry cache dir: %w", err)
		}
		cache = filepath.Join(home, ".cache", "ferry")
	}
	cached := filepath.Join(cache, "bin", tool)
	if _, err := os.Stat(cached); err != nil {
		return "", fmt.Errorf("%s not built and repository not found: %w", tool, err)
	}
	return cached, nil
}

// findScript walks up from the working directory to tools/<tool>/build.sh.
func findScript(tool string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		script := filepath.Join(dir, "tools", tool, "build.sh")
		if fi, err := os.Stat(script); err == nil && !fi.IsDir() {
			return script, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no tools/%s/build.sh above the working directory", tool)
		}
		dir = parent
	}
}

func build(tool, script string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("bash", script)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build %s: %w\n%s", tool, err, lastLines(stderr.String(), 40))
	}
	bin := lastLines(strings.TrimSpace(stdout.String()), 1)
	if bin == "" {
		return "", errors.New("build " + tool + ": build.sh printed no path")
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("build %s: %w", tool, err)
	}
	return bin, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
