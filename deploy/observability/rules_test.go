package observability

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"go.yaml.in/yaml/v3"

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

// Every alert tells the one paged what happened and where to read what to
// do: a summary, a description, and a runbook_url whose anchor is a
// heading of docs/operations.md (as GitHub makes anchors: lower case,
// spaces to dashes, punctuation dropped).
func TestAlertsHaveRunbooks(t *testing.T) {
	b, err := os.ReadFile("ferry-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	ops, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(string(ops), -1) {
		anchors[githubAnchor(m[1])] = true
	}
	const prefix = "https://github.com/ferry-replicator/ferry/blob/main/docs/operations.md#"
	alerts := 0
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			for _, key := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[key] == "" {
					t.Errorf("%s: no %s annotation", r.Alert, key)
				}
			}
			anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], prefix)
			if !ok || !anchors[anchor] {
				t.Errorf("%s: runbook_url %q is not a heading of docs/operations.md", r.Alert, r.Annotations["runbook_url"])
			}
		}
	}
	if alerts < 12 {
		t.Fatalf("%d alerts in ferry-rules.yaml, want at least 12", alerts)
	}
}

// githubAnchor is the anchor GitHub gives a Markdown heading.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
