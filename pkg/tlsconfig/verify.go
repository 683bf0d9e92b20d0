package tlsconfig

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// ServerTLS returns the configuration of a TLS server: TLS 1.3 only, a
// client certificate required, and the client admitted only if its chain
// ends in the current CA bundle and it presents an allowed identity. A
// client with the wrong identity fails the handshake, so it sees only
// Unavailable; the writer uses ServerOptions instead, which moves the
// identity check into gRPC interceptors and answers PermissionDenied.
//
// Every handshake builds its configuration in GetConfigForClient from the
// material current at that moment, so a reload applies to the next
// handshake without a restart; connections already open keep their
// session. The returned configuration is also complete without
// GetConfigForClient, should a caller drop it.
func (s *Source) ServerTLS() *tls.Config {
	return s.serverTLS(true)
}

// serverTLS is ServerTLS; with checkID false the handshake checks only the
// chain, and the caller must check the identity on every call (authz.go).
func (s *Source) serverTLS(checkID bool) *tls.Config {
	c := s.serverConfig("", checkID)
	c.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		remote := ""
		if hello.Conn != nil {
			remote = hello.Conn.RemoteAddr().String()
		}
		return s.serverConfig(remote, checkID), nil
	}
	return c
}

func (s *Source) serverConfig(remote string, checkID bool) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.cur.Load().cert, nil
		},
		// The handshake fails when the client sends no certificate. Its
		// chain is verified in VerifyConnection against the pool current at
		// the handshake, by the same code as on the client side, so a
		// denial on either side names what the peer presented.
		ClientAuth: tls.RequireAnyClientCert,
		// No session resumption. VerifyConnection also runs on resumed
		// sessions (on the certificates stored in the ticket), so a peer
		// whose CA was dropped could not come back on an old ticket anyway;
		// but the links are few and long-lived, so resumption saves nothing
		// worth keeping that path open.
		SessionTicketsDisabled: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			var err error
			if checkID {
				err = s.verifyPeer(cs, x509.ExtKeyUsageClientAuth)
			} else {
				_, err = s.verifyChain(cs, x509.ExtKeyUsageClientAuth)
			}
			if err != nil {
				s.denials.record(s.log, "tls client denied", "remote", remote, "err", err)
			}
			return err
		},
	}
}

// ClientTLS returns the configuration of a TLS client (the fetcher dialling
// a writer): TLS 1.3 only, this process's current certificate, and the
// server admitted only if its chain ends in the current CA bundle and it
// presents an allowed identity.
func (s *Source) ClientTLS() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// InsecureSkipVerify turns off only the stdlib's verification, which
		// would check the chain against RootCAs fixed in this Config (grpc
		// clones it once, at dial) and the server's host name. VerifyConnection
		// below verifies the chain against the CA bundle current at each
		// handshake, and the peer's SPIFFE ID or DNS name instead of the
		// dialled host name (the SPIFFE model: the identity is the workload,
		// not its address). It runs on every handshake, verified or not, so
		// no connection skips it. Do not remove one without the other.
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return s.cur.Load().cert, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			err := s.verifyPeer(cs, x509.ExtKeyUsageServerAuth)
			if err != nil {
				s.denials.record(s.log, "tls server denied", "server_name", cs.ServerName, "err", err)
			}
			return err
		},
	}
}

// verifyPeer checks the peer's chain against the current CA pool, for the
// given use, and its identity against allowed_ids. The error names what the
// peer presented, which is what an operator needs to fix either side.
func (s *Source) verifyPeer(cs tls.ConnectionState, usage x509.ExtKeyUsage) error {
	if _, err := s.verifyChain(cs, usage); err != nil {
		return err
	}
	return s.checkIdentity(cs.PeerCertificates[0])
}

