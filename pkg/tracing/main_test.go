package tracing

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: Setup's
// batch processor and exporter connection must all end with shutdown.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
