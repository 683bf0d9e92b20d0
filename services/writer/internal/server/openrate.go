package server

import (
	"fmt"
	"time"
)

// Opens are rate-limited per peer identity. Each Open the writer accepts
// takes a producer id of the target and writes a __ferry_producers record
// (package provenance), and max_streams_per_peer bounds only the streams a
// peer holds at once, not how often it opens them: a peer reopening
// without end (a shard failing as it opens, or on purpose) brought a
// record an Open, and the fetchers' view of the registry, bounded, came to
// forget what they had to know (issue 41). A token bucket per peer,
// open_burst_per_peer deep, refilled at open_rate_per_peer a second,
// passes a fetcher opening all its shards at once and refuses an Open
// past it with ResourceExhausted, saying when a token comes back; the
// fetcher backs off and retries.

// openLimiter holds a bucket per peer identity ("" in plaintext). It is
// not safe for concurrent use: the Server's lock guards it.
type openLimiter struct {
	rate  float64 // tokens a second; 0: unbounded
	burst float64
	now   func() time.Time // time.Now; tests move it
	peers map[string]*openBucket
}

type openBucket struct {
	tokens float64
	at     time.Time // when tokens was last brought up to date
}

// maxRatePeers is how many peers' buckets the limiter holds before it
// drops the full ones, which are as good as new.
const maxRatePeers = 1024

func newOpenLimiter(rate float64, burst int) openLimiter {
	return openLimiter{rate: rate, burst: float64(max(burst, 1)), now: time.Now, peers: map[string]*openBucket{}}
}

// take takes a token of peer's bucket, or says how long until there is
// one.
func (l *openLimiter) take(peer string) (wait time.Duration, ok bool) {
	if l.rate <= 0 {
		return 0, true
	}
	now := l.now()
	b := l.peers[peer]
	if b == nil {
		if len(l.peers) >= maxRatePeers {
			l.dropFull(now)
		}
		b = &openBucket{tokens: l.burst, at: now}
		l.peers[peer] = b
	}
	b.tokens = l.fill(b, now)
	b.at = now
	if b.tokens < 1 {
		return time.Duration((1 - b.tokens) / l.rate * float64(time.Second)), false
	}
	b.tokens--
	return 0, true
}

// fill is b's tokens at now.
func (l *openLimiter) fill(b *openBucket, now time.Time) float64 {
	return min(l.burst, b.tokens+max(now.Sub(b.at).Seconds(), 0)*l.rate)
}

// dropFull forgets the buckets that are full at now.
func (l *openLimiter) dropFull(now time.Time) {
	for peer, b := range l.peers {
		if l.fill(b, now) >= l.burst {
			delete(l.peers, peer)
		}
	}
}

// refusal is the refusal of peer's Open past its rate, wait before a
// token comes back.
func (l *openLimiter) refusal(peer string, wait time.Duration) error {
	return fmt.Errorf("%w: peer %q opened more than open_rate_per_peer %g streams a second (bursts of open_burst_per_peer %d): retry in %v",
		errOpenRate, peer, l.rate, int(l.burst), wait.Round(time.Millisecond))
}
