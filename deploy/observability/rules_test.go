package observability

import (
	"os/exec"
	"testing"

	"github.com/ferry-replicator/ferry/loadtest/toolbin"
)

// promtool is Prometheus's rule checker: $FERRY_PROMTOOL, else what
// tools/promtool/build.sh provides (Debian's prometheus package unpacked
// into the Ferry cache; `make promtool`). The test fails without it: make
// test provides it, and rules nobody checked would ship.
func promtool(t *testing.T) string {
	t.Helper()
	bin, err := toolbin.Path("promtool", "FERRY_PROMTOOL")
	if err != nil {
		t.Fatalf("promtool: %v (make promtool provides it)", err)
	}
	return bin
}

// The rules load in Prometheus (promtool check rules: syntax, PromQL,
// templates), and each alert fires on the series of ferry-rules_test.yaml
// meant to fire it and on no other.
func TestRulesPassPromtool(t *testing.T) {
	bin := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", "ferry-rules.yaml"},
		{"test", "rules", "ferry-rules_test.yaml"},
	} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
