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
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ferry-replicator/ferry/loadtest/ports"
	"github.com/ferry-replicator/ferry/loadtest/procgroup"
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

// Build compiles ferry-fetcher, ferry-writer and ferryctl into dir (the
// drills and the ferry-dr soak fail links over with ferryctl, as an
// operator does); with race, with the race detector, so the process-level
// tests check the binaries too (Process.Crashes reads what the detector
// reported).
func Build(ctx context.Context, dir string, race bool) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	for _, b := range []struct{ bin, pkg string }{
		{"ferry-fetcher", "./services/fetcher"},
		{"ferry-writer", "./services/writer"},
		{"ferryctl", "./services/ferryctl"},
	} {
		args := []string{"build", "-o", filepath.Join(dir, b.bin)}
		if race {
			args = append(args, "-race")
		}
		cmd := exec.CommandContext(ctx, "go", append(args, b.pkg)...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %w\n%s", b.bin, err, out)
		}
	}
	return nil
}

// crashMarks start what a Ferry process must never write to its log: a
// report of Go's race detector, a panic, or a fatal runtime error (the
// last two at a line's start, where the runtime writes them; Ferry's own
// log lines start with "time=").
var crashMarks = []string{"WARNING: DATA RACE", "\npanic: ", "\nfatal error: "}

// Crashes returns the first race report, panic or fatal runtime error in
// the process's log (all of its runs) and what follows it, empty when
// there is none. A process that exits by design (a writer whose checkpoint
// view failed) is not a crash; one that panics is a bug, whatever the
// copy's outcome.
func (p *Process) Crashes() string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return ""
	}
	text := "\n" + string(data) // a panic may be the log's first line
	first := -1
	for _, m := range crashMarks {
		if i := strings.Index(text, m); i >= 0 && (first < 0 || i < first) {
			first = i
		}
	}
	if first < 0 {
		return ""
	}
	return strings.TrimPrefix(text[first:min(len(text), first+8000)], "\n")
}

// FreeAddr returns a loopback host:port for a server a test starts (a
// writer's listener, its admin port, a proxy): below the ephemeral range
// and reserved for this process (package ports), so it is still free when
// the server binds it again after a kill or a restart.
func FreeAddr() (string, error) {
	p, err := ports.Free(1, false)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p[0])), nil
}

// Process is a running Ferry binary.
type Process struct {
	Name    string
	LogPath string
	bin     string
	args    []string
	proc    *procgroup.Proc
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
	return p, p.Restart()
}

// PID is the process id.
func (p *Process) PID() int { return p.proc.PID() }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.proc.Done() }

// Err is the exit error, once Done.
func (p *Process) Err() error { return p.proc.Err() }

// Stop sends SIGTERM and waits for a graceful exit, returning how the
// process ended; after timeout it kills.
func (p *Process) Stop(timeout time.Duration) error {
	if err := p.proc.Stop(timeout); err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	return p.proc.Err()
}

// Kill sends SIGKILL to the process group and waits.
func (p *Process) Kill() { p.proc.Kill() }

// Restart starts the same binary with the same config again (and is
// Start's first run).
func (p *Process) Restart() error {
	proc, err := procgroup.Start(p.bin, p.args, p.LogPath)
	if err != nil {
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	p.proc = proc
	return nil
}

// RestartWith starts bin in place of the process's binary, with the same
// configuration and log, once the process has exited: a rolling upgrade's
// new build over the old one.
func (p *Process) RestartWith(bin string) error {
	p.bin = bin
	return p.Restart()
}

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
// would, and returns once all its threads have stopped; Resume continues it.
func (p *Process) Pause() error { return p.proc.Pause() }

// Resume continues a paused process.
func (p *Process) Resume() error { return p.proc.Resume() }

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
