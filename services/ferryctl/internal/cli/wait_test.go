package cli

import (
	"context"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
)

// stallingControl answers its first Status and holds every later one
// until the caller gives up: a writer that stops answering mid-wait.
type stallingControl struct {
	ferryv1.UnimplementedControlServiceServer
	calls atomic.Int32
}

func (s *stallingControl) Status(ctx context.Context, _ *ferryv1.StatusRequest) (*ferryv1.StatusResponse, error) {
	if s.calls.Add(1) > 1 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &ferryv1.StatusResponse{Writer: "w1", TimeUnixMs: time.Now().UnixMilli(),
		Links: []*ferryv1.LinkStatus{{Name: "east", Shards: 1}}}, nil
}

// When the deadline cuts a read short, a wait that timed out names what
// it still waited for (the last read's answer), not the cut-off call:
// CI once saw "waiting for writer ...: DeadlineExceeded" instead of the
// group a planned failover waited for.
func TestWaitTimeoutNamesWhatItWaitedFor(t *testing.T) {
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	ctl := &stallingControl{}
	ferryv1.RegisterControlServiceServer(srv, ctl)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient("passthrough:///bufconn", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	c := &client{writers: []writer{{addr: "bufconn", conn: cc, ctl: ferryv1.NewControlServiceClient(cc)}}, timeout: time.Minute}
	t.Cleanup(c.close)

	ctx, cancel := context.WithTimeout(context.Background(), 2*plannedPoll+time.Second)
	defer cancel()
	_, err = c.waitFor(ctx, io.Discard, "east", 3*time.Second, "group sync", func(view) []string {
		return []string{"group app orders/0: a sync"}
	})
	if ctl.calls.Load() < 2 {
		t.Fatalf("the wait read %d times, want a read cut short by the deadline", ctl.calls.Load())
	}
	if err == nil || !strings.Contains(err.Error(), "timed out after 3s waiting for group app orders/0: a sync;") ||
		strings.Contains(err.Error(), "DeadlineExceeded") {
		t.Fatalf("wait ended with %v, want it to name the group it waited for", err)
	}
}
