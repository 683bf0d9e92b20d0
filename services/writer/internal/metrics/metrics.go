// Package metrics defines the writer's Prometheus metrics. Names start with
// ferry_; docs/metrics.md maps them to MirrorMaker 2's.
package metrics

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-replicator/ferry/pkg/stages"
)

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
	// Failover is the failover meter, read at each scrape from its source
	// (SetSource): ages grow between heartbeats, so no gauge is set.
	Failover *FailoverCollector
	// GroupSyncs counts the group syncer's syncs by link and outcome;
	// Groups serves each group's sync age and re-read exposure, read at
	// each scrape (SetSource).
	GroupSyncs *prometheus.CounterVec
	Groups     *GroupCollector
	// Stages is ferry_replication_stage_seconds; the writer observes its
	// transit and commit stages.
	Stages *prometheus.HistogramVec
	// TopicConfigDrift is 1 for each target topic config that differs
	// from its source's while the source did not change it (package
	// topics, Syncer): changed on the target by hand.
	TopicConfigDrift *prometheus.GaugeVec
	// TopicsRecreated counts target topics found deleted under the
	// writer and created again (package topics, Ensurer.Forget).
	TopicsRecreated *prometheus.CounterVec

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

// WatchUnverifiedCheckpoints exports n, what the checkpoint view holds
// of records it has not verified yet (checkpoints.max_unverified_bytes
// bounds it), as a gauge.
func (m *Metrics) WatchUnverifiedCheckpoints(n func() float64) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ferry_checkpoint_unverified_bytes",
		Help: "Bytes the checkpoint view holds in records it has not verified yet; at most checkpoints.max_unverified_bytes.",
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
			Help: "Bytes of received batches the writer holds, queued or in a round, across all streams (payloads as received and decompressed, records decoded to rebuild); at most max_buffered_bytes.",
		}),
		CheckpointsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_checkpoint_records_refused_total",
			Help: "Checkpoint records the writer's checkpoint view ignored, by reason (unreadable, unsigned, unsigned_tombstone, unverified, unverified_bound, replayed, unsigned_control, unverified_control, control_tombstone).",
		}, []string{"reason"}),
		CheckpointsAcceptedUnsigned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_checkpoints_accepted_unsigned_total",
			Help: "Unsigned checkpoints an open took under checkpoints.accept_unsigned.",
		}),
		reg: reg,
	}
	m.Failover = newFailoverCollector()
	m.GroupSyncs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ferry_group_sync_total",
		Help: "Consumer-group syncs by outcome: moved, unchanged, active (members on the target), owned (committed by someone else), before_index, error, limit.",
	}, []string{"link", "outcome"})
	m.Groups = newGroupCollector()
	m.TopicConfigDrift = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ferry_topic_config_drift",
		Help: "1 while a target topic config differs from the source's copied value although the source did not change it (set on the target by hand); reported, not overwritten, unless links[].config_sync is overwrite.",
	}, []string{"link", "topic", "config"})
	reg.MustRegister(m.TopicConfigDrift)
	m.TopicsRecreated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ferry_writer_target_topics_recreated_total",
		Help: "Target topics deleted while the writer copied to them and created again; the records copied to them before went with the deletion.",
	}, []string{"topic"})
	reg.MustRegister(m.TopicsRecreated)
	reg.MustRegister(m.Records, m.Bytes, m.WireBytes, m.Latency, m.Rejected, m.StaleEpochs, m.Streams, m.ProduceSeconds, m.Checkpoints,
		m.BufferedBytes, m.CheckpointsRefused, m.CheckpointsAcceptedUnsigned, m.Failover, m.GroupSyncs, m.Groups)
	m.Stages = stages.Register(reg)
	return m
}

// Exposure is one source partition's line of the failover meter.
type Exposure struct {
	Link, Topic string
	Partition   int32
	// Records would be lost if the source died now; Seconds is how much
	// source time they span (the lag in seconds), valid when HasSeconds.
	Records    int64
	Seconds    float64
	HasSeconds bool
	// HeartbeatAge is the age of the last heartbeat, in seconds.
	HeartbeatAge float64
}

