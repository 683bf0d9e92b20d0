package bench

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/ferry-replicator/ferry/loadtest/harness"
)

// WANOptions shape an emulated wide-area hop.
type WANOptions struct {
	// RTT is the added round trip; half of it is added in each direction.
	RTT time.Duration
	// BandwidthKBs caps each direction of each connection, in KB/s
	// (toxiproxy's unit); 0 means no cap.
	BandwidthKBs int
}

// wan is an emulated wide-area hop on loopback: clients connect to Addr, a
// byte-counting forwarder passes everything to an in-process toxiproxy that
// adds latency (and optionally caps bandwidth) and forwards to upstream.
type wan struct {
	Addr    string
	proxy   *toxiproxy.Proxy
	counter *counter
}

// startWAN listens on listen and forwards to upstream through toxiproxy.
func startWAN(listen, upstream string, o WANOptions) (*wan, error) {
	inner, err := harness.FreeAddr()
	if err != nil {
		return nil, fmt.Errorf("wan: %w", err)
	}
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	proxy := toxiproxy.NewProxy(server, "wan", inner, upstream)
	if err := proxy.Start(); err != nil {
		return nil, fmt.Errorf("wan: start toxiproxy: %w", err)
	}
	half := o.RTT.Milliseconds() / 2
	toxics := []string{
		fmt.Sprintf(`{"name":"lat-up","type":"latency","stream":"upstream","attributes":{"latency":%d}}`, half),
		fmt.Sprintf(`{"name":"lat-down","type":"latency","stream":"downstream","attributes":{"latency":%d}}`, half),
	}
	if o.BandwidthKBs > 0 {
		toxics = append(toxics,
			fmt.Sprintf(`{"name":"bw-up","type":"bandwidth","stream":"upstream","attributes":{"rate":%d}}`, o.BandwidthKBs),
			fmt.Sprintf(`{"name":"bw-down","type":"bandwidth","stream":"downstream","attributes":{"rate":%d}}`, o.BandwidthKBs))
	}
	for _, t := range toxics {
		if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(t)); err != nil {
			proxy.Stop()
			return nil, fmt.Errorf("wan: add toxic %s: %w", t, err)
		}
	}
	c, err := startCounter(listen, inner)
	if err != nil {
		proxy.Stop()
		return nil, fmt.Errorf("wan: %w", err)
	}
	return &wan{Addr: listen, proxy: proxy, counter: c}, nil
}

// Bytes is the number of bytes carried so far, both directions.
func (w *wan) Bytes() int64 { return w.counter.bytes.Load() }

// Close stops accepting, closes every connection and waits for them.
func (w *wan) Close() {
	w.counter.close()
	w.proxy.Stop()
}

// counter is a TCP forwarder that counts the bytes it carries.
type counter struct {
	ln       net.Listener
	upstream string
	bytes    atomic.Int64
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[net.Conn]bool
	closed   bool
}

func startCounter(listen, upstream string) (*counter, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("counter listen %s: %w", listen, err)
	}
	c := &counter{ln: ln, upstream: upstream, conns: map[net.Conn]bool{}}
	c.wg.Add(1)
	go c.accept()
	return c, nil
}

func (c *counter) accept() {
	defer c.wg.Done()
	for {
		conn, err := c.ln.Accept()
		if err != nil {
			return // closed
		}
		up, err := net.Dial("tcp", c.upstream)
		if err != nil {
			conn.Close()
			continue
		}
		if !c.track(conn, up) {
			return
		}
		c.wg.Add(2)
		go c.pipe(conn, up)
		go c.pipe(up, conn)
	}
}

// track registers a connection pair unless the counter is closing.
func (c *counter) track(a, b net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		a.Close()
		b.Close()
		return false
	}
	c.conns[a], c.conns[b] = true, true
	return true
}

func (c *counter) pipe(dst, src net.Conn) {
	defer c.wg.Done()
	// An error (reset, closed) ends the copy like EOF does. Ending one
	// direction ends the pair: Kafka and gRPC never half-close.
	_, _ = io.Copy(countingWriter{dst, &c.bytes}, src)
	dst.Close()
	src.Close()
	c.mu.Lock()
	delete(c.conns, dst)
	delete(c.conns, src)
	c.mu.Unlock()
}

func (c *counter) close() {
	c.mu.Lock()
	c.closed = true
	for conn := range c.conns {
		conn.Close()
	}
	c.mu.Unlock()
	c.ln.Close()
	c.wg.Wait()
}

type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (cw countingWriter) Write(p []byte) (int, error) {
	n, err := cw.w.Write(p)
	cw.n.Add(int64(n))
	return n, err
}