// verifyChain checks the peer's chain against the current CA pool, for the
// given use, and returns the identities the peer's certificate names.
func (s *Source) verifyChain(cs tls.ConnectionState, usage x509.ExtKeyUsage) ([]string, error) {
	if len(cs.PeerCertificates) == 0 {
		return nil, errors.New("tls peer presented no certificate")
	}
	leaf := cs.PeerCertificates[0]
	ids := identities(leaf)
	intermediates := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		intermediates.AddCert(c)
	}
	_, err := leaf.Verify(x509.VerifyOptions{
		Roots:         s.cur.Load().pool,
		Intermediates: intermediates,
		CurrentTime:   time.Now(),
		KeyUsages:     []x509.ExtKeyUsage{usage},
	})
	if err != nil {
		return nil, fmt.Errorf("tls peer presented %s (issuer %q): certificate not trusted: %w", describe(ids), leaf.Issuer.String(), err)
	}
	return ids, nil
}

// trust is a list of allowed identities, as allowed_ids names them.
type trust struct {
	allowed map[string]bool
	// spiffe is set when the list names a SPIFFE ID: a peer must then
	// present at most one URI SAN, as an X.509 SVID does.
	spiffe bool
}

func newTrust(ids []string) trust {
	t := trust{allowed: map[string]bool{}}
	for _, id := range ids {
		t.allowed[normalizeID(id)] = true
		t.spiffe = t.spiffe || strings.HasPrefix(id, "spiffe://")
	}
	return t
}

// checkIdentity admits a peer certificate if one of its identities is in
// allowed_ids. Where SPIFFE IDs are allowed, a certificate with several
// URI SANs is refused whatever they are: an X.509 SVID names exactly one
// SPIFFE ID, and a certificate naming an allowed ID and others besides
// comes from a CA that signs whatever it is asked, so it is not admitted
// on the first match.
func (t *trust) checkIdentity(leaf *x509.Certificate) error {
	ids := identities(leaf)
	if t.spiffe && len(leaf.URIs) > 1 {
		return fmt.Errorf("tls peer presented %s: %w", describe(ids), ErrNotOneURISAN)
	}
	for _, id := range ids {
		if t.allowed[normalizeID(id)] {
			return nil
		}
	}
	return fmt.Errorf("tls peer presented %s: %w", describe(ids), ErrIdentityNotAllowed)
}

// identities lists a certificate's URI SANs, then its DNS SANs.
func identities(c *x509.Certificate) []string {
	ids := make([]string, 0, len(c.URIs)+len(c.DNSNames))
	for _, u := range c.URIs {
		ids = append(ids, u.String())
	}
	return append(ids, c.DNSNames...)
}

func describe(ids []string) string {
	if len(ids) == 0 {
		return "no URI or DNS name"
	}
	return "[" + strings.Join(ids, " ") + "]"
}

// normalizeID makes DNS names case-insensitive; SPIFFE IDs compare exactly.
func normalizeID(id string) string {
	if strings.Contains(id, "://") {
		return id
	}
	return strings.ToLower(id)
}

// PeerIdentity returns the identity of the TLS peer of a gRPC call, for
// logs: its SPIFFE ID, or without one its DNS names. The server admitted the
// peer, so the identity is verified. It returns "" without TLS.
func PeerIdentity(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return ""
	}
	leaf := info.State.PeerCertificates[0]
	for _, u := range leaf.URIs {
		if u.Scheme == "spiffe" {
			return u.String()
		}
	}
	return strings.Join(leaf.DNSNames, ",")
}

// denialLog logs denials at most once a second, so a scanner hammering the
// port cannot flood the log; every denial is counted.
type denialLog struct {
	total      atomic.Uint64
	every      time.Duration // one line per this; a second when zero
	mu         sync.Mutex
	last       time.Time
	suppressed uint64
}

func (d *denialLog) record(log *slog.Logger, msg string, args ...any) {
	d.total.Add(1)
	d.mu.Lock()
	every := d.every
	if every == 0 {
		every = time.Second
	}
	now := time.Now()
	if !d.last.IsZero() && now.Sub(d.last) < every {
		d.suppressed++
		d.mu.Unlock()
		return
	}
	n := d.suppressed
	d.last, d.suppressed = now, 0
	d.mu.Unlock()
	log.Warn(msg, append(args, "suppressed_before", n)...)
}
