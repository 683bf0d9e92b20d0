package deploy

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

func TestNomadJobsParse(t *testing.T) {
	names, err := Files("nomad")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 2 {
		t.Fatalf("nomad/ holds %v: want a job per tier", names)
	}
	for _, tier := range []string{"fetcher", "writer"} {
		if _, err := LoadNomad("nomad/ferry-"+tier+".nomad.hcl", tier); err != nil {
			t.Error(err)
		}
	}
}

// nomadMutation breaks a job file in one way: old replaced by new, or
// edit applied, and facts changed.
type nomadMutation struct {
	old, new string
	edit     func(t *testing.T, src string) string
	facts    func(*Facts)
	want     string // "": no error
}

// TestNomadCheckFindsBrokenJobs breaks each job in one way at a time and
// wants the loader or Check to say so, so the services' tests cannot pass
// on a check that never fails.
func TestNomadCheckFindsBrokenJobs(t *testing.T) {
	shards := func(n int) func(*Facts) { return func(f *Facts) { f.Shards = n } }
	tests := map[string][]nomadMutation{
		"fetcher": {
			{},
			{old: `path     = "/readyz"`, new: `path     = "/healthz"`, want: "http check of /readyz"},
			{old: "to = 7402", new: "to = 7403", want: "network port admin"},
			{old: `kill_timeout = "45s"`, new: `kill_timeout = "25s"`, want: "kill_timeout"},
			{old: `destination   = "secrets/tls.key"`, new: `destination   = "secrets/key.pem"`, want: "tls file /secrets/tls.key"},
			{old: "listen: 0.0.0.0:7402", new: "listen: 0.0.0.0:${NOMAD_ALLOC_INDEX}", want: "Nomad would rewrite it"},
			{old: "listen: 0.0.0.0:7402", new: "listen: 0.0.0.0:%{ if true }7402%{ endif }", want: "Nomad would rewrite it"},
			{old: "listen: 0.0.0.0:7402", new: `listen: 0.0.0.0:{{ env "PORT" }}`, want: "Nomad would rewrite it"},
			{old: `"fetcher-${NOMAD_ALLOC_ID}"`, new: `"fetcher-${NOMAD_ALOC_ID}"`, want: "Unknown variable"},
			{old: `"fetcher-${NOMAD_ALLOC_ID}"`, new: `"fetcher-$${NOMAD_ALOC_ID}"`, want: "no sample for [${NOMAD_ALOC_ID}]"},
			{old: `readonly_rootfs = true`, new: `readonly_rootfs = false`, want: "readonly_rootfs"},
			{old: `cap_drop        = ["all"]`, new: `cap_drop        = ["net_raw"]`, want: "cap_drop"},
			{old: `ports           = ["admin"]`, new: `ports           = []`, want: "docker ports"},
			{old: `user   = "65532:65532"`, new: `user   = "root"`, want: "non-root"},
			{old: `GOMEMLIMIT `, new: `FERRY_WRITER_ID = "x"` + "\n" + `GOMEMLIMIT `, want: "FERRY_WRITER_ID"},
			{facts: func(f *Facts) { f.Replicable = false }, want: "count 3"},
			{facts: func(f *Facts) { f.Replicable = false }, want: "scaling max 16"},
			{facts: shards(8), want: "scaling max 16 is above the 8 shards"},
			{facts: shards(16)},
			{old: "min     = 2", new: "min     = 4", want: "count 3 is outside scaling"},
			{old: "min     = 2", new: "min     = 0", want: "scaling min 0"},
			{old: "max_parallel      = 1", new: "max_parallel      = 2", want: "max_parallel"},
			{old: `health_check      = "checks"`, new: `health_check      = "task_states"`, want: "health_check"},
			{old: "auto_revert       = true", new: "auto_revert       = false", want: "auto_revert"},
			{edit: dropBlock("update {"), want: "Missing update block"},
			{edit: dropBlock("restart {"), want: "Missing restart block"},
			{edit: dropBlock("scaling {"), want: "no scaling block"},
			{edit: dropBlock("spread {"), want: "spread"},
			{old: `attribute = "${node.unique.id}"`, new: `attribute = "${node.datacenter}"`, want: "spread"},
			// The alternative to spread: a hard one-per-host constraint.
			{edit: replaceBlock("spread {", "constraint {\n      operator = \"distinct_hosts\"\n      value    = \"true\"\n    }")},
		},
		"writer": {
			{},
			{old: "to = 7400", new: "to = 7410", want: "network port grpc"},
			{old: `shutdown_delay = "5s"`, new: `shutdown_delay = "30s"`, want: "kill_timeout"},
			{old: `port     = "grpc"`, new: `port     = "admin"`, want: "no service registers the gRPC port"},
			{old: `type     = "http"`, new: `type     = "tcp"`, want: "http check of /readyz"},
			{old: `ports           = ["grpc", "admin"]`, new: `ports           = ["admin"]`, want: "docker ports"},
			{facts: func(f *Facts) { f.SelfRegisters = true }, want: "Nomad registers the writer already"},
			{facts: shards(4), want: "scaling max 16 is above the 4 shards"},
		},
	}
	for tier, ms := range tests {
		name := "nomad/ferry-" + tier + ".nomad.hcl"
		src, err := Read(name)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range ms {
			t.Run(fmt.Sprintf("%s/%d/%s", tier, i, m.want), func(t *testing.T) {
				broken := src
				if m.edit != nil {
					broken = m.edit(t, src)
				} else if m.old != "" {
					if !strings.Contains(src, m.old) {
						t.Fatalf("%s no longer holds %q: update the test", name, m.old)
					}
					broken = strings.Replace(src, m.old, m.new, 1)
				}
				f := factsFor(tier, "/secrets")
				if m.facts != nil {
					m.facts(&f)
				}
				expect(t, checkNomad(name, broken, tier, f), m.want)
			})
		}
	}
}

