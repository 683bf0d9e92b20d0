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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
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
	cmd  *exec.Cmd     // nil before the first start
	done chan struct{} // closed when cmd has exited
}

// Binary returns the path of the consul-dev executable: $FERRY_CONSUL_BIN if
// set, else the one tools/consul-dev/build.sh keeps in the Ferry cache
// ($FERRY_CACHE or ~/.cache/ferry). When the repository is found above the
// working directory, build.sh is run first: it returns at once when the binary
// is current, and otherwise builds it, which takes 8 to 9 minutes on a cold
// Go cache.
func Binary() (string, error) {
	if bin := os.Getenv("FERRY_CONSUL_BIN"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("FERRY_CONSUL_BIN: %w", err)
		}
		return bin, nil
	}
	if root, err := repoRoot(); err == nil {
		return build(root)
	}
	// Outside the repository nothing can be built; use what is cached.
	cached, err := cachedBinary()
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(cached); err != nil {
		return "", fmt.Errorf("consul-dev not built and repository not found: %w", err)
	}
	return cached, nil
}

func cachedBinary() (string, error) {
	cache := os.Getenv("FERRY_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("ferry cache dir: %w", err)
		}
		cache = filepath.Join(home, ".cache", "ferry")
	}
	return filepath.Join(cache, "bin", "consul-dev"), nil
}

// repoRoot walks up from the working directory to the directory that holds
// tools/consul-dev.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if fi, err := os.Stat(filepath.Join(dir, "tools", "consul-dev")); err == nil && fi.IsDir() {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no tools/consul-dev above the working directory")
		}
		dir = parent
	}
}

func build(root string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("bash", filepath.Join(root, "tools", "consul-dev", "build.sh"))
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build consul-dev: %w\n%s", err, tail(stderr.String(), 40))
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	bin := lines[len(lines)-1]
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("build consul-dev: %w", err)
	}
	return bin, nil
}

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
	ports, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	httpPort, serverPort, lanPort, wanPort := ports[0], ports[1], ports[2], ports[3]
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
		"-http-port", strconv.Itoa(httpPort),
		"-server-port", strconv.Itoa(serverPort),
		"-serf-lan-port", strconv.Itoa(lanPort),
		"-serf-wan-port", strconv.Itoa(wanPort),
		// -dev listens on gRPC 8502, gRPC-TLS 8503 and DNS 8600 unless told
		// not to; fixed ports would clash between parallel agents.
		"-grpc-port", "-1",
		"-grpc-tls-port", "-1",
		"-dns-port", "-1",
	)
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

// HTTPAddr is the agent's HTTP API address, host:port.
func (a *Agent) HTTPAddr() string { return a.httpAddr }

// LogFile is the path of the file that holds the agent's output.
func (a *Agent) LogFile() string { return a.logPath }

// PID is the process ID of the current (or last) agent process.
func (a *Agent) PID() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd == nil || a.cmd.Process == nil {
		return 0
	}
	return a.cmd.Process.Pid
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
	a.killLocked()
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
	if err := a.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	// kill returns before the group stop is complete: until one thread acts
	// on the signal, the others can still serve a request.
	return waitStopped(a.PID(), 5*time.Second)
}

// Resume undoes Pause with SIGCONT.
func (a *Agent) Resume() error { return a.signal(syscall.SIGCONT) }

func (a *Agent) signal(sig syscall.Signal) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.runningLocked() {
		return errors.New("consul agent not running")
	}
	if err := syscall.Kill(-a.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("signal consul agent: %w", err)
	}
	return nil
}

func (a *Agent) startLocked(ctx context.Context) error {
	logf, err := os.OpenFile(a.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("consul log file: %w", err)
	}
	// The child gets its own copy of the descriptor; ours is closed on return.
	defer logf.Close()
	fmt.Fprintf(logf, "==> consulagent: %s %s\n", a.bin, strings.Join(a.args, " "))

	cmd := exec.Command(a.bin, a.args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	// Its own process group, so Stop and Kill reach anything it forks.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start consul agent: %w", err)
	}
	done := make(chan struct{})
	go func() {
		// The exit status is kept in cmd.ProcessState.
		_ = cmd.Wait()
		// Whatever ended the agent, leave nothing of its group behind. This
		// runs right after the reap, before the group's ID can be reused.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		close(done)
	}()
	a.cmd, a.done = cmd, done

	if err := a.waitLeader(ctx); err != nil {
		a.killLocked()
		return fmt.Errorf("consul agent on %s: %w (log %s)\n%s", a.httpAddr, err, a.logPath, tailFile(a.logPath, 20))
	}
	return nil
}

// waitLeader polls /v1/status/leader until it names a leader, the process
// exits, or the start-up deadline passes.
func (a *Agent) waitLeader(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, a.opts.StartTimeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
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
		case <-a.done:
			return fmt.Errorf("%w: %s", errExited, a.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("no leader: %w (last: %v)", ctx.Err(), last)
		case <-tick.C:
		}
	}
}

func (a *Agent) leader(ctx context.Context, client *http.Client) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.httpAddr+"/v1/status/leader", nil)
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

func (a *Agent) runningLocked() bool {
	if a.cmd == nil {
		return false
	}
	select {
	case <-a.done:
		return false
	default:
		return true
	}
}

func (a *Agent) stopLocked() error {
	if !a.runningLocked() {
		return nil
	}
	pgid := a.cmd.Process.Pid
	// SIGCONT too, so a paused agent can act on the SIGTERM.
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	_ = syscall.Kill(-pgid, syscall.SIGCONT)
	timer := time.NewTimer(a.opts.StopTimeout)
	defer timer.Stop()
	select {
	case <-a.done:
		return nil
	case <-timer.C:
		a.killLocked()
		return fmt.Errorf("consul agent did not exit within %s of SIGTERM; killed", a.opts.StopTimeout)
	}
}

func (a *Agent) killLocked() {
	if !a.runningLocked() {
		return
	}
	_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
	<-a.done
}

// waitStopped polls /proc until every thread of pid is in the stopped
// state.
func waitStopped(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		stopped, err := allThreadsStopped(pid)
		if err != nil {
			return fmt.Errorf("pause consul agent: %w", err)
		}
		if stopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pause consul agent: not stopped after %s", timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func allThreadsStopped(pid int) (bool, error) {
	stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(stats) == 0 {
		return false, fmt.Errorf("threads of %d: %v", pid, err)
	}
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread has exited
		}
		if err != nil {
			return false, err
		}
		// The state follows the command name, which is in parentheses and
		// may itself hold spaces or parentheses: "pid (comm) S ...".
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return false, fmt.Errorf("parse %s", path)
		}
		if state := b[i+2]; state != 'T' && state != 't' {
			return false, nil
		}
	}
	return true, nil
}

// Agent ports are drawn from below Linux's ephemeral range (32768-60999 by
// default), from which the kernel hands out the local ports of outgoing
// connections: there, any client on the machine could take an agent's port
// while it is down for a Restart.
const (
	portMin = 15000
	portMax = 32767
)

// freePorts returns n distinct loopback ports that are free for both TCP and
// UDP (Serf uses both). The listeners stay open until all n are chosen, so the
// ports differ; another process may still take one before the agent binds it.
func freePorts(n int) ([]int, error) {
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries == 1000 {
			return nil, fmt.Errorf("no free port in %d-%d", portMin, portMax)
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(portMin+rand.IntN(portMax-portMin+1)))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue // taken, or already chosen: try another
		}
		closers = append(closers, l)
		u, err := net.ListenPacket("udp", addr)
		if err != nil {
			continue
		}
		closers = append(closers, u)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return tail(string(b), n)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
