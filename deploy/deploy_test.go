package deploy

import (
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// The Ferry configurations themselves are loaded and validated by the
// services' config packages (services/*/internal/config/deploy_test.go),
// which alone may import them; these tests check the files' shape, the
// parsers, and what the two tiers must agree on.

// factsFor is what the shipped configurations say; the services' tests
// derive the same from the real loaders.
func factsFor(tier, tlsDir string) Facts {
	f := Facts{Tier: tier, ShutdownTimeout: 20 * time.Second, Replicable: true,
		TLSFiles: []string{tlsDir + "/tls.crt", tlsDir + "/tls.key", tlsDir + "/ca.crt"}}
	if tier == "fetcher" {
		f.AdminListen = "0.0.0.0:7402"
	} else {
		f.AdminListen, f.GRPCListen = "0.0.0.0:7401", "0.0.0.0:7400"
	}
	return f
}

// expect wants no error for want "", else one containing want.
func expect(t *testing.T, errs []error, want string) {
	t.Helper()
	if want == "" {
		for _, err := range errs {
			t.Errorf("unbroken manifest: %v", err)
		}
		return
	}
	for _, err := range errs {
		if strings.Contains(err.Error(), want) {
			return
		}
	}
	t.Errorf("want an error containing %q, got %v", want, errs)
}

// tierLink is a link as both tiers name it; shards unset is 0 here.
type tierLink struct {
	Name   string `yaml:"name"`
	Shards int    `yaml:"shards"`
}

// tierConfig is the part of both tiers' configurations they must agree on,
// decoded loosely (the services' tests decode them strictly).
type tierConfig struct {
	Link  tierLink   `yaml:"link"`
	Links []tierLink `yaml:"links"`
	TLS   struct {
		AllowedIDs []string `yaml:"allowed_ids"`
	} `yaml:"tls"`
	Writers struct {
		TLS struct {
			AllowedIDs []string `yaml:"allowed_ids"`
		} `yaml:"tls"`
		Consul struct {
			Service string `yaml:"service"`
		} `yaml:"consul"`
	} `yaml:"writers"`
}

func decodeConfig(t *testing.T, m Manifest) tierConfig {
	t.Helper()
	text, err := m.Config()
	if err != nil {
		t.Fatal(err)
	}
	var c tierConfig
	if err := yaml.Unmarshal([]byte(text), &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTiersAgree checks, per platform, that the writers accept the
// fetchers' link, that each side admits the other's certificate identity,
// and that Nomad fetchers look for the service name the writer job
// registers (TestKubernetesCertificatesAgree checks the Certificates).
func TestTiersAgree(t *testing.T) {
	kf, err := LoadKubernetes(KubernetesOverlay("fetcher"), "fetcher")
	if err != nil {
		t.Fatal(err)
	}
	kw, err := LoadKubernetes(KubernetesOverlay("writer"), "writer")
	if err != nil {
		t.Fatal(err)
	}
	nf, err := LoadNomad("nomad/ferry-fetcher.nomad.hcl", "fetcher")
	if err != nil {
		t.Fatal(err)
	}
	nw, err := LoadNomad("nomad/ferry-writer.nomad.hcl", "writer")
	if err != nil {
		t.Fatal(err)
	}
	for _, pair := range []struct {
		name            string
		fetcher, writer Manifest
	}{{"kubernetes", kf, kw}, {"nomad", nf, nw}} {
		f, w := decodeConfig(t, pair.fetcher), decodeConfig(t, pair.writer)
		// Same name and shard count: the writer refuses shard numbers
		// outside its links[].shards.
		if !slices.Contains(w.Links, f.Link) {
			t.Errorf("%s: the writer's links %v do not include the fetcher's link %+v", pair.name, w.Links, f.Link)
		}
		if !slices.Contains(w.TLS.AllowedIDs, "spiffe://prod.example/ferry/fetcher") ||
			!slices.Contains(f.Writers.TLS.AllowedIDs, "spiffe://prod.example/ferry/writer") {
			t.Errorf("%s: allowed_ids writer %v, fetcher %v: want each to admit the other's SPIFFE ID", pair.name, w.TLS.AllowedIDs, f.Writers.TLS.AllowedIDs)
		}
	}

	// Nomad: fetchers look up the service the writer job registers.
	f := decodeConfig(t, nf)
	registered := false
	for _, s := range nw.job.Group.Services {
		if s.Name == f.Writers.Consul.Service {
			registered = true
		}
	}
	if !registered {
		t.Errorf("nomad: fetchers look for service %q, which the writer job does not register", f.Writers.Consul.Service)
	}

}
