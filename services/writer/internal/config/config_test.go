package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-replicator/ferry/pkg/config"
)

func TestWriterConfigErrorsNameTheKey(t *testing.T) {
	base := "target: {bootstrap_servers: [\"127.0.0.1:9092\"]}\ntls: {insecure: true}\n"
	tests := []struct {
		name, yaml, want string
	}{
		{"valid", base + "links: [{name: a, topics: {include: ['.*']}}]\n", ""},
		{"prefix policy without prefix", base + "links: [{name: a, naming: prefix}]\n", "links[0].naming"},
		{"unknown link key", base + "links: [{name: a, topics: {include: ['.*']}, prefx: x}]\n", "field prefx not found"},
		{"no links", base, "links: required"},
		{"duplicate link", base + "links: [{name: a, topics: {include: ['.*']}}, {name: a, topics: {include: ['.*']}}]\n", "links[1].name"},
		{"exactly once", base + "links: [{name: a, topics: {include: ['.*']}, delivery: exactly_once}]\n", ""},
		{"unknown delivery", base + "links: [{name: a, topics: {include: ['.*']}, delivery: at_most_once}]\n", "links[0].delivery"},
		// Issue 22 item 2: configs copied by an allow list; identity
		// naming needs the writer's own topic list; topics are bounded.
		{"config exclude replaced", base + "links: [{name: a, topics: {include: ['.*']}, config_exclude: ['x']}]\n", "links[0].config_exclude: replaced by links[].config_allow"},
		{"config allow", base + "links: [{name: a, topics: {include: ['.*']}, config_allow: [cleanup.policy, segment.bytes]}]\n", ""},
		{"config allow not a key", base + "links: [{name: a, topics: {include: ['.*']}, config_allow: ['retention.*']}]\n", `links[0].config_allow: "retention.*"`},
		{"config sync overwrite and ACL sync", base + "links: [{name: a, topics: {include: ['.*']}, config_sync: overwrite, sync_acls: true}]\n", ""},
		{"unknown config sync", base + "links: [{name: a, topics: {include: ['.*']}, config_sync: sometimes}]\n", `links[0].config_sync: "sometimes": want apply, overwrite, report or off`},
		{"config sync too often", base + "links: [{name: a, topics: {include: ['.*']}}]\nconfig_sync_interval: 10ms\n", "config_sync_interval: 10ms"},
		{"identity naming without topics", base + "links: [{name: a}]\n", "links[0].topics.include: required with naming identity"},
		{"prefix naming takes every topic by default", base + "links: [{name: a, naming: prefix, prefix: 'a.'}]\n", ""},
		{"platform topic", base + "links: [{name: a, topics: {include: ['.*']}, platform_topics: [_schemas]}]\n", ""},
		{"not a platform topic", base + "links: [{name: a, topics: {include: ['.*']}, platform_topics: [orders]}]\n", `links[0].platform_topics: "orders" is not a platform topic`},
		// Issue 22 item 3: streams bounded per peer and per writer.
		{"streams per peer above the writer's", base + "links: [{name: a, topics: {include: ['.*']}}]\nmax_streams: 10\nmax_streams_per_peer: 11\n", "max_streams_per_peer: 11"},
		// Issue 23 item 3: heartbeats persisted to a topic of their own.
		{"heartbeats persisted too often", base + "links: [{name: a, topics: {include: ['.*']}}]\nheartbeats: {persist_interval: 10ms}\n", "heartbeats.persist_interval: 10ms"},
		{"heartbeats into the checkpoint topic", base + "links: [{name: a, topics: {include: ['.*']}}]\nheartbeats: {topic: __ferry_checkpoints}\n", "heartbeats.topic"},
		{"no heartbeat topic", base + "links: [{name: a, topics: {include: ['.*']}}]\nheartbeats: {topic: ''}\n", "heartbeats.topic: required"},
		{"no streams", base + "links: [{name: a, topics: {include: ['.*']}}]\nmax_streams: 0\n", "max_streams: 0"},
		{"max partitions", base + "links: [{name: a, topics: {include: ['.*']}}]\nmax_partitions: 0\n", "max_partitions: 0"},
		{"group below batch", base + "links: [{name: a, topics: {include: ['.*']}}]\nmax_group_bytes: 1KiB\n", "max_group_bytes"},
		{"buffered bytes below max_batch_bytes", base + "links: [{name: a, topics: {include: ['.*']}}]\nmax_buffered_bytes: 1MiB\n", ""},
		{"buffered bytes below 1MiB", base + "links: [{name: a, topics: {include: ['.*']}}]\nmax_buffered_bytes: 512KiB\n", "max_buffered_bytes: 512KiB"},
		{"buffered bytes above 64GiB", base + "links: [{name: a, topics: {include: ['.*']}}]\nmax_buffered_bytes: 65GiB\n", "max_buffered_bytes: 65GiB"},
		{"tls required by default", "target: {bootstrap_servers: [k:9092]}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", "tls.cert_file: required"},
		{"plaintext on a public listener refused", base + "listen: 0.0.0.0:7400\nlinks: [{name: a, topics: {include: ['.*']}}]\n", "tls.insecure"},
		{"bad size", base + "links: [{name: a, topics: {include: ['.*']}}]\nmax_batch_bytes: lots\n", "bad size"},
		{"topic allow list", base + "links: [{name: a, topics: {include: ['orders\\..*'], exclude: ['orders\\.pii']}}]\n", ""},
		{"bad topic include", base + "links: [{name: a, topics: {include: ['ok', '(']}}]\n", "links[0].topics.include[1]"},
		{"bad topic exclude", base + "links: [{name: a, topics: {exclude: ['a)(?:b']}}]\n", "links[0].topics.exclude[0]"},
		{"empty topic include", base + "links: [{name: a, topics: {include: []}}]\n", "links[0].topics.include: required"},
		// Settings whose part is off are refused, not ignored.
		{"certificate with insecure", "target: {bootstrap_servers: [\"127.0.0.1:9092\"]}\ntls: {insecure: true, cert_file: w.pem}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", "tls.cert_file: has no effect with tls.insecure"},
		{"connection age with insecure", "target: {bootstrap_servers: [\"127.0.0.1:9092\"]}\ntls: {insecure: true, max_connection_age: 7h}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", "tls.max_connection_age: has no effect"},
		{"advertise without registration", base + "registration: {advertise: 'w:7400'}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", "registration.advertise: has no effect without registration.address"},
		{"registration with its address", base + "registration: {address: '127.0.0.1:8500', advertise: 'w:7400'}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", ""},
		{"registration over https", base + "registration: {address: '127.0.0.1:8501', scheme: https}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", ""},
		{"registration token file missing", base + "registration: {address: '127.0.0.1:8500', token_file: /nonexistent/t}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", "registration.token_file: open /nonexistent/t"},
		{"registration key without cert", base + "registration: {address: '127.0.0.1:8500', key_file: /k.pem}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", "registration.cert_file: cert_file and key_file go together"},
		{"registration CA without registration", base + "registration: {ca_file: /ca.pem}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", "registration.ca_file: has no effect without registration.address"},
		{"fixed grpc windows", base + "grpc: {stream_window: 32MiB, conn_window: 64MiB}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", ""},
		{"half a grpc window setting", base + "grpc: {stream_window: 32MiB}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", "grpc: set both stream_window and conn_window"},
		{"grpc window below gRPC's floor", base + "grpc: {stream_window: 16KiB, conn_window: 1MiB}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", "grpc.stream_window: 16KiB"},
		{"grpc conn window below the stream's", base + "grpc: {stream_window: 8MiB, conn_window: 1MiB}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", "grpc.conn_window"},
		{"merge every small batch", base + "producer: {merge_below: 0}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", ""},
		{"merge below above the batch limit", base + "producer: {merge_below: 2MiB}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", "producer.merge_below: 2MiB"},
		// An exactly-once round must fit its transaction (issue 21: 10s
		// under a 30s produce timeout was accepted, and a slow ISR made the
		// coordinator abort rounds that were then sent again as they were).
		{"transaction timeout below two produce timeouts", base + "producer: {timeout: 30s, transaction_timeout: 10s}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", "producer.transaction_timeout: 10s: must be at least 1m10s"},
		{"transaction timeout unused at least once", base + "producer: {timeout: 30s, transaction_timeout: 10s}\nlinks: [{name: a, topics: {include: ['.*']}, delivery: at_least_once}]\n", ""},
		{"transaction timeout that fits", base + "producer: {timeout: 5s, transaction_timeout: 20s}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", ""},
		// Issue 22 item 1: a link binds its fetchers and its shard count.
		{"link shards", base + "links: [{name: a, topics: {include: ['.*']}, shards: 64}]\n", ""},
		{"link shards above the fetchers' limit", base + "links: [{name: a, topics: {include: ['.*']}, shards: 100001}]\n", "links[0].shards: 100001"},
		{"link allowed ids with insecure", base + "links: [{name: a, topics: {include: ['.*']}, allowed_ids: ['spiffe://x/f']}]\n", "links[0].allowed_ids: has no effect with tls.insecure"},
		{"link allowed id the writer refuses", "target: {bootstrap_servers: [k:9092]}\ntls: {allowed_ids: ['spiffe://x/f']}\nlinks: [{name: a, topics: {include: ['.*']}, allowed_ids: ['spiffe://x/g']}]\n",
			`links[0].allowed_ids: "spiffe://x/g" is not in tls.allowed_ids`},
		{"link allowed id not an identity", "target: {bootstrap_servers: [k:9092]}\ntls: {allowed_ids: ['spiffe://x/f']}\nlinks: [{name: a, topics: {include: ['.*']}, allowed_ids: ['*.x']}]\n",
			`links[0].allowed_ids: "*.x"`},
		// Issue 21 item 5: signed checkpoints.
		{"checkpoint signers with insecure", base + "checkpoints: {signers: {allowed_ids: ['spiffe://x/w']}}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", "checkpoints.signers.allowed_ids: has no effect with tls.insecure"},
		{"accept unsigned with insecure", base + "checkpoints: {accept_unsigned: true}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", "checkpoints.accept_unsigned: has no effect with tls.insecure"},
		{"checkpoint signer not an identity", "target: {bootstrap_servers: [k:9092]}\ntls: {allowed_ids: ['spiffe://x/f']}\ncheckpoints: {signers: {allowed_ids: ['*.w']}}\nlinks: [{name: a, topics: {include: ['.*']}}]\n",
			`checkpoints.signers.allowed_ids: "*.w"`},
		{"checkpoint signers CA missing", "target: {bootstrap_servers: [k:9092]}\ntls: {allowed_ids: ['spiffe://x/f']}\ncheckpoints: {signers: {ca_file: /nonexistent/ca.pem}}\nlinks: [{name: a, topics: {include: ['.*']}}]\n",
			"checkpoints.signers.ca_file: read CA bundle /nonexistent/ca.pem"},
		// Issue 41 item 7: what the checkpoint view keeps unverified is bounded.
		{"checkpoint unverified bound", base + "checkpoints: {max_unverified_bytes: 256MiB}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", ""},
		{"checkpoint unverified bound too small", base + "checkpoints: {max_unverified_bytes: 64KiB}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", "checkpoints.max_unverified_bytes: 64KiB: must be between 1MiB and 64GiB"},
		// Issue 41 item 4: Opens rate-limited per peer, registry keys.
		{"open rate", base + "open_rate_per_peer: 0.5\nopen_burst_per_peer: 16\nlinks: [{name: a, topics: {include: ['.*']}}]\n", ""},
		{"open rate zero", base + "open_rate_per_peer: 0\nlinks: [{name: a, topics: {include: ['.*']}}]\n", "open_rate_per_peer: 0: must be above 0"},
		{"open burst negative", base + "open_burst_per_peer: -1\nlinks: [{name: a, topics: {include: ['.*']}}]\n", "open_burst_per_peer: -1"},
		{"registry keyed by stream", base + "producer_registry: {key: stream}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", ""},
		{"registry key unknown", base + "producer_registry: {key: writer}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", `producer_registry.key: "writer": want producer_id or stream`},
		// Issue 23 item 1: the offset index topic.
		{"offset index settings", base + "offset_index: {topic: ferry-index, partitions: 6, retention: 720h}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", ""},
		{"offset index retention below an hour", base + "offset_index: {retention: 30m}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", "offset_index.retention: 30m0s: must be at least 1h"},
		{"offset index without a topic", base + "offset_index: {topic: ''}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", "offset_index.topic: required"},
		{"offset index in the checkpoint topic", base + "offset_index: {topic: __ferry_checkpoints}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", "offset_index.topic: must differ from checkpoints.topic"},
		{"offset index partitions", base + "offset_index: {partitions: -1}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", "offset_index.partitions: -1"},
		{"offset index flushed every round", base + "offset_index: {flush_interval: 0s}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", ""},
		{"offset index flush interval negative", base + "offset_index: {flush_interval: -1s}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", "offset_index.flush_interval: -1s: must be between 0 (every round) and 1m0s"},
		{"offset index flush interval above a minute", base + "offset_index: {flush_interval: 2m}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", "offset_index.flush_interval: 2m0s: must be between 0"},
		// Issue 23 item 5: the control plane admits operators by identity.
		{"control allowed ids with insecure", base + "control: {allowed_ids: ['spiffe://x/op']}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", "control.allowed_ids: has no effect with tls.insecure"},
		{"control allowed id not an identity", "target: {bootstrap_servers: [k:9092]}\ntls: {allowed_ids: ['spiffe://x/f']}\ncontrol: {allowed_ids: ['*.ops']}\nlinks: [{name: a, topics: {include: ['.*']}}]\n",
			`control.allowed_ids: "*.ops"`},
		{"sampling without tracing", base + "tracing: {sampling_ratio: 0.5}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", "tracing.sampling_ratio: has no effect without tracing.endpoint"},
		{"jaeger ui without tracing", base + "tracing: {ui_url: 'http://jaeger:16686'}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", "tracing.ui_url: has no effect without tracing.endpoint"},
		{"jaeger ui not a URL", base + "tracing: {endpoint: '127.0.0.1:4317', ui_url: 'ftp://jaeger'}\nlinks: [{name: a, topics: {include: ['.*']}}]\n", `tracing.ui_url: "ftp://jaeger": want an absolute http or https URL`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "w.yaml")
			if err := os.WriteFile(path, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			c := Defaults()
			err := config.Load(&c, path, nil, "FERRY_WRITER_", nil)
			if err == nil {
				err = c.Validate()
			}
			if tt.want == "" {
				if err != nil {
					t.Fatalf("valid config refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// The offset index has as many partitions as the checkpoint topic unless
// set, so a round adds at most one index partition per checkpoint
// partition to its transaction.
func TestOffsetIndexDefaults(t *testing.T) {
	c := Defaults()
	c.Target.BootstrapServers, c.TLS.Insecure = []string{"127.0.0.1:9092"}, true
	c.Links = []Link{{Name: "a", Topics: struct {
		Include []string `yaml:"include"`
		Exclude []string `yaml:"exclude"`
	}{Include: []string{".*"}}}}
	c.Checkpoints.Partitions = 5
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if o := c.OffsetIndex; o.Topic != "__ferry_offset_index" || o.Partitions != 5 || o.Retention != 7*24*time.Hour || o.FlushInterval != time.Second {
		t.Errorf("offset_index defaults %+v, want __ferry_offset_index, the checkpoints' 5 partitions, 7 days, flushed every second", o)
	}
}

// The topic allow list is parsed once, by Validate, with the fetcher's
// defaults and semantics; a list set empty in the file stays empty.
func TestLinkTopicFilter(t *testing.T) {
	base := "target: {bootstrap_servers: [\"127.0.0.1:9092\"]}\ntls: {insecure: true}\n"
	tests := []struct {
		name, links string
		accept      []string
		refuse      []string
	}{
		{"defaults (prefix naming)", "[{name: a, naming: prefix, prefix: 'a.'}]", []string{"orders", "east.orders"},
			[]string{"__ferry_checkpoints", "__consumer_offsets", "x.internal", "x-internal", "x.replica"}},
		{"include anchored", "[{name: a, topics: {include: ['orders']}}]", []string{"orders"},
			[]string{"orders2", "my-orders", "__orders"}},
		{"exclude set empty", "[{name: a, naming: prefix, prefix: 'a.', topics: {exclude: []}}]", []string{"orders", "__private"}, nil},
		{"exclude wins", "[{name: a, topics: {include: ['orders.*'], exclude: ['orders\\.pii']}}]", []string{"orders.eu"},
			[]string{"orders.pii"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "w.yaml")
			if err := os.WriteFile(path, []byte(base+"links: "+tt.links+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			c := Defaults()
			if err := config.Load(&c, path, nil, "FERRY_WRITER_", nil); err != nil {
				t.Fatal(err)
			}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			f := c.Links[0].TopicFilter()
			for _, topic := range tt.accept {
				if err := f.Check(topic); err != nil {
					t.Errorf("%s refused: %v", topic, err)
				}
			}
			for _, topic := range tt.refuse {
				if f.Check(topic) == nil {
					t.Errorf("%s accepted, want refused", topic)
				}
			}
		})
	}
}

// A writer of several links warns of each link without allowed_ids: the
// fetchers of every link may open it (issue 41: an empty allowed_ids
// admitted every peer without a word). One link, or a plaintext writer,
// has nothing to warn of here.
func TestLinksOpenToEveryFetcherAreNamed(t *testing.T) {
	c := Defaults()
	c.Links = []Link{{Name: "east", AllowedIDs: []string{"spiffe://x/east"}}, {Name: "west"}, {Name: "north"}}
	got := c.Warnings()
	if len(got) != 2 || !strings.Contains(got[0], "link west admits every fetcher identity") || !strings.Contains(got[1], "link north") {
		t.Fatalf("warnings %q, want west's and north's", got)
	}
	c.Links = c.Links[1:2]
	if got := c.Warnings(); len(got) != 0 {
		t.Errorf("one link: warnings %q", got)
	}
}
