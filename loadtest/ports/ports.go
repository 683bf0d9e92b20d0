// Package ports picks free loopback ports for the servers the tests start
// (Kafka brokers, Consul, Jaeger).
package ports

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
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
// TCP and, when udp is set, for UDP as well (Consul's Serf uses both). The
// listeners stay open until all n are chosen, so the ports differ; another
// process may still take one before the server binds it, which the callers
// handle by trying again.
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