// TestNomadUnknownNamesFail misspells an attribute or a block in each
// job and wants the error to name the file and the line, as a typo in a
// job Nomad would refuse (or, for some, silently ignore) must not pass.
func TestNomadUnknownNamesFail(t *testing.T) {
	for _, tc := range []struct{ tier, old, new, want string }{
		{"fetcher", "readonly_rootfs = true", "readonly_rootfz = true", `Unsupported argument; An argument named "readonly_rootfz"`},
		{"fetcher", "restart {", "restrat {", `Unsupported block type; Blocks of type "restrat"`},
		{"fetcher", "kill_timeout =", "kil_timeout =", `Unsupported argument; An argument named "kil_timeout"`},
		{"writer", "max_parallel ", "max_paralel ", `Unsupported argument; An argument named "max_paralel"`},
		{"writer", "spread {", "sprad {", `Unsupported block type; Blocks of type "sprad"`},
		{"writer", `data          = "{{`, `dta           = "{{`, `Unsupported argument; An argument named "dta"`},
	} {
		t.Run(tc.tier+"/"+tc.new, func(t *testing.T) {
			name := "nomad/ferry-" + tc.tier + ".nomad.hcl"
			src, err := Read(name)
			if err != nil {
				t.Fatal(err)
			}
			at := strings.Index(src, tc.old)
			if at < 0 {
				t.Fatalf("%s no longer holds %q: update the test", name, tc.old)
			}
			line := strings.Count(src[:at], "\n") + 1
			_, err = parseNomad(name, strings.Replace(src, tc.old, tc.new, 1), tc.tier)
			want := regexp.MustCompile(fmt.Sprintf(`%s:%d,\d+-\d+: %s`, regexp.QuoteMeta(name), line, regexp.QuoteMeta(tc.want)))
			if err == nil || !want.MatchString(err.Error()) {
				t.Fatalf("error %v, want one matching %s", err, want)
			}
		})
	}
}

// dropBlock removes the block whose opening line holds header, through
// its closing brace (the first line indented as the opening one).
func dropBlock(header string) func(*testing.T, string) string {
	return replaceBlock(header, "")
}

// replaceBlock replaces the block dropBlock would remove with text.
func replaceBlock(header, text string) func(*testing.T, string) string {
	return func(t *testing.T, src string) string {
		t.Helper()
		lines := strings.Split(src, "\n")
		for i, l := range lines {
			if !strings.Contains(l, header) {
				continue
			}
			indent := l[:len(l)-len(strings.TrimLeft(l, " "))]
			for j := i + 1; j < len(lines); j++ {
				if lines[j] == indent+"}" {
					var repl []string
					if text != "" {
						repl = []string{indent + text}
					}
					out := append(append(append([]string{}, lines[:i]...), repl...), lines[j+1:]...)
					return strings.Join(out, "\n")
				}
			}
		}
		t.Fatalf("no block %q ending at its own indentation: update the test", header)
		return ""
	}
}

func checkNomad(name, src, tier string, f Facts) []error {
	n, err := parseNomad(name, src, tier)
	if err != nil {
		return []error{err}
	}
	if _, err := n.Config(); err != nil {
		return []error{err}
	}
	if _, err := n.Env("FERRY_" + strings.ToUpper(tier) + "_"); err != nil {
		return []error{err}
	}
	return n.Check(f)
}

// TestNomadVaultAlternative rewrites each job the way docs/deploy.md
// ("Certificates from Vault") and the comment in the job say, and wants it
// to decode and pass Check: the documented alternative stays inside the
// schema.
func TestNomadVaultAlternative(t *testing.T) {
	for _, tier := range []string{"fetcher", "writer"} {
		t.Run(tier, func(t *testing.T) {
			name := "nomad/ferry-" + tier + ".nomad.hcl"
			src, err := Read(name)
			if err != nil {
				t.Fatal(err)
			}
			issue := `{{ with secret \"pki/issue/ferry-` + tier + `\" \"common_name=ferry-` + tier +
				`\" \"uri_sans=spiffe://prod.example/ferry/` + tier + `\" }}`
			vault := src
			for old, field := range map[string]string{"tls_crt": "certificate", "tls_key": "private_key", "ca_crt": "issuing_ca"} {
				from := `{{ with nomadVar \"nomad/jobs/ferry-` + tier + `\" }}{{ .` + old + ` }}{{ end }}`
				if !strings.Contains(vault, from) {
					t.Fatalf("%s no longer holds %s: update the test", name, from)
				}
				vault = strings.Replace(vault, from, issue+`{{ .Data.`+field+` }}{{ end }}`, 1)
			}
			vault = strings.Replace(vault, `kill_signal  = "SIGTERM"`, `kill_signal  = "SIGTERM"`+"\n"+`vault { role = "ferry-`+tier+`" }`, 1)
			expect(t, checkNomad(name, vault, tier, factsFor(tier, "/secrets")), "")
			n, err := parseNomad(name, vault, tier)
			if err != nil {
				t.Fatal(err)
			}
			if v := n.job.Group.Task.Vault; v == nil || v.Role != "ferry-"+tier {
				t.Errorf("vault block %+v, want role ferry-%s", v, tier)
			}
		})
	}
}
