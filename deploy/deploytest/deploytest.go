// Package deploytest checks a tier's configuration as each manifest in
// deploy/ embeds it, from that tier's own config package test, so the check
// runs the tier's real loader and validation.
package deploytest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-replicator/ferry/deploy"
	"github.com/ferry-replicator/ferry/pkg/config"
	"github.com/ferry-replicator/ferry/pkg/consulclient"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
)

// Tier describes a service's configuration to the check. C is its config
// type.
type Tier[C any] struct {
	Name     string                  // "fetcher" or "writer"
	Defaults func() C                // the config package's Defaults
	Facts    func(c *C) deploy.Facts // what the loaded config says the manifest must match
	TLS      func(c *C) *tlsconfig.Config
	// Consul returns the tier's Consul settings (nil: none), whose token
	// files exist only where the manifest runs, like the mTLS files.
	Consul   func(c *C) []*consulclient.Config
	Validate func(c *C) error
}

// Check loads the tier's configuration from each manifest (the ConfigMap
// the tier's Kubernetes overlay renders, the Nomad template) with the
// environment settings the manifest adds, exactly as the binary would, and
// has deploy.Check hold the manifest to it.
//
// Validate also reads the mTLS files, which exist only where the manifest
// runs; once their paths are checked against the manifest's mounts, Check
// points them at fresh development certificates (and Consul token files at
// a sample token) so the rest of the validation runs unchanged.
func Check[C any](t *testing.T, tier Tier[C]) {
	t.Helper()
	certs := t.TempDir()
	if _, err := devcerts.WriteDir(certs, devcerts.Options{Validity: time.Hour}); err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(certs, "consul-token")
	if err := os.WriteFile(token, []byte("00000000-0000-0000-0000-000000000000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	prefix := "FERRY_" + strings.ToUpper(tier.Name) + "_"
	manifests := map[string]func() (deploy.Manifest, error){
		deploy.KubernetesOverlay(tier.Name): func() (deploy.Manifest, error) {
			return deploy.LoadKubernetes(deploy.KubernetesOverlay(tier.Name), tier.Name)
		},
		"nomad/ferry-" + tier.Name + ".nomad.hcl": func() (deploy.Manifest, error) {
			return deploy.LoadNomad("nomad/ferry-"+tier.Name+".nomad.hcl", tier.Name)
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
			env, err := m.Env(prefix)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), tier.Name+".yaml")
			if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			c := tier.Defaults()
			if err := config.Load(&c, path, env, prefix, nil); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			for _, err := range m.Check(tier.Facts(&c)) {
				t.Error(err)
			}
			tls := tier.TLS(&c)
			tls.CertFile = filepath.Join(certs, tier.Name+".pem")
			tls.KeyFile = filepath.Join(certs, tier.Name+"-key.pem")
			tls.CAFile = filepath.Join(certs, "ca.pem")
			if tier.Consul != nil {
				for _, cc := range tier.Consul(&c) {
					if cc.TokenFile != "" {
						cc.TokenFile = token
					}
				}
			}
			if err := tier.Validate(&c); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
}
