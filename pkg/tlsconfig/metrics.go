package tlsconfig

import "github.com/prometheus/client_golang/prometheus"

// RegisterMetrics exports the state of the link's TLS material on reg, so
// an alert fires before a certificate expires or while rotated files fail
// to load (the process keeps serving the old certificate then, and only
// the log says so).
func (s *Source) RegisterMetrics(reg prometheus.Registerer) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ferry_tls_certificate_expiry_timestamp_seconds",
			Help: "When the gRPC link's certificate in use expires (its NotAfter), in Unix seconds.",
		}, func() float64 { return float64(s.cur.Load().cert.Leaf.NotAfter.Unix()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ferry_tls_reload_errors_total",
			Help: "Reloads of the gRPC link's certificate, key or CA files that failed (the previous material stays in use).",
		}, func() float64 { return float64(s.reloadErrors.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ferry_tls_reload_failing",
			Help: "1 while the latest reload of the gRPC link's TLS files failed, 0 once one succeeds.",
		}, func() float64 {
			if s.Status().LastReloadError != "" {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ferry_tls_peer_denials_total",
			Help: "Peers refused on the gRPC link (untrusted chain, identity not allowed).",
		}, func() float64 { return float64(s.denials.total.Load()) }),
	)
}
