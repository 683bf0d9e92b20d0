package soak

import (
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// TestHopOutlivesAHungRemoval drives toxiproxy v2.5.0 into the deadlock
// the CI soak hit: a destination stops reading while a latency toxic
// holds data, a removal starts (it takes the proxy's toxic lock and waits
// for the toxic, which waits for the blocked writer), then the
// destination closes (the writer ends and waits for the same lock). The
// removal never returns; the hop must replace its proxy, and the new one
// must carry a connection.
func TestHopOutlivesAHungRemoval(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	stalled := make(chan net.Conn, 1)
	echo := make(chan net.Conn, 1)
	go func() {
		first := true
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			if first {
				// The stalled destination: reads nothing.
				c.(*net.TCPConn).SetReadBuffer(4096)
				stalled <- c
				first = false
				continue
			}
			echo <- c
			go io.Copy(c, c)
		}
	}()

	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := free.Addr().String()
	free.Close()
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(server, "hop", listen, up.Addr().String())
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	h := &hop{p: p, toxics: server, log: slog.New(slog.DiscardHandler)}
	defer func() { h.proxy().Stop() }()
	if err := h.addToxic(`{"name":"lag","type":"latency","stream":"upstream","attributes":{"latency":50}}`); err != nil {
		t.Fatal(err)
	}

	client, err := net.Dial("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	dest := <-stalled
	// Fill the path until the writer blocks on the destination and the
	// toxic holds a chunk it cannot hand on.
	client.SetWriteDeadline(time.Now().Add(3 * time.Second))
	chunk := make([]byte, 32<<10)
	for {
		if _, err := client.Write(chunk); err != nil {
			break
		}
	}

	removed := make(chan error, 1)
	go func() { removed <- h.removeToxics("lag") }()
	time.Sleep(500 * time.Millisecond) // the removal holds the lock
	dest.(*net.TCPConn).SetLinger(0)
	dest.Close() // the writer fails and waits for that lock

	select {
	case err := <-removed:
		if err != nil {
			t.Fatalf("removeToxics: %v", err)
		}
	case <-time.After(removeWait + 10*time.Second):
		t.Fatal("removeToxics did not return: the hop hangs with toxiproxy")
	}
	if h.proxy() == p {
		t.Fatal("the removal returned on the old proxy: toxiproxy did not hang, so this test no longer reproduces Shopify/toxiproxy#558")
	}

	// The replacement carries a connection, with no toxic.
	c, err := net.Dial("tcp", listen)
	if err != nil {
		t.Fatalf("dial the replaced proxy: %v", err)
	}
	defer c.Close()
	<-echo
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "ping" {
		t.Fatalf("read through the replaced proxy: %q, %v", got, err)
	}
}
