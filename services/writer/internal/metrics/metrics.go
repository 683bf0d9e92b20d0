// Package metrics defines the writer's Prometheus metrics. Names start with
// ferry_; docs/metrics.md maps them to MirrorMaker 2's.
package metrics

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the writer's instruments, registered on one registry.
type Metrics struct {
	Records        *prometheus.CounterVec
	Bytes          *prometheus.CounterVec
	WireBytes      *prometheus.CounterVec
	Latency        *prometheus.HistogramVec
	Rejected       *prometheus.CounterVec
	StaleEpochs    *prometheus.CounterVec
	Streams        prometheus.Gauge
	ProduceSeconds prometheus.Histogram
	Checkpoints    *prometheus.CounterVec
	BufferedBytes  prometheus.Gauge
	// CheckpointsRefused counts checkpoint records the checkpoint view
	// ignored, by reason; CheckpointsAcceptedUnsigned the unsigned ones an
	// open took under checkpoints.accept_unsigned.
	CheckpointsRefused          *prometheus.CounterVec
	CheckpointsAcceptedUnsigned prometheus.Counter

	reg prometheus.Registerer
}

// WatchUnsignedCheckpoints exports n, the partitions whose latest
// checkpoint is unsigned, as a gauge (an upgrade is done when it is 0).
func (m *Metrics) WatchUnsignedCheckpoints(n func() float64) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ferry_checkpoints_unsigned",
		Help: "Partitions whose latest checkpoint record is unsigned (written by a writer older than signing, or by someone else).",
	}, n))
}

// LatencyBuckets span a local commit (milliseconds) to a long catch-up
// (minutes), in seconds.
var LatencyBuckets = prometheus.ExponentialBuckets(0.001, 2, 20)

// New registers the writer's metrics on reg.
func New(reg prometheus.Registerer) *Metrics {
	part := []string{"link", "topic", "partition"}
	m := &Metrics{
		Records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_writer_records_total", Help: "Records produced to the target and acknowledged by it, by source partition.",
		}, part),
		Bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_writer_bytes_total", Help: "Uncompressed bytes of records (encoded) written, by source partition.",
		}, part),
		WireBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_writer_wire_bytes_total", Help: "Compressed batch payload bytes received from fetchers, by source partition.",
		}, part),
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ferry_replication_latency_seconds",
			Help:    "Time from a record's source timestamp to its acknowledgement by the target cluster.",
			Buckets: LatencyBuckets,
		}, []string{"link", "topic"}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_writer_rejected_total", Help: "Opens and batches refused, by reason (the gRPC code).",
		}, []string{"link", "reason"}),
		StaleEpochs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_writer_fencing_events_total", Help: "Opens or batches refused because a newer owner of the shard exists.",
		}, []string{"link"}),
		Streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ferry_writer_streams_active", Help: "Shard streams this writer serves now.",
		}),
		ProduceSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ferry_writer_produce_round_seconds", Help: "Duration of one produce round (records plus checkpoints) to the target.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		Checkpoints: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_writer_checkpoints_total", Help: "Checkpoints committed to the checkpoint topic.",
		}, []string{"link"}),
		BufferedBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ferry_writer_buffered_bytes",
			Help: "Wire bytes of received batches the writer holds, queued or in a round, across all streams; at most max_buffered_bytes.",
		}),
		CheckpointsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_checkpoint_records_refused_total",
			Help: "Checkpoint records the writer's checkpoint view ignored, by reason (unreadable, unsigned, unsigned_tombstone, unverified, replayed).",
		}, []string{"reason"}),
		CheckpointsAcceptedUnsigned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_checkpoints_accepted_unsigned_total",
			Help: "Unsigned checkpoints an open took under checkpoints.accept_unsigned.",
		}),
		reg: reg,
	}
	reg.MustRegister(m.Records, m.Bytes, m.WireBytes, m.Latency, m.Rejected, m.StaleEpochs, m.Streams, m.ProduceSeconds, m.Checkpoints,
		m.BufferedBytes, m.CheckpointsRefused, m.CheckpointsAcceptedUnsigned)
	return m
}
