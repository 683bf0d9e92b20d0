// Package config is the fetcher's typed configuration: defaults, the YAML
// layout and validation that names every bad key.
package config

import (
	"os"
	"regexp"
	"strconv"
	"time"

	"github.com/ferry-replicator/ferry/pkg/admin"
	"github.com/ferry-replicator/ferry/pkg/batch"
	"github.com/ferry-replicator/ferry/pkg/config"
	"github.com/ferry-replicator/ferry/pkg/groupsync"
	"github.com/ferry-replicator/ferry/pkg/kafkaclient"
	"github.com/ferry-replicator/ferry/pkg/shards"
	"github.com/ferry-replicator/ferry/pkg/telemetry"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
	"github.com/ferry-replicator/ferry/pkg/tracing"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/catalog"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/ownership"
)

// Config is the whole fetcher configuration. One fetcher process serves one
// link: one source cluster, one topic selection.
type Config struct {
	// ID names this fetcher in logs, status and the writers' view.
	// Default: hostname.
	ID string `yaml:"id"`
	// Admin is the HTTP address of /metrics, /healthz, /readyz, /status,
	// and the loopback one of pprof (off by default).
	Admin admin.Config        `yaml:"admin"`
	Log   telemetry.LogConfig `yaml:"log"`
	// Source is the cluster the fetcher reads.
	Source kafkaclient.Config `yaml:"source"`
	Link   Link               `yaml:"link"`
	// Writers is where batches go.
	Writers Writers `yaml:"writers"`
	// Lease coordinates shard ownership among the link's fetchers through
	// Consul; without lease.address this fetcher owns every shard.
	Lease ownership.ConsulConfig `yaml:"lease"`
	// ShutdownTimeout bounds the drain at SIGTERM.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// Tracing exports OpenTelemetry spans over OTLP; off without an endpoint.
	Tracing tracing.Config `yaml:"tracing"`
}

// Link is the replication flow's source side.
type Link struct {
	// Name identifies the link; writers must know it.
	Name string `yaml:"name"`
	// Topics selects the source topics by regular expressions, anchored at
	// both ends. A topic is replicated when an include matches and no
	// exclude does.
	Topics struct {
		Include []string `yaml:"include"`
		Exclude []string `yaml:"exclude"`
	} `yaml:"topics"`
	// Shards is the fixed number of shards partitions hash into.
	Shards int `yaml:"shards"`
	// OwnedShards restricts this fetcher to these shard numbers; empty owns
	// every shard (single fetcher).
	OwnedShards []int `yaml:"owned_shards"`
	// StartFrom is where a partition with no checkpoint starts: earliest or
	// latest.
	StartFrom string `yaml:"start_from"`
	// DiscoveryInterval is how often new topics and partitions are looked
	// for, and the topics' configs (and ACLs, with SyncACLs) read again: a
	// shard whose topics' configs or ACLs changed is reopened, so its
	// writer applies them (the writers' links[].config_sync).
	DiscoveryInterval time.Duration `yaml:"discovery_interval"`
	// SyncACLs sends each topic's ALLOW Read and Describe ACLs (literal
	// on its name or prefixed on a prefix of it) to the writers, which
	// create them on the target topic when their links[].sync_acls is on.
	// The fetcher's principal needs Describe on the source's Cluster to
	// list ACLs. Off by default.
	SyncACLs  bool `yaml:"sync_acls"`
	Heartbeat struct {
		// Interval is how often each shard reads its partitions' source
		// offsets (high watermark, log start, head timestamp) and sends
		// them to its writer as a heartbeat, whether or not data flows;
		// the fetcher's lag gauge follows the same reads.
		Interval time.Duration `yaml:"interval"`
	} `yaml:"heartbeat"`
	// Groups syncs the source's consumer groups: their committed offsets
	// of the copied partitions are read every Interval and sent on the
	// streams, and the writers commit them, translated, to the same
	// groups on the target (docs/architecture.md, "Consumer-group sync").
	Groups Groups `yaml:"groups"`
	// Codec compresses batches on the wire: zstd, lz4, snappy or none.
	Codec string `yaml:"codec"`
	Batch struct {
		// MaxBytes bounds a wire batch: a fetch round's Kafka batches of a
		// partition are grouped up to this size (a larger one travels
		// alone).
		MaxBytes config.ByteSize `yaml:"max_bytes"`
		// Linger is deprecated and ignored: it timed the record path's
		// batches, which is gone. Kept so that older configurations load;
		// a start warns while it is set (Deprecations).
		Linger time.Duration `yaml:"linger"`
	} `yaml:"batch"`
	// MaxInflightBytes bounds the compressed bytes sent on a shard's stream
	// and not yet acknowledged.
	MaxInflightBytes config.ByteSize `yaml:"max_inflight_bytes"`
	// MaxBufferedBytes bounds the source bytes all shards hold at once,
	// from the fetch that reads them to the writer's acknowledgement: the
	// fetcher's memory for batches follows this, not the partition count.
	MaxBufferedBytes config.ByteSize `yaml:"max_buffered_bytes"`
	// OnDataLoss is what a partition does when going on would lose or skip
	// data (offset out of range, checkpoint beyond the source, topic
	// recreated): stop (the default) or skip, counted and logged.
	OnDataLoss string `yaml:"on_data_loss"`
	// FetchMaxBytes is the per-partition fetch size.
	FetchMaxBytes config.ByteSize `yaml:"fetch_max_bytes"`
	// PassThrough is deprecated: the fetcher always sends the source's
	// Kafka record batches as the broker stores them, and the record path
	// that "false" chose is gone. Kept as text so that a configuration
	// that says "true" still loads (with a warning, Deprecations) and one
	// that says "false" is refused by name rather than as an unknown key.
	PassThrough string `yaml:"pass_through"`
	// SkipReplicated leaves out the source's batches that a Ferry writer
	// produced (their producer ids are in the source's __ferry_producers),
	// so nothing another link copied into the source goes back: links A→B
	// and B→A run without loops. On by default. Off for a link that must
	// carry on what another link copied in (a chain A→B→C).
	SkipReplicated bool `yaml:"skip_replicated"`
}

