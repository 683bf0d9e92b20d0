// Package consulagent runs a real Consul dev agent (Consul 1.15.4, built from
// tools/consul-dev) for tests and load tools, on free loopback ports.
//
// The agent runs in -dev mode: one server that elects itself leader within a
// second, and keeps its Raft state (KV, sessions, catalog) in memory only.
// Restart therefore brings back an empty agent on the same ports, which is what
// a Consul-outage test wants. Each agent runs in its own process group, and
// Stop and Kill signal the whole group, so no process outlives them.
package consulagent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/ferry-replicator/ferry/loadtest/ports"
	"github.com/ferry-replicator/ferry/loadtest/procgroup"
	"github.com/ferry-replicator/ferry/loadtest/toolbin"
)

// Defaults for Options.
const (
	DefaultDatacenter   = "dc1"
	DefaultNodeName     = "ferry-consul"
	DefaultStartTimeout = 60 * time.Second
	DefaultStopTimeout  = 10 * time.Second
)

// Options configures an agent. The zero value is usable.
type Options struct {
	// Binary is the consul-dev executable; empty means Binary().
	Binary string
	// Datacenter is the agent's datacenter name (default DefaultDatacenter).
	Datacenter string
	// NodeName is the agent's node name (default DefaultNodeName).
	NodeName string
	// DataDir is passed as -data-dir when set. Even then a -dev agent keeps
	// Raft state in memory; the directory holds only the node ID and such.
	DataDir string
	// Persistent runs a single-server agent (-server -bootstrap-expect 1)
	// that keeps its Raft state in DataDir, which is then required, so a
	// restart keeps sessions, locks and their indexes as a real Consul
	// outage would. Electing a leader takes a few seconds longer than -dev.
	Persistent bool
	// LogFile receives the agent's output, appended across restarts. Empty
	// means a new file in the system temp directory (see Agent.LogFile).
	LogFile string
	// StartTimeout bounds each wait for a leader, on Start and Restart, on top
	// of the context (default DefaultStartTimeout).
	StartTimeout time.Duration
	// StopTimeout is how long Stop waits after SIGTERM before SIGKILL
	// (default DefaultStopTimeout).
	StopTimeout time.Duration
	// TLS, when set, makes the agent serve its HTTP API over HTTPS only,
	// and admit only clients presenting a certificate signed by the CA
	// (verify_incoming): HTTPAddr then names the HTTPS port, and no
	// plaintext port is open.
	TLS *TLSFiles
	// HCL fragments are passed to the agent as they are, one -hcl each (an
	// acl block, for instance).
	HCL []string
}

// TLSFiles are the PEM files of an agent's HTTPS API: its certificate and
// key (the certificate must name 127.0.0.1), and the CA that signs it and
// its clients' certificates.
type TLSFiles struct {
	CAFile, CertFile, KeyFile string
}

// Agent is a running (or stopped) Consul dev agent. Its methods are safe for
// concurrent use.
type Agent struct {
	bin      string
	args     []string
	httpAddr string
	logPath  string
	opts     Options

	mu   sync.Mutex
	proc *procgroup.Proc // nil before the first start
}

// Binary returns the path of the consul-dev executable: $FERRY_CONSUL_BIN if
// set, else the one tools/consul-dev/build.sh keeps in the Ferry cache (see
// toolbin.Path; a cold build takes 8 to 9 minutes).
func Binary() (string, error) { return toolbin.Path("consul-dev", "FERRY_CONSUL_BIN") }

// Start runs a dev agent on free loopback ports and returns once it has a
// leader. ctx bounds only the start-up: the agent runs until Stop or Kill.
func Start(ctx context.Context, opts Options) (*Agent, error) {
	if opts.Binary == "" {
		bin, err := Binary()
		if err != nil {
			return nil, err
		}
		opts.Binary = bin
	}
	if opts.Datacenter == "" {
		opts.Datacenter = DefaultDatacenter
	}
	if opts.NodeName == "" {
		opts.NodeName = DefaultNodeName
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = DefaultStopTimeout
	}
	if opts.LogFile == "" {
		f, err := os.CreateTemp("", "consul-dev-*.log")
		if err != nil {
			return nil, fmt.Errorf("consul log file: %w", err)
		}
		opts.LogFile = f.Name()
		f.Close()
	}

	// A port chosen free can still be taken before the agent binds it (by
	// another test's agent picking at the same moment); then the agent exits
	// at once, and new ports are tried.
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		var a *Agent
		a, err = start(ctx, opts)
		if err == nil {
			return a, nil
		}
		if !errors.Is(err, errExited) {
			break
		}
	}
	return nil, err
}

// errExited marks an agent process that ended before it had a leader.
var errExited = errors.New("exited before electing a leader")

