package deploy

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/zclconf/go-cty/cty"
)

// Nomad job files are read with HashiCorp's HCL library and decoded
// strictly into the structs below: a schema of the stanzas Ferry's jobs
// use, not of all Nomad accepts (Nomad's own job parser is not open source
// since 1.7). An attribute or block the schema does not know is an error
// naming the file and line, so a misspelt setting, which Nomad would
// refuse or ignore, fails the tests. A job that needs a stanza outside the
// schema adds it here, with a check if it matters.

// nomadFile is a job file: one job.
type nomadFile struct {
	Job nomadJob `hcl:"job,block"`
}

type nomadJob struct {
	Name        string      `hcl:"name,label"`
	Datacenters []string    `hcl:"datacenters"`
	Type        string      `hcl:"type"`
	Update      nomadUpdate `hcl:"update,block"`
	Group       nomadGroup  `hcl:"group,block"`
}

// nomadUpdate is the rolling deploy.
type nomadUpdate struct {
	MaxParallel      int    `hcl:"max_parallel"`
	HealthCheck      string `hcl:"health_check"`
	MinHealthyTime   string `hcl:"min_healthy_time,optional"`
	HealthyDeadline  string `hcl:"healthy_deadline,optional"`
	ProgressDeadline string `hcl:"progress_deadline,optional"`
	AutoRevert       bool   `hcl:"auto_revert"`
}

type nomadGroup struct {
	Name        string            `hcl:"name,label"`
	Count       int               `hcl:"count"`
	Scaling     *nomadScaling     `hcl:"scaling,block"`
	Spreads     []nomadSpread     `hcl:"spread,block"`
	Constraints []nomadConstraint `hcl:"constraint,block"`
	Network     nomadNetwork      `hcl:"network,block"`
	Restart     nomadRestart      `hcl:"restart,block"`
	Services    []nomadService    `hcl:"service,block"`
	Task        nomadTask         `hcl:"task,block"`
}

// nomadScaling bounds `nomad job scale` and the Nomad Autoscaler.
type nomadScaling struct {
	Enabled bool `hcl:"enabled,optional"`
	Min     int  `hcl:"min"`
	Max     int  `hcl:"max"`
}

type nomadSpread struct {
	Attribute string `hcl:"attribute"`
	Weight    *int   `hcl:"weight,optional"`
}

type nomadConstraint struct {
	Attribute string `hcl:"attribute,optional"`
	Operator  string `hcl:"operator,optional"`
	Value     string `hcl:"value,optional"`
}

type nomadNetwork struct {
	Ports []nomadPort `hcl:"port,block"`
}

type nomadPort struct {
	Label string `hcl:"label,label"`
	To    int    `hcl:"to"`
}

type nomadRestart struct {
	Attempts int    `hcl:"attempts"`
	Interval string `hcl:"interval"`
	Delay    string `hcl:"delay"`
	Mode     string `hcl:"mode"`
}

// nomadService is a Consul registration.
type nomadService struct {
	Name     string       `hcl:"name"`
	Port     string       `hcl:"port"`
	Provider string       `hcl:"provider"`
	Checks   []nomadCheck `hcl:"check,block"`
}

type nomadCheck struct {
	Name     string    `hcl:"name"`
	Type     string    `hcl:"type"`
	Port     string    `hcl:"port"`
	Path     string    `hcl:"path,optional"`
	Interval string    `hcl:"interval"`
	Timeout  string    `hcl:"timeout"`
	Def      hcl.Range `hcl:",def_range"`
}

type nomadTask struct {
	Name          string          `hcl:"name,label"`
	Driver        string          `hcl:"driver"`
	User          string          `hcl:"user"`
	Config        nomadDocker     `hcl:"config,block"`
	KillTimeout   string          `hcl:"kill_timeout"`
	KillSignal    string          `hcl:"kill_signal,optional"`
	ShutdownDelay string          `hcl:"shutdown_delay,optional"`
	Env           nomadEnv        `hcl:"env,block"`
	Resources     nomadResources  `hcl:"resources,block"`
	Templates     []nomadTemplate `hcl:"template,block"`
	Vault         *nomadVault     `hcl:"vault,block"`
}

// nomadDocker is the docker driver's config.
type nomadDocker struct {
	Image          string   `hcl:"image"`
	Args           []string `hcl:"args"`
	Ports          []string `hcl:"ports"`
	ReadonlyRootfs bool     `hcl:"readonly_rootfs"`
	CapDrop        []string `hcl:"cap_drop"`
}

type nomadEnv struct {
	Vars map[string]string `hcl:",remain"`
}