// Groups selects the consumer groups a link syncs.
type Groups struct {
	// Enabled turns group sync on (the default).
	Enabled bool `yaml:"enabled"`
	// Include and Exclude select groups by id, regular expressions
	// anchored at both ends, as for topics; the defaults leave out
	// Kafka's, Connect's and console consumers' groups
	// (groupsync.DefaultExclude).
	Include []string `yaml:"include"`
	Exclude []string `yaml:"exclude"`
	// Interval is how often the source's groups are read and sent.
	Interval time.Duration `yaml:"interval"`
	// Max bounds the groups read per interval (the rest, in id order,
	// are skipped and logged): the writers keep state and a metric
	// series per group.
	Max int `yaml:"max"`
}

// Writers lists the writers and how to reach them.
type Writers struct {
	// Addresses are writer gRPC host:port addresses; a shard sticks to one
	// by stable hashing and moves on failure.
	Addresses []string `yaml:"addresses"`
	// TLS secures the connections to writers: mutual TLS, checking the
	// writer's identity against tls.allowed_ids; on by default.
	TLS tlsconfig.Config `yaml:"tls"`
	// Consul finds writers in the target region's catalog instead (healthy
	// instances of the service, followed with blocking queries).
	Consul catalog.Config `yaml:"consul"`
	// MaxMessageBytes must not exceed the writers' max_batch_bytes.
	MaxMessageBytes config.ByteSize `yaml:"max_message_bytes"`
	// OpenTimeout bounds waiting for a writer's answer to an open.
	OpenTimeout time.Duration `yaml:"open_timeout"`
	// Backoff between reconnects grows from MinBackoff to MaxBackoff.
	MinBackoff time.Duration `yaml:"min_backoff"`
	MaxBackoff time.Duration `yaml:"max_backoff"`
}

// DefaultExclude is MirrorMaker 2's default topic exclusion: internal and
// replica topics, and anything starting with two underscores.
var DefaultExclude = []string{`.*[\-\.]internal`, `.*\.replica`, `__.*`}

