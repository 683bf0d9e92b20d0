package tracing

import (
	"math"
	"net"
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
