// Package ports picks free loopback ports for the servers the tests start
// (Kafka brokers, Consul, Jaeger).
package ports

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
)

// Ports are drawn from below Linux's ephemeral range (32768-60999 by
// default), from which the kernel hands out the local ports of outgoing
// connections: there, any client on the machine could take a server's port
// while the server is down for a restart.
const (
	portMin = 15000
	portMax = 32767
)

// Free returns n distinct loopback ports that were free a moment ago, for
// TCP and, when udp is set, for UDP as well (Consul's Serf uses both), and
// reserves them for the life of this process: each is locked in a file
// that every Ferry test process consults (reserve), so a port stays this
// process's while its server is down for a restart, when another test
// binary running beside it (go test runs packages in parallel) would
// otherwise take it. A process that does not use this package may still
// take one before the server binds it, which the callers handle by trying
// again.
func Free(n int, udp bool) ([]int, error) {
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
		if !reserve(l.Addr().(*net.TCPAddr).Port) {
			continue // another Ferry test process holds it
		}
		if udp {
			u, err := net.ListenPacket("udp", addr)
			if err != nil {
				continue
			}
			closers = append(closers, u)
		}
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

var (
	reservedMu sync.Mutex
	reserved   []*os.File // held open, and so locked, until the process exits
)

// reserve locks the port's file under the temporary folder without
// waiting; it reports whether this process now holds it. The lock is the
// open file's, so it ends with the process, however it ends.
func reserve(port int) bool {
	dir := filepath.Join(os.TempDir(), "ferry-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return true // no shared folder: fall back to the bind check alone
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return false
	}
	reservedMu.Lock()
	reserved = append(reserved, f)
	reservedMu.Unlock()
	return true
}
