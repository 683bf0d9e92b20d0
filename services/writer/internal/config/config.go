// Package config is the writer's typed configuration: defaults, the YAML
// layout and validation that names every bad key.
package config

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/ferry-replicator/ferry/pkg/admin"
	"github.com/ferry-replicator/ferry/pkg/config"
	"github.com/ferry-replicator/ferry/pkg/kafkaclient"
	"github.com/ferry-replicator/ferry/pkg/provenance"
	"github.com/ferry-replicator/ferry/pkg/shards"
	"github.com/ferry-replicator/ferry/pkg/telemetry"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
	"github.com/ferry-replicator/ferry/pkg/tracing"
	"github.com/ferry-replicator/ferry/services/writer/internal/checkpoint"
	"github.com/ferry-replicator/ferry/services/writer/internal/groupstate"
	"github.com/ferry-replicator/ferry/services/writer/internal/naming"
	"github.com/ferry-replicator/ferry/services/writer/internal/offsetindex"
	"github.com/ferry-replicator/ferry/services/writer/internal/registration"
	"github.com/ferry-replicator/ferry/services/writer/internal/topicfilter"
	"github.com/ferry-replicator/ferry/services/writer/internal/topics"
)

// GRPC holds the gRPC port's HTTP/2 flow-control windows. Both zero (the
// default) keeps gRPC-Go's dynamic windows: they start at 64 KiB and grow
// with the measured bandwidth-delay product up to 16 MiB. Fixed windows are
// for a link whose bandwidth-delay product, in wire bytes, is above 16 MiB
// (docs/configuration.md, "Long round trips").
type GRPC struct {
	// StreamWindow is each stream's window (one stream per shard).
	StreamWindow config.ByteSize `yaml:"stream_window"`
	// ConnWindow is the connection's window, shared by its streams.
	ConnWindow config.ByteSize `yaml:"conn_window"`
}

// Config is the whole writer configuration.
type Config struct {
	// ID names this writer in logs, status and checkpoints. Default: hostname.
	ID string `yaml:"id"`
	// Listen is the gRPC address fetchers connect to.
	Listen string `yaml:"listen"`
	// Admin is the HTTP address of /metrics, /healthz, /readyz, /status,
	// and the loopback one of pprof (off by default).
	Admin admin.Config        `yaml:"admin"`
	Log   telemetry.LogConfig `yaml:"log"`
	// Target is the cluster the writer produces to.
	Target kafkaclient.Config `yaml:"target"`
	// Checkpoints is where committed progress is kept, in the target cluster.
	Checkpoints Checkpoints `yaml:"checkpoints"`
	// OffsetIndex is where each round records where its source offsets
	// landed, in the target cluster (docs/architecture.md, "Offset index").
	OffsetIndex OffsetIndex `yaml:"offset_index"`
	// Heartbeats is where the last heartbeat of each source partition is
	// kept, in the target cluster, for the failover meter after a restart.
	Heartbeats Heartbeats `yaml:"heartbeats"`
	// GroupState is where the group sync's state outlives the writer: a
	// failover report and failback after a writer restart read it.
	GroupState GroupState `yaml:"group_state"`
	// ProducerRegistry says how the writer's records in __ferry_producers
	// are keyed.
	ProducerRegistry ProducerRegistry `yaml:"producer_registry"`
	// Producer tunes the target producer of each shard.
	Producer Producer `yaml:"producer"`
	// MaxBatchBytes bounds one batch's records, uncompressed. It must be at
	// least the fetchers' batch.max_bytes.
	MaxBatchBytes config.ByteSize `yaml:"max_batch_bytes"`
	// MaxGroupBytes bounds the records one produce round (and, in
	// exactly-once mode, one transaction) groups from several batches.
	MaxGroupBytes config.ByteSize `yaml:"max_group_bytes"`
	// MaxStreams bounds the shard streams the writer serves at once, and
	// MaxStreamsPerPeer those of one fetcher identity: each stream holds a
	// Kafka client, a producer id and a __ferry_producers record. An Open
	// above either is refused with ResourceExhausted (the fetcher retries).
	MaxStreams        int `yaml:"max_streams"`
	MaxStreamsPerPeer int `yaml:"max_streams_per_peer"`
	// OpenRatePerPeer bounds the Opens one fetcher identity may make a
	// second, in bursts of OpenBurstPerPeer (0: max_streams_per_peer):
	// each Open takes a producer id and writes a __ferry_producers
	// record. An Open past it is refused with ResourceExhausted.
	OpenRatePerPeer  float64 `yaml:"open_rate_per_peer"`
	OpenBurstPerPeer int     `yaml:"open_burst_per_peer"`
	// MaxPartitions bounds the partition count of a target topic the
	// writer creates or grows: an Open with a topic above it is refused.
	// Growth cannot be undone, so a fetcher never decides it alone.
	MaxPartitions int32 `yaml:"max_partitions"`
	// MaxBufferedBytes bounds the wire bytes (as received, compressed) of
	// the batches the writer holds, queued or in a round, across all its
	// streams: one limit for the process, whatever the number of shards.
	MaxBufferedBytes config.ByteSize `yaml:"max_buffered_bytes"`
	// AckTimeout bounds how long an ack may wait for its peer to read it:
	// a stream whose peer reads none in time ends, so a peer that stops
	// reading cannot keep its stream until max_connection_age.
	AckTimeout time.Duration `yaml:"ack_timeout"`
	// ShutdownTimeout bounds the drain at SIGTERM.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// GRPC sizes the flow-control windows of the gRPC port, which bound how
	// many bytes a fetcher has on the wire before the writer reads them.
	GRPC GRPC `yaml:"grpc"`
	// TLS secures the gRPC port: mutual TLS with an allow list of fetcher
	// identities, on by default.
	TLS tlsconfig.Config `yaml:"tls"`
	// Registration puts the writer in the target region's Consul catalog.
	Registration registration.Config `yaml:"registration"`
	// Tracing exports OpenTelemetry spans over OTLP; off without an endpoint.
	Tracing tracing.Config `yaml:"tracing"`
	// Links lists the replication flows this writer accepts.
	Links []Link `yaml:"links"`
	// ConfigSyncInterval is how often the target topics the writer has
	// opened are compared with their source's configs (links[].config_sync)
	// and their synced ACLs created. Default 1m.
	ConfigSyncInterval time.Duration `yaml:"config_sync_interval"`
	// Control is the link control plane the gRPC port serves to
	// operators (ferryctl): off until control.allowed_ids names one.
	Control Control `yaml:"control"`
}

