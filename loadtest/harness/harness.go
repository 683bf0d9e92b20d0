// Package harness runs Ferry the way it runs in production, for the demo,
// the end-to-end tests and the scenarios: the real ferry-fetcher and
// ferry-writer binaries as child processes with YAML configuration, against
// real Kafka wire protocol (kfake in process, or Apache Kafka).
package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"
)

// RepoRoot finds the repository root by walking up to go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Build compiles ferry-fetcher and ferry-writer into dir.
func Build(ctx context.Context, dir string) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	for _, svc := range []string{"fetcher", "writer"} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, "ferry-"+svc), "./services/"+svc)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build ferry-%s: %w\n%s", svc, err, out)
		}
	}
	return nil
}

var (
	addrMu sync.Mutex
	given  = map[string]bool{}
)

// FreeAddr returns a loopback host:port that was free a moment ago and that
// this process has not handed out before: the kernel reuses a released
// port quickly, and two components of one test must not get the same one.
func FreeAddr() (string, error) {
	addrMu.Lock()
	defer addrMu.Unlock()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		addr := ln.Addr().String()
		ln.Close()
		if !given[addr] {
			given[addr] = true
			return addr, nil
		}
	}
}

// Process is a running Ferry binary.
type Process struct {
	Name    string
	LogPath string
	bin     string
	args    []string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
}

// Start runs bin with a YAML config file made from cfg, logging to
// dir/name.log (appended, so restarts keep earlier logs). A writer or
// fetcher configuration without its own TLS settings gets mutual TLS with
// development certificates made in dir (see Certs).
func Start(dir, bin, name string, cfg map[string]any) (*Process, error) {
	if err := withTLS(dir, bin, cfg); err != nil {
		return nil, err
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return nil, err
	}
	p := &Process{Name: name, LogPath: filepath.Join(dir, name+".log"), bin: bin, args: []string{"--config", path}}
	return p, p.start()
}

func (p *Process) start() error {
	logf, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return nil
}

// PID is the process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the exit error, once Done.
func (p *Process) Err() error { return p.err }

// Stop sends SIGTERM and waits for a graceful exit; after timeout it kills.
func (p *Process) Stop(timeout time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.Kill()
		return fmt.Errorf("%s did not stop within %v after SIGTERM", p.Name, timeout)
	}
}

// Kill sends SIGKILL to the process group and waits.
func (p *Process) Kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Restart starts the same binary with the same config again.
func (p *Process) Restart() error { return p.start() }

// WriterConfig is a writer configuration for a test or the demo.
func WriterConfig(id, listen, admin string, target []string, links ...map[string]any) map[string]any {
	return map[string]any{
		"id": id, "listen": listen,
		"admin":  map[string]any{"listen": admin},
		"log":    map[string]any{"level": "info"},
		"target": map[string]any{"bootstrap_servers": target},
		"links":  links,
	}
}

// FetcherConfig is a fetcher configuration for a test or the demo.
func FetcherConfig(id, admin, link string, source, writers []string, include ...string) map[string]any {
	return map[string]any{
		"id":     id,
		"admin":  map[string]any{"listen": admin},
		"log":    map[string]any{"level": "info"},
		"source": map[string]any{"bootstrap_servers": source},
		"link": map[string]any{
			"name":               link,
			"topics":             map[string]any{"include": include},
			"discovery_interval": "1s",
		},
		"writers": map[string]any{"addresses": writers, "min_backoff": "50ms", "max_backoff": "1s", "open_timeout": "2m"},
	}
}

// Metric reads one sample (name with labels exactly as exposed, or a bare
// name summed over its series) from a Prometheus endpoint.
func Metric(ctx context.Context, adminAddr, name string) (float64, error) {
	families, err := scrape(ctx, adminAddr)
	if err != nil {
		return 0, err
	}
	v, ok := families[name]
	if !ok {
		return 0, nil
	}
	return v, nil
}

// Pause stops the process with SIGSTOP, as a long GC pause or a frozen VM
// would; Resume continues it.
func (p *Process) Pause() error { return syscall.Kill(p.cmd.Process.Pid, syscall.SIGSTOP) }

// Resume continues a paused process.
func (p *Process) Resume() error { return syscall.Kill(p.cmd.Process.Pid, syscall.SIGCONT) }

// CPUSeconds is the user plus system CPU time a process has used so far,
// from /proc/<pid>/stat (Linux).
func CPUSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state is field 3, utime 14, stime 15.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("unexpected /proc stat format")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("bad /proc stat times")
	}
	const ticks = 100 // USER_HZ on Linux
	return (ut + st) / ticks, nil
}
