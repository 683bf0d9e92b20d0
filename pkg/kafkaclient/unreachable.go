package kafkaclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Unreachable reports whether err, from sarama or franz-go, means that the
// cluster could not be reached or was not serving yet (no broker answers, a
// connection reset, a leader or controller being elected): worth trying
// again. A refusal is not: a failed login or authorization, a certificate
// either side rejects, a setting the client or the cluster refuses, any
// Kafka error code its protocol does not call retriable. Kafka's own table
// of retriable codes (franz-go's kerr) decides for sarama's codes too.
func Unreachable(err error) bool {
	var listener *TLSListenerError
	if err == nil || refusedTLS(err) || errors.As(err, &listener) {
		return false
	}
	var conf sarama.ConfigurationError
	if errors.As(err, &conf) {
		return false
	}
	// Before sarama's ErrOutOfBrokers: that error carries each broker's
	// own, and a refused login under it is still a refusal.
	var code sarama.KError
	if errors.As(err, &code) {
		return kerr.IsRetriable(kerr.ErrorForCode(int16(code)))
	}
	var franz *kerr.Error
	if errors.As(err, &franz) {
		return franz.Retriable
	}
	var netErr net.Error
	return errors.Is(err, sarama.ErrOutOfBrokers) || errors.Is(err, sarama.ErrNotConnected) ||
		errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, context.DeadlineExceeded)
}

// refusedTLS: a handshake that failed on a certificate, either side's. A
// refusal by the broker (no client certificate, one it does not trust)
// reaches the client as a TLS alert, which crypto/tls returns as a
// net.OpError of Op "remote error" (its alert type is unexported).
func refusedTLS(err error) bool {
	var (
		unknown  x509.UnknownAuthorityError
		host     x509.HostnameError
		invalid  x509.CertificateInvalidError
		verify   *tls.CertificateVerificationError
		alert    tls.AlertError
		recordHd tls.RecordHeaderError
		op       *net.OpError
	)
	return errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid) ||
		errors.As(err, &verify) || errors.As(err, &alert) || errors.As(err, &recordHd) ||
		(errors.As(err, &op) && op.Op == "remote error")
}
