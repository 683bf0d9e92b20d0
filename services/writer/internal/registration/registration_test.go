package registration

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ferry-replicator/ferry/loadtest/consulagent"
	"github.com/ferry-replicator/ferry/pkg/consulclient"
	"github.com/ferry-replicator/ferry/pkg/testwait"
)

// logLines collects log messages, so the test can wait for the retry.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, string(p))
	return len(p), nil
}

func (l *logLines) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

// A writer that starts while its Consul agent is down keeps trying and is in
// the catalog once the agent is back; it comes back after the agent loses
// its entry (a -dev agent restarts empty, as an agent without its data
// would), and leaves the catalog when Run ends. Before Run existed the
// writer registered once and exited on the first failure (soak ci-d: a
// writer started during a Consul stall).
func TestRunRegistersWhenConsulComesBackAndKeepsTheEntry(t *testing.T) {
	ctx := context.Background()
	agent, err := consulagent.Start(ctx, consulagent.Options{})
	if err != nil {
		t.Fatalf("start Consul (make consul builds it): %v", err)
	}
	t.Cleanup(func() { _ = agent.Stop() })
	ready := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	t.Cleanup(ready.Close)
	if err := agent.Stop(); err != nil {
		t.Fatal(err)
	}

	logs := &logLines{}
	r, err := New(Config{Config: consulclient.Config{Address: agent.HTTPAddr()}, Service: "ferry-writer"}, "w1", "127.0.0.1:7000",
		strings.TrimPrefix(ready.URL, "http://"), slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	r.minRetry, r.maxRetry, r.refresh, r.timeout = 20*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond, time.Second
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.Run(rctx) }()
	t.Cleanup(func() { cancel(); <-done })

	waitFor(t, "a failed registration to be retried", func() bool { return logs.count("consul registration failed") >= 2 })

	client, err := api.NewClient(&api.Config{Address: agent.HTTPAddr()})
	if err != nil {
		t.Fatal(err)
	}
	present := func() bool {
		s, _, err := client.Agent().Service(r.ID(), nil)
		return err == nil && s != nil && s.Port == 7000 && s.Address == "127.0.0.1"
	}
	// registered(n): the entry is in the catalog and Run has said so for
	// the n-th time. The agent can answer the test's look before Run's
	// own request returns; the next step (a restart, the end) must not
	// cut that request off, or Run sees it fail.
	registered := func(n int) func() bool {
		return func() bool { return present() && logs.count("registered in consul") >= n }
	}

	if err := agent.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the entry once Consul is back", registered(1))

	if err := client.Agent().ServiceDeregister(r.ID()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the entry after it was removed", registered(2))

	if err := agent.Restart(ctx); err != nil { // comes back empty
		t.Fatal(err)
	}
	waitFor(t, "the entry after an agent restart without state", registered(3))

	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if s, _, err := client.Agent().Service(r.ID(), nil); err == nil && s != nil {
		t.Fatalf("entry %s still in the catalog after Run ended", r.ID())
	}
	if n := logs.count("registered in consul"); n != 3 {
		t.Errorf("logged %d registrations, want 3 (first, after removal, after restart)", n)
	}
}

// A bad advertised address is a configuration error, reported at once.
func TestNewRefusesABadAdvertiseAddress(t *testing.T) {
	_, err := New(Config{Config: consulclient.Config{Address: "127.0.0.1:1"}, Service: "s", Advertise: "no-port"}, "w", "127.0.0.1:1", "127.0.0.1:2", slog.Default())
	if err == nil || !strings.Contains(err.Error(), "registration.advertise") {
		t.Fatalf("err = %v, want one naming registration.advertise", err)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	testwait.For(t, 20*time.Second, what, ok)
}
