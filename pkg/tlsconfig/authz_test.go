package tlsconfig

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
)

// countingServer serves every method of the Ferry gRPC service, as listed
// by its generated descriptor, with a handler that only counts its calls:
// a method added to the service later is covered without touching the test.
type countingServer struct {
	addr  string
	calls atomic.Int64
}

func startCountingServer(t *testing.T, opts ...grpc.ServerOption) *countingServer {
	t.Helper()
	cs := &countingServer{}
	orig := ferryv1.ReplicationService_ServiceDesc
	desc := grpc.ServiceDesc{ServiceName: orig.ServiceName, HandlerType: orig.HandlerType, Metadata: orig.Metadata}
	for _, m := range orig.Methods {
		full := "/" + orig.ServiceName + "/" + m.MethodName
		desc.Methods = append(desc.Methods, grpc.MethodDesc{
			MethodName: m.MethodName,
			Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
				in := new(emptypb.Empty)
				if err := dec(in); err != nil {
					return nil, err
				}
				h := func(context.Context, any) (any, error) {
					cs.calls.Add(1)
					return &emptypb.Empty{}, nil
				}
				if interceptor == nil {
					return h(ctx, in)
				}
				return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: full}, h)
			},
		})
	}
	for _, st := range orig.Streams {
		desc.Streams = append(desc.Streams, grpc.StreamDesc{
			StreamName:    st.StreamName,
			ServerStreams: st.ServerStreams,
			ClientStreams: st.ClientStreams,
			Handler: func(_ any, ss grpc.ServerStream) error {
				cs.calls.Add(1)
				if !st.ServerStreams {
					// A client stream (Report) answers with exactly one
					// message: none is a cardinality violation.
					return ss.SendMsg(&emptypb.Empty{})
				}
				return nil
			},
		})
	}
	gs := grpc.NewServer(opts...)
	gs.RegisterService(&desc, struct {
		ferryv1.UnimplementedReplicationServiceServer
	}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cs.addr = lis.Addr().String()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); wg.Wait() })
	return cs
}

// callEveryMethod calls each method of the Ferry service once and returns
// each call's error by full method name. Streams are closed for sending at
// once and read until the server ends them.
func callEveryMethod(t *testing.T, addr string, cfg *tls.Config) map[string]error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	desc := ferryv1.ReplicationService_ServiceDesc
	out := map[string]error{}
	for _, m := range desc.Methods {
		full := "/" + desc.ServiceName + "/" + m.MethodName
		out[full] = conn.Invoke(ctx, full, &emptypb.Empty{}, &emptypb.Empty{})
	}
	for i, st := range desc.Streams {
		full := "/" + desc.ServiceName + "/" + st.StreamName
		out[full] = func() error {
			s, err := conn.NewStream(ctx, &desc.Streams[i], full)
			if err != nil {
				return err
			}
			if err := s.CloseSend(); err != nil {
				return err
			}
			for {
				if err := s.RecvMsg(&emptypb.Empty{}); err != nil {
					if errors.Is(err, io.EOF) {
						return nil // the handler returned OK
					}
					return err
				}
			}
		}()
	}
	if len(out) == 0 {
		t.Fatal("the Ferry service descriptor lists no method")
	}
	return out
}

// TestWrongIdentityPermissionDeniedOnEveryMethod: a client whose
// certificate chains to the writer's CA but names an identity outside
// allowed_ids completes the handshake and gets PermissionDenied, naming the
// identity it presented, on every method; no handler runs. The right
// identity still reaches every handler.
func TestWrongIdentityPermissionDeniedOnEveryMethod(t *testing.T) {
	p := newPair(t)
	var logs syncBuffer
	wsrc := p.writer.source(slog.New(slog.NewTextHandler(&logs, nil)))
	srv := startCountingServer(t, wsrc.ServerOptions()...)
	intruder := newSide(t, valid(t, p.ca, intruderID), []string{writerID}, p.ca).source(discard())

	denied := callEveryMethod(t, srv.addr, intruder.ClientTLS())
	for method, err := range denied {
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s as %s: %v, want PermissionDenied", method, intruderID, err)
		}
		if !strings.Contains(status.Convert(err).Message(), intruderID) {
			t.Errorf("%s: message %q does not name the presented identity", method, status.Convert(err).Message())
		}
	}
	if n := srv.calls.Load(); n != 0 {
		t.Fatalf("handlers ran %d times for a denied client, want 0", n)
	}
	if got := wsrc.Status().Denials; got != uint64(len(denied)) {
		t.Errorf("denials %d, want %d", got, len(denied))
	}
	out := logs.String()
	if !strings.Contains(out, "tls client denied") || !strings.Contains(out, intruderID) ||
		!strings.Contains(out, "method=/ferry.v1.ReplicationService/") || !strings.Contains(out, "remote=127.0.0.1:") {
		t.Errorf("denial log lacks the message, identity, method or remote address:\n%s", out)
	}

	admitted := callEveryMethod(t, srv.addr, p.fsrc.ClientTLS())
	for method, err := range admitted {
		if err != nil {
			t.Errorf("%s as %s: %v", method, fetcherID, err)
		}
	}
	if n := srv.calls.Load(); n != int64(len(admitted)) {
		t.Errorf("handlers ran %d times for the allowed client, want %d", n, len(admitted))
	}
}

// TestServerOptionsHandshakeStillRefuses: moving the identity check out of
// the handshake leaves every other refusal there, so such clients see
// Unavailable and never reach the interceptors.
func TestServerOptionsHandshakeStillRefuses(t *testing.T) {
	p := newPair(t)
	srv := startCountingServer(t, p.wsrc.ServerOptions()...)
	other := newCA(t, "other")
	expired := issue(t, p.ca, fetcherID, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
	expiredCert, err := tls.X509KeyPair(expired.CertPEM, expired.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	tls12 := p.fsrc.ClientTLS()
	tls12.MinVersion, tls12.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	noCert := p.fsrc.ClientTLS()
	noCert.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return &tls.Certificate{}, nil
	}
	cases := map[string]*tls.Config{
		"no certificate": noCert,
		"other CA":       newSide(t, valid(t, other, fetcherID), []string{writerID}, p.ca).source(discard()).ClientTLS(),
		"expired":        {MinVersion: tls.VersionTLS13, InsecureSkipVerify: true, Certificates: []tls.Certificate{expiredCert}},
		"TLS 1.2":        tls12,
	}
	for name, cfg := range cases {
		t.Run(name, func(t *testing.T) {
			for method, err := range callEveryMethod(t, srv.addr, cfg) {
				if status.Code(err) != codes.Unavailable {
					t.Errorf("%s: %v, want Unavailable (a handshake failure)", method, err)
				}
			}
		})
	}
	if n := srv.calls.Load(); n != 0 {
		t.Fatalf("handlers ran %d times, want 0", n)
	}
}

// TestInterceptorRefusesCallWithoutTLS: the interceptors fail closed when
// a call carries no TLS peer, which only a miswired server produces.
func TestInterceptorRefusesCallWithoutTLS(t *testing.T) {
	p := newPair(t)
	ran := false
	_, err := p.wsrc.UnaryInterceptor(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/x/Y"},
		func(context.Context, any) (any, error) { ran = true; return nil, nil })
	if status.Code(err) != codes.Unauthenticated || ran {
		t.Fatalf("call without a peer: %v, handler ran %v; want Unauthenticated and no handler", err, ran)
	}
}