// Control configures the writer's ControlService (docs/operations.md,
// "ferryctl").
type Control struct {
	// AllowedIDs are the operator identities (SPIFFE IDs or DNS names of
	// ferryctl's client certificates) that may read and change the state
	// of the writer's links. The TLS handshake admits them beside
	// tls.allowed_ids; they may call nothing but the ControlService, and
	// fetchers (tls.allowed_ids) may not call it. Empty: control refused.
	AllowedIDs []string `yaml:"allowed_ids"`
}

// Checkpoints configures the compacted checkpoint topic.
type Checkpoints struct {
	Topic             string `yaml:"topic"`
	Partitions        int32  `yaml:"partitions"`
	ReplicationFactor int16  `yaml:"replication_factor"`
	// Signers are the writers whose checkpoints this writer trusts: each
	// checkpoint record is signed with its writer's tls certificate, and
	// one that does not verify stops its partition (checkpoint_unverified).
	Signers Signers `yaml:"signers"`
	// AcceptUnsigned takes unsigned checkpoints (of writers older than
	// signing) with a warning: on while upgrading, off after.
	AcceptUnsigned bool `yaml:"accept_unsigned"`
	// MaxUnverifiedBytes bounds what the checkpoint view holds of records
	// it has not verified yet; past it each record is verified as it is
	// read, and one that does not verify is refused.
	MaxUnverifiedBytes config.ByteSize `yaml:"max_unverified_bytes"`
}

// ProducerRegistry configures the writer's records in __ferry_producers
// (pkg/provenance).
type ProducerRegistry struct {
	// Key is how its records are keyed: producer_id, one record per id
	// (a record per at-least-once Open, never compacted away), which every
	// fetcher reads; or stream, one key per writer, link and shard, which
	// fetchers older than it refuse (their links would copy back what
	// this writer writes): set it once every fetcher reading the target
	// cluster runs a build that reads it.
	Key string `yaml:"key"`
}

// Registry key settings.
const (
	RegistryKeyProducerID = "producer_id"
	RegistryKeyStream     = "stream"
)

// Keys is how the Recorder keys records under Key (which Validate checked).
func (r ProducerRegistry) Keys() provenance.Keys {
	if r.Key == RegistryKeyStream {
		return provenance.KeyByStream
	}
	return provenance.KeyByID
}

// Signers says whose checkpoint signatures a writer admits.
type Signers struct {
	// CAFile is the PEM bundle a signer's chain must end in. Default:
	// tls.ca_file.
	CAFile string `yaml:"ca_file"`
	// AllowedIDs are the identities a signer may present (SPIFFE IDs or
	// DNS names). Default: the identities of the writer's own tls
	// certificate (its SPIFFE IDs, or without one its DNS names), so
	// writers sharing an identity need no setting.
	AllowedIDs []string `yaml:"allowed_ids"`
}

