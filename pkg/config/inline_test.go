package config

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

type InlineShared struct {
	Address string `yaml:"address"`
	CAFile  string `yaml:"ca_file"`
}

type inlineConfig struct {
	Lease struct {
		InlineShared `yaml:",inline"`
		KeyPrefix    string `yaml:"key_prefix"`
	} `yaml:"lease"`
}

// A struct inlined into another (yaml ",inline") lends its keys to the
// outer one in every layer: file, environment and --set, and --help.
func TestInlineStructKeysBelongToTheOuterOne(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("lease:\n  address: a:1\n  key_prefix: p\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var c inlineConfig
	if err := Load(&c, path, []string{"X_LEASE_CA_FILE=/ca.pem"}, "X_", []string{"lease.key_prefix=q"}); err != nil {
		t.Fatal(err)
	}
	if c.Lease.Address != "a:1" || c.Lease.CAFile != "/ca.pem" || c.Lease.KeyPrefix != "q" {
		t.Errorf("loaded %+v", c.Lease)
	}
	keys := List(&c)
	for _, want := range []string{"lease.address (string)", "lease.ca_file (string)", "lease.key_prefix (string)"} {
		if !slices.Contains(keys, want) {
			t.Errorf("List() = %v, missing %q", keys, want)
		}
	}
}
