// Package metrics defines the fetcher's Prometheus metrics. Names start with
// ferry_; docs/metrics.md maps them to MirrorMaker 2's.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-replicator/ferry/pkg/stages"
)

// Metrics are the fetcher's instruments.
type Metrics struct {
	Records        *prometheus.CounterVec
	Bytes          *prometheus.CounterVec
	WireBytes      *prometheus.CounterVec
	LagRecords     *prometheus.GaugeVec
	Committed      *prometheus.GaugeVec
	InflightBytes  prometheus.Gauge
	BufferedBytes  prometheus.Gauge
	StreamRestarts *prometheus.CounterVec
	PartitionStops *prometheus.CounterVec
	ShardsOwned    prometheus.Gauge
	Skipped        *prometheus.CounterVec
	Replicated     *prometheus.CounterVec
	Unattributed   *prometheus.CounterVec
	// Stages is ferry_replication_stage_seconds; the fetcher observes
	// its fetch stage.
	Stages *prometheus.HistogramVec
}

// New registers the fetcher's metrics on reg.
func New(reg prometheus.Registerer) *Metrics {
	part := []string{"link", "topic", "partition"}
	m := &Metrics{
		Records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_fetcher_records_total", Help: "Records read from the source and sent to a writer, by source partition.",
		}, part),
		Bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_fetcher_bytes_total", Help: "Encoded record bytes sent, before compression.",
		}, part),
		WireBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_fetcher_wire_bytes_total", Help: "Compressed batch payload bytes sent to writers.",
		}, part),
		LagRecords: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ferry_lag_records", Help: "Source high watermark minus the committed next offset, by source partition.",
		}, part),
		Committed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ferry_committed_offset", Help: "Next source offset committed in the target, by source partition.",
		}, part),
		InflightBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ferry_fetcher_inflight_bytes", Help: "Compressed bytes sent and not yet acknowledged, all shards.",
		}),
		BufferedBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ferry_fetcher_buffered_bytes", Help: "Source bytes the fetcher holds for its shards, reserved for fetches under way, queued to send or sent and not yet acknowledged; at most link.max_buffered_bytes.",
		}),
		StreamRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_fetcher_stream_restarts_total",
			Help: "Shard streams that failed and were reopened, by reason: the gRPC status code of the failure in snake case (unavailable, permission_denied, failed_precondition, ...) or other.",
		}, []string{"link", "reason"}),
		PartitionStops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_data_loss_events_total", Help: "Partitions stopped because copying on would lose or skip data (offset out of range, checkpoint beyond the source, oversized record, source batches pass-through cannot read).",
		}, []string{"link", "topic", "partition", "reason"}),
		Skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_skipped_records_total", Help: "Source records skipped under link.on_data_loss: skip (known counts only).",
		}, part),
		Replicated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_fetcher_replicated_skipped_records_total",
			Help: "Source records not copied because a Ferry writer copying from this link's target cluster produced them into the source cluster (link.skip_replicated), by source partition.",
		}, part),
		Unattributed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_fetcher_replicated_unattributed_records_total",
			Help: "Source records copied although a Ferry writer produced them into the source cluster, because its __ferry_producers entry names no source cluster (a writer older than the field): copied back if they came from this link's target (link.skip_replicated), by source partition.",
		}, part),
		ShardsOwned: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ferry_shards_owned", Help: "Shards this fetcher replicates now.",
		}),
	}
	reg.MustRegister(m.Records, m.Bytes, m.WireBytes, m.LagRecords, m.Committed, m.InflightBytes, m.BufferedBytes, m.StreamRestarts, m.PartitionStops, m.ShardsOwned, m.Skipped, m.Replicated, m.Unattributed)
	m.Stages = stages.Register(reg)
	return m
}

// RegisterRegistryRefused exports refused, the producer registry records
// the fetcher's provenance View did not take (link.skip_replicated).
func RegisterRegistryRefused(reg prometheus.Registerer, refused func() int) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ferry_fetcher_producer_registry_refused_records",
		Help: "Records of the source's __ferry_producers the fetcher did not take since it started: malformed or out of bounds, not signed by an admitted writer, or a later record of a known id naming another source cluster (the first entry wins).",
	}, func() float64 { return float64(refused()) }))
}

// RegisterRegistryForgotten exports forgotten, the producer ids the
// fetcher's provenance View forgot past its bound of 2^20 ids.
func RegisterRegistryForgotten(reg prometheus.Registerer, forgotten func() int) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ferry_fetcher_producer_registry_forgotten_ids",
		Help: "Producer ids of the source's __ferry_producers the fetcher forgot since it started, to keep 2^20: the oldest it read that no stream produces with now. A batch of one, met again, is copied.",
	}, func() float64 { return float64(forgotten()) }))
}

// RegisterLinkShards exports the link's shard count: ferry_shards_owned has
// no link label, and a rule needs both, by link, to see a shard that no
// fetcher holds (deploy/observability).
func RegisterLinkShards(reg prometheus.Registerer, link string, shards int) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ferry_link_shards", Help: "Shards the link is cut into (link.shards): each one should be owned by one fetcher.",
	}, []string{"link"})
	g.WithLabelValues(link).Set(float64(shards))
	reg.MustRegister(g)
}
