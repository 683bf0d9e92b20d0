// Package procgroup runs the child processes of the tests, the demo and the
// benchmark (Kafka brokers, MirrorMaker 2, Consul, Jaeger, Ferry's own
// binaries), each alone in a process group:
//
//   - signals go to the whole group, so they reach anything the child forks
//     and never the Go process that started it;
//   - the child is killed when the Go process dies, so a crashed test binary
//     leaves no broker or agent behind;
//   - one goroutine per child reaps it and then kills whatever is left of its
//     group.
package procgroup

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Proc is one started child. Its methods are safe for concurrent use.
type Proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the child has exited and been reaped
	err  error         // Wait's result; read only after done is closed
}

// Start runs bin with args, appending its stdout and stderr to logPath
// after a line with the command, so a log read after a failure says what ran
// (and a restart's output follows the earlier run's).
func Start(bin string, args []string, logPath string) (*Proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("log file of %s: %w", filepath.Base(bin), err)
	}
	// The child keeps its own copy of the descriptor.
	defer logf.Close()
	if _, err := fmt.Fprintf(logf, "==> %s %s\n", bin, strings.Join(args, " ")); err != nil {
		return nil, fmt.Errorf("log file of %s: %w", filepath.Base(bin), err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Pdeathsig fires when the OS thread that started the child exits; the Go
	// runtime ends a thread only when a goroutine exits while locked to it,
	// which nothing here does, so in practice it means "the Go process died".
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", filepath.Base(bin), err)
	}
	p := &Proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		// Leave nothing of the group behind, whatever ended the child. This
		// runs right after the reap, before the group's ID can be reused.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		close(p.done)
	}()
	return p, nil
}

// PID is the child's process ID, which is also its group's ID.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Done is closed once the child has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the child has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is how the child ended (nil for exit status 0), or nil while it runs.
func (p *Proc) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Signal sends sig to the child's group.
func (p *Proc) Signal(sig syscall.Signal) error {
	if p.Exited() {
		return errors.New("process has exited")
	}
	if err := syscall.Kill(-p.PID(), sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal pid %d: %w", p.PID(), err)
	}
	return nil
}

// Stop sends SIGTERM (and SIGCONT, so a paused child can act on it) and
// waits up to timeout, then kills the child. It returns an error only when
// the child had to be killed; Err says how it ended.
func (p *Proc) Stop(timeout time.Duration) error {
	if p.Exited() {
		return nil
	}
	_ = p.Signal(syscall.SIGTERM)
	_ = p.Signal(syscall.SIGCONT)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
		p.Kill()
		return fmt.Errorf("pid %d did not exit within %s of SIGTERM; killed", p.PID(), timeout)
	}
}

// Kill ends the group with SIGKILL, as a crash would, and waits until the
// child is reaped.
func (p *Proc) Kill() {
	_ = p.Signal(syscall.SIGKILL)
	<-p.done
}

// Pause freezes the group with SIGSTOP, as a long GC pause or a frozen VM
// would: its ports stay open but nothing answers. It returns once every
// thread of the child has stopped: kill returns before the group stop is
// complete, and until each thread acts on the signal it can still serve.
func (p *Proc) Pause() error {
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	deadline := time.Now().Add(pauseTimeout)
	for {
		stopped, err := allThreadsStopped(p.PID())
		if err != nil {
			return fmt.Errorf("pause pid %d: %w", p.PID(), err)
		}
		if stopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pause pid %d: threads still running after %s", p.PID(), pauseTimeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// pauseTimeout bounds Pause's wait. A thread stops only when it leaves
// uninterruptible sleep (state D: disk I/O, or a parent waiting on a vfork
// child), which can take seconds on a loaded machine.
const pauseTimeout = 30 * time.Second

// Resume undoes Pause with SIGCONT.
func (p *Proc) Resume() error { return p.Signal(syscall.SIGCONT) }

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

// LogTail returns the last n lines of the file at path (a child's log), or
// the error reading it.
func LogTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