// OffsetIndex configures the offset index topic, which the writer creates
// with the checkpoints' replication factor.
type OffsetIndex struct {
	Topic string `yaml:"topic"`
	// Partitions when created; 0 (the default) takes checkpoints.partitions,
	// which Validate fills in.
	Partitions int32 `yaml:"partitions"`
	// Retention is the topic's retention.ms when created: at least the
	// longest retention of the source topics, or translating their oldest
	// offsets answers that they are before the index.
	Retention time.Duration `yaml:"retention"`
	// FlushInterval is how often a shard writes its partitions' index
	// records to the topic (0: with every round). Until then they ride,
	// committed with the data, in the partitions' checkpoints, where
	// translation reads them too.
	FlushInterval time.Duration `yaml:"flush_interval"`
}

// Heartbeats configures the compacted heartbeat topic (created with
// checkpoints.partitions and checkpoints.replication_factor).
type Heartbeats struct {
	Topic string `yaml:"topic"`
	// PersistInterval is how often changed heartbeats are written: each
	// partition's record at most once an interval, all in one batch.
	PersistInterval time.Duration `yaml:"persist_interval"`
}

// GroupState configures the compacted topic where the group sync keeps
// what it knows of each group partition (package groupstate; created with
// checkpoints.partitions and checkpoints.replication_factor), written at
// most once a heartbeats.persist_interval and read back at start.
type GroupState struct {
	Topic string `yaml:"topic"`
}

// Producer tunes target producers.
type Producer struct {
	// Compression of the records in the target cluster: none, gzip, snappy,
	// lz4 or zstd.
	Compression string `yaml:"compression"`
	// MaxMessageBytes bounds one produce request batch; keep it at or below
	// the target broker's message.max.bytes.
	MaxMessageBytes config.ByteSize `yaml:"max_message_bytes"`
	// MergeBelow is the size under which a source batch that shares a
	// round with other batches of its partition is merged with them into
	// larger batches (decompressed and compressed again) instead of
	// passing as it is in a produce request of its own; 0 passes every
	// batch that can.
	MergeBelow config.ByteSize `yaml:"merge_below"`
	// Timeout bounds one produce round before the shard's stream fails and
	// resumes from its checkpoint.
	Timeout time.Duration `yaml:"timeout"`
	// TransactionTimeout is how long the target keeps an exactly-once
	// round's transaction open before aborting it. A dead writer's open
	// transaction holds back read_committed readers (and the next owner's
	// checkpoint read) until it is fenced, which the shard's next owner
	// does at once, or this passes. It must leave a round the time to
	// finish (MinTransactionTimeout): a coordinator that aborts a round
	// still producing fails it, and the same round is sent again as it was.
	TransactionTimeout time.Duration `yaml:"transaction_timeout"`
}

// commitAllowance is what an exactly-once round needs beyond its two
// produce waits: the producer's own grace on each answer (5 s, see
// producer.send) and the commit.
const commitAllowance = 10 * time.Second

// MinTransactionTimeout is the shortest producer.transaction_timeout that
// lets an exactly-once round whose produce requests each wait up to
// timeout commit before its coordinator aborts it.
func MinTransactionTimeout(timeout time.Duration) time.Duration {
	return 2*timeout + commitAllowance
}

