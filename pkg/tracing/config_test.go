package tracing

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ferry-replicator/ferry/pkg/config"
)

func TestValidate(t *testing.T) {
	with := func(f func(*Config)) Config { c := DefaultConfig(); f(&c); return c }
	cases := []struct {
		name string
		cfg  Config
		want []string // substrings of problems, in order; none for a valid config
	}{
		{"default is off and valid", DefaultConfig(), nil},
		{"loopback plaintext", with(func(c *Config) { c.Endpoint = "127.0.0.1:4317" }), nil},
		{"localhost plaintext", with(func(c *Config) { c.Endpoint = "localhost:4317" }), nil},
		{"ipv6 loopback", with(func(c *Config) { c.Endpoint = "[::1]:4317" }), nil},
		{"remote TLS", with(func(c *Config) { c.Endpoint = "otel.example:4317"; c.Insecure = false }), nil},
		{"ratio bounds", with(func(c *Config) { c.SamplingRatio = 1 }), nil},
		{"remote plaintext", with(func(c *Config) { c.Endpoint = "otel.example:4317" }), []string{"tracing.insecure: plaintext OTLP is allowed only to a loopback"}},
		{"scheme", with(func(c *Config) { c.Endpoint = "http://127.0.0.1:4317" }), []string{"tracing.endpoint: \"http://127.0.0.1:4317\": want host:port without a scheme"}},
		{"no port", with(func(c *Config) { c.Endpoint = "127.0.0.1" }), []string{"tracing.endpoint: \"127.0.0.1\": want host:port"}},
		{"bad port", with(func(c *Config) { c.Endpoint = "127.0.0.1:0" }), []string{"port \"0\" is not 1 to 65535"}},
		{"no host", with(func(c *Config) { c.Endpoint = ":4317" }), []string{"host required"}},
		{"ratio above 1", with(func(c *Config) { c.SamplingRatio = 1.5 }), []string{"tracing.sampling_ratio: 1.5: want a number from 0 to 1"}},
		{"ratio negative", with(func(c *Config) { c.SamplingRatio = -0.1 }), []string{"tracing.sampling_ratio"}},
		{"ratio NaN", with(func(c *Config) { c.SamplingRatio = math.NaN() }), []string{"tracing.sampling_ratio"}},
		{"empty attribute", with(func(c *Config) { c.ResourceAttributes = map[string]string{" ": "x"} }), []string{"tracing.resource_attributes: empty attribute name"}},
		{"ui url", with(func(c *Config) { c.UIURL = "http://jaeger:16686" }), nil},
		{"ui url with a path", with(func(c *Config) { c.UIURL = "https://ops.example/jaeger/" }), nil},
		{"ui url relative", with(func(c *Config) { c.UIURL = "jaeger:16686" }), []string{`tracing.ui_url: "jaeger:16686": want an absolute http or https URL`}},
		{"ui url no host", with(func(c *Config) { c.UIURL = "http:///search" }), []string{"tracing.ui_url: \"http:///search\": want an absolute http or https URL"}},
		{"ui url script", with(func(c *Config) { c.UIURL = "javascript:alert(1)" }), []string{"tracing.ui_url: \"javascript:alert(1)\": want an absolute http or https URL"}},
		{"ui url query", with(func(c *Config) { c.UIURL = "http://jaeger:16686/?x=1" }), []string{"tracing.ui_url: \"http://jaeger:16686/?x=1\": no query or fragment"}},
		{"ui url credentials", with(func(c *Config) { c.UIURL = "http://u:p@jaeger:16686" }), []string{"tracing.ui_url: no user or password"}},
		{"ui url unparsable", with(func(c *Config) { c.UIURL = "http://jae ger:1" }), []string{"tracing.ui_url: "}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var p config.Problems
			tc.cfg.Validate("tracing", &p)
			if len(p) != len(tc.want) {
				t.Fatalf("problems = %q, want %d", p, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(p[i], w) {
					t.Errorf("problem %d = %q, want it to contain %q", i, p[i], w)
				}
			}
		})
	}
}

// TestLoadFromConfigFile checks the YAML names through Ferry's own loader,
// as a service embeds the section.
func TestLoadFromConfigFile(t *testing.T) {
	type service struct {
		Tracing Config `yaml:"tracing"`
	}
	path := filepath.Join(t.TempDir(), "svc.yaml")
	yaml := "tracing:\n  endpoint: 127.0.0.1:4317\n  ui_url: http://jaeger:16686\n  sampling_ratio: 0.5\n  resource_attributes: {region: eu-west-1, deployment.environment: prod}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	got := service{Tracing: DefaultConfig()}
	if err := config.Load(&got, path, []string{"FERRY_TRACING_INSECURE=true"}, "FERRY_", []string{"tracing.sampling_ratio=0.25"}); err != nil {
		t.Fatal(err)
	}
	want := Config{
		Endpoint:           "127.0.0.1:4317",
		UIURL:              "http://jaeger:16686",
		Insecure:           true,
		SamplingRatio:      0.25,
		ResourceAttributes: map[string]string{"region": "eu-west-1", "deployment.environment": "prod"},
	}
	if !reflect.DeepEqual(got.Tracing, want) {
		t.Errorf("loaded %+v, want %+v", got.Tracing, want)
	}
}
