package kafkaclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TLSListenerError is a plaintext client's failure at a broker that speaks
// TLS: the broker closes every connection whose first bytes are not a TLS
// handshake, which the client sees as a dropped connection, the same as a
// broker restarting. It is a refusal, not worth waiting for: no retry
// changes the setting.
type TLSListenerError struct {
	Broker  string
	Setting string // the key of the TLS setting to turn on
	Err     error  // what the client saw
}

func (e *TLSListenerError) Error() string {
	return fmt.Sprintf("broker %s speaks TLS but %s.enabled is false (the broker closed the plaintext connection: %v): turn TLS on for this cluster",
		e.Broker, e.Setting, e.Err)
}

// probeTimeout bounds each broker's TLS probe.
const probeTimeout = 3 * time.Second

// Explain returns err, or, when it is a dropped connection of a client
// without TLS (c.TLS off) whose brokers answer a TLS handshake, a
// TLSListenerError naming setting (the cluster's key: "source.tls"), which
// Unreachable refuses. Each broker is asked only on such an error, with a
// handshake that checks nothing of its certificate: it tells whether the
// listener speaks TLS, and no data is sent over it.
func (c Config) Explain(ctx context.Context, setting string, err error) error {
	if err == nil || c.TLS.Enabled || !dropped(err) {
		return err
	}
	for _, addr := range c.BootstrapServers {
		if speaksTLS(ctx, addr) {
			return &TLSListenerError{Broker: addr, Setting: setting, Err: err}
		}
	}
	return err
}

// dropped: the connection ended with no Kafka answer, as sarama and
// franz-go report it.
func dropped(err error) bool {
	var first *kgo.ErrFirstReadEOF
	return errors.As(err, &first) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// speaksTLS reports whether addr completes a TLS handshake, or answers one
// with a TLS alert (a broker that wants a client certificate).
func speaksTLS(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // a probe of the protocol only: nothing is sent or trusted
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		conn.Close()
		return true
	}
	var (
		alert tls.AlertError
		op    *net.OpError
	)
	return errors.As(err, &alert) || (errors.As(err, &op) && op.Op == "remote error")
}
