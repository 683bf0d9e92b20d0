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

func TestNomadJobsParse(t *testing.T) {
	names, err := Files("nomad")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 2 {
		t.Fatalf("nomad/ holds %v: want a job per tier", names)
	}
	for _, tier := range []string{"fetcher", "writer"} {
		if _, err := LoadNomad("nomad/ferry-"+tier+".nomad.hcl", tier); err != nil {
			t.Error(err)
		}
	}
}

func TestParseHCL(t *testing.T) {
	tests := []struct {
		name, src, want string // want: the error's text, or the heredoc's
	}{
		{name: "heredoc dedented", src: "job \"j\" {\n  data = <<-EOF\n    a: 1\n      b: \"#x\"\n  EOF\n}\n", want: "a: 1\n  b: \"#x\"\n"},
		{name: "heredoc as written", src: "job \"j\" {\n  data = <<EOF\n  a: 1\nEOF\n}\n", want: "  a: 1\n"},
		{name: "comments", src: "# top\njob \"j\" { // open\n  data = \"#not a comment\" # a comment\n}\n", want: "#not a comment"},
		{name: "one-line block refused", src: "job \"j\" {\n  port \"p\" { to = 1 }\n}\n", want: "outside the HCL subset"},
		{name: "unclosed block", src: "job \"j\" {\n", want: "never closed"},
		{name: "unclosed heredoc", src: "job \"j\" {\n  data = <<EOF\n", want: "never ends"},
		{name: "stray brace", src: "}\n", want: "closes no block"},
		{name: "attribute twice", src: "job \"j\" {\n  data = \"a\"\n  data = \"b\"\n}\n", want: "set twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, err := ParseHCL(tt.src)
			if err != nil {
				if !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("error %v, want %q", err, tt.want)
				}
				return
			}
			job, err := root.Child("job", "j")
			if err != nil {
				t.Fatal(err)
			}
			got, err := job.String("data")
			if err != nil || got != tt.want {
				t.Fatalf("data %q (%v), want %q", got, err, tt.want)
			}
		})
	}
}

// factsFor is what the shipped configurations say; the services' tests
// derive the same from the real loaders.
func factsFor(tier, tlsDir string) Facts {
	f := Facts{Tier: tier, ShutdownTimeout: 20 * time.Second, Replicable: true,
		TLSFiles: []string{tlsDir + "/tls.crt", tlsDir + "/tls.key", tlsDir + "/ca.crt"}}
	if tier == "fetcher" {
		f.AdminListen, f.Shards, f.Link = "0.0.0.0:7402", 16, "east-to-west"
	} else {
		f.AdminListen, f.GRPCListen = "0.0.0.0:7401", "0.0.0.0:7400"
	}
	return f
}

// TestCheckFindsBrokenManifests breaks each manifest in one way at a time
// and wants Check (or the loader) to say so, so the services' tests
// cannot pass on a check that never fails.
func TestCheckFindsBrokenManifests(t *testing.T) {
	type mutation struct {
		old, new, want string
		facts          func(*Facts)
	}
	noop := func(*Facts) {}
	nomad := map[string][]mutation{
		"fetcher": {
			{"", "", "", noop},
			{`path     = "/readyz"`, `path     = "/healthz"`, "http check of /readyz", noop},
			{"to = 7402", "to = 7403", "network port admin", noop},
			{`kill_timeout = "45s"`, `kill_timeout = "25s"`, "kill_timeout", noop},
			{`destination   = "secrets/tls.key"`, `destination   = "secrets/key.pem"`, "tls file /secrets/tls.key", noop},
			{"listen: 0.0.0.0:7402", "listen: ${NOMAD_ADDR_admin}", "Nomad would rewrite it", noop},
			{`readonly_rootfs = true`, `readonly_rootfs = false`, "readonly_rootfs", noop},
			{`user   = "65532:65532"`, `user   = "root"`, "non-root", noop},
			{"", "", "count 3", func(f *Facts) { f.Replicable = false }},
		},
		"writer": {
			{"", "", "", noop},
			{"to = 7400", "to = 7410", "network port grpc", noop},
			{`shutdown_delay = "5s"`, `shutdown_delay = "30s"`, "kill_timeout", noop},
			{`port     = "grpc"`, `port     = "admin"`, "no service registers the gRPC port", noop},
			{"", "", "Nomad registers the writer already", func(f *Facts) { f.SelfRegisters = true }},
		},
	}
	for tier, ms := range nomad {
		name := "nomad/ferry-" + tier + ".nomad.hcl"
		src, err := Read(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			t.Run(name+"/"+m.new+m.want, func(t *testing.T) {
				if !strings.Contains(src, m.old) {
					t.Fatalf("%s no longer holds %q: update the test", name, m.old)
				}
				f := factsFor(tier, "/secrets")
				m.facts(&f)
				errs := checkNomad(name, strings.Replace(src, m.old, m.new, 1), tier, f)
				expect(t, errs, m.want)
			})
		}
	}
}

func checkNomad(name, src, tier string, f Facts) []error {
	n, err := parseNomad(name, src, tier)
	if err != nil {
		return []error{err}
	}
	if _, err := n.Config(); err != nil {
		return []error{err}
	}
	if _, err := n.Env("FERRY_"); err != nil {
		return []error{err}
	}
	return n.Check(f)
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
	for _, s := range nw.services() {
		if name, _ := s.String("name"); name == f.Writers.Consul.Service {
			registered = true
		}
	}
	if !registered {
		t.Errorf("nomad: fetchers look for service %q, which the writer job does not register", f.Writers.Consul.Service)
	}

}
