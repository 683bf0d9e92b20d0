package tlsconfig

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The certificate's expiry is a metric, and so is a reload that fails
// (the old certificate stays in use, so nothing else shows it), and its
// recovery; a rotation moves the expiry.
func TestMetricsShowExpiryAndFailedReloads(t *testing.T) {
	p := newPair(t)
	reg := prometheus.NewRegistry()
	p.wsrc.RegisterMetrics(reg)
	gauge := func(name string) float64 {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() == name {
				m := f.GetMetric()[0]
				if m.GetGauge() != nil {
					return m.GetGauge().GetValue()
				}
				return m.GetCounter().GetValue()
			}
		}
		t.Fatalf("no metric %s", name)
		return 0
	}
	if got, want := gauge("ferry_tls_certificate_expiry_timestamp_seconds"), float64(p.wsrc.Status().NotAfter.Unix()); got != want {
		t.Errorf("expiry %v, want %v", got, want)
	}
	if gauge("ferry_tls_reload_errors_total") != 0 || gauge("ferry_tls_reload_failing") != 0 {
		t.Error("reload errors before any reload")
	}

	p.writer.write(p.writer.cfg.CertFile, []byte("not a certificate"))
	if err := p.wsrc.Reload(); err == nil {
		t.Fatal("reload of a broken file succeeded")
	}
	if gauge("ferry_tls_reload_errors_total") != 1 || gauge("ferry_tls_reload_failing") != 1 {
		t.Errorf("after a failed reload: errors %v, failing %v; want 1, 1", gauge("ferry_tls_reload_errors_total"), gauge("ferry_tls_reload_failing"))
	}

	later := issue(t, p.ca, writerID, time.Now().Add(-time.Minute), time.Now().Add(3*time.Hour))
	p.writer.writeLeaf(later)
	if err := p.wsrc.Reload(); err != nil {
		t.Fatal(err)
	}
	if got, want := gauge("ferry_tls_certificate_expiry_timestamp_seconds"), float64(later.Cert.NotAfter.Unix()); got != want {
		t.Errorf("expiry after rotation %v, want %v", got, want)
	}
	if gauge("ferry_tls_reload_failing") != 0 || gauge("ferry_tls_reload_errors_total") != 1 {
		t.Error("a successful reload did not clear failing, or changed the error count")
	}
	if gauge("ferry_tls_peer_denials_total") != 0 {
		t.Error("denials counted without a refused peer")
	}
}
