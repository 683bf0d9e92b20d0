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

// TestDeployManifests loads the writer configuration each manifest in
// deploy/ embeds (the Kubernetes ConfigMap, the Nomad template) with the
// environment settings the manifest adds, exactly as the binary would, and
// has deploy.Check hold the manifest to it: the gRPC and admin ports,
// probes, Service and checks, the drain time, the certificate files.
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
		"kubernetes/writer.yaml": func() (deploy.Manifest, error) {
			return deploy.LoadKubernetes("kubernetes/writer.yaml", "writer")
		},
		"nomad/ferry-writer.nomad.hcl": func() (deploy.Manifest, error) {
			return deploy.LoadNomad("nomad/ferry-writer.nomad.hcl", "writer")
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
			env, err := m.Env("FERRY_WRITER_")
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "writer.yaml")
			if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			c := Defaults()
			if err := config.Load(&c, path, env, "FERRY_WRITER_", nil); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			tls := &c.TLS
			for _, err := range m.Check(deploy.Facts{
				Tier:            "writer",
				AdminListen:     c.Admin.Listen,
				GRPCListen:      c.Listen,
				ShutdownTimeout: c.ShutdownTimeout,
				TLSFiles:        []string{tls.CertFile, tls.KeyFile, tls.CAFile},
				Replicable:      true, // each shard's transactional producer fences the last
				SelfRegisters:   c.Registration.Address != "",
			}) {
				t.Error(err)
			}
			tls.CertFile = filepath.Join(certs, "writer.pem")
			tls.KeyFile = filepath.Join(certs, "writer-key.pem")
			tls.CAFile = filepath.Join(certs, "ca.pem")
			if err := c.Validate(); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
}
