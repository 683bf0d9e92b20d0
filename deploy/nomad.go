package deploy

import (
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"
)

// Nomad is one tier's job in a Nomad job file: job "ferry-<tier>" with one
// group and a task "ferry-<tier>".
type Nomad struct {
	File  string
	Tier  string
	Job   *Block
	Group *Block
	Task  *Block
}

// LoadNomad reads a tier's Nomad job file.
func LoadNomad(name, tier string) (*Nomad, error) {
	src, err := files.ReadFile(name)
	if err != nil {
		return nil, err
	}
	return parseNomad(name, string(src), tier)
}

func parseNomad(name, src, tier string) (*Nomad, error) {
	root, err := ParseHCL(src)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	n := &Nomad{File: name, Tier: tier}
	if n.Job, err = root.Child("job", "ferry-"+tier); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if n.Group, err = n.Job.Child("group", ""); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if n.Task, err = n.Group.Child("task", "ferry-"+tier); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return n, nil
}

// taskPath maps a path inside a docker task (/local/x, /secrets/x) to the
// template destination that writes it (local/x, secrets/x).
func taskPath(p string) string { return strings.TrimPrefix(path.Clean(p), "/") }

// template returns the task's template block writing dest.
func (n *Nomad) template(dest string) (*Block, error) {
	for _, t := range n.Task.Children("template") {
		if d, err := t.String("destination"); err == nil && d == dest {
			return t, nil
		}
	}
	return nil, fmt.Errorf("%s: no template writes %s", n.File, dest)
}

// interpolation matches what Nomad (${...}) or its templates ({{ }}, and
// HCL's %{ } directives) would replace.
var interpolation = regexp.MustCompile(`\$\{|%\{|\{\{`)

// Config returns the text of the template writing the file --config
// names: the heredoc as written. The job files keep it plain YAML, with
// per-allocation values in the env block, so the text is exactly what
// the service reads; a ${...}, %{ } or {{ }} in it is an error here.
func (n *Nomad) Config() (string, error) {
	cfg, err := n.Task.Child("config", "")
	if err != nil {
		return "", err
	}
	args, err := cfg.Strings("args")
	if err != nil {
		return "", err
	}
	file, err := configArg(args)
	if err != nil {
		return "", err
	}
	t, err := n.template(taskPath(file))
	if err != nil {
		return "", fmt.Errorf("--config %s: %w", file, err)
	}
	if a := t.Attrs["data"]; !a.Heredoc {
		return "", fmt.Errorf("%s:%d: the configuration template's data must be a heredoc", n.File, t.Line)
	}
	text, err := t.String("data")
	if err != nil {
		return "", err
	}
	if m := interpolation.FindString(text); m != "" {
		return "", fmt.Errorf("%s:%d: the configuration holds %q: Nomad would rewrite it; set per-allocation values in the env block", n.File, t.Line, m)
	}
	return text, nil
}

// nomadSamples stand in for Nomad's runtime interpolations.
var nomadSamples = map[string]string{
	"NOMAD_ALLOC_ID":                 "5f6d2a6e-0c1b-4d9e-9a51-2f0c8b1e7a10",
	"NOMAD_SHORT_ALLOC_ID":           "5f6d2a6e",
	"NOMAD_ALLOC_INDEX":              "0",
	"NOMAD_IP_admin":                 "10.1.2.3",
	"attr.unique.network.ip-address": "10.1.2.3",
	"node.unique.name":               "node-1",
}

var nomadVar = regexp.MustCompile(`\$\{([^}]*)\}`)

// Env returns the task's FERRY_ settings from its env block.
func (n *Nomad) Env(prefix string) ([]string, error) {
	env, err := n.Task.Child("env", "")
	if err != nil {
		return nil, err
	}
	var out []string
	for name := range env.Attrs {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		v, err := env.String(name)
		if err != nil {
			return nil, err
		}
		var unknown []string
		v = nomadVar.ReplaceAllStringFunc(v, func(m string) string {
			key := m[2 : len(m)-1]
			s, ok := nomadSamples[key]
			if !ok {
				unknown = append(unknown, key)
			}
			return s
		})
		if len(unknown) > 0 {
			return nil, fmt.Errorf("%s: no sample for %v", name, unknown)
		}
		out = append(out, name+"="+v)
	}
	return out, nil
}

