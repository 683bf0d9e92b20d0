package service

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-replicator/ferry/pkg/telemetry"
)

// stopConfig sends its own process a SIGTERM while it is validated, as a
// stop arriving during start-up, and returns once the signal is delivered.
// Were Main's handler not installed yet, the signal would kill the test.
type stopConfig struct {
	Name string `yaml:"name"`
}

func (c *stopConfig) Validate() error {
	seen := make(chan os.Signal, 1)
	signal.Notify(seen, syscall.SIGTERM)
	defer signal.Stop(seen)
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-seen:
	case <-time.After(5 * time.Second):
	}
	return nil
}

func (c *stopConfig) Logging() telemetry.LogConfig {
	return telemetry.LogConfig{Level: "info", Format: "text"}
}

// A stop during start-up ends the service cleanly: exit 0, and run, if it
// starts at all, finds its context already ending.
func TestStopDuringStartUpExitsCleanly(t *testing.T) {
	var out bytes.Buffer
	code := Main("svc", "SVC_", "test", &stopConfig{}, nil, nil, &out, func(ctx context.Context, _ *stopConfig, _ *slog.Logger) error {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(10 * time.Second):
			t.Error("the stop signal did not end run's context")
			return nil
		}
	})
	if code != 0 {
		t.Fatalf("exit %d, want 0:\n%s", code, out.String())
	}
}

// hangupConfig sends its own process a SIGHUP while it is validated, as a
// certificate rotation's hangup arriving before the service's reloader
// listens. kill(2) delivers a signal a process sends itself before it
// returns, so with SIGHUP's default action this test binary dies here.
type hangupConfig struct {
	Name string `yaml:"name"`
}

func (c *hangupConfig) Validate() error {
	return syscall.Kill(syscall.Getpid(), syscall.SIGHUP)
}

func (c *hangupConfig) Logging() telemetry.LogConfig {
	return telemetry.LogConfig{Level: "info", Format: "text"}
}

// A hangup during start-up neither kills the service nor stops it.
func TestHangupDuringStartUpIsHarmless(t *testing.T) {
	var out bytes.Buffer
	ran := false
	code := Main("svc", "SVC_", "test", &hangupConfig{}, nil, nil, &out, func(ctx context.Context, _ *hangupConfig, _ *slog.Logger) error {
		ran = ctx.Err() == nil
		return nil
	})
	if code != 0 || !ran {
		t.Fatalf("exit %d, run with a live context %v, want 0 and true:\n%s", code, ran, out.String())
	}
}
