package shard

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

// Writers holds one gRPC connection per writer address, shared by every
// shard: gRPC multiplexes their streams.
//
// It also knows which writers are healthy: a watcher per connection keeps
// it connecting and marks the writer down while gRPC cannot reach it
// (TRANSIENT_FAILURE) and up again once it is READY. Shards rank the
// healthy writers by rendezvous hashing, so a shard's writer is a function
// of the healthy set: when a failed writer comes back, the shards it had
// move back to it (see Changed).
type Writers struct {
	maxBytes int
	creds    credentials.TransportCredentials
	extra    []grpc.DialOption

	mu      sync.Mutex
	addrs   []string
	conns   map[string]*writerConn
	changed chan struct{} // closed when the healthy set changes
	closed  bool
	wg      sync.WaitGroup // the watchers
}

type writerConn struct {
	cc    *grpc.ClientConn
	err   error // grpc.NewClient's, reported by Pick
	down  bool
	close context.CancelFunc // stops the watcher
}

// NewWriters connects to addrs, secured by creds; extra options are added
// to each (tracing.DialOptions, the reconnect backoff). Close stops it.
func NewWriters(addrs []string, maxMessageBytes int, creds credentials.TransportCredentials, extra ...grpc.DialOption) *Writers {
	w := &Writers{maxBytes: maxMessageBytes, creds: creds, extra: extra, conns: map[string]*writerConn{}, changed: make(chan struct{})}
	w.SetAddresses(addrs)
	return w
}

// SetAddresses replaces the writer list (from discovery). Connections to
// writers no longer listed are closed; their streams fail and reopen on a
// listed writer. Shards whose preferred writer changes are told (Changed).
func (w *Writers) SetAddresses(addrs []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.addrs = append([]string(nil), addrs...)
	keep := map[string]bool{}
	for _, a := range addrs {
		keep[a] = true
		if _, ok := w.conns[a]; !ok {
			w.conns[a] = w.dialLocked(a)
		}
	}
	for a, c := range w.conns {
		if !keep[a] {
			c.shut()
			delete(w.conns, a)
		}
	}
	w.notifyLocked()
}

func (w *Writers) dialLocked(addr string) *writerConn {
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(w.creds),
		// Pings find a writer that stopped answering (paused, partitioned)
		// within seconds, even while flow control has nothing to send. The
		// writers' enforcement policy allows one ping every 10s.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: false}),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(w.maxBytes + 64<<10)),
	}, w.extra...)
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return &writerConn{err: fmt.Errorf("writer %s: %w", addr, err), close: func() {}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &writerConn{cc: cc, close: cancel}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.watch(ctx, addr, c)
	}()
	return c
}

// shut stops the watcher and closes the connection.
func (c *writerConn) shut() {
	c.close()
	if c.cc != nil {
		c.cc.Close()
	}
}

// watch follows a connection's state until ctx ends or it is closed. It
// asks an idle connection to connect, so a writer no stream uses is still
// seen coming back; gRPC retries a failed one with its connect backoff.
func (w *Writers) watch(ctx context.Context, addr string, c *writerConn) {
	for {
		st := c.cc.GetState()
		switch st {
		case connectivity.Idle:
			c.cc.Connect()
		case connectivity.Ready:
			w.setDown(addr, c, false)
		case connectivity.TransientFailure:
			w.setDown(addr, c, true)
		case connectivity.Shutdown:
			return
		}
		if !c.cc.WaitForStateChange(ctx, st) {
			return
		}
	}
}

func (w *Writers) setDown(addr string, c *writerConn, down bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conns[addr] != c || c.down == down {
		return
	}
	c.down = down
	w.notifyLocked()
}

func (w *Writers) notifyLocked() {
	close(w.changed)
	w.changed = make(chan struct{})
}

// Changed returns a channel closed at the next change of the healthy
// writer set. A shard takes it before Pick, so no change is missed.
func (w *Writers) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// rankLocked orders the healthy writers for a shard, best first; when none
// is healthy, all of them, since trying beats waiting.
func (w *Writers) rankLocked(link string, shard int) []string {
	ranked := make([]string, 0, len(w.addrs))
	for _, a := range w.addrs {
		if c := w.conns[a]; c != nil && !c.down {
			ranked = append(ranked, a)
		}
	}
	if len(ranked) == 0 {
		ranked = append(ranked, w.addrs...)
	}
	score := func(addr string) uint64 {
		h := fnv.New64a()
		fmt.Fprintf(h, "%s/%d/%s", link, shard, addr)
		return h.Sum64()
	}
	sort.Slice(ranked, func(i, j int) bool { return score(ranked[i]) > score(ranked[j]) })
	return ranked
}

// Preferred is the writer a shard belongs on now: the first of its
// ranking of the healthy writers; "" when none is known.
func (w *Writers) Preferred(link string, shard int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ranked := w.rankLocked(link, shard); len(ranked) > 0 {
		return ranked[0]
	}
	return ""
}

// Pick returns the writer a shard uses on its attempt-th try since it last
// made progress: attempt 0 is its preferred writer, later attempts the
// next in its ranking (a writer that is reachable but fails the shard).
func (w *Writers) Pick(link string, shard, attempt int) (string, *grpc.ClientConn, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ranked := w.rankLocked(link, shard)
	if len(ranked) == 0 {
		return "", nil, errors.New("no writer known")
	}
	addr := ranked[attempt%len(ranked)]
	c := w.conns[addr]
	if c == nil {
		return "", nil, errors.New("writer connections closed")
	}
	if c.err != nil {
		return "", nil, c.err
	}
	return addr, c.cc, nil
}

// Close closes every connection and waits for the watchers.
func (w *Writers) Close() {
	w.mu.Lock()
	w.closed = true
	for a, c := range w.conns {
		c.shut()
		delete(w.conns, a)
	}
	w.mu.Unlock()
	w.wg.Wait()
}
