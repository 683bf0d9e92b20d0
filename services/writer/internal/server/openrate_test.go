package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/ferry-replicator/ferry/services/writer/internal/topicfilter"
)

// Opens are rate-limited per peer identity: each takes a producer id and
// writes a __ferry_producers record, so a peer reopening without end (a
// loop, or on purpose) would fill the registry. A burst passes; past it
// an Open is refused with ResourceExhausted, saying when to retry, and
// the fetcher backs off. A stream that ends gives no Open back, and
// another peer has its own bucket.
func TestOpensAreRateLimitedPerPeer(t *testing.T) {
	pki := newTestPKI(t)
	topics := mustFilter(t, topicfilter.DefaultInclude, topicfilter.DefaultExclude)
	w := startWriterGRPC(t, []Link{{Name: "east", Topics: topics, Shards: 8}},
		func(o *Options) { o.OpenRatePerPeer, o.OpenBurstPerPeer = 1.0/3600, 2 },
		pki.server(t), pki.client(t, eastFetcher))
	east, west := w.client, w.dial(t, pki.client(t, westFetcher))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	first, err := openShard(ctx, t, east, "east", 0, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openShard(ctx, t, east, "east", 1, 8, 1); err != nil {
		t.Fatal(err)
	}
	closeStream(t, first)
	_, err = openShard(ctx, t, east, "east", 0, 8, 2)
	wantRefusal(t, err, codes.ResourceExhausted, eastFetcher, "open_rate_per_peer", "retry in")
	if _, err := openShard(ctx, t, west, "east", 2, 8, 1); err != nil {
		t.Fatalf("another peer refused under its own rate: %v", err)
	}
	if got := w.rejected(t, "east", "open_rate"); got != 1 {
		t.Errorf("rejected{reason=open_rate} = %v, want 1", got)
	}
}

// The bucket refills at the rate, up to the burst, and says how long
// until the next token; buckets of peers gone quiet are dropped once
// full.
func TestOpenBucketRefills(t *testing.T) {
	at := time.Unix(1000, 0)
	l := newOpenLimiter(2, 3) // two a second, bursts of three
	l.now = func() time.Time { return at }
	for i := range 3 {
		if _, ok := l.take("f"); !ok {
			t.Fatalf("open %d of the burst refused", i)
		}
	}
	wait, ok := l.take("f")
	if ok || wait != 500*time.Millisecond {
		t.Fatalf("past the burst: %v, %v; want refused, a token in 500ms", wait, ok)
	}
	at = at.Add(250 * time.Millisecond)
	if wait, ok := l.take("f"); ok || wait != 250*time.Millisecond {
		t.Fatalf("250ms later: %v, %v; want refused, a token in 250ms", wait, ok)
	}
	at = at.Add(250 * time.Millisecond)
	if _, ok := l.take("f"); !ok {
		t.Fatal("a token refilled, refused")
	}
	at = at.Add(time.Hour) // full again, not above the burst
	for i := range 3 {
		if _, ok := l.take("f"); !ok {
			t.Fatalf("after an hour, open %d of the burst refused", i)
		}
	}
	if _, ok := l.take("f"); ok {
		t.Fatal("an hour of quiet gave more than the burst")
	}
	for i := range maxRatePeers {
		l.take(string(rune('a' + i)))
	}
	at = at.Add(time.Hour)
	l.take("new")
	if len(l.peers) != 1 {
		t.Errorf("%d buckets after every one of %d peers refilled, want 1 (the new one)", len(l.peers), maxRatePeers)
	}
}
