package devcerts

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWriteDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	files, err := WriteDir(dir, Options{Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 8 {
		t.Fatalf("wrote %v", files)
	}
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		want := os.FileMode(0o644)
		if strings.HasSuffix(f, "-key.pem") {
			want = 0o600
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s mode %v, want %v", f, fi.Mode().Perm(), want)
		}
	}

	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.pem holds no certificate")
	}
	for _, tier := range []string{"fetcher", "writer", "ferryctl"} {
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, tier+".pem"), filepath.Join(dir, tier+"-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		leaf := pair.Leaf
		if len(leaf.URIs) != 1 || leaf.URIs[0].String() != "spiffe://ferry.local/ferry/"+tier {
			t.Errorf("%s URIs %v", tier, leaf.URIs)
		}
		if len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "localhost" || len(leaf.IPAddresses) != 2 || !leaf.IPAddresses[0].IsLoopback() {
			t.Errorf("%s names %v %v", tier, leaf.DNSNames, leaf.IPAddresses)
		}
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{usage}, DNSName: "localhost"}); err != nil {
				t.Errorf("%s does not verify: %v", tier, err)
			}
		}
		if d := time.Until(leaf.NotAfter); d > time.Hour || d < 50*time.Minute {
			t.Errorf("%s expires in %v, want about 1h", tier, d)
		}
	}

	if _, err := WriteDir(dir, Options{Validity: time.Hour}); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("second write without overwrite: %v", err)
	}
	if _, err := WriteDir(dir, Options{Validity: time.Hour, Overwrite: true, TrustDomain: "example.org"}); err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "writer.pem"), filepath.Join(dir, "writer-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if got := pair.Leaf.URIs[0].String(); got != "spiffe://example.org/ferry/writer" {
		t.Errorf("after overwrite: %s", got)
	}
	if _, err := WriteDir(dir, Options{}); err == nil {
		t.Error("zero validity accepted")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}
