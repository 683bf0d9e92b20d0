package observability

import (
	"testing"

	"go.uber.org/goleak"
)

// The scrape test runs a whole fetcher and writer: everything they start
// ends with the test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// go-metrics, which sarama uses, starts a process-wide meter ticker.
		goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"),
	)
}
