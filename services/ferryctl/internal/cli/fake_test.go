package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
)

// linkState is link east as the writers of a target share it (the
// checkpoint topic): its control record, its meter and its groups.
type linkState struct {
	mu         sync.Mutex
	control    *ferryv1.LinkControl
	partitions []*ferryv1.LinkPartition
	groups     []*ferryv1.LinkGroup
	// sets are the SetLinkState calls taken.
	sets []*ferryv1.SetLinkStateRequest
	// streaming is how many Status answers after a failover still report
	// shard 0's stream open (its round in flight); landed, the meter once
	// that round committed and the stream ended.
	streaming int
	landed    []*ferryv1.LinkPartition
}

func (s *linkState) taken() []*ferryv1.SetLinkStateRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*ferryv1.SetLinkStateRequest(nil), s.sets...)
}

// fakeWriter is one writer's ControlService, in process over bufconn: a
// writer whose state the test sets exactly (a failed_over link's meter,
// a group without a position, a writer that never reads a change back),
// which the real writers reach only through long scenarios.
type fakeWriter struct {
	ferryv1.UnimplementedControlServiceServer
	name string
	link *linkState
	// stale: this writer never reads a change back; its Status answers
	// the control it started with.
	stale   bool
	started *ferryv1.LinkControl
	// failStatusFrom: Status fails from this call on (0: never).
	failStatusFrom int32
	calls          atomic.Int32
}

func (f *fakeWriter) Status(_ context.Context, _ *ferryv1.StatusRequest) (*ferryv1.StatusResponse, error) {
	if n := f.calls.Add(1); f.failStatusFrom > 0 && n >= f.failStatusFrom {
		return nil, status.Error(codes.Unavailable, "writer going away")
	}
	f.link.mu.Lock()
	defer f.link.mu.Unlock()
	ctl := f.link.control
	if f.stale {
		ctl = f.started
	}
	var shards []*ferryv1.LinkShard
	if ctl.GetState() == ferryv1.LinkState_LINK_STATE_FAILED_OVER && f.link.landed != nil {
		if f.link.streaming > 0 {
			f.link.streaming--
			shards = []*ferryv1.LinkShard{{Shard: 0, Epoch: 1, Active: true, Fetcher: "f1"}}
		} else {
			f.link.partitions = f.link.landed
		}
	}
	now := time.Now().UnixMilli()
	// A live fetcher's heartbeats: each read finds one just read.
	var ps []*ferryv1.LinkPartition
	for _, p := range f.link.partitions {
		p = proto.CloneOf(p)
		p.HeartbeatObservedAtUnixMs = now
		ps = append(ps, p)
	}
	return &ferryv1.StatusResponse{Writer: f.name, TimeUnixMs: now, Links: []*ferryv1.LinkStatus{{
		Name: "east", Control: ctl, Shards: 1, ShardStates: shards, Partitions: ps, Groups: f.link.groups,
	}}}, nil
}

func (f *fakeWriter) SetLinkState(_ context.Context, req *ferryv1.SetLinkStateRequest) (*ferryv1.SetLinkStateResponse, error) {
	f.link.mu.Lock()
	defer f.link.mu.Unlock()
	cur := f.link.control.GetGeneration()
	if exp := req.GetExpectedGeneration(); exp != 0 && exp != cur {
		return nil, status.Errorf(codes.FailedPrecondition, "generation %d, not %d", cur, exp)
	}
	f.link.sets = append(f.link.sets, req)
	f.link.control = &ferryv1.LinkControl{State: req.GetState(), Reason: req.GetReason(), Generation: cur + 1, TimeUnixMs: time.Now().UnixMilli()}
	return &ferryv1.SetLinkStateResponse{Control: f.link.control}, nil
}

// fakeTarget is link east's writers, faked, and ferryctl reaching them.
type fakeTarget struct {
	link    *linkState
	writers []*fakeWriter
	lis     []*bufconn.Listener
}

// startFakes serves each writer over its own bufconn listener until the
// test ends; every writer shares l.
func startFakes(t *testing.T, l *linkState, ws ...*fakeWriter) fakeTarget {
	t.Helper()
	ft := fakeTarget{link: l, writers: ws}
	for i, w := range ws {
		w.link, w.name, w.started = l, fmt.Sprintf("w%d", i+1), l.control
		lis := bufconn.Listen(1 << 20)
		srv := grpc.NewServer()
		ferryv1.RegisterControlServiceServer(srv, w)
		go srv.Serve(lis)
		t.Cleanup(srv.Stop)
		ft.lis = append(ft.lis, lis)
	}
	return ft
}

// dial is session.dial for the fakes: every writer, with the flags' -o.
func (ft fakeTarget) dial(c *conn, _ []string) (*client, error) {
	// A change a stale writer never reads back is awaited this long.
	cl := &client{timeout: time.Second, json: c.output == "json"}
	for i, lis := range ft.lis {
		cc, err := grpc.NewClient("passthrough:///bufconn", grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
		if err != nil {
			cl.close()
			return nil, err
		}
		cl.writers = append(cl.writers, writer{addr: ft.writers[i].name, conn: cc, ctl: ferryv1.NewControlServiceClient(cc)})
	}
	return cl, nil
}

// run runs ferryctl against the fakes with stdin and returns its exit
// code, stdout and stderr.
func (ft fakeTarget) run(t *testing.T, stdin io.Reader, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	s := session{stdin: stdin, stdout: &out, stderr: &errOut, dial: ft.dial}
	code := s.run(context.Background(), args)
	return code, out.String(), errOut.String()
}

// control is a link control record of state at generation gen.
func control(state ferryv1.LinkState, gen uint64) *ferryv1.LinkControl {
	return &ferryv1.LinkControl{State: state, Generation: gen, TimeUnixMs: time.Now().UnixMilli()}
}

// meter is a partition of orders: committed up to committed, the last
// heartbeat's high watermark hw.
func meter(p int32, committed, hw int64) *ferryv1.LinkPartition {
	return &ferryv1.LinkPartition{Topic: "orders", Partition: p, CommittedNextOffset: committed, SourceHighWatermark: hw,
		LagRecords: max(0, hw-committed), HeartbeatAgeSeconds: 0.1}
}
