package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-replicator/ferry/pkg/config"
)

func TestWriterConfigErrorsNameTheKey(t *testing.T) {
	base := "target: {bootstrap_servers: [\"127.0.0.1:9092\"]}\ntls: {insecure: true}\n"
	tests := []struct {
		name, yaml, want string
	}{
		{"valid", base + "links: [{name: a}]\n", ""},
		{"prefix policy without prefix", base + "links: [{name: a, naming: prefix}]\n", "links[0].naming"},
		{"unknown link key", base + "links: [{name: a, prefx: x}]\n", "field prefx not found"},
		{"no links", base, "links: required"},
		{"duplicate link", base + "links: [{name: a}, {name: a}]\n", "links[1].name"},
		{"exactly once", base + "links: [{name: a, delivery: exactly_once}]\n", ""},
		{"unknown delivery", base + "links: [{name: a, delivery: at_most_once}]\n", "links[0].delivery"},
		{"bad exclude regex", base + "links: [{name: a, config_exclude: ['(']}]\n", "links[0].config_exclude"},
		{"group below batch", base + "links: [{name: a}]\nmax_group_bytes: 1KiB\n", "max_group_bytes"},
		{"tls required by default", "target: {bootstrap_servers: [k:9092]}\nlinks: [{name: a}]\n", "tls.cert_file: required"},
		{"plaintext on a public listener refused", base + "listen: 0.0.0.0:7400\nlinks: [{name: a}]\n", "tls.insecure"},
		{"bad size", base + "links: [{name: a}]\nmax_batch_bytes: lots\n", "bad size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "w.yaml")
			if err := os.WriteFile(path, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			c := Defaults()
			err := config.Load(&c, path, nil, "FERRY_WRITER_", nil)
			if err == nil {
				err = c.Validate()
			}
			if tt.want == "" {
				if err != nil {
					t.Fatalf("valid config refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
