// Package ownership decides which shards this fetcher replicates, and with
// which epoch. The fetcher asks an Owner; what stands behind it (a static
// assignment, in-process leases, Consul leases) is the backend's business.
package ownership

import (
	"context"
	"sync"
)

// Lease is the right to replicate one shard until Lost is closed.
type Lease struct {
	Shard int
	// Epoch grows each time the shard changes hands; it travels in every
	// batch so writers refuse a former owner.
	Epoch uint64
	// Lost is closed when the lease ends without the holder releasing it.
	Lost <-chan struct{}
}

// Owner hands out shard leases.
type Owner interface {
	// Acquire takes the shard if it is free; ok is false when another holds it.
	Acquire(ctx context.Context, shard int) (lease Lease, ok bool, err error)
	// Release gives the shard back after its stream has drained.
	Release(shard int)
	// Wants reports whether this fetcher may hold the shard at all.
	Wants(shard int) bool
	// Target is how many of total non-empty shards this fetcher should
	// hold now: its fair share when several fetchers split a link.
	Target(total int) int
}

// Local is the in-process backend: every shard the configuration allows is
// free for this process to take. It coordinates nothing between processes,
// so it is for a single fetcher per link (the demo, a static split where
// each fetcher owns distinct shards). Epochs start at 1 each time the
// process starts; a writer accepts an equal epoch as the same owner
// reconnecting.
type Local struct {
	allowed map[int]bool // nil: every shard

	mu    sync.Mutex
	held  map[int]bool
	epoch map[int]uint64
}

// NewLocal builds the backend; shards limits it to those numbers (empty: all).
func NewLocal(shards []int) *Local {
	l := &Local{held: map[int]bool{}, epoch: map[int]uint64{}}
	if len(shards) > 0 {
		l.allowed = map[int]bool{}
		for _, s := range shards {
			l.allowed[s] = true
		}
	}
	return l
}

// Wants reports whether the configuration gives this process the shard.
func (l *Local) Wants(shard int) bool { return l.allowed == nil || l.allowed[shard] }

// Target is every shard: a Local owner is alone.
func (l *Local) Target(total int) int { return total }

// Acquire takes the shard; it is never lost.
func (l *Local) Acquire(_ context.Context, shard int) (Lease, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.Wants(shard) || l.held[shard] {
		return Lease{}, false, nil
	}
	l.held[shard] = true
	if l.epoch[shard] == 0 {
		l.epoch[shard] = 1
	}
	return Lease{Shard: shard, Epoch: l.epoch[shard], Lost: make(chan struct{})}, true, nil
}

// Release frees the shard.
func (l *Local) Release(shard int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.held, shard)
}
