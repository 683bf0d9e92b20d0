package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferry-replicator/ferry/deploy"
	"github.com/ferry-replicator/ferry/pkg/config"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
)

// TestDeployManifests loads the fetcher configuration each manifest in
// deploy/ embeds (the Kubernetes ConfigMap, the Nomad template) with the
// environment settings the manifest adds, exactly as the binary would, and
// has deploy.Check hold the manifest to it: ports, probes and checks, the
// drain time, the certificate files, replicas only with leases.
//
// Validate also reads the mTLS files, which exist only where the manifest
// runs; once their paths are checked against the manifest's mounts, the
// test points them at fresh development certificates so the rest of the
// validation runs unchanged.
func TestDeployManifests(t *testing.T) {
	certs := t.TempDir()
	if _, err := devcerts.WriteDir(certs, devcerts.Options{Validity: time.Hour}); err != nil {
		t.Fatal(err)
	}
	manifests := map[string]func() (deploy.Manifest, error){
		"kubernetes/fetcher.yaml": func() (deploy.Manifest, error) {
			return deploy.LoadKubernetes("kubernetes/fetcher.yaml", "fetcher")
		},
		"nomad/ferry-fetcher.nomad.hcl": func() (deploy.Manifest, error) {
			return deploy.LoadNomad("nomad/ferry-fetcher.nomad.hcl", "fetcher")
		},
	}
	for name, open := range manifests {
		t.Run(name, func(t *testing.T) {
			m, err := open()
			if err != nil {
				t.Fatal(err)
			}
			text, err := m.Config()
			if err != nil {
				t.Fatal(err)
			}
			env, err := m.Env("FERRY_FETCHER_")
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "fetcher.yaml")
			if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			c := Defaults()
			if err := config.Load(&c, path, env, "FERRY_FETCHER_", nil); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			tls := &c.Writers.TLS
			for _, err := range m.Check(deploy.Facts{
				Tier:            "fetcher",
				AdminListen:     c.Admin.Listen,
				ShutdownTimeout: c.ShutdownTimeout,
				TLSFiles:        []string{tls.CertFile, tls.KeyFile, tls.CAFile},
				Replicable:      c.Lease.Address != "" && len(c.Link.OwnedShards) == 0,
			}) {
				t.Error(err)
			}
			tls.CertFile = filepath.Join(certs, "fetcher.pem")
			tls.KeyFile = filepath.Join(certs, "fetcher-key.pem")
			tls.CAFile = filepath.Join(certs, "ca.pem")
			if err := c.Validate(); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
}
