package tracing

import (
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/ferry-replicator/ferry/pkg/config"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
)

// DefaultSamplingRatio samples one batch in a hundred: at tens of thousands
// of batches a second a trace of every batch would cost more than the
// replication it describes. Records whose producer sampled them are traced
// whatever the ratio (parent-based sampling).
const DefaultSamplingRatio = 0.01

// Config is the tracing section of a service's configuration.
type Config struct {
	// Endpoint is the OTLP/gRPC collector, host:port. Empty turns tracing
	// off: Setup then returns a no-op provider whose spans cost a few
	// nanoseconds and no allocation.
	Endpoint string `yaml:"endpoint"`
	// Insecure sends OTLP in plaintext. It is on by default because the
	// recommended collector is an agent on the same host, reached over
	// loopback; as for Ferry's other connections, plaintext to any other
	// address is refused by Validate. Off, the exporter uses TLS with the
	// system roots, or the CA in OTEL_EXPORTER_OTLP_CERTIFICATE.
	Insecure bool `yaml:"insecure"`
	// SamplingRatio is the share of new traces (batches without a sampled
	// parent) that are recorded, 0 to 1. A span with a parent follows the
	// parent's decision.
	SamplingRatio float64 `yaml:"sampling_ratio"`
	// ResourceAttributes are added to every span's resource (region, zone,
	// environment...). OTEL_RESOURCE_ATTRIBUTES overrides a key set in both.
	// Set in the configuration file only: the config package cannot set a
	// map from an environment variable or --set.
	ResourceAttributes map[string]string `yaml:"resource_attributes"`
	// UIURL is the Jaeger UI that shows these traces (for example
	// http://jaeger:16686); empty (the default) links to none. When set,
	// the status page links to the UI's search for the service and to
	// the last sampled traces the process recorded spans of.
	UIURL string `yaml:"ui_url"`
}

// DefaultConfig is tracing off, with the settings that apply once an
// endpoint is given. A service starts from it, since the zero Config has a
// sampling ratio of 0.
func DefaultConfig() Config {
	return Config{Insecure: true, SamplingRatio: DefaultSamplingRatio}
}

// Enabled reports whether the configuration turns tracing on.
func (c Config) Enabled() bool { return c.Endpoint != "" }

// Validate records every problem of the section at prefix (as "tracing").
func (c Config) Validate(prefix string, p *config.Problems) {
	if c.Endpoint != "" {
		c.validateEndpoint(prefix, p)
	}
	if math.IsNaN(c.SamplingRatio) || c.SamplingRatio < 0 || c.SamplingRatio > 1 {
		p.Addf(prefix+".sampling_ratio", "%v: want a number from 0 to 1", c.SamplingRatio)
	}
	for k := range c.ResourceAttributes {
		if strings.TrimSpace(k) == "" {
			p.Addf(prefix+".resource_attributes", "empty attribute name")
		}
	}
	if c.UIURL != "" {
		validateUIURL(prefix+".ui_url", c.UIURL, p)
	}
}

// validateUIURL checks the Jaeger UI's address: the status page appends
// /search and /trace/<id> to it, so it must be an absolute http(s) URL
// without a query or fragment; and the page shows it to whoever reaches
// the admin port, so it must hold no credentials.
func validateUIURL(key, raw string, p *config.Problems) {
	u, err := url.Parse(raw)
	if err != nil {
		p.Addf(key, "%v", err)
		return
	}
	switch {
	case u.User != nil:
		p.Addf(key, "no user or password in the URL: the status page shows it to whoever reaches the admin port")
	case (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "":
		p.Addf(key, "%q: want an absolute http or https URL of the Jaeger UI, such as http://jaeger:16686", raw)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		p.Addf(key, "%q: no query or fragment: /search and /trace/<id> are appended to it", raw)
	}
}

func (c Config) validateEndpoint(prefix string, p *config.Problems) {
	key := prefix + ".endpoint"
	if strings.Contains(c.Endpoint, "://") {
		p.Addf(key, "%q: want host:port without a scheme (TLS is chosen by %s.insecure)", c.Endpoint, prefix)
		return
	}
	host, port, err := net.SplitHostPort(c.Endpoint)
	if err != nil {
		p.Addf(key, "%q: want host:port: %v", c.Endpoint, err)
		return
	}
	if host == "" {
		p.Addf(key, "%q: host required", c.Endpoint)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		p.Addf(key, "%q: port %q is not 1 to 65535", c.Endpoint, port)
	}
	if c.Insecure && host != "" && !tlsconfig.IsLoopback(c.Endpoint) {
		p.Addf(prefix+".insecure", "plaintext OTLP is allowed only to a loopback collector, not %q; set %s.insecure=false for TLS", c.Endpoint, prefix)
	}
}