// Defaults returns the configuration used where a file is silent.
func Defaults() Config {
	host, _ := os.Hostname()
	c := Config{
		ID:              host,
		Log:             telemetry.LogConfig{Level: "info", Format: "text"},
		Source:          kafkaclient.Defaults("ferry-fetcher"),
		ShutdownTimeout: 20 * time.Second,
		Writers: Writers{
			MaxMessageBytes: 4 << 20,
			OpenTimeout:     30 * time.Second,
			MinBackoff:      100 * time.Millisecond,
			MaxBackoff:      10 * time.Second,
		},
	}
	c.Admin.Listen = "127.0.0.1:7402"
	c.Lease = ownership.DefaultConsulConfig()
	c.Writers.Consul.Service = "ferry-writer"
	c.Writers.TLS = tlsconfig.Defaults()
	// A writer (server) setting: the fetcher refuses it, so it is unset.
	c.Writers.TLS.MaxConnectionAge = 0
	c.Tracing = tracing.DefaultConfig()
	c.Link.Topics.Include = []string{".*"}
	c.Link.Topics.Exclude = DefaultExclude
	c.Link.Shards = shards.Default
	c.Link.StartFrom = "earliest"
	c.Link.DiscoveryInterval = 30 * time.Second
	c.Link.Heartbeat.Interval = time.Second
	c.Link.Groups = Groups{Enabled: true, Include: groupsync.DefaultInclude, Exclude: groupsync.DefaultExclude, Interval: 10 * time.Second, Max: 1000}
	// lz4, chosen by the benchmark (docs/benchmark.md, "Wire codec"): in
	// the 2026-11-30 run it copied at 1.28× zstd's catch-up throughput for
	// 0.71× its CPU per GB, for 1.49× the bytes on the wire. (It was
	// withdrawn for a day while it made the exactly-once duplicates of
	// docs/exactly-once.md likely; their cause is fixed.)
	c.Link.Codec = "lz4"
	c.Link.Batch.MaxBytes = 1 << 20
	c.Link.MaxInflightBytes = 16 << 20
	c.Link.MaxBufferedBytes = 32 << 20
	c.Link.FetchMaxBytes = 1 << 20
	c.Link.OnDataLoss = "stop"
	c.Link.SkipReplicated = true
	return c
}