// FailoverCollector serves ferry_failover_exposure_records,
// ferry_failover_exposure_seconds and ferry_heartbeat_age_seconds, by
// link, topic and partition: one series each per partition a heartbeat
// was received or loaded for, of the writer's links.
type FailoverCollector struct {
	records, seconds, age *prometheus.Desc

	mu   sync.Mutex
	read func() []Exposure
}

func newFailoverCollector() *FailoverCollector {
	part := []string{"link", "topic", "partition"}
	return &FailoverCollector{
		records: prometheus.NewDesc("ferry_failover_exposure_records",
			"Records the source held per its last heartbeat that are not committed on the target: lost if the source died now.", part, nil),
		seconds: prometheus.NewDesc("ferry_failover_exposure_seconds",
			"Source head timestamp minus that of the last record committed on the target: the lag, and the data a failover now would lose, in seconds.", part, nil),
		age: prometheus.NewDesc("ferry_heartbeat_age_seconds",
			"Age of the last heartbeat of the partition: how old the writer's knowledge of the source is.", part, nil),
	}
}

// SetSource sets where the meter is read from at each scrape.
func (c *FailoverCollector) SetSource(read func() []Exposure) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.read = read
}

// Describe implements prometheus.Collector.
func (c *FailoverCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.records
	ch <- c.seconds
	ch <- c.age
}

// Collect implements prometheus.Collector.
func (c *FailoverCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	read := c.read
	c.mu.Unlock()
	if read == nil {
		return
	}
	for _, e := range read() {
		labels := []string{e.Link, e.Topic, strconv.Itoa(int(e.Partition))}
		ch <- prometheus.MustNewConstMetric(c.records, prometheus.GaugeValue, float64(e.Records), labels...)
		if e.HasSeconds {
			ch <- prometheus.MustNewConstMetric(c.seconds, prometheus.GaugeValue, e.Seconds, labels...)
		}
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, e.HeartbeatAge, labels...)
	}
}

// GroupSync is one consumer group's line of the group sync.
type GroupSync struct {
	Link, Group string
	// Age is the age of the source read the group's target position last
	// followed, valid when HasAge; Reread the records it would read again
	// after a failover now, valid when HasReread.
	Age       float64
	HasAge    bool
	Reread    int64
	HasReread bool
}

// GroupCollector serves ferry_group_sync_age_seconds and
// ferry_failover_reread_records by link and group: one series each per
// group the writer syncs, at most groupsync.MaxGroups per link (and
// link.groups.max of its fetchers).
type GroupCollector struct {
	age, reread *prometheus.Desc

	mu   sync.Mutex
	read func() []GroupSync
}

func newGroupCollector() *GroupCollector {
	labels := []string{"link", "group"}
	return &GroupCollector{
		age: prometheus.NewDesc("ferry_group_sync_age_seconds",
			"Age of the source read a consumer group's target position last followed.", labels, nil),
		reread: prometheus.NewDesc("ferry_failover_reread_records",
			"Records a consumer group would read again after a failover now: its source offsets minus those its target position stands for.", labels, nil),
	}
}

// SetSource sets where the group lines are read from at each scrape.
func (c *GroupCollector) SetSource(read func() []GroupSync) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.read = read
}

// Describe implements prometheus.Collector.
func (c *GroupCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.age
	ch <- c.reread
}

// Collect implements prometheus.Collector.
func (c *GroupCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	read := c.read
	c.mu.Unlock()
	if read == nil {
		return
	}
	for _, g := range read() {
		if g.HasAge {
			ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, g.Age, g.Link, g.Group)
		}
		if g.HasReread {
			ch <- prometheus.MustNewConstMetric(c.reread, prometheus.GaugeValue, float64(g.Reread), g.Link, g.Group)
		}
	}
}
