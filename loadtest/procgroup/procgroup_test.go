package procgroup

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-replicator/ferry/pkg/testwait"
)

// start runs a shell script as the child, logging to a temporary file.
func start(t *testing.T, script string) (*Proc, string) {
	t.Helper()
	log := filepath.Join(t.TempDir(), "child.log")
	p, err := Start("/bin/sh", []string{"-c", script}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p, log
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, 10*time.Second, what, cond)
}

// alive reports whether a process with pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z'
}

// grandchild reads the PID the script wrote to the log's last line.
func grandchild(t *testing.T, log string) int {
	t.Helper()
	var pid int
	waitFor(t, "the grandchild's pid", func() bool {
		lines := strings.Split(strings.TrimSpace(LogTail(log, 1)), "\n")
		n, err := strconv.Atoi(lines[len(lines)-1])
		pid = n
		return err == nil && n > 0
	})
	return pid
}

// The log starts with the command, then holds the child's output, and Err
// reports the exit status once the child is done.
func TestLogAndExitStatus(t *testing.T) {
	p, log := start(t, "echo hello; exit 3")
	<-p.Done()
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("Err = %v, want exit status 3", err)
	}
	got := LogTail(log, 10)
	if want := "==> /bin/sh -c echo hello; exit 3\nhello"; got != want {
		t.Fatalf("log = %q, want %q", got, want)
	}
}

// Kill reaches what the child forked, not only the child.
func TestKillEndsTheWholeGroup(t *testing.T) {
	p, log := start(t, "sleep 300 & echo $!; wait")
	gc := grandchild(t, log)
	p.Kill()
	waitFor(t, "the grandchild to die", func() bool { return !alive(gc) })
}

// A child that exits on its own leaves nothing of its group behind.
func TestExitCleansUpTheGroup(t *testing.T) {
	p, log := start(t, "sleep 300 & echo $!; sleep 0.2")
	gc := grandchild(t, log)
	<-p.Done()
	waitFor(t, "the grandchild to die", func() bool { return !alive(gc) })
}

// Stop kills a child that ignores SIGTERM once the timeout passes, and says
// so; a child that honours SIGTERM stops without an error.
func TestStop(t *testing.T) {
	// The log's first line holds the script, so the marker is computed.
	stubborn, log := start(t, "trap '' TERM; echo trap-$((1+1)); while :; do sleep 0.05; done")
	waitFor(t, "the trap", func() bool { return strings.Contains(LogTail(log, 5), "trap-2") })
	if err := stubborn.Stop(200 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("Stop of a child ignoring SIGTERM = %v, want an error saying it was killed", err)
	}
	if !stubborn.Exited() {
		t.Fatal("child still running after Stop")
	}
	polite, _ := start(t, "sleep 300")
	if err := polite.Stop(10 * time.Second); err != nil {
		t.Fatalf("Stop = %v", err)
	}
	if err := polite.Stop(time.Second); err != nil {
		t.Fatalf("second Stop = %v, want a no-op", err)
	}
}

// Pause returns only once the child is stopped, and a paused child still
// acts on Stop (which sends SIGCONT after SIGTERM).
func TestPauseResumeStop(t *testing.T) {
	// Pause only once sh has become sleep: a SIGSTOP that catches a child
	// between vfork and exec leaves its parent waiting in state D, which no
	// stop signal ends.
	p, _ := start(t, "exec sleep 300")
	waitFor(t, "the exec", func() bool {
		comm, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID()) + "/comm")
		return err == nil && strings.TrimSpace(string(comm)) == "sleep"
	})
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	if stopped, err := allThreadsStopped(p.PID()); err != nil || !stopped {
		t.Fatalf("after Pause: stopped %v, err %v", stopped, err)
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the child to run again", func() bool {
		stopped, err := allThreadsStopped(p.PID())
		return err == nil && !stopped
	})
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(10 * time.Second); err != nil {
		t.Fatalf("Stop of a paused child = %v", err)
	}
	if err := p.Signal(syscall.SIGCONT); err == nil {
		t.Fatal("Signal to an exited child succeeded")
	}
	if err := p.Pause(); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("Pause of an exited child = %v, want an error", err)
	}
}