func start(ctx context.Context, opts Options) (*Agent, error) {
	free, err := ports.Free(4, true)
	if err != nil {
		return nil, err
	}
	httpPort, serverPort, lanPort, wanPort := free[0], free[1], free[2], free[3]
	mode := []string{"-dev"}
	if opts.Persistent {
		if opts.DataDir == "" {
			return nil, errors.New("consulagent: Persistent needs DataDir")
		}
		mode = []string{"-server", "-bootstrap-expect", "1", "-ui=false"}
	}
	args := append(mode,
		"-client", "127.0.0.1",
		"-bind", "127.0.0.1",
		"-datacenter", opts.Datacenter,
		"-node", opts.NodeName,
		"-server-port", strconv.Itoa(serverPort),
		"-serf-lan-port", strconv.Itoa(lanPort),
		"-serf-wan-port", strconv.Itoa(wanPort),
		// -dev listens on gRPC 8502, gRPC-TLS 8503 and DNS 8600 unless told
		// not to; fixed ports would clash between parallel agents.
		"-grpc-port", "-1",
		"-grpc-tls-port", "-1",
		"-dns-port", "-1",
	)
	if opts.TLS != nil {
		// Consul 1.12 and later: the tls block; tls.defaults also covers the
		// server RPC port, which a single server does not dial.
		args = append(args, "-http-port", "-1", "-https-port", strconv.Itoa(httpPort),
			"-hcl", fmt.Sprintf("tls { defaults { ca_file = %q cert_file = %q key_file = %q verify_incoming = true } }",
				opts.TLS.CAFile, opts.TLS.CertFile, opts.TLS.KeyFile))
	} else {
		args = append(args, "-http-port", strconv.Itoa(httpPort))
	}
	for _, h := range opts.HCL {
		args = append(args, "-hcl", h)
	}
	if opts.DataDir != "" {
		args = append(args, "-data-dir", opts.DataDir)
	}
	a := &Agent{
		bin:      opts.Binary,
		args:     args,
		httpAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(httpPort)),
		logPath:  opts.LogFile,
		opts:     opts,
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.startLocked(ctx); err != nil {
		return nil, err
	}
	return a, nil
}

// HTTPAddr is the agent's HTTP API address, host:port (HTTPS with
// Options.TLS).
func (a *Agent) HTTPAddr() string { return a.httpAddr }

// LogFile is the path of the file that holds the agent's output.
func (a *Agent) LogFile() string { return a.logPath }

// PID is the process ID of the current (or last) agent process.
func (a *Agent) PID() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.proc == nil {
		return 0
	}
	return a.proc.PID()
}

// Stop sends SIGTERM and waits up to Options.StopTimeout for the agent to
// exit, then kills it. It is a no-op on an agent that has already exited.
// A non-nil error means the agent had to be killed.
func (a *Agent) Stop() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stopLocked()
}

// Kill ends the agent at once with SIGKILL, as a crash would, and waits for it
// to be gone.
func (a *Agent) Kill() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.proc != nil {
		a.proc.Kill()
	}
}

// Restart stops the agent (if it is running) and starts it again on the same
// ports, returning once it has a leader. A -dev agent keeps its state in
// memory, so the restarted agent has no KV entries, sessions or services.
func (a *Agent) Restart(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	// An agent that needed SIGKILL is gone all the same; start anew.
	_ = a.stopLocked()
	return a.startLocked(ctx)
}

// Pause freezes the agent with SIGSTOP: its ports stay open but nothing
// answers, like a hung server. It returns once every thread has stopped.
func (a *Agent) Pause() error {
	p, err := a.running()
	if err != nil {
		return err
	}
	return p.Pause()
}

// Resume undoes Pause with SIGCONT.
func (a *Agent) Resume() error {
	p, err := a.running()
	if err != nil {
		return err
	}
	return p.Resume()
}

func (a *Agent) running() (*procgroup.Proc, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.proc == nil || a.proc.Exited() {
		return nil, errors.New("consul agent not running")
	}
	return a.proc, nil
}

func (a *Agent) stopLocked() error {
	if a.proc == nil {
		return nil
	}
	if err := a.proc.Stop(a.opts.StopTimeout); err != nil {
		return fmt.Errorf("consul agent: %w", err)
	}
	return nil
}

func (a *Agent) startLocked(ctx context.Context) error {
	p, err := procgroup.Start(a.bin, a.args, a.logPath)
	if err != nil {
		return fmt.Errorf("consul agent: %w", err)
	}
	a.proc = p
	if err := a.waitLeader(ctx); err != nil {
		p.Kill()
		return fmt.Errorf("consul agent on %s: %w (log %s)\n%s", a.httpAddr, err, a.logPath, procgroup.LogTail(a.logPath, 20))
	}
	return nil
}

// waitLeader polls /v1/status/leader until it names a leader, the process
// exits, or the start-up deadline passes.
func (a *Agent) waitLeader(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, a.opts.StartTimeout)
	defer cancel()
	client, err := a.probeClient()
	if err != nil {
		return err
	}
	defer client.CloseIdleConnections()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		leader, err := a.leader(ctx, client)
		if err == nil && leader != "" {
			return nil
		}
		if err == nil {
			err = errors.New("no leader yet")
		}
		last = err
		select {
		case <-a.proc.Done():
			return fmt.Errorf("%w: %v", errExited, a.proc.Err())
		case <-ctx.Done():
			return fmt.Errorf("no leader: %w (last: %v)", ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// probeClient is the readiness check's HTTP client: with TLS it presents
// the agent's own certificate, which the CA signed for client use too.
func (a *Agent) probeClient() (*http.Client, error) {
	if a.opts.TLS == nil {
		return &http.Client{Timeout: time.Second}, nil
	}
	ca, err := os.ReadFile(a.opts.TLS.CAFile)
	if err != nil {
		return nil, fmt.Errorf("consul agent CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("consul agent CA %s: no PEM certificate", a.opts.TLS.CAFile)
	}
	cert, err := tls.LoadX509KeyPair(a.opts.TLS.CertFile, a.opts.TLS.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("consul agent certificate: %w", err)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	return &http.Client{Timeout: time.Second, Transport: tr}, nil
}

func (a *Agent) leader(ctx context.Context, client *http.Client) (string, error) {
	scheme := "http://"
	if a.opts.TLS != nil {
		scheme = "https://"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+a.httpAddr+"/v1/status/leader", nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %s: %s", resp.Status, bytes.TrimSpace(body))
	}
	var leader string
	if err := json.Unmarshal(body, &leader); err != nil {
		return "", fmt.Errorf("decode leader: %w", err)
	}
	return leader, nil
}