type nomadResources struct {
	CPU       int `hcl:"cpu"`
	Memory    int `hcl:"memory"`
	MemoryMax int `hcl:"memory_max,optional"`
}

type nomadTemplate struct {
	Destination  string `hcl:"destination"`
	ChangeMode   string `hcl:"change_mode"`
	ChangeSignal string `hcl:"change_signal,optional"`
	Perms        string `hcl:"perms,optional"`
	UID          *int   `hcl:"uid,optional"`
	GID          *int   `hcl:"gid,optional"`
	Data         string `hcl:"data"`
	// DataRange is where data's value is written: Config reads the text
	// there, before HCL evaluates it.
	DataRange hcl.Range `hcl:"data,attr_value_range"`
	Def       hcl.Range `hcl:",def_range"`
}

// nomadVault is the Vault alternative to Nomad Variables for the mTLS
// files (docs/deploy.md): the task's workload identity logs in to this
// role and templates read Vault's PKI.
type nomadVault struct {
	Role         string `hcl:"role,optional"`
	ChangeMode   string `hcl:"change_mode,optional"`
	ChangeSignal string `hcl:"change_signal,optional"`
}

// nomadRuntime are the runtime interpolations the jobs may use, each with
// a plausible sample: Nomad fills them in on the client, per allocation.
var nomadRuntime = map[string]string{
	"NOMAD_ALLOC_ID":                 "5f6d2a6e-0c1b-4d9e-9a51-2f0c8b1e7a10",
	"NOMAD_SHORT_ALLOC_ID":           "5f6d2a6e",
	"NOMAD_ALLOC_INDEX":              "0",
	"NOMAD_IP_admin":                 "10.1.2.3",
	"attr.unique.network.ip-address": "10.1.2.3",
	"node.unique.id":                 "0b7c4d1e-5a2f-4c3b-8e6d-9f1a2b3c4d5e",
	"node.unique.name":               "node-1",
	"node.datacenter":                "east",
}

// runtimeContext evaluates each of nomadRuntime to its own ${...} text,
// as Nomad leaves them for the client, so a decoded value holds what
// Nomad would hand the client and an unknown variable is an error.
func runtimeContext() *hcl.EvalContext {
	tree := map[string]any{}
	for name := range nomadRuntime {
		parts := strings.Split(name, ".")
		m := tree
		for _, p := range parts[:len(parts)-1] {
			sub, ok := m[p].(map[string]any)
			if !ok {
				sub = map[string]any{}
				m[p] = sub
			}
			m = sub
		}
		m[parts[len(parts)-1]] = cty.StringVal("${" + name + "}")
	}
	return &hcl.EvalContext{Variables: ctyObject(tree).AsValueMap()}
}

func ctyObject(tree map[string]any) cty.Value {
	attrs := map[string]cty.Value{}
	for k, v := range tree {
		if sub, ok := v.(map[string]any); ok {
			attrs[k] = ctyObject(sub)
		} else {
			attrs[k] = v.(cty.Value)
		}
	}
	return cty.ObjectVal(attrs)
}

// Nomad is one tier's job in a Nomad job file: job "ferry-<tier>" with one
// group and a task "ferry-<tier>".
type Nomad struct {
	File string
	Tier string
	src  []byte
	job  nomadJob
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
	f, diags := hclparse.NewParser().ParseHCL([]byte(src), name)
	if diags.HasErrors() {
		return nil, diagErrors(diags)
	}
	var file nomadFile
	if diags := gohcl.DecodeBody(f.Body, runtimeContext(), &file); diags.HasErrors() {
		return nil, diagErrors(diags)
	}
	n := &Nomad{File: name, Tier: tier, src: f.Bytes, job: file.Job}
	if want := "ferry-" + tier; n.job.Name != want || n.job.Group.Task.Name != want {
		return nil, fmt.Errorf("%s: job %q, task %q: want both named %q", name, n.job.Name, n.job.Group.Task.Name, want)
	}
	return n, nil
}

// diagErrors returns every diagnostic, one a line (hcl.Diagnostics'
// Error shows only the first), each with its file:line,column.
func diagErrors(diags hcl.Diagnostics) error {
	errs := make([]error, len(diags))
	for i, d := range diags {
		errs[i] = d
	}
	return errors.Join(errs...)
}

// taskPath maps a path inside a docker task (/local/x, /secrets/x) to the
// template destination that writes it (local/x, secrets/x).
func taskPath(p string) string { return strings.TrimPrefix(path.Clean(p), "/") }

