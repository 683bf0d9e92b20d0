package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-replicator/ferry/pkg/config"
)

func load(t *testing.T, yaml string, env []string, sets ...string) error {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fetcher.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Defaults()
	if err := config.Load(&c, path, env, "FERRY_FETCHER_", sets); err != nil {
		return err
	}
	return c.Validate()
}

const valid = `
source: {bootstrap_servers: ["127.0.0.1:9092"]}
link: {name: east-west}
writers: {addresses: ["127.0.0.1:7400"], tls: {insecure: true}}
`

func TestConfigErrorsNameTheKey(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		env  []string
		sets []string
		want string // "" means valid
	}{
		{name: "valid", yaml: valid},
		{name: "unknown key in file", yaml: valid + "lnk: {}\n", want: "field lnk not found"},
		{name: "misspelt nested key", yaml: valid + "shutdown_timout: 1s\n", want: "shutdown_timout"},
		{name: "missing bootstrap", yaml: "link: {name: a}\nwriters: {addresses: [x:1]}\n", want: "source.bootstrap_servers: required"},
		{name: "bad include regex", yaml: valid, sets: []string{"link.topics.include=orders(,x"}, want: "link.topics.include[0]"},
		{name: "batch above message limit", yaml: valid, sets: []string{"link.batch.max_bytes=8MiB"}, want: "link.batch.max_bytes: 8MiB is above writers.max_message_bytes"},
		{name: "buffered bytes below a fetch", yaml: valid, sets: []string{"link.max_buffered_bytes=512KiB"}, want: "link.max_buffered_bytes: 512KiB: must be at least link.batch.max_bytes and link.fetch_max_bytes (1MiB)"},
		{name: "buffered bytes below a larger fetch", yaml: valid, sets: []string{"link.max_buffered_bytes=2MiB", "link.fetch_max_bytes=4MiB"}, want: "link.max_buffered_bytes: 2MiB: must be at least link.batch.max_bytes and link.fetch_max_bytes (4MiB)"},
		{name: "bad codec", yaml: valid, sets: []string{"link.codec=gzip"}, want: "link.codec"},
		{name: "heartbeats too often", yaml: valid, sets: []string{"link.heartbeat.interval=10ms"}, want: "link.heartbeat.interval: 10ms: must be between 100ms and 1m"},
		{name: "heartbeats too rare", yaml: valid, sets: []string{"link.heartbeat.interval=2m"}, want: "link.heartbeat.interval: 2m0s"},
		{name: "groups read too often", yaml: valid, sets: []string{"link.groups.interval=500ms"}, want: "link.groups.interval: 500ms: must be at least 1s"},
		{name: "too many groups", yaml: valid, sets: []string{"link.groups.max=20000"}, want: "link.groups.max: 20000: must be between 1 and 10000"},
		{name: "bad group regex", yaml: valid, sets: []string{"link.groups.exclude=app(,x"}, want: "link.groups.exclude[0]"},
		{name: "group sync off takes any interval", yaml: valid, sets: []string{"link.groups.enabled=false", "link.groups.interval=0s"}},
		{name: "bad duration from env", yaml: valid, env: []string{"FERRY_FETCHER_LINK_BATCH_LINGER=soon"}, want: "FERRY_FETCHER_LINK_BATCH_LINGER"},
		{name: "unknown env setting", yaml: valid, env: []string{"FERRY_FETCHER_NOPE=1"}, want: "FERRY_FETCHER_NOPE: no such setting"},
		{name: "env overrides file", yaml: valid, env: []string{"FERRY_FETCHER_LINK_START_FROM=middle"}, want: `link.start_from: "middle"`},
		{name: "owned shard out of range", yaml: valid, sets: []string{"link.owned_shards=3,8"}, want: "shard 8 is outside 0..7"},
		{name: "tls required by default", yaml: "source: {bootstrap_servers: [k:9092]}\nlink: {name: a}\nwriters: {addresses: [\"w:7400\"]}\n", want: "writers.tls.cert_file: required"},
		{name: "plaintext to a remote writer refused", yaml: "source: {bootstrap_servers: [k:9092]}\nlink: {name: a}\nwriters: {addresses: [\"10.1.2.3:7400\"], tls: {insecure: true}}\n", want: "writers.tls.insecure"},
		{name: "unknown --set key", yaml: valid, sets: []string{"link.nme=x"}, want: `no such setting "link.nme"`},
		{name: "unknown nested key names its path", yaml: "link:\n  name: a\n  nme: x\n", want: "link.nme (line 3): field nme not found"},
		{
			name: "regular expression in double quotes",
			yaml: "source: {bootstrap_servers: [\"127.0.0.1:9092\"]}\nlink:\n  name: a\n  topics:\n    include: [\"orders\\..*\"]\n",
			want: "link.topics.include (line 5): found unknown escape character: in double quotes a backslash starts an escape",
		},
		// Accepted and then ignored would mislead: each is refused.
		{name: "max connection age is the writer's", yaml: valid, sets: []string{"writers.tls.max_connection_age=1h"}, want: "writers.tls.max_connection_age: only a writer setting (server side); remove it"},
		{name: "lease setting without leases", yaml: valid, sets: []string{"lease.session_ttl=30s"}, want: "lease.session_ttl: has no effect without lease.address"},
		{name: "writer discovery setting without discovery", yaml: valid, sets: []string{"writers.consul.service=w"}, want: "writers.consul.service: has no effect without writers.consul.address"},
		{name: "certificate in plaintext", yaml: valid, sets: []string{"writers.tls.cert_file=/x.pem"}, want: "writers.tls.cert_file: has no effect with writers.tls.insecure"},
		{name: "sampling without tracing", yaml: valid, sets: []string{"tracing.sampling_ratio=0.5"}, want: "tracing.sampling_ratio: has no effect without tracing.endpoint"},
		{name: "jaeger ui without tracing", yaml: valid, sets: []string{"tracing.ui_url=http://jaeger:16686"}, want: "tracing.ui_url: has no effect without tracing.endpoint"},
		{name: "jaeger ui not a URL", yaml: valid, sets: []string{"tracing.endpoint=127.0.0.1:4317", "tracing.ui_url=jaeger"}, want: `tracing.ui_url: "jaeger": want an absolute http or https URL`},
		{name: "jaeger ui", yaml: valid, sets: []string{"tracing.endpoint=127.0.0.1:4317", "tracing.ui_url=https://jaeger.example"}},
		{name: "lease settings with leases", yaml: valid, sets: []string{"lease.address=127.0.0.1:8500", "lease.session_ttl=30s"}},
		// Consul's TLS and token settings, the same keys in every Consul
		// section (pkg/consulclient).
		{name: "lease over https", yaml: valid, sets: []string{"lease.address=127.0.0.1:8501", "lease.scheme=https"}},
		{name: "lease CA file missing", yaml: valid, sets: []string{"lease.address=127.0.0.1:8501", "lease.ca_file=/nonexistent/ca.pem"}, want: "lease.ca_file: open /nonexistent/ca.pem"},
		{name: "lease client cert without key", yaml: valid, sets: []string{"lease.address=127.0.0.1:8501", "lease.cert_file=/c.pem"}, want: "lease.cert_file: cert_file and key_file go together"},
		{name: "lease bad scheme", yaml: valid, sets: []string{"lease.address=127.0.0.1:8501", "lease.scheme=tls"}, want: `lease.scheme: "tls": want http or https`},
		{name: "lease TLS over http", yaml: valid, sets: []string{"lease.address=127.0.0.1:8500", "lease.scheme=http", "lease.server_name=consul"}, want: "lease.scheme: http, but TLS settings"},
		{name: "lease token file missing", yaml: valid, sets: []string{"lease.address=127.0.0.1:8500", "lease.token_file=/nonexistent/token"}, want: "lease.token_file: open /nonexistent/token"},
		{name: "lease token without leases", yaml: valid, env: []string{"FERRY_FETCHER_LEASE_TOKEN_FILE=/t"}, want: "lease.token_file: has no effect without lease.address"},
		{name: "discovery CA without discovery", yaml: valid, sets: []string{"writers.consul.ca_file=/ca.pem"}, want: "writers.consul.ca_file: has no effect without writers.consul.address"},
		{name: "discovery token file missing", yaml: "source: {bootstrap_servers: [k:9092]}\nlink: {name: a}\nwriters: {consul: {address: '127.0.0.1:8500', token_file: /nonexistent/t}, tls: {cert_file: /c, key_file: /k, ca_file: /ca}}\n", want: "writers.consul.token_file: open /nonexistent/t"},
		// The record path is gone: an older configuration that chose
		// pass-through still loads (TestDeprecatedSettingsLoadWithAWarning),
		// one that chose the record path is refused by name.
		{name: "pass-through", yaml: valid, sets: []string{"link.pass_through=true"}},
		{name: "pass-through not a bool", yaml: valid, sets: []string{"link.pass_through=sometimes"}, want: "link.pass_through"},
		{name: "record path refused", yaml: valid, sets: []string{"link.pass_through=false"}, want: "link.pass_through: false is no longer supported"},
		{name: "record path refused with skip_replicated off", yaml: valid, sets: []string{"link.pass_through=false", "link.skip_replicated=false"}, want: "link.pass_through: false is no longer supported"},
		{name: "linger", yaml: valid, sets: []string{"link.batch.linger=20ms"}},
		{name: "skip_replicated off", yaml: valid, sets: []string{"link.skip_replicated=false"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := load(t, tt.yaml, tt.env, tt.sets...)
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

// A configuration written for the record path's days, which set
// link.pass_through: true and link.batch.linger, loads; each setting is
// named in a warning, so the operator learns to remove it. Without them
// there is nothing to warn about.
func TestDeprecatedSettingsLoadWithAWarning(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fetcher.yaml")
	const old = `
source: {bootstrap_servers: ["127.0.0.1:9092"]}
link: {name: east-west, pass_through: true, batch: {max_bytes: 1MiB, linger: 20ms}}
writers: {addresses: ["127.0.0.1:7400"], tls: {insecure: true}}
`
	if err := os.WriteFile(path, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Defaults()
	if err := config.Load(&c, path, nil, "FERRY_FETCHER_", nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("older configuration refused: %v", err)
	}
	warned := strings.Join(c.Deprecations(), "\n")
	for _, key := range []string{"link.pass_through", "link.batch.linger"} {
		if !strings.Contains(warned, key) {
			t.Errorf("no warning names %s; warnings:\n%s", key, warned)
		}
	}
	d := Defaults()
	if w := d.Deprecations(); len(w) > 0 {
		t.Errorf("defaults warn: %q", w)
	}
}

func TestEveryProblemIsReportedAtOnce(t *testing.T) {
	err := load(t, "link: {name: 'bad name', codec: gzip}\n", nil)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, key := range []string{"source.bootstrap_servers", "link.name", "link.codec", "writers.addresses"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("error does not name %s:\n%v", key, err)
		}
	}
}