var linkName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// Validate returns every problem, each naming its key.
func (c *Config) Validate() error {
	var p config.Problems
	if c.ID == "" {
		p.Addf("id", "required")
	}
	c.Admin.Validate(&p)
	c.Log.Validate(&p)
	c.Tracing.Validate("tracing", &p)
	c.Source.Validate("source", &p)
	l := &c.Link
	if !linkName.MatchString(l.Name) {
		p.Addf("link.name", "%q: want 1 to 128 of A-Z a-z 0-9 . _ -", l.Name)
	}
	if len(l.Topics.Include) == 0 {
		p.Addf("link.topics.include", "required: at least one regular expression")
	}
	for i, re := range l.Topics.Include {
		if _, err := regexp.Compile(re); err != nil {
			p.Addf("link.topics.include["+strconv.Itoa(i)+"]", "%q is not a regular expression: %v", re, err)
		}
	}
	for i, re := range l.Topics.Exclude {
		if _, err := regexp.Compile(re); err != nil {
			p.Addf("link.topics.exclude["+strconv.Itoa(i)+"]", "%q is not a regular expression: %v", re, err)
		}
	}
	if l.Shards < 1 || l.Shards > 100000 {
		p.Addf("link.shards", "%d: must be between 1 and 100000", l.Shards)
	}
	for _, s := range l.OwnedShards {
		if s < 0 || s >= l.Shards {
			p.Addf("link.owned_shards", "shard %d is outside 0..%d", s, l.Shards-1)
		}
	}
	if l.StartFrom != "earliest" && l.StartFrom != "latest" {
		p.Addf("link.start_from", "%q: want earliest or latest", l.StartFrom)
	}
	if l.DiscoveryInterval < 100*time.Millisecond {
		p.Addf("link.discovery_interval", "%v: must be at least 100ms", l.DiscoveryInterval)
	}
	// Each read is three ListOffsets requests per leader (package
	// sourcewatch, one read for all the fetcher's shards): below
	// 100ms that is load on the source for nothing the meter needs; above
	// a minute the failover meter knows too little.
	if l.Heartbeat.Interval < 100*time.Millisecond || l.Heartbeat.Interval > time.Minute {
		p.Addf("link.heartbeat.interval", "%v: must be between 100ms and 1m", l.Heartbeat.Interval)
	}
	l.Groups.validate(&p)
	if _, err := batch.ParseCodec(l.Codec); err != nil {
		p.Addf("link.codec", "%v", err)
	}
	if l.Batch.MaxBytes < 1024 {
		p.Addf("link.batch.max_bytes", "%v: must be at least 1KiB", l.Batch.MaxBytes)
	}
	if l.Batch.MaxBytes > c.Writers.MaxMessageBytes {
		p.Addf("link.batch.max_bytes", "%v is above writers.max_message_bytes (%v): batches would be refused", l.Batch.MaxBytes, c.Writers.MaxMessageBytes)
	}
	if l.MaxInflightBytes < l.Batch.MaxBytes {
		p.Addf("link.max_inflight_bytes", "%v: must be at least link.batch.max_bytes (%v)", l.MaxInflightBytes, l.Batch.MaxBytes)
	}
	if floor := max(l.Batch.MaxBytes, l.FetchMaxBytes); l.MaxBufferedBytes < floor {
		p.Addf("link.max_buffered_bytes", "%v: must be at least link.batch.max_bytes and link.fetch_max_bytes (%v)", l.MaxBufferedBytes, floor)
	}
	if l.OnDataLoss != "stop" && l.OnDataLoss != "skip" {
		p.Addf("link.on_data_loss", "%q: want stop or skip", l.OnDataLoss)
	}
	if l.FetchMaxBytes < 1024 {
		p.Addf("link.fetch_max_bytes", "must be at least 1KiB")
	}
	if l.PassThrough != "" {
		switch on, err := strconv.ParseBool(l.PassThrough); {
		case err != nil:
			p.Addf("link.pass_through", "%q is not true or false (the setting is deprecated: remove it)", l.PassThrough)
		case !on:
			p.Addf("link.pass_through", "false is no longer supported: the record path was removed, and the fetcher always sends the source's Kafka record batches as they are (the writers must accept them: upgrade writers first); remove the setting")
		}
	}
	// Plaintext is allowed only to loopback writers, each of them.
	first := ""
	if len(c.Writers.Addresses) > 0 {
		first = c.Writers.Addresses[0]
	}
	// max_connection_age is the gRPC server's keepalive MaxConnectionAge,
	// which the writer applies to recycle connections; a client has nothing
	// to apply it to, and the writer's setting already recycles the
	// fetcher's connections.
	if c.Writers.TLS.MaxConnectionAge != 0 {
		p.Addf("writers.tls.max_connection_age", "only a writer setting (server side); remove it")
	}
	tls := c.Writers.TLS
	tls.MaxConnectionAge = tlsconfig.Defaults().MaxConnectionAge // refused above, not the shared check's business
	tls.Validate("writers.tls", first, &p)
	if c.Writers.TLS.Insecure {
		for _, a := range c.Writers.Addresses {
			if !tlsconfig.IsLoopback(a) {
				p.Addf("writers.tls.insecure", "writer %s is not on loopback: plaintext is refused", a)
			}
		}
		if c.Writers.Consul.Address != "" {
			p.Addf("writers.tls.insecure", "cannot be combined with writers.consul: discovered writers are not known to be on loopback")
		}
	}
	if len(c.Writers.Addresses) == 0 && c.Writers.Consul.Address == "" {
		p.Addf("writers.addresses", "required unless writers.consul.address is set: list writer host:port addresses")
	}
	if len(c.Writers.Addresses) > 0 && c.Writers.Consul.Address != "" {
		p.Addf("writers.consul.address", "set either writers.addresses or writers.consul.address, not both")
	}
	if c.Writers.MaxMessageBytes < 1024 || c.Writers.MaxMessageBytes > 256<<20 {
		p.Addf("writers.max_message_bytes", "%v: must be between 1KiB and 256MiB", c.Writers.MaxMessageBytes)
	}
	if c.Writers.OpenTimeout <= 0 {
		p.Addf("writers.open_timeout", "must be positive")
	}
	if c.Writers.MinBackoff <= 0 || c.Writers.MaxBackoff < c.Writers.MinBackoff {
		p.Addf("writers.min_backoff", "must be positive and at most writers.max_backoff")
	}
	if c.ShutdownTimeout <= 0 {
		p.Addf("shutdown_timeout", "must be positive")
	}
	c.Writers.Consul.Config.Validate("writers.consul", &p)
	c.Lease.Config.Validate("lease", &p)
	if c.Lease.Address != "" {
		// Consul's own bounds: it refuses session TTLs outside 10s..24h and
		// caps the lock delay at 60s.
		if c.Lease.SessionTTL < 10*time.Second || c.Lease.SessionTTL > 24*time.Hour {
			p.Addf("lease.session_ttl", "%v: Consul accepts 10s to 24h", c.Lease.SessionTTL)
		}
		if c.Lease.LockDelay < 0 || c.Lease.LockDelay > time.Minute {
			p.Addf("lease.lock_delay", "%v: must be between 0 and 60s", c.Lease.LockDelay)
		}
		if c.Lease.BalanceInterval < 100*time.Millisecond {
			p.Addf("lease.balance_interval", "%v: must be at least 100ms", c.Lease.BalanceInterval)
		}
		if c.Lease.KeyPrefix == "" {
			p.Addf("lease.key_prefix", "required")
		}
		if len(l.OwnedShards) > 0 {
			p.Addf("link.owned_shards", "cannot be combined with lease.address: Consul leases decide ownership")
		}
	}
	c.refuseInert(&p)
	return p.Err()
}

