package consulagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-replicator/ferry/loadtest/consulagent"
)

// TestAgentLifecycle runs the real agent through every state a Consul-outage
// test needs. It fails, never skips, when the binary cannot be had: the
// agent is part of the project's own build (tools/consul-dev/build.sh).
func TestAgentLifecycle(t *testing.T) {
	bin, err := consulagent.Binary()
	if err != nil {
		t.Fatalf("consul-dev binary: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	logFile := filepath.Join(t.TempDir(), "consul.log")
	// The agent's output stays out of the test's; show it only on failure.
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("agent log tail:\n%s", lastLines(string(b), 60))
		}
	})
	began := time.Now()
	a, err := consulagent.Start(ctx, consulagent.Options{
		Binary:     bin,
		Datacenter: "ferry-test",
		NodeName:   "lifecycle",
		LogFile:    logFile,
	})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(a.Kill)
	t.Logf("agent %s up in %s (log %s)", a.HTTPAddr(), time.Since(began).Round(time.Millisecond), a.LogFile())
	addr := a.HTTPAddr()
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Errorf("HTTPAddr = %q, want a loopback address", addr)
	}
	requireLeader(t, addr)

	// Paused, the agent keeps its port but does not answer.
	if err := a.Pause(); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if l, err := leader(addr, 300*time.Millisecond); err == nil {
		t.Fatalf("paused agent answered, leader %q", l)
	}
	if err := a.Resume(); err != nil {
		t.Fatalf("resume: %v", err)
	}
	requireLeader(t, addr)

	// Restart of a running agent: a new process on the same address.
	pid := a.PID()
	if err := a.Restart(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if a.PID() == pid {
		t.Errorf("PID after restart = %d, want a new process", pid)
	}
	requireGone(t, pid)
	if a.HTTPAddr() != addr {
		t.Errorf("HTTPAddr after restart = %q, want %q", a.HTTPAddr(), addr)
	}
	requireLeader(t, addr)

	// Kill, as a crash would; Restart brings it back.
	pid = a.PID()
	a.Kill()
	requireGone(t, pid)
	if _, err := leader(addr, time.Second); err == nil {
		t.Fatal("killed agent still answers")
	}
	if err := a.Restart(ctx); err != nil {
		t.Fatalf("restart after kill: %v", err)
	}
	requireLeader(t, addr)

	// Stop exits on SIGTERM, well before the SIGKILL fallback.
	pid = a.PID()
	if err := a.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	requireGone(t, pid)
	if _, err := leader(addr, time.Second); err == nil {
		t.Fatal("stopped agent still answers")
	}
}

func requireLeader(t *testing.T, addr string) {
	t.Helper()
	l, err := leader(addr, 5*time.Second)
	if err != nil {
		t.Fatalf("leader: %v", err)
	}
	if !strings.HasPrefix(l, "127.0.0.1:") {
		t.Fatalf("leader = %q, want the agent's own loopback server address", l)
	}
}

// requireGone checks that no process of the agent's group is left.
func requireGone(t *testing.T, pgid int) {
	t.Helper()
	if err := syscall.Kill(-pgid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("process group %d still there (kill -0: %v)", pgid, err)
	}
}

func leader(addr string, timeout time.Duration) (string, error) {
	client := &http.Client{Timeout: timeout}
	resp, err := client.Get("http://" + addr + "/v1/status/leader")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %s: %s", resp.Status, body)
	}
	var l string
	if err := json.Unmarshal(body, &l); err != nil {
		return "", fmt.Errorf("decode leader %q: %w", body, err)
	}
	return l, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
