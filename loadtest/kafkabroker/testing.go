package kafkabroker

import (
	"context"
	"testing"
	"time"
)

// StartT starts a broker for a test and stops it when the test ends. A
// broker that cannot start fails the test (make kafka installs the jars):
// a test that needs real Kafka never skips for lack of it.
func StartT(t testing.TB, opts Options) *Broker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("real Kafka broker did not start (make kafka installs it): %v", err)
	}
	t.Cleanup(func() {
		if err := b.Stop(); err != nil {
			t.Error(err)
		}
	})
	return b
}
