package config

import (
	"testing"

	"github.com/ferry-replicator/ferry/deploy"
	"github.com/ferry-replicator/ferry/deploy/deploytest"
	"github.com/ferry-replicator/ferry/pkg/consulclient"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
)

// TestDeployManifests holds each manifest in deploy/ to the writer
// configuration it embeds: the gRPC and admin ports, probes, Service and
// checks, the drain time, the certificate files (see deploytest.Check).
func TestDeployManifests(t *testing.T) {
	deploytest.Check(t, deployTier())
}

// TestExampleConfig loads deploy/examples/writer.yaml, the plain
// configuration docs/deploy.md starts from, with the writer's loader and
// validation.
func TestExampleConfig(t *testing.T) {
	deploytest.CheckExample(t, deployTier())
}

// deployTier is what deploytest needs of the writer's configuration.
func deployTier() deploytest.Tier[Config] {
	return deploytest.Tier[Config]{
		Name:     "writer",
		Defaults: Defaults,
		Facts: func(c *Config) deploy.Facts {
			tls := c.TLS
			return deploy.Facts{
				Tier:            "writer",
				AdminListen:     c.Admin.Listen,
				GRPCListen:      c.Listen,
				ShutdownTimeout: c.ShutdownTimeout,
				TLSFiles:        []string{tls.CertFile, tls.KeyFile, tls.CAFile},
				Replicable:      true, // each shard's transactional producer fences the last
				SelfRegisters:   c.Registration.Address != "",
				SecretFiles:     secretFiles(c.Registration.TokenFile),
				Shards:          totalShards(c.Links),
			}
		},
		TLS:      func(c *Config) *tlsconfig.Config { return &c.TLS },
		Consul:   func(c *Config) []*consulclient.Config { return []*consulclient.Config{&c.Registration.Config} },
		Validate: func(c *Config) error { return c.Validate() },
	}
}

// secretFiles is the token file when one is set.
func secretFiles(token string) []string {
	if token == "" {
		return nil
	}
	return []string{token}
}

// totalShards is the shards of all links, each a writer serves at a time;
// Validate, which fills the default, has not run yet.
func totalShards(links []Link) int {
	n := 0
	for _, l := range links {
		if l.Shards == 0 {
			l.Shards = DefaultShards
		}
		n += l.Shards
	}
	return n
}
