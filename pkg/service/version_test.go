package service

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/ferry-replicator/ferry/pkg/telemetry"
)

// badConfig never validates: --version must answer without a configuration
// (an operator asks an image which build it holds before configuring it).
type badConfig struct{}

func (badConfig) Validate() error { return errors.New("no configuration") }
func (badConfig) Logging() telemetry.LogConfig {
	return telemetry.LogConfig{Level: "info", Format: "text"}
}

func TestVersionNeedsNoConfiguration(t *testing.T) {
	var out bytes.Buffer
	ran := false
	code := Main("ferry-x", "FERRY_X_", "test", badConfig{}, []string{"--version"}, nil, &out,
		func(context.Context, badConfig, *slog.Logger) error { ran = true; return nil })
	if code != 0 || ran {
		t.Fatalf("exit %d, ran %v; want 0 without running:\n%s", code, ran, out.String())
	}
	line := strings.TrimSpace(out.String())
	if !strings.HasPrefix(line, "ferry-x ") || !strings.Contains(line, "(commit ") || strings.Count(line, "\n") != 0 {
		t.Fatalf("--version printed %q; want one line: name, version, commit", line)
	}
}

func TestVersionStampedByTheBuild(t *testing.T) {
	defer func(v, c string) { version, commit = v, c }(version, commit)
	version, commit = "v1.2.3", "0123abcd"
	if got := Version("ferry-y"); !strings.HasPrefix(got, "ferry-y v1.2.3 (commit 0123abcd, go") {
		t.Fatalf("Version = %q", got)
	}
}
