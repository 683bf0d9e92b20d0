// Package stages defines ferry_replication_stage_seconds, the latency of
// each stage a batch passes on its way from the source to the target, so an
// operator sees where time goes without a trace. Both tiers register it
// (each observes its own stages), so its name, labels and buckets are
// defined once, here; docs/metrics.md says what each stage measures.
//
// It is observed once per wire batch, never per record: the data path is
// hot, and one observation per batch costs nothing measurable.
package stages

import "github.com/prometheus/client_golang/prometheus"

// The stages, the values of the stage label.
const (
	// Fetch is source append to fetched, observed by the fetcher.
	Fetch = "fetch"
	// Transit is fetched to received by the writer, observed by the
	// writer from the fetch time the fetcher stamps on the batch.
	Transit = "transit"
	// Commit is received by the writer to committed on the target
	// (acknowledged, or its transaction committed), observed by the writer.
	Commit = "commit"
)

// Buckets span a local hop (a millisecond) to a long catch-up (about nine
// minutes), in seconds.
var Buckets = prometheus.ExponentialBuckets(0.001, 2, 20)

// Register registers the histogram on reg.
func Register(reg prometheus.Registerer) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ferry_replication_stage_seconds",
		Help:    "Latency of each stage of a batch, by stage: fetch (source append to fetched, on the fetcher), transit (fetched to received by the writer, across two clocks), commit (received by the writer to committed on the target). One observation per batch.",
		Buckets: Buckets,
	}, []string{"link", "stage"})
	reg.MustRegister(h)
	return h
}
