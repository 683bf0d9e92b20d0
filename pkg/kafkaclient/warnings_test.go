package kafkaclient

import (
	"strings"
	"testing"
)

// insecure_skip_verify is refused for nothing (a test cluster may need it),
// but against a broker off this machine it gives the path to anyone on it:
// the service warns at start, naming the key and the broker.
func TestWarningsForSkippedVerification(t *testing.T) {
	for _, tc := range []struct {
		name    string
		brokers []string
		tls     TLSConfig
		want    string // "" means no warning
	}{
		{"verified", []string{"kafka-east:9093"}, TLSConfig{Enabled: true}, ""},
		{"skipped on loopback", []string{"127.0.0.1:9093", "localhost:9094"}, TLSConfig{Enabled: true, InsecureSkipVerify: true}, ""},
		{"skipped for a remote broker", []string{"127.0.0.1:9093", "kafka-east:9093"}, TLSConfig{Enabled: true, InsecureSkipVerify: true},
			"source.tls.insecure_skip_verify is set for broker kafka-east:9093, which is not on loopback"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults("x")
			c.BootstrapServers, c.TLS = tc.brokers, tc.tls
			got := strings.Join(c.Warnings("source"), "\n")
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Fatalf("warnings %q, want %q", got, tc.want)
			}
		})
	}
}
