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

func TestKubernetesDocumentsNameThemselves(t *testing.T) {
	names, err := Files("kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 4 {
		t.Fatalf("kubernetes/ holds %v: want fetcher.yaml, writer.yaml and the optional certificates", names)
	}
	for _, name := range names {
		objs, err := Objects(name)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if len(objs) == 0 {
			t.Errorf("%s: no documents", name)
		}
		for _, o := range objs {
			if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
				t.Errorf("%s:%d: apiVersion %q, kind %q, metadata.name %q: all are required", name, o.Line, o.APIVersion, o.Kind, o.Metadata.Name)
			}
		}
	}
}

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

// TestCheckFindsBrokenManifests breaks each manifest in one way at a time
// and wants Check (or the loader) to say so, so the services' tests
// cannot pass on a check that never fails.
func TestCheckFindsBrokenManifests(t *testing.T) {
	type mutation struct {
		old, new, want string
		facts          func(*Facts)
	}
	noop := func(*Facts) {}
	kube := map[string][]mutation{
		"fetcher": {
			{"", "", "", noop},
			{"path: /readyz", "path: /ready", "readinessProbe path", noop},
			{"path: /healthz", "path: /readyz", "livenessProbe path", noop},
			{"containerPort: 7402", "containerPort: 7403", "container port admin", noop},
			{`prometheus.io/port: "7402"`, `prometheus.io/port: "9090"`, "prometheus.io", noop},
			{"terminationGracePeriodSeconds: 45", "terminationGracePeriodSeconds: 25", "terminationGracePeriodSeconds", noop},
			{"readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", "readOnlyRootFilesystem", noop},
			{"runAsNonRoot: true", "runAsNonRoot: false", "runAsNonRoot", noop},
			{"memory: 448Mi", "memory: 1Gi", "memory request", noop},
			{"mountPath: /etc/ferry/tls", "mountPath: /etc/ferry/certs", "tls file", noop},
			{"--config\", \"/etc/ferry/config/fetcher.yaml", "--config\", \"/etc/ferry/config/f.yaml", "no key f.yaml", noop},
			{"ferry-fetcher:VERSION", "ferry-fetcher:latest", "image", noop},
			{"", "", "admin.listen \"127.0.0.1:7402\" is loopback", func(f *Facts) { f.AdminListen = "127.0.0.1:7402" }},
			{"", "", "several replicas", func(f *Facts) { f.Replicable = false }},
			{"", "", "terminationGracePeriodSeconds", func(f *Facts) { f.ShutdownTimeout = time.Minute }},
		},
		"writer": {
			{"", "", "", noop},
			{"targetPort: grpc", "targetPort: admin", "Service ferry-writer port grpc targets", noop},
			{"containerPort: 7400", "containerPort: 7410", "container port grpc", noop},
			{"seconds: 5", "seconds: 30", "terminationGracePeriodSeconds", noop},
			{"kind: PodDisruptionBudget", "kind: PodDisruptionBudgetX", "no PodDisruptionBudget", noop},
		},
	}
	for tier, ms := range kube {
		name := "kubernetes/" + tier + ".yaml"
		src, err := Read(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			t.Run(name+"/"+m.new+m.want, func(t *testing.T) {
				if !strings.Contains(src, m.old) {
					t.Fatalf("%s no longer holds %q: update the test", name, m.old)
				}
				f := factsFor(tier, "/etc/ferry/tls")
				m.facts(&f)
				errs := checkKubernetes(name, strings.Replace(src, m.old, m.new, 1), tier, f)
				expect(t, errs, m.want)
			})
		}
	}
}

func checkKubernetes(name, src, tier string, f Facts) []error {
	k, err := parseKubernetes(name, []byte(src), tier)
	if err != nil {
		return []error{err}
	}
	if _, err := k.Config(); err != nil {
		return []error{err}
	}
	if _, err := k.Env("FERRY_"); err != nil {
		return []error{err}
	}
	return k.Check(f)
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
// fetchers' link, that each side admits the other's certificate identity
// (the optional cert-manager Certificates on Kubernetes), that those
// Certificates fill the Secrets the Deployments mount, and that Nomad
// fetchers look for the service name the writer job registers.
func TestTiersAgree(t *testing.T) {
	kf, err := LoadKubernetes("kubernetes/fetcher.yaml", "fetcher")
	if err != nil {
		t.Fatal(err)
	}
	kw, err := LoadKubernetes("kubernetes/writer.yaml", "writer")
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

	// Kubernetes: the optional Certificates fill the mounted Secrets with
	// the identities the other tier admits.
	for _, c := range []struct {
		tier  string
		k     *Kubernetes
		peers []string
	}{{"fetcher", kf, decodeConfig(t, kw).TLS.AllowedIDs}, {"writer", kw, decodeConfig(t, kf).Writers.TLS.AllowedIDs}} {
		objs, err := Objects("kubernetes/optional/" + c.tier + "-certificate.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if len(objs) != 1 || objs[0].Kind != "Certificate" {
			t.Fatalf("optional/%s-certificate.yaml: want one Certificate", c.tier)
		}
		var cert struct {
			Spec struct {
				SecretName string   `yaml:"secretName"`
				URIs       []string `yaml:"uris"`
			} `yaml:"spec"`
		}
		if err := objs[0].Decode(&cert); err != nil {
			t.Fatal(err)
		}
		secret, err := c.k.SecretAt("/etc/ferry/tls")
		if err != nil || secret != cert.Spec.SecretName {
			t.Errorf("%s: the Deployment mounts Secret %q (%v), the Certificate fills %q", c.tier, secret, err, cert.Spec.SecretName)
		}
		for _, uri := range cert.Spec.URIs {
			if !slices.Contains(c.peers, uri) {
				t.Errorf("%s: the Certificate's URI %s is not in the other tier's allowed_ids %v", c.tier, uri, c.peers)
			}
		}
	}
}