// refuseInert refuses settings that would be accepted and then ignored,
// because the setting that turns their part on is off.
func (c *Config) refuseInert(p *config.Problems) {
	d := Defaults()
	refuse := p.RefuseInert
	if c.Lease.Address == "" {
		l, dl := c.Lease, d.Lease
		refuse("has no effect without lease.address (no leases: this fetcher owns every shard it is given); set lease.address or remove it",
			append(l.Settings("lease"),
				config.Setting{Key: "lease.key_prefix", Set: l.KeyPrefix != dl.KeyPrefix},
				config.Setting{Key: "lease.session_ttl", Set: l.SessionTTL != dl.SessionTTL},
				config.Setting{Key: "lease.lock_delay", Set: l.LockDelay != dl.LockDelay},
				config.Setting{Key: "lease.balance_interval", Set: l.BalanceInterval != dl.BalanceInterval})...)
	}
	if c.Writers.Consul.Address == "" {
		w, dw := c.Writers.Consul, d.Writers.Consul
		refuse("has no effect without writers.consul.address; set it or remove this",
			append(w.Settings("writers.consul"),
				config.Setting{Key: "writers.consul.service", Set: w.Service != dw.Service})...)
	}
	if t := c.Writers.TLS; t.Insecure {
		refuse("has no effect with writers.tls.insecure (plaintext); remove it, or turn insecure off",
			config.Setting{Key: "writers.tls.cert_file", Set: t.CertFile != ""},
			config.Setting{Key: "writers.tls.key_file", Set: t.KeyFile != ""},
			config.Setting{Key: "writers.tls.ca_file", Set: t.CAFile != ""},
			config.Setting{Key: "writers.tls.allowed_ids", Set: len(t.AllowedIDs) > 0},
			config.Setting{Key: "writers.tls.reload_interval", Set: t.ReloadInterval != d.Writers.TLS.ReloadInterval})
	}
	if t, dt := c.Tracing, d.Tracing; !t.Enabled() {
		refuse("has no effect without tracing.endpoint (tracing is off); set the endpoint or remove this",
			config.Setting{Key: "tracing.insecure", Set: t.Insecure != dt.Insecure},
			config.Setting{Key: "tracing.sampling_ratio", Set: t.SamplingRatio != dt.SamplingRatio},
			config.Setting{Key: "tracing.resource_attributes", Set: len(t.ResourceAttributes) > 0},
			config.Setting{Key: "tracing.ui_url", Set: t.UIURL != ""})
	}
}

// Deprecations returns a warning for each deprecated setting the
// configuration sets, for the fetcher to log at start: each is accepted,
// and ignored, so that an older configuration still loads.
func (c *Config) Deprecations() []string {
	var out []string
	if c.Link.PassThrough != "" {
		out = append(out, "link.pass_through is deprecated and ignored: the fetcher always sends the source's Kafka record batches as they are; remove the setting")
	}
	if c.Link.Batch.Linger != 0 {
		out = append(out, "link.batch.linger is deprecated and ignored: it timed the removed record path's batches; remove the setting")
	}
	return out
}

// Logging returns the log settings.
func (c *Config) Logging() telemetry.LogConfig { return c.Log }

func (g *Groups) validate(p *config.Problems) {
	if !g.Enabled {
		return
	}
	for i, re := range g.Include {
		if _, err := regexp.Compile(re); err != nil {
			p.Addf("link.groups.include["+strconv.Itoa(i)+"]", "%q is not a regular expression: %v", re, err)
		}
	}
	for i, re := range g.Exclude {
		if _, err := regexp.Compile(re); err != nil {
			p.Addf("link.groups.exclude["+strconv.Itoa(i)+"]", "%q is not a regular expression: %v", re, err)
		}
	}
	// Each read lists the source's groups and fetches each one's offsets:
	// more often than a second is load on the source's coordinators for
	// positions consumers commit every few seconds at best.
	if g.Interval < time.Second {
		p.Addf("link.groups.interval", "%v: must be at least 1s", g.Interval)
	}
	if g.Max < 1 || g.Max > groupsync.MaxGroups {
		p.Addf("link.groups.max", "%d: must be between 1 and %d", g.Max, groupsync.MaxGroups)
	}
}
