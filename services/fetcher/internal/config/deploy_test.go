package config

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ferry-replicator/ferry/deploy"
	"github.com/ferry-replicator/ferry/deploy/deploytest"
	"github.com/ferry-replicator/ferry/pkg/consulclient"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
)

// TestDeployManifests holds each manifest in deploy/ to the fetcher
// configuration it embeds: ports, probes and checks, the drain time, the
// certificate files, replicas only with leases, the autoscaler within
// link.shards and on the link's lag (see deploytest.Check).
func TestDeployManifests(t *testing.T) {
	deploytest.Check(t, deployTier())
}

// TestExampleConfig loads deploy/examples/fetcher.yaml, the plain
// configuration docs/deploy.md starts from, with the fetcher's loader and
// validation.
func TestExampleConfig(t *testing.T) {
	deploytest.CheckExample(t, deployTier())
}

// deployTier is what deploytest needs of the fetcher's configuration.
func deployTier() deploytest.Tier[Config] {
	return deploytest.Tier[Config]{
		Name:     "fetcher",
		Defaults: Defaults,
		Facts: func(c *Config) deploy.Facts {
			tls := c.Writers.TLS
			return deploy.Facts{
				Tier:            "fetcher",
				AdminListen:     c.Admin.Listen,
				ShutdownTimeout: c.ShutdownTimeout,
				TLSFiles:        []string{tls.CertFile, tls.KeyFile, tls.CAFile},
				SecretFiles:     nonEmpty(c.Lease.TokenFile, c.Writers.Consul.TokenFile),
				Replicable:      c.Lease.Address != "" && len(c.Link.OwnedShards) == 0,
				Shards:          c.Link.Shards,
				Link:            c.Link.Name,
			}
		},
		TLS: func(c *Config) *tlsconfig.Config { return &c.Writers.TLS },
		Consul: func(c *Config) []*consulclient.Config {
			return []*consulclient.Config{&c.Lease.Config, &c.Writers.Consul.Config}
		},
		Validate: func(c *Config) error {
			// A shipped manifest or example carries no setting the
			// fetcher warns about.
			if d := c.Deprecations(); len(d) > 0 {
				return fmt.Errorf("deprecated settings: %s", strings.Join(d, "; "))
			}
			return c.Validate()
		},
	}
}

// nonEmpty drops the unset paths.
func nonEmpty(paths ...string) []string {
	var out []string
	for _, p := range paths {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}