// port returns a group network port's `to` (the port inside the task).
func (n *Nomad) port(label string) (int, error) {
	netw, err := n.Group.Child("network", "")
	if err != nil {
		return 0, err
	}
	p, err := netw.Child("port", label)
	if err != nil {
		return 0, err
	}
	return p.Int("to")
}

// services returns the service blocks of the group and the task.
func (n *Nomad) services() []*Block {
	return append(n.Group.Children("service"), n.Task.Children("service")...)
}

func (n *Nomad) duration(b *Block, name string) (time.Duration, error) {
	s, err := b.String(name)
	if err != nil {
		return 0, err
	}
	return time.ParseDuration(s)
}

// Check returns every disagreement between the tier's job and its
// configuration.
func (n *Nomad) Check(f Facts) []error {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(n.File+": "+format, args...))
	}
	if d, _ := n.Task.String("driver"); d != "docker" {
		fail("driver %q, want docker", d)
	}
	if cfg, err := n.Task.Child("config", ""); err != nil {
		fail("%v", err)
	} else {
		if img, _ := cfg.String("image"); img != ImageName(f.Tier) {
			fail("image %q, want the placeholder %q", img, ImageName(f.Tier))
		}
		if cfg.Attrs["readonly_rootfs"].Raw != "true" {
			fail("docker readonly_rootfs is not true")
		}
	}
	if u, _ := n.Task.String("user"); u == "" || u == "root" || strings.HasPrefix(u, "0:") || u == "0" {
		fail("task user %q: run as a non-root user", u)
	}

	// Admin port: the health checks.
	if admin, err := listenPort("admin.listen", f.AdminListen); err != nil {
		fail("%v", err)
	} else if p, err := n.port("admin"); err != nil || p != admin {
		fail("network port admin maps to %d (%v), admin.listen says %d", p, err, admin)
	}
	ready := false
	for _, s := range n.services() {
		for _, c := range s.Children("check") {
			typ, _ := c.String("type")
			pth, _ := c.String("path")
			port, _ := c.String("port")
			if typ == "http" && pth == "/readyz" && port == "admin" {
				ready = true
			} else {
				fail("check at line %d: want an http check of /readyz on port admin", c.Line)
			}
		}
	}
	if !ready {
		fail("no service has an http check of /readyz on the admin port")
	}

	// gRPC port: the registered writer service.
	if f.GRPCListen != "" {
		if grpc, err := listenPort("listen", f.GRPCListen); err != nil {
			fail("%v", err)
		} else if p, err := n.port("grpc"); err != nil || p != grpc {
			fail("network port grpc maps to %d (%v), listen says %d", p, err, grpc)
		}
		registered := false
		for _, s := range n.services() {
			if port, _ := s.String("port"); port == "grpc" {
				registered = true
			}
		}
		if !registered {
			fail("no service registers the gRPC port")
		}
		if f.SelfRegisters {
			fail("registration.address is set: Nomad registers the writer already (see the comment at the top of the job)")
		}
	}

	for _, file := range f.TLSFiles {
		if _, err := n.template(taskPath(file)); err != nil {
			fail("tls file %s: %v", file, err)
		}
	}

	for _, file := range f.SecretFiles {
		if !strings.HasPrefix(taskPath(file), "secrets/") {
			fail("secret file %s: want it in the task's secrets/ folder", file)
		}
		if _, err := n.template(taskPath(file)); err != nil {
			fail("secret file %s: %v", file, err)
		}
	}

	need := f.ShutdownTimeout + drainMargin
	if _, ok := n.Task.Attrs["shutdown_delay"]; ok {
		d, err := n.duration(n.Task, "shutdown_delay")
		if err != nil {
			fail("shutdown_delay: %v", err)
		}
		need += d
	}
	if kt, err := n.duration(n.Task, "kill_timeout"); err != nil || kt < need {
		fail("kill_timeout %v (%v) must be at least %v (shutdown_timeout %v, shutdown_delay, %v margin)", kt, err, need, f.ShutdownTimeout, drainMargin)
	}

	for _, b := range []string{"update", "restart"} {
		if len(n.Job.Children(b))+len(n.Group.Children(b)) == 0 {
			fail("no %s block", b)
		}
	}
	if count, err := n.Group.Int("count"); err == nil && count > 1 && !f.Replicable {
		fail("count %d of a configuration that must run alone (a fetcher without lease.address owns every shard)", count)
	}
	return errs
}