// Link is one replication flow as the target side sees it.
type Link struct {
	// Name must match the fetchers' link.name.
	Name string `yaml:"name"`
	// Naming is identity (keep topic names) or prefix.
	Naming string `yaml:"naming"`
	// Prefix goes before each topic name when naming is prefix.
	Prefix string `yaml:"prefix"`
	// Delivery is exactly_once (records and checkpoints commit in one target
	// transaction) or at_least_once (idempotent producer, checkpoint after
	// the records; a crash can duplicate, never lose).
	Delivery string `yaml:"delivery"`
	// Shards is the link's number of shards, the fetchers' link.shards: an
	// Open of a shard number at or above it is refused. Default 8, the
	// fetchers' default.
	Shards int `yaml:"shards"`
	// AllowedIDs lists the fetcher identities (SPIFFE IDs or DNS names, as
	// in tls.allowed_ids, each of which they must be) that may open the
	// link's shards. Empty admits every identity of tls.allowed_ids: with
	// several links, name each link's fetchers, or any one of them can
	// write, skip and fence on every link.
	AllowedIDs []string `yaml:"allowed_ids"`
	// ReplicationFactor of created target topics; -1 takes the broker's default.
	ReplicationFactor int16 `yaml:"replication_factor"`
	// ConfigAllow lists the source topic configs a created target topic
	// takes (exact keys). Default topics.DefaultConfigAllow.
	ConfigAllow []string `yaml:"config_allow"`
	// MinRetention and MinRetentionBytes are the floors of a copied
	// retention.ms and retention.bytes: a lower source value (or a hostile
	// fetcher's retention.ms=1) is raised to them. Defaults 1h and 100MiB.
	MinRetention      time.Duration   `yaml:"min_retention"`
	MinRetentionBytes config.ByteSize `yaml:"min_retention_bytes"`
	// ConfigSync is what the writer does with the configs of a target
	// topic that exists, every config_sync_interval and at each open
	// that brings a source change (the fetchers read the source's configs
	// every link.discovery_interval): apply (default) applies the
	// source's changes and reports drift (a target config changed by
	// hand while the source kept its value); overwrite also puts drift
	// back to the source's value; report changes nothing and reports
	// every difference; off copies configs at creation only. Only the
	// configs of config_allow are read or changed, within the floors.
	ConfigSync string `yaml:"config_sync"`
	// SyncACLs creates on each target topic the source's ALLOW Read and
	// Describe topic ACLs the fetchers send (their link.sync_acls), as
	// literal ACLs on the target topic for the same principals and hosts,
	// so consumers can read after a failover. Off by default: the
	// fetchers of the link then choose who may read its target topics.
	SyncACLs bool `yaml:"sync_acls"`
	// ConfigExclude was a deny list of regular expressions; it is refused,
	// naming config_allow, so a file written for it is not silently read
	// as an allow-everything.
	ConfigExclude []string `yaml:"config_exclude"`
	// PlatformTopics lists platform topics (Schema Registry's _schemas,
	// Kafka Connect's connect-*, _confluent*, mm2-*) this link may write
	// nonetheless, such as _schemas for a Schema Registry copy.
	PlatformTopics []string `yaml:"platform_topics"`
	// Topics is the writer's own allow list of source topics for the link,
	// with the meaning of the fetcher's link.topics: a topic is accepted
	// when an include matches and no exclude does, each expression
	// anchored at both ends. An Open naming any other topic is refused, so
	// a fetcher's settings never decide alone what is written here.
	// Defaults: include `.*` (with naming prefix only: identity naming
	// writes the target's own topic names, so it needs an include set),
	// exclude the fetcher's default list.
	Topics struct {
		Include []string `yaml:"include"`
		Exclude []string `yaml:"exclude"`
	} `yaml:"topics"`

	topics topicfilter.Filter // Topics, parsed by Validate
}

// TopicFilter is Topics as parsed by Validate.
func (l *Link) TopicFilter() topicfilter.Filter { return l.topics }

// DefaultMergeBelow is producer.merge_below's default (docs/benchmark.md
// has the measurements behind it).
const DefaultMergeBelow = 64 << 10

// DefaultOpenRatePerPeer is open_rate_per_peer's default, in Opens a
// second: a healthy fetcher opens each shard once an hour or so (its
// connection's maximum age), and all of them at once when it or a writer
// starts, which open_burst_per_peer covers; a shard reopening in a loop
// is slowed to this, and the fetcher backs off.
const DefaultOpenRatePerPeer = 2

// DefaultMaxPartitions is max_partitions' default.
const DefaultMaxPartitions = 1000

// Defaults returns the configuration used where a file is silent.
func Defaults() Config {
	host, _ := os.Hostname()
	c := Config{
		ID:                 host,
		Listen:             "127.0.0.1:7400",
		Log:                telemetry.LogConfig{Level: "info", Format: "text"},
		Target:             kafkaclient.Defaults("ferry-writer"),
		Checkpoints:        Checkpoints{Topic: "__ferry_checkpoints", Partitions: 1, ReplicationFactor: -1, MaxUnverifiedBytes: checkpoint.DefaultMaxUnverifiedBytes},
		OffsetIndex:        OffsetIndex{Topic: offsetindex.DefaultTopic, Retention: offsetindex.DefaultRetention, FlushInterval: offsetindex.DefaultFlushInterval},
		Heartbeats:         Heartbeats{Topic: "__ferry_heartbeats", PersistInterval: 5 * time.Second},
		GroupState:         GroupState{Topic: groupstate.DefaultTopic},
		ProducerRegistry:   ProducerRegistry{Key: RegistryKeyProducerID},
		Producer:           Producer{Compression: "lz4", MaxMessageBytes: 1 << 20, MergeBelow: DefaultMergeBelow, Timeout: 20 * time.Second, TransactionTimeout: 60 * time.Second},
		MaxBatchBytes:      4 << 20,
		MaxGroupBytes:      8 << 20,
		MaxBufferedBytes:   64 << 20,
		AckTimeout:         time.Minute,
		MaxPartitions:      DefaultMaxPartitions,
		MaxStreams:         1024,
		MaxStreamsPerPeer:  256,
		OpenRatePerPeer:    DefaultOpenRatePerPeer,
		ShutdownTimeout:    20 * time.Second,
		ConfigSyncInterval: time.Minute,
	}
	c.Admin.Listen = "127.0.0.1:7401"
	c.Registration.Service = "ferry-writer"
	c.TLS = tlsconfig.Defaults()
	c.Tracing = tracing.DefaultConfig()
	return c
}

