package kafkabroker

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// jvmFlags are the flags Kafka's own kafka-run-class.sh uses by default
// (KAFKA_JVM_PERFORMANCE_OPTS), so measurements resemble a packaged Kafka.
var jvmFlags = []string{
	"-server",
	"-XX:+UseG1GC",
	"-XX:MaxGCPauseMillis=20",
	"-XX:InitiatingHeapOccupancyPercent=35",
	"-XX:+ExplicitGCInvokesConcurrent",
	"-XX:+ExitOnOutOfMemoryError",
	"-Djava.awt.headless=true",
}

// javaArgs builds the java command line for mainClass.
func javaArgs(libs, heap string, extra []string, mainClass string, args ...string) []string {
	a := []string{"-Xms" + heap, "-Xmx" + heap}
	a = append(a, jvmFlags...)
	if conf := log4jConfig(); conf != "" {
		a = append(a, "-Dlog4j2.configurationFile="+conf)
	}
	a = append(a, extra...)
	a = append(a, "-cp", filepath.Join(libs, "*"), mainClass)
	return append(a, args...)
}

// proc is one running java process, alone in its own process group.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // result of Wait; read only after done is closed
}

// startProc starts java with args, appending its stdout and stderr to
// logPath. The process gets its own process group so that signals reach it
// (and any child) without touching the Go test process, and SIGKILL if the
// Go process dies so that no orphan JVM survives a crashed test binary.
func startProc(args []string, logPath string) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	// The child keeps its own copy of the descriptor.
	defer logf.Close()

	cmd := exec.Command("java", args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	// Pdeathsig fires when the OS thread that started the child exits; the Go
	// runtime only ends threads whose goroutine exits while locked to them,
	// which this package never does, so in practice it means "Go process died".
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	// The only goroutine per process: it reaps the child and reports exit.
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the whole process group.
func (p *proc) signal(sig syscall.Signal) error {
	if p.exited() {
		return errors.New("process has exited")
	}
	if err := syscall.Kill(-p.pid(), sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// stop asks the JVM to shut down (SIGTERM runs its shutdown hooks) and waits
// up to timeout, then kills it. A paused process is resumed first, or it
// would never act on SIGTERM.
func (p *proc) stop(timeout time.Duration) error {
	if p.exited() {
		return nil
	}
	_ = p.signal(syscall.SIGTERM)
	_ = p.signal(syscall.SIGCONT)
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
		p.kill()
		return fmt.Errorf("pid %d did not exit within %s of SIGTERM, killed", p.pid(), timeout)
	}
}

// kill sends SIGKILL to the process group and waits until it is reaped.
func (p *proc) kill() {
	_ = p.signal(syscall.SIGKILL)
	<-p.done
}

// exitError describes how a process that should be running ended, with the
// end of its log, which is where the JVM says why.
func exitError(p *proc, logPath string) error {
	return fmt.Errorf("java exited (%v); end of %s:\n%s", p.err, logPath, logTail(logPath, 30))
}

// logTail returns the last n lines of the file at path.
func logTail(path string, n int) string {
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

// writeProps writes a Java properties file with keys sorted, values as is
// but for line breaks, written as the \n escape so that a multi-line value
// (inline PEM) stays one property. Mode 0600: it may hold a private key.
func writeProps(path, header string, props map[string]string) error {
	var b strings.Builder
	b.WriteString("# " + header + "\n")
	for _, k := range slices.Sorted(maps.Keys(props)) {
		fmt.Fprintf(&b, "%s=%s\n", k, strings.ReplaceAll(props[k], "\n", `\n`))
	}
	return os.WriteFile(path, []byte(b.String()), 0o600)
}

// freePorts returns n distinct free TCP ports on 127.0.0.1. The listeners
// are held open until all ports are chosen so the kernel cannot hand out the
// same one twice; another process may still take one before Kafka binds it,
// which is rare enough for tests.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
