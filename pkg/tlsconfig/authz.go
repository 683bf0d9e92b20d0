package tlsconfig

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// ErrIdentityNotAllowed is the cause of a denial of a peer whose
// certificate is trusted but names no identity in allowed_ids.
var ErrIdentityNotAllowed = errors.New("identity not in allowed_ids")

// ErrNotOneURISAN is the cause of a denial of a peer whose certificate
// names several URI SANs where allowed_ids holds SPIFFE IDs.
var ErrNotOneURISAN = errors.New("a SPIFFE certificate names exactly one URI SAN")

// ServerOptions returns the gRPC server options of a TLS server (the
// writer's listener) that refuses a trusted client with the wrong identity
// per call, with PermissionDenied, rather than in the handshake.
//
// The handshake still fails for everything that is not a trusted, valid
// client certificate: none, another CA, expired or not yet valid, the wrong
// key usage, TLS below 1.3. A client whose certificate passes those checks
// but names no allowed identity completes the handshake, and the
// interceptors refuse each of its calls before any handler runs. The
// difference matters to the operator of the refused side: Unavailable reads
// as a network problem and is retried quietly, PermissionDenied says that
// the certificate is the wrong one.
//
// The credentials and the interceptors come together so that one is never
// installed without the other: the credentials alone would admit any
// identity the CA ever signed. The interceptors are chained, so other
// interceptors of the server keep working.
func (s *Source) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.Creds(credentials.NewTLS(s.serverTLS(false))),
		grpc.ChainUnaryInterceptor(s.UnaryInterceptor),
		grpc.ChainStreamInterceptor(s.StreamInterceptor),
	}
}

// UnaryInterceptor refuses a call unless its TLS peer presented an allowed
// identity (see ServerOptions).
func (s *Source) UnaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := s.authorize(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// StreamInterceptor refuses a stream unless its TLS peer presented an
// allowed identity (see ServerOptions).
func (s *Source) StreamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := s.authorize(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}

// authorize checks the identity of the call's TLS peer; the chain was
// verified in the handshake. A call without a TLS peer certificate is
// refused too (Unauthenticated): these interceptors exist only where TLS
// is on, so such a call means the server was wired wrong, and failing
// closed shows that at once. A plaintext (insecure) server has no Source,
// hence no interceptors, and admits every call.
func (s *Source) authorize(ctx context.Context, method string) error {
	p, ok := peer.FromContext(ctx)
	remote := ""
	if ok && p.Addr != nil {
		remote = p.Addr.String()
	}
	var info credentials.TLSInfo
	if ok {
		info, ok = p.AuthInfo.(credentials.TLSInfo)
	}
	if !ok || len(info.State.PeerCertificates) == 0 {
		err := errors.New("call without a TLS peer certificate")
		s.denials.record(s.log, "tls client denied", "remote", remote, "method", method, "err", err)
		return status.Error(codes.Unauthenticated, err.Error())
	}
	if err := s.checkIdentity(info.State.PeerCertificates[0]); err != nil {
		s.denials.record(s.log, "tls client denied", "remote", remote, "method", method, "err", err)
		return status.Error(codes.PermissionDenied, err.Error())
	}
	return nil
}