// template returns the task's template writing dest.
func (n *Nomad) template(dest string) (*nomadTemplate, error) {
	for i, t := range n.job.Group.Task.Templates {
		if t.Destination == dest {
			return &n.job.Group.Task.Templates[i], nil
		}
	}
	return nil, fmt.Errorf("%s: no template writes %s", n.File, dest)
}

// interpolation matches what Nomad (${...}) or its templates ({{ }}, and
// HCL's %{ } directives) would replace.
var interpolation = regexp.MustCompile(`\$\{|%\{|\{\{`)

// Config returns the text of the template writing the file --config
// names. The job files keep it plain YAML, with per-allocation values in
// the env block, so the text is exactly what the service reads: a ${...},
// %{ } or {{ }} in the source is an error here (HCL would have evaluated
// the first two away by now, so the source text is what is checked).
func (n *Nomad) Config() (string, error) {
	file, err := configArg(n.job.Group.Task.Config.Args)
	if err != nil {
		return "", fmt.Errorf("%s: %w", n.File, err)
	}
	t, err := n.template(taskPath(file))
	if err != nil {
		return "", fmt.Errorf("--config %s: %w", file, err)
	}
	if m := interpolation.Find(t.DataRange.SliceBytes(n.src)); m != nil {
		return "", fmt.Errorf("%s: the configuration holds %q: Nomad would rewrite it; set per-allocation values in the env block", t.DataRange, m)
	}
	return t.Data, nil
}

var nomadVar = regexp.MustCompile(`\$\{([^}]*)\}`)

// Env returns the task's settings for this tier (names starting with
// prefix) from its env block, with runtime interpolations replaced by
// samples. A FERRY_ setting of another tier is an error: the other
// binary's name, which this one would never read.
func (n *Nomad) Env(prefix string) ([]string, error) {
	var out []string
	for name, v := range n.job.Group.Task.Env.Vars {
		if !strings.HasPrefix(name, prefix) {
			if strings.HasPrefix(name, "FERRY_") {
				return nil, fmt.Errorf("%s: env %s is not a %s setting", n.File, name, prefix+"*")
			}
			continue
		}
		var unknown []string
		v = nomadVar.ReplaceAllStringFunc(v, func(m string) string {
			// runtimeContext let only nomadRuntime's names through, but an
			// escaped $${...} reaches here as ${...} too.
			s, ok := nomadRuntime[m[2:len(m)-1]]
			if !ok {
				unknown = append(unknown, m)
			}
			return s
		})
		if len(unknown) > 0 {
			return nil, fmt.Errorf("%s: env %s: no sample for %v", n.File, name, unknown)
		}
		out = append(out, name+"="+v)
	}
	slices.Sort(out)
	return out, nil
}

// port returns a group network port's `to` (the port inside the task).
func (n *Nomad) port(label string) (int, error) {
	for _, p := range n.job.Group.Network.Ports {
		if p.Label == label {
			return p.To, nil
		}
	}
	return 0, fmt.Errorf("no network port %q", label)
}

// Check returns every disagreement between the tier's job and its
// configuration.
func (n *Nomad) Check(f Facts) []error {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(n.File+": "+format, args...))
	}
	n.checkTask(f, fail)
	n.checkPorts(f, fail)
	n.checkFiles(f, fail)
	n.checkStop(f, fail)
	n.checkUpdate(fail)
	n.checkScale(f, fail)
	return errs
}

type failFunc func(format string, args ...any)

// checkTask holds the task to the image and to least privilege.
func (n *Nomad) checkTask(f Facts, fail failFunc) {
	task := n.job.Group.Task
	if task.Driver != "docker" {
		fail("driver %q, want docker", task.Driver)
	}
	if task.Config.Image != ImageName(f.Tier) {
		fail("image %q, want the placeholder %q", task.Config.Image, ImageName(f.Tier))
	}
	if !task.Config.ReadonlyRootfs {
		fail("docker readonly_rootfs is not true")
	}
	if !slices.Contains(task.Config.CapDrop, "all") {
		fail("docker cap_drop %q: drop all capabilities (Ferry needs none)", task.Config.CapDrop)
	}
	if u := task.User; u == "" || u == "root" || u == "0" || strings.HasPrefix(u, "0:") {
		fail("task user %q: run as a non-root user", u)
	}
}

