// Package testwait is the one condition poll of Ferry's tests: wait for an
// end state with a deadline, never sleep as synchronisation.
package testwait

import (
	"testing"
	"time"
)

// For polls cond every 10 ms until it holds, failing t (naming what) when
// timeout passes first.
func For(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
