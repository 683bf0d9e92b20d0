package consulclient

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-replicator/ferry/pkg/config"
)

// A setting wins over Consul's environment variable; an unset one leaves
// the variable in force, as in Consul's own tools.
func TestSettingsOverConsulEnvironment(t *testing.T) {
	t.Setenv("CONSUL_TLS_SERVER_NAME", "from-env")
	for _, tc := range []struct {
		set, want string
	}{{"", "from-env"}, {"from-settings", "from-settings"}} {
		c, err := New(Config{Address: "127.0.0.1:8501", ServerName: tc.set}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.HTTP.Transport.(*http.Transport).TLSClientConfig.ServerName; got != tc.want {
			t.Errorf("server_name %q: TLS server name %q, want %q", tc.set, got, tc.want)
		}
		c.Close()
	}
}

func TestValidateNamesTheKeyAndNeverTheToken(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("s3cr3t-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("s3cr3t-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // "" means valid
	}{
		{"off", Config{Scheme: "gopher"}, ""},
		{"token file", Config{Address: "a:1", TokenFile: token}, ""},
		{"empty token file", Config{Address: "a:1", TokenFile: empty}, "c.token_file: " + empty + " is empty"},
		{"CA not PEM", Config{Address: "a:1", CAFile: notPEM}, "c.ca_file: " + notPEM + " holds no PEM certificate"},
		{"key without cert", Config{Address: "a:1", KeyFile: token}, "c.cert_file: cert_file and key_file go together"},
		{"bad scheme", Config{Address: "a:1", Scheme: "tcp"}, `c.scheme: "tcp"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p config.Problems
			tc.cfg.Validate("c", &p)
			err := p.Err()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Fatalf("the file's content is in the error: %v", err)
			}
		})
	}
}
