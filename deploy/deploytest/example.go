package deploytest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-replicator/ferry/deploy"
	"github.com/ferry-replicator/ferry/pkg/config"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
)

// CheckExample loads deploy/examples/<tier>.yaml with the tier's own
// loader, as the binary would with --config and no environment, and
// validates it, the mTLS and Consul token files pointed at development
// ones as Check does: the example users copy first must load as written.
func CheckExample[C any](t *testing.T, tier Tier[C]) {
	t.Helper()
	text, err := deploy.Example(tier.Name)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, tier.Name+".yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	c := tier.Defaults()
	prefix := "FERRY_" + strings.ToUpper(tier.Name) + "_"
	if err := config.Load(&c, path, nil, prefix, nil); err != nil {
		t.Fatalf("deploy/examples/%s.yaml: %v", tier.Name, err)
	}
	if _, err := devcerts.WriteDir(dir, devcerts.Options{Validity: time.Hour}); err != nil {
		t.Fatal(err)
	}
	tls := tier.TLS(&c)
	tls.CertFile = filepath.Join(dir, tier.Name+".pem")
	tls.KeyFile = filepath.Join(dir, tier.Name+"-key.pem")
	tls.CAFile = filepath.Join(dir, "ca.pem")
	if tier.Consul != nil {
		token := filepath.Join(dir, "consul-token")
		if err := os.WriteFile(token, []byte("00000000-0000-0000-0000-000000000000\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, cc := range tier.Consul(&c) {
			if cc.TokenFile != "" {
				cc.TokenFile = token
			}
		}
	}
	if err := tier.Validate(&c); err != nil {
		t.Errorf("deploy/examples/%s.yaml: %v", tier.Name, err)
	}
}
