// Package sourceconfig reads a fetcher's configuration file for another
// program (ferryctl failback): the link it serves and how it reaches its
// source cluster. The file is loaded by the fetcher's own loader, layered
// as ferry-fetcher layers it (defaults, the file, FERRY_FETCHER_*
// variables, unknown keys refused), and its link name and source section
// are validated as the fetcher validates them, by the same key names. The
// rest is not: the operator's machine need not hold the fetcher's own
// certificates (writers.tls), which the fetcher's whole validation reads.
package sourceconfig

import (
	"github.com/ferry-replicator/ferry/pkg/config"
	"github.com/ferry-replicator/ferry/pkg/kafkaclient"
	fetcherconfig "github.com/ferry-replicator/ferry/services/fetcher/internal/config"
)

// EnvPrefix is the fetcher's environment variable prefix.
const EnvPrefix = "FERRY_FETCHER_"

// Source is what a fetcher's configuration says of its link's source.
type Source struct {
	// Link is link.name.
	Link string
	// Kafka is the source section: brokers, TLS and SASL.
	Kafka kafkaclient.Config
}

// Load reads the fetcher configuration at path under env (KEY=VALUE).
func Load(path string, env []string) (Source, error) {
	cfg := fetcherconfig.Defaults()
	if err := config.Load(&cfg, path, env, EnvPrefix, nil); err != nil {
		return Source{}, err
	}
	var p config.Problems
	if cfg.Link.Name == "" {
		p.Addf("link.name", "required")
	}
	cfg.Source.Validate("source", &p)
	if err := p.Err(); err != nil {
		return Source{}, err
	}
	return Source{Link: cfg.Link.Name, Kafka: cfg.Source}, nil
}