// linkDefaults fills a link's unset fields.
func linkDefaults(l *Link) {
	if l.Naming == "" {
		l.Naming = "identity"
	}
	if l.Delivery == "" {
		l.Delivery = "exactly_once"
	}
	if l.ReplicationFactor == 0 {
		l.ReplicationFactor = -1
	}
	if l.Shards == 0 {
		l.Shards = DefaultShards
	}
	if l.ConfigAllow == nil {
		l.ConfigAllow = topics.DefaultConfigAllow
	}
	if l.ConfigSync == "" {
		l.ConfigSync = string(topics.SyncApply)
	}
	if l.MinRetention == 0 {
		l.MinRetention = time.Hour
	}
	if l.MinRetentionBytes == 0 {
		l.MinRetentionBytes = 100 << 20
	}
	// nil is unset; an empty list set in the file stays empty. Identity
	// naming gets no default include (Validate asks for one).
	if l.Topics.Include == nil && l.Naming != "identity" {
		l.Topics.Include = topicfilter.DefaultInclude
	}
	if l.Topics.Exclude == nil {
		l.Topics.Exclude = topicfilter.DefaultExclude
	}
}

// DefaultShards is links[].shards' default, the fetchers' link.shards
// default.
const DefaultShards = shards.Default

var (
	linkName  = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)
	configKey = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,254}$`)
)

// Validate fills link defaults and returns every problem, each naming its key.
// Warnings are settings that run but leave something open, each a line
// for the log at start.
func (c *Config) Warnings() []string {
	var out []string
	if len(c.Links) < 2 || c.TLS.Insecure {
		return out // one link: tls.allowed_ids are its fetchers
	}
	for _, l := range c.Links {
		if len(l.AllowedIDs) == 0 {
			out = append(out, fmt.Sprintf("link %s admits every fetcher identity of tls.allowed_ids (links[].allowed_ids is empty): "+
				"a fetcher of any of this writer's %d links can write, skip and fence on it; name its fetchers", l.Name, len(c.Links)))
		}
	}
	return out
}

func (c *Config) Validate() error {
	var p config.Problems
	if c.ID == "" {
		p.Addf("id", "required")
	}
	if c.Listen == "" {
		p.Addf("listen", "required: the gRPC host:port fetchers connect to")
	}
	c.Admin.Validate(&p)
	c.Log.Validate(&p)
	c.TLS.Validate("tls", c.Listen, &p)
	c.Tracing.Validate("tracing", &p)
	c.Target.Validate("target", &p)
	if c.Checkpoints.Topic == "" {
		p.Addf("checkpoints.topic", "required")
	}
	if c.Checkpoints.Partitions < 1 {
		p.Addf("checkpoints.partitions", "must be at least 1")
	}
	if c.Checkpoints.MaxUnverifiedBytes < 1<<20 || c.Checkpoints.MaxUnverifiedBytes > 64<<30 {
		p.Addf("checkpoints.max_unverified_bytes", "%v: must be between 1MiB and 64GiB", c.Checkpoints.MaxUnverifiedBytes)
	}
	if sg := c.Checkpoints.Signers; !c.TLS.Insecure {
		if sg.CAFile != "" {
			if err := tlsconfig.CheckCAFile(sg.CAFile); err != nil {
				p.Addf("checkpoints.signers.ca_file", "%v", err)
			}
		}
		for _, id := range sg.AllowedIDs {
			if err := tlsconfig.CheckID(id); err != nil {
				p.Addf("checkpoints.signers.allowed_ids", "%q: %v", id, err)
			}
		}
	}
	c.OffsetIndex.validate(c.Checkpoints, &p)
	switch c.Heartbeats.Topic {
	case "":
		p.Addf("heartbeats.topic", "required")
	case c.Checkpoints.Topic, provenance.Topic, c.OffsetIndex.Topic:
		p.Addf("heartbeats.topic", "%q is another of the writer's topics", c.Heartbeats.Topic)
	}
	switch c.GroupState.Topic {
	case "":
		p.Addf("group_state.topic", "required")
	case c.Checkpoints.Topic, provenance.Topic, c.OffsetIndex.Topic, c.Heartbeats.Topic:
		p.Addf("group_state.topic", "%q is another of the writer's topics", c.GroupState.Topic)
	}
	if c.Heartbeats.PersistInterval < 100*time.Millisecond || c.Heartbeats.PersistInterval > 10*time.Minute {
		p.Addf("heartbeats.persist_interval", "%v: must be between 100ms and 10m", c.Heartbeats.PersistInterval)
	}
	switch c.Producer.Compression {
	case "none", "gzip", "snappy", "lz4", "zstd":
	default:
		p.Addf("producer.compression", "%q: want none, gzip, snappy, lz4 or zstd", c.Producer.Compression)
	}
	if c.Producer.MaxMessageBytes < 1024 {
		p.Addf("producer.max_message_bytes", "must be at least 1KiB")
	}
	if c.Producer.MergeBelow < 0 || c.Producer.MergeBelow > c.Producer.MaxMessageBytes {
		p.Addf("producer.merge_below", "%v: must be between 0 and producer.max_message_bytes", c.Producer.MergeBelow)
	}
	if c.Producer.Timeout <= 0 {
		p.Addf("producer.timeout", "must be positive")
	}
	if c.Producer.TransactionTimeout < time.Second {
		p.Addf("producer.transaction_timeout", "%v: must be at least 1s", c.Producer.TransactionTimeout)
	}
	if c.MaxBatchBytes < 1024 || c.MaxBatchBytes > 256<<20 {
		p.Addf("max_batch_bytes", "%v: must be between 1KiB and 256MiB", c.MaxBatchBytes)
	}
	if g := c.GRPC; g.StreamWindow != 0 || g.ConnWindow != 0 {
		// gRPC-Go ignores windows under 64 KiB, and either window set
		// turns the dynamic sizing off for both: half a setting would
		// leave the other window at 64 KiB.
		switch {
		case g.StreamWindow == 0 || g.ConnWindow == 0:
			p.Addf("grpc", "set both stream_window and conn_window, or neither (dynamic windows)")
		case g.StreamWindow < 64<<10 || g.StreamWindow > 1<<30:
			p.Addf("grpc.stream_window", "%v: must be between 64KiB and 1GiB", g.StreamWindow)
		case g.ConnWindow < g.StreamWindow || g.ConnWindow > 1<<30:
			p.Addf("grpc.conn_window", "%v: must be at least grpc.stream_window (%v) and at most 1GiB", g.ConnWindow, g.StreamWindow)
		}
	}
	if c.MaxGroupBytes < c.MaxBatchBytes {
		p.Addf("max_group_bytes", "%v: must be at least max_batch_bytes (%v)", c.MaxGroupBytes, c.MaxBatchBytes)
	}
	// Not tied to max_batch_bytes, which bounds uncompressed records: this
	// counts compressed wire bytes, and a batch above it is still admitted
	// (alone), so only a floor that keeps streams moving is needed.
	if c.MaxBufferedBytes < 1<<20 || c.MaxBufferedBytes > 64<<30 {
		p.Addf("max_buffered_bytes", "%v: must be between 1MiB and 64GiB", c.MaxBufferedBytes)
	}
	if c.AckTimeout < time.Second || c.AckTimeout > time.Hour {
		p.Addf("ack_timeout", "%v: must be between 1s and 1h", c.AckTimeout)
	}
	if c.MaxStreams < 1 {
		p.Addf("max_streams", "%d: must be at least 1", c.MaxStreams)
	}
	if c.MaxStreamsPerPeer < 1 || c.MaxStreamsPerPeer > c.MaxStreams {
		p.Addf("max_streams_per_peer", "%d: must be between 1 and max_streams (%d)", c.MaxStreamsPerPeer, c.MaxStreams)
	}
	if c.OpenRatePerPeer <= 0 || c.OpenRatePerPeer > 10000 {
		p.Addf("open_rate_per_peer", "%g: must be above 0 and at most 10000 (Opens a second)", c.OpenRatePerPeer)
	}
	if c.OpenBurstPerPeer < 0 {
		p.Addf("open_burst_per_peer", "%d: must be at least 0 (0: max_streams_per_peer)", c.OpenBurstPerPeer)
	}
	switch c.ProducerRegistry.Key {
	case RegistryKeyProducerID, RegistryKeyStream:
	default:
		p.Addf("producer_registry.key", "%q: want %s or %s", c.ProducerRegistry.Key, RegistryKeyProducerID, RegistryKeyStream)
	}
	if c.MaxPartitions < 1 || c.MaxPartitions > 1000000 {
		p.Addf("max_partitions", "%d: must be between 1 and 1000000", c.MaxPartitions)
	}
	if c.ShutdownTimeout <= 0 {
		p.Addf("shutdown_timeout", "must be positive")
	}
	if c.ConfigSyncInterval < time.Second || c.ConfigSyncInterval > time.Hour {
		p.Addf("config_sync_interval", "%v: must be between 1s and 1h", c.ConfigSyncInterval)
	}
	c.Registration.Config.Validate("registration", &p)
	if c.Registration.Address != "" && c.Registration.Service == "" {
		p.Addf("registration.service", "required with registration.address")
	}
	c.refuseInert(&p)
	if !c.TLS.Insecure {
		for _, id := range c.Control.AllowedIDs {
			if err := tlsconfig.CheckID(id); err != nil {
				p.Addf("control.allowed_ids", "%q: %v", id, err)
			}
		}
	}
	if len(c.Links) == 0 {
		p.Addf("links", "required: at least one link")
	}
	seen := map[string]bool{}
	for i := range c.Links {
		l := &c.Links[i]
		linkDefaults(l)
		key := func(f string) string { return "links[" + strconv.Itoa(i) + "]." + f }
		if !linkName.MatchString(l.Name) {
			p.Addf(key("name"), "%q: want 1 to 128 of A-Z a-z 0-9 . _ -", l.Name)
		}
		if seen[l.Name] {
			p.Addf(key("name"), "%q appears twice", l.Name)
		}
		seen[l.Name] = true
		if _, err := naming.Parse(l.Naming, l.Prefix); err != nil {
			p.Addf(key("naming"), "%v", err)
		}
		switch l.Delivery {
		case "at_least_once", "exactly_once":
		default:
			p.Addf(key("delivery"), "%q: want exactly_once or at_least_once", l.Delivery)
		}
		if l.Shards < 1 || l.Shards > 100000 {
			p.Addf(key("shards"), "%d: must be between 1 and 100000, the fetchers' link.shards", l.Shards)
		}
		if c.TLS.Insecure {
			if len(l.AllowedIDs) > 0 {
				p.Addf(key("allowed_ids"), "has no effect with tls.insecure (plaintext peers have no identity); remove it, or turn insecure off")
			}
		} else {
			tlsconfig.ValidateIDs(key("allowed_ids"), l.AllowedIDs, c.TLS.AllowedIDs, &p)
		}
		if l.ReplicationFactor < -1 || l.ReplicationFactor == 0 {
			p.Addf(key("replication_factor"), "%d: want -1 (broker default) or a positive number", l.ReplicationFactor)
		}
		if l.ConfigExclude != nil {
			p.Addf(key("config_exclude"), "replaced by links[].config_allow, an allow list of the source configs a created topic takes (docs/configuration.md)")
		}
		if l.MinRetention < 0 {
			p.Addf(key("min_retention"), "%v: want a duration of 0 or more", l.MinRetention)
		}
		for _, k := range l.ConfigAllow {
			if !configKey.MatchString(k) {
				p.Addf(key("config_allow"), "%q: want a topic config key such as retention.ms", k)
			}
		}
		if _, err := topics.ParseConfigSync(l.ConfigSync); err != nil {
			p.Addf(key("config_sync"), "%v", err)
		}
		for _, t := range l.PlatformTopics {
			if !topics.Platform(t) {
				p.Addf(key("platform_topics"), "%q is not a platform topic: it needs no entry here (links[].topics decides)", t)
			}
		}
		switch {
		case l.Topics.Include == nil && l.Naming == "identity":
			p.Addf(key("topics.include"), "required with naming identity: the target's own topic names are written, so the writer, not the fetcher, must say which")
		case len(l.Topics.Include) == 0:
			p.Addf(key("topics.include"), "required: at least one regular expression (an empty list would refuse every topic)")
		}
		for j, re := range l.Topics.Include {
			if err := topicfilter.CheckExpr(re); err != nil {
				p.Addf(key("topics.include["+strconv.Itoa(j)+"]"), "%q is not a regular expression: %v", re, err)
			}
		}
		for j, re := range l.Topics.Exclude {
			if err := topicfilter.CheckExpr(re); err != nil {
				p.Addf(key("topics.exclude["+strconv.Itoa(j)+"]"), "%q is not a regular expression: %v", re, err)
			}
		}
		// Parsed once, here; every problem is reported above.
		l.topics, _ = topicfilter.Parse(l.Topics.Include, l.Topics.Exclude)
	}
	// After the links' defaults: delivery is exactly_once unless set.
	if least := MinTransactionTimeout(c.Producer.Timeout); c.Producer.Timeout > 0 && c.Producer.TransactionTimeout < least &&
		slices.ContainsFunc(c.Links, func(l Link) bool { return l.Delivery == "exactly_once" }) {
		p.Addf("producer.transaction_timeout", "%v: must be at least %v with exactly_once links (twice producer.timeout %v, plus %v): "+
			"a round produces its records and then its checkpoints in one transaction, each waiting up to producer.timeout, "+
			"and the coordinator aborts a transaction older than this", c.Producer.TransactionTimeout, least, c.Producer.Timeout, commitAllowance)
	}
	return p.Err()
}

// validate checks the offset index settings and fills its partitions'
// default in.
func (o *OffsetIndex) validate(cps Checkpoints, p *config.Problems) {
	switch {
	case o.Topic == "":
		p.Addf("offset_index.topic", "required")
	case o.Topic == cps.Topic:
		p.Addf("offset_index.topic", "must differ from checkpoints.topic (%s)", cps.Topic)
	}
	switch {
	case o.Partitions < 0:
		p.Addf("offset_index.partitions", "%d: must be at least 1, or 0 for checkpoints.partitions", o.Partitions)
	case o.Partitions == 0:
		o.Partitions = cps.Partitions
	}
	if o.Retention < offsetindex.MinRetention {
		p.Addf("offset_index.retention", "%v: must be at least %v (set it to the longest retention of the source topics at least)", o.Retention, offsetindex.MinRetention)
	}
	if o.FlushInterval < 0 || o.FlushInterval > offsetindex.MaxFlushInterval {
		p.Addf("offset_index.flush_interval", "%v: must be between 0 (every round) and %v", o.FlushInterval, offsetindex.MaxFlushInterval)
	}
}

// Logging returns the log settings.
func (c *Config) Logging() telemetry.LogConfig { return c.Log }

// refuseInert refuses settings that would be accepted and then ignored,
// because the setting that turns their part on is off.
func (c *Config) refuseInert(p *config.Problems) {
	d := Defaults()
	if r, dr := c.Registration, d.Registration; r.Address == "" {
		p.RefuseInert("has no effect without registration.address (the writer is not in Consul's catalog); set it or remove this",
			append(r.Settings("registration"),
				config.Setting{Key: "registration.service", Set: r.Service != dr.Service},
				config.Setting{Key: "registration.advertise", Set: r.Advertise != dr.Advertise})...)
	}
	if t, dt := c.TLS, d.TLS; t.Insecure {
		p.RefuseInert("has no effect with tls.insecure (plaintext); remove it, or turn insecure off",
			config.Setting{Key: "tls.cert_file", Set: t.CertFile != ""},
			config.Setting{Key: "tls.key_file", Set: t.KeyFile != ""},
			config.Setting{Key: "tls.ca_file", Set: t.CAFile != ""},
			config.Setting{Key: "tls.allowed_ids", Set: len(t.AllowedIDs) > 0},
			config.Setting{Key: "tls.max_connection_age", Set: t.MaxConnectionAge != dt.MaxConnectionAge},
			config.Setting{Key: "tls.reload_interval", Set: t.ReloadInterval != dt.ReloadInterval})
		// Without a certificate nothing is signed or verified.
		p.RefuseInert("has no effect with tls.insecure (checkpoints are neither signed nor verified without a certificate); remove it, or turn insecure off",
			config.Setting{Key: "checkpoints.signers.ca_file", Set: c.Checkpoints.Signers.CAFile != ""},
			config.Setting{Key: "checkpoints.signers.allowed_ids", Set: len(c.Checkpoints.Signers.AllowedIDs) > 0},
			config.Setting{Key: "checkpoints.accept_unsigned", Set: c.Checkpoints.AcceptUnsigned})
		// The control plane admits operators by their certificate.
		p.RefuseInert("has no effect with tls.insecure (plaintext callers have no identity, so the control plane stays off); remove it, or turn insecure off",
			config.Setting{Key: "control.allowed_ids", Set: len(c.Control.AllowedIDs) > 0})
	}
	if t, dt := c.Tracing, d.Tracing; !t.Enabled() {
		p.RefuseInert("has no effect without tracing.endpoint (tracing is off); set the endpoint or remove this",
			config.Setting{Key: "tracing.insecure", Set: t.Insecure != dt.Insecure},
			config.Setting{Key: "tracing.sampling_ratio", Set: t.SamplingRatio != dt.SamplingRatio},
			config.Setting{Key: "tracing.resource_attributes", Set: len(t.ResourceAttributes) > 0},
			config.Setting{Key: "tracing.ui_url", Set: t.UIURL != ""})
	}
}
