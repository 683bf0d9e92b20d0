package shard

import (
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

// Writers holds one gRPC connection per writer address, shared by every
// shard: gRPC multiplexes their streams.
type Writers struct {
	addrs    []string
	maxBytes int
	creds    credentials.TransportCredentials
	extra    []grpc.DialOption

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// NewWriters prepares connections (made on first use) to addrs, secured
// by creds; extra options are added to each (tracing.DialOptions).
func NewWriters(addrs []string, maxMessageBytes int, creds credentials.TransportCredentials, extra ...grpc.DialOption) *Writers {
	return &Writers{addrs: addrs, maxBytes: maxMessageBytes, creds: creds, extra: extra, conns: map[string]*grpc.ClientConn{}}
}

// SetAddresses replaces the writer list (from discovery). Connections to
// writers no longer listed are closed; their streams fail and reopen on a
// listed writer.
func (w *Writers) SetAddresses(addrs []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.addrs = append([]string(nil), addrs...)
	keep := map[string]bool{}
	for _, a := range addrs {
		keep[a] = true
	}
	for a, c := range w.conns {
		if !keep[a] {
			c.Close()
			delete(w.conns, a)
		}
	}
}

// Pick returns the writer a shard uses on its attempt-th try. Shards rank
// the writers by rendezvous hashing, so a shard sticks to one writer and
// moves only when that writer fails or the list changes.
func (w *Writers) Pick(link string, shard, attempt int) (string, *grpc.ClientConn, error) {
	w.mu.Lock()
	ranked := append([]string(nil), w.addrs...)
	w.mu.Unlock()
	if len(ranked) == 0 {
		return "", nil, errors.New("no healthy writer known")
	}
	score := func(addr string) uint64 {
		h := fnv.New64a()
		fmt.Fprintf(h, "%s/%d/%s", link, shard, addr)
		return h.Sum64()
	}
	sort.Slice(ranked, func(i, j int) bool { return score(ranked[i]) > score(ranked[j]) })
	addr := ranked[attempt%len(ranked)]
	w.mu.Lock()
	defer w.mu.Unlock()
	if c, ok := w.conns[addr]; ok {
		return addr, c, nil
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(w.creds),
		// Pings find a writer that stopped answering (paused, partitioned)
		// within seconds, even while flow control has nothing to send. The
		// writers' enforcement policy allows one ping every 10s.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: false}),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(w.maxBytes + 64<<10)),
	}, w.extra...)
	c, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return "", nil, fmt.Errorf("writer %s: %w", addr, err)
	}
	w.conns[addr] = c
	return addr, c, nil
}

// Close closes every connection.
func (w *Writers) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.conns {
		c.Close()
	}
}