// checkPorts holds the network ports, the docker ports and the Consul
// services and checks to the listen addresses.
func (n *Nomad) checkPorts(f Facts, fail failFunc) {
	g := n.job.Group
	for _, p := range g.Network.Ports {
		// The docker driver publishes only the ports its config names.
		if !slices.Contains(g.Task.Config.Ports, p.Label) {
			fail("docker ports %q do not publish network port %q", g.Task.Config.Ports, p.Label)
		}
	}
	if admin, err := listenPort("admin.listen", f.AdminListen); err != nil {
		fail("%v", err)
	} else if p, err := n.port("admin"); err != nil || p != admin {
		fail("network port admin maps to %d (%v), admin.listen says %d", p, err, admin)
	}
	ready := false
	for _, s := range g.Services {
		for _, c := range s.Checks {
			if c.Type == "http" && c.Path == "/readyz" && c.Port == "admin" {
				ready = true
			} else {
				fail("check at %s: want an http check of /readyz on port admin", c.Def)
			}
		}
	}
	if !ready {
		fail("no service has an http check of /readyz on the admin port")
	}
	if f.GRPCListen == "" {
		return
	}
	if grpc, err := listenPort("listen", f.GRPCListen); err != nil {
		fail("%v", err)
	} else if p, err := n.port("grpc"); err != nil || p != grpc {
		fail("network port grpc maps to %d (%v), listen says %d", p, err, grpc)
	}
	if !slices.ContainsFunc(g.Services, func(s nomadService) bool { return s.Port == "grpc" }) {
		fail("no service registers the gRPC port")
	}
	if f.SelfRegisters {
		fail("registration.address is set: Nomad registers the writer already (see the comment at the top of the job)")
	}
}

// checkFiles wants the mTLS and secret files written by templates.
func (n *Nomad) checkFiles(f Facts, fail failFunc) {
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
}

// checkStop wants kill_timeout to cover the drain: Nomad kills the task
// that long after SIGTERM (and after shutdown_delay, which the drain
// cannot use).
func (n *Nomad) checkStop(f Facts, fail failFunc) {
	task := n.job.Group.Task
	need := f.ShutdownTimeout + drainMargin
	if task.ShutdownDelay != "" {
		d, err := time.ParseDuration(task.ShutdownDelay)
		if err != nil {
			fail("shutdown_delay: %v", err)
		}
		need += d
	}
	if kt, err := time.ParseDuration(task.KillTimeout); err != nil || kt < need {
		fail("kill_timeout %v (%v) must be at least %v (shutdown_timeout %v, shutdown_delay, %v margin)", kt, err, need, f.ShutdownTimeout, drainMargin)
	}
}

// checkUpdate wants a rolling deploy one allocation at a time, healthy by
// the Consul checks (/readyz) before the next, reverted if it never is:
// one at a time keeps the other instances serving and moves one
// instance's shards at a time.
func (n *Nomad) checkUpdate(fail failFunc) {
	u := n.job.Update
	if u.MaxParallel != 1 {
		fail("update max_parallel %d, want 1: replace one allocation at a time", u.MaxParallel)
	}
	if u.HealthCheck != "checks" {
		fail("update health_check %q, want \"checks\": healthy means /readyz passes", u.HealthCheck)
	}
	if !u.AutoRevert {
		fail("update auto_revert is false: a version that never turns healthy must roll back")
	}
}

// checkScale holds count and the scaling bounds to what the configuration
// allows, and wants the instances spread over hosts.
func (n *Nomad) checkScale(f Facts, fail failFunc) {
	g := n.job.Group
	if g.Count > 1 && !f.Replicable {
		fail("count %d of a configuration that must run alone (a fetcher without lease.address owns every shard)", g.Count)
	}
	if s := g.Scaling; s == nil {
		fail("no scaling block: `nomad job scale` and the autoscaler need bounds")
	} else {
		if s.Min < 1 || s.Min > s.Max {
			fail("scaling min %d, max %d: want 1 <= min <= max", s.Min, s.Max)
		}
		if g.Count < s.Min || g.Count > s.Max {
			fail("count %d is outside scaling min %d, max %d", g.Count, s.Min, s.Max)
		}
		if s.Max > 1 && !f.Replicable {
			fail("scaling max %d of a configuration that must run alone", s.Max)
		}
		if f.Shards > 0 && s.Max > f.Shards {
			fail("scaling max %d is above the %d shards: instances past them idle", s.Max, f.Shards)
		}
	}
	spread := slices.ContainsFunc(g.Spreads, func(s nomadSpread) bool { return s.Attribute == "${node.unique.id}" })
	distinct := slices.ContainsFunc(g.Constraints, func(c nomadConstraint) bool {
		return c.Operator == "distinct_hosts" && c.Value != "false"
	})
	if !spread && !distinct {
		fail("no spread over \"${node.unique.id}\" nor distinct_hosts constraint: one host's loss could take every instance")
	}
}
