package tlsconfig

import (
	"context"
	"fmt"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/ferry-replicator/ferry/pkg/config"
)

// IDs is a set of peer identities matched as allowed_ids matches them:
// SPIFFE IDs exactly, DNS names without regard to case. A server uses it
// for a narrower list than allowed_ids, such as the fetchers one link
// admits, after the interceptors have admitted the peer at all.
type IDs struct {
	set map[string]bool
}

// NewIDs builds the set; ids are checked by ValidateIDs.
func NewIDs(ids []string) IDs {
	s := IDs{set: make(map[string]bool, len(ids))}
	for _, id := range ids {
		s.set[normalizeID(id)] = true
	}
	return s
}

// Empty is whether the set names no identity.
func (s IDs) Empty() bool { return len(s.set) == 0 }

// AdmitPeer returns nil if the call's TLS peer presents one of the set's
// identities. A call without a TLS peer certificate is refused: a
// plaintext server has no identities to compare, so a narrower list there
// is a wiring mistake, and failing closed shows it.
func (s IDs) AdmitPeer(ctx context.Context) error {
	p, ok := peer.FromContext(ctx)
	var info credentials.TLSInfo
	if ok {
		info, ok = p.AuthInfo.(credentials.TLSInfo)
	}
	if !ok || len(info.State.PeerCertificates) == 0 {
		return fmt.Errorf("call without a TLS peer certificate: %w", ErrIdentityNotAllowed)
	}
	ids := identities(info.State.PeerCertificates[0])
	for _, id := range ids {
		if s.set[normalizeID(id)] {
			return nil
		}
	}
	return fmt.Errorf("tls peer presented %s: %w", describe(ids), ErrIdentityNotAllowed)
}

// ValidateIDs records under key every id that is not a SPIFFE ID or an
// exact DNS name, and every one the server's own allowed_ids (within)
// does not admit: the server refuses such a peer before any narrower list
// is consulted, so naming it there would be inert.
func ValidateIDs(key string, ids, within []string, p *config.Problems) {
	admitted := NewIDs(within)
	for _, id := range ids {
		if err := checkID(id); err != nil {
			p.Addf(key, "%q: %v", id, err)
			continue
		}
		if !admitted.set[normalizeID(id)] {
			p.Addf(key, "%q is not in tls.allowed_ids: the writer refuses that peer before any link is looked at", id)
		}
	}
}
