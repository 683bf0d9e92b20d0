package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
)

// Object is one document of a Kubernetes manifest: its header, and the
// whole document for Decode.
type Object struct {
	APIVersion string   `yaml:"apiVersion"`
	Kind       string   `yaml:"kind"`
	Metadata   Metadata `yaml:"metadata"`
	// Line is where the document starts in its file.
	Line int `yaml:"-"`
	node *yaml.Node
}

// Metadata is the part of Kubernetes object metadata Ferry's manifests use.
type Metadata struct {
	Name        string            `yaml:"name"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// Decode decodes the whole document into v (unknown fields ignored).
func (o Object) Decode(v any) error { return o.node.Decode(v) }

// Objects decodes every YAML document of a Kubernetes manifest file.
// Empty documents (comments only) are skipped.
func Objects(name string) ([]Object, error) {
	data, err := files.ReadFile(name)
	if err != nil {
		return nil, err
	}
	return decodeObjects(name, data)
}

func decodeObjects(name string, data []byte) ([]Object, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []Object
	for {
		var n yaml.Node
		if err := dec.Decode(&n); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if len(n.Content) == 0 || (n.Content[0].Kind == yaml.ScalarNode && n.Content[0].Tag == "!!null") {
			continue
		}
		o := Object{Line: n.Content[0].Line, node: &n}
		if err := n.Decode(&o); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, o.Line, err)
		}
		out = append(out, o)
	}
}

// IntOrString is a Kubernetes port reference or quantity: a number or a
// name, kept as written.
type IntOrString string

// UnmarshalYAML keeps any scalar as written.
func (s *IntOrString) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a number or a string", n.Line)
	}
	*s = IntOrString(n.Value)
	return nil
}

// LabelSelector selects pods by labels.
type LabelSelector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

// Deployment is the part of an apps/v1 Deployment Ferry's manifests use.
type Deployment struct {
	Spec struct {
		Replicas *int          `yaml:"replicas"`
		Selector LabelSelector `yaml:"selector"`
		Template struct {
			Metadata Metadata `yaml:"metadata"`
			Spec     PodSpec  `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// PodSpec is the part of a pod spec Ferry's manifests use.
type PodSpec struct {
	TerminationGracePeriodSeconds *int `yaml:"terminationGracePeriodSeconds"`
	SecurityContext               struct {
		RunAsNonRoot *bool `yaml:"runAsNonRoot"`
		RunAsUser    *int  `yaml:"runAsUser"`
	} `yaml:"securityContext"`
	Containers []Container `yaml:"containers"`
	Volumes    []struct {
		Name      string `yaml:"name"`
		ConfigMap *struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
		Secret *struct {
			SecretName string `yaml:"secretName"`
		} `yaml:"secret"`
	} `yaml:"volumes"`
}

// Container is the part of a container spec Ferry's manifests use.
type Container struct {
	Name  string   `yaml:"name"`
	Image string   `yaml:"image"`
	Args  []string `yaml:"args"`
	Env   []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			FieldRef *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	ReadinessProbe *Probe `yaml:"readinessProbe"`
	LivenessProbe  *Probe `yaml:"livenessProbe"`
	Lifecycle      struct {
		PreStop *struct {
			Sleep *struct {
				Seconds int `yaml:"seconds"`
			} `yaml:"sleep"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
	Resources struct {
		Requests map[string]IntOrString `yaml:"requests"`
		Limits   map[string]IntOrString `yaml:"limits"`
	} `yaml:"resources"`
	SecurityContext struct {
		RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
	} `yaml:"volumeMounts"`
}

// Probe is an HTTP probe.
type Probe struct {
	HTTPGet *struct {
		Path string      `yaml:"path"`
		Port IntOrString `yaml:"port"`
	} `yaml:"httpGet"`
}

// Service is the part of a v1 Service Ferry's manifests use.
type Service struct {
	Spec struct {
		Selector map[string]string `yaml:"selector"`
		Ports    []struct {
			Name       string      `yaml:"name"`
			Port       int         `yaml:"port"`
			TargetPort IntOrString `yaml:"targetPort"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

// PodDisruptionBudget is the part of a policy/v1 PodDisruptionBudget
// Ferry's manifests use.
type PodDisruptionBudget struct {
	Spec struct {
		Selector       LabelSelector `yaml:"selector"`
		MinAvailable   *IntOrString  `yaml:"minAvailable"`
		MaxUnavailable *IntOrString  `yaml:"maxUnavailable"`
	} `yaml:"spec"`
}

// Kubernetes is one tier's objects in a Kubernetes manifest file: one
// Deployment whose container is named ferry-<tier>, the ConfigMaps,
// Services and PodDisruptionBudgets next to it.
type Kubernetes struct {
	File       string
	Tier       string
	Deployment Deployment
	Container  Container
	ConfigMaps map[string]map[string]string // name → data
	Services   map[string]Service
	PDBs       map[string]PodDisruptionBudget
}

// LoadKubernetes reads a tier's Kubernetes manifest file.
func LoadKubernetes(name, tier string) (*Kubernetes, error) {
	data, err := files.ReadFile(name)
	if err != nil {
		return nil, err
	}
	return parseKubernetes(name, data, tier)
}

func parseKubernetes(name string, data []byte, tier string) (*Kubernetes, error) {
	objs, err := decodeObjects(name, data)
	if err != nil {
		return nil, err
	}
	k := &Kubernetes{File: name, Tier: tier, ConfigMaps: map[string]map[string]string{},
		Services: map[string]Service{}, PDBs: map[string]PodDisruptionBudget{}}
	deployments := 0
	for _, o := range objs {
		var err error
		switch o.Kind {
		case "Deployment":
			deployments++
			err = o.Decode(&k.Deployment)
		case "ConfigMap":
			var cm struct {
				Data map[string]string `yaml:"data"`
			}
			err = o.Decode(&cm)
			k.ConfigMaps[o.Metadata.Name] = cm.Data
		case "Service":
			var s Service
			err = o.Decode(&s)
			k.Services[o.Metadata.Name] = s
		case "PodDisruptionBudget":
			var p PodDisruptionBudget
			err = o.Decode(&p)
			k.PDBs[o.Metadata.Name] = p
		}
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %s %s: %w", name, o.Line, o.Kind, o.Metadata.Name, err)
		}
	}
	if deployments != 1 {
		return nil, fmt.Errorf("%s: want one Deployment, found %d", name, deployments)
	}
	for _, c := range k.Deployment.Spec.Template.Spec.Containers {
		if c.Name == "ferry-"+tier {
			k.Container = c
			return k, nil
		}
	}
	return nil, fmt.Errorf("%s: the Deployment has no container named ferry-%s", name, tier)
}

// mount returns the volume mounted at dir in the Ferry container.
func (k *Kubernetes) mount(dir string) (volume string, subPath string, ok bool) {
	for _, m := range k.Container.VolumeMounts {
		if path.Clean(m.MountPath) == path.Clean(dir) {
			return m.Name, m.SubPath, true
		}
	}
	return "", "", false
}

// configMapAt returns the ConfigMap name of the volume mounted at dir.
func (k *Kubernetes) configMapAt(dir string) (string, error) {
	vol, _, ok := k.mount(dir)
	if !ok {
		return "", fmt.Errorf("nothing is mounted at %s", dir)
	}
	for _, v := range k.Deployment.Spec.Template.Spec.Volumes {
		if v.Name == vol && v.ConfigMap != nil {
			return v.ConfigMap.Name, nil
		}
	}
	return "", fmt.Errorf("volume %s at %s is not a ConfigMap", vol, dir)
}

// SecretAt returns the Secret name of the volume mounted at dir.
func (k *Kubernetes) SecretAt(dir string) (string, error) {
	vol, subPath, ok := k.mount(dir)
	if !ok {
		return "", fmt.Errorf("nothing is mounted at %s", dir)
	}
	if subPath != "" {
		// The kubelet never updates subPath mounts: renewed certificates
		// would not reach Ferry.
		return "", fmt.Errorf("volume %s at %s uses subPath, so renewals never reach the files", vol, dir)
	}
	for _, v := range k.Deployment.Spec.Template.Spec.Volumes {
		if v.Name == vol && v.Secret != nil {
			return v.Secret.SecretName, nil
		}
	}
	return "", fmt.Errorf("volume %s at %s is not a Secret", vol, dir)
}

// Config returns the configuration file --config names, from the
// ConfigMap mounted at its folder.
func (k *Kubernetes) Config() (string, error) {
	file, err := configArg(k.Container.Args)
	if err != nil {
		return "", err
	}
	cm, err := k.configMapAt(path.Dir(file))
	if err != nil {
		return "", fmt.Errorf("--config %s: %w", file, err)
	}
	data, ok := k.ConfigMaps[cm]
	if !ok {
		return "", fmt.Errorf("--config %s: no ConfigMap %s in %s", file, cm, k.File)
	}
	text, ok := data[path.Base(file)]
	if !ok {
		return "", fmt.Errorf("--config %s: ConfigMap %s has no key %s", file, cm, path.Base(file))
	}
	return text, nil
}

// podFieldSamples stand in for the downward API's values.
var podFieldSamples = map[string]string{
	"metadata.name":      "ferry-pod-7c9d8b6f5-x2x4q",
	"metadata.namespace": "ferry",
	"status.podIP":       "10.1.2.3",
	"spec.nodeName":      "node-1",
}

// Env returns the container's FERRY_ settings with downward-API samples.
func (k *Kubernetes) Env(prefix string) ([]string, error) {
	var out []string
	for _, e := range k.Container.Env {
		if len(e.Name) < len(prefix) || e.Name[:len(prefix)] != prefix {
			continue
		}
		v := e.Value
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			s, ok := podFieldSamples[e.ValueFrom.FieldRef.FieldPath]
			if !ok {
				return nil, fmt.Errorf("%s: no sample for field %s", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			v = s
		case e.ValueFrom != nil:
			return nil, fmt.Errorf("%s: only value and fieldRef are understood for settings", e.Name)
		}
		out = append(out, e.Name+"="+v)
	}
	return out, nil
}

// port resolves a probe's or Service's port (number or container port name).
func (k *Kubernetes) port(ref IntOrString) (int, bool) {
	if n, err := strconv.Atoi(string(ref)); err == nil {
		return n, true
	}
	for _, p := range k.Container.Ports {
		if p.Name == string(ref) {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

func (k *Kubernetes) namedPort(name string) (int, bool) {
	for _, p := range k.Container.Ports {
		if p.Name == name {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

// selects reports whether every label of sel is on the pods.
func (k *Kubernetes) selects(sel map[string]string) bool {
	labels := k.Deployment.Spec.Template.Metadata.Labels
	for key, v := range sel {
		if labels[key] != v {
			return false
		}
	}
	return len(sel) > 0
}

var quantity = regexp.MustCompile(`^([0-9]+)(Ki|Mi|Gi)?$`)

// mebibytes reads a memory quantity in Ki, Mi, Gi or bytes.
func mebibytes(q IntOrString) (float64, error) {
	m := quantity.FindStringSubmatch(string(q))
	if m == nil {
		return 0, fmt.Errorf("memory %q: want a number with Ki, Mi or Gi", q)
	}
	n, _ := strconv.ParseFloat(m[1], 64)
	switch m[2] {
	case "":
		return n / (1 << 20), nil
	case "Ki":
		return n / 1024, nil
	case "Gi":
		return n * 1024, nil
	}
	return n, nil
}

// MaxMemoryMiB is the memory limit each tier must stay within.
const MaxMemoryMiB = 512

// Check returns every disagreement between the tier's Kubernetes objects
// and its configuration.
func (k *Kubernetes) Check(f Facts) []error {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(k.File+": "+format, args...))
	}
	c, pod := k.Container, k.Deployment.Spec.Template.Spec
	if c.Image != ImageName(f.Tier) {
		fail("image %q, want the placeholder %q", c.Image, ImageName(f.Tier))
	}
	if !k.selects(k.Deployment.Spec.Selector.MatchLabels) {
		fail("the Deployment's selector does not match its pod labels")
	}

	// Admin port: probes and Prometheus.
	if admin, err := listenPort("admin.listen", f.AdminListen); err != nil {
		fail("%v", err)
	} else {
		if p, ok := k.namedPort("admin"); !ok || p != admin {
			fail("container port admin is %d, admin.listen says %d", p, admin)
		}
		for _, pr := range []struct {
			name  string
			probe *Probe
			path  string
		}{{"readinessProbe", c.ReadinessProbe, "/readyz"}, {"livenessProbe", c.LivenessProbe, "/healthz"}} {
			if pr.probe == nil || pr.probe.HTTPGet == nil {
				fail("%s: want an httpGet of %s", pr.name, pr.path)
				continue
			}
			if pr.probe.HTTPGet.Path != pr.path {
				fail("%s path %q, want %s", pr.name, pr.probe.HTTPGet.Path, pr.path)
			}
			if p, ok := k.port(pr.probe.HTTPGet.Port); !ok || p != admin {
				fail("%s port %q is not admin.listen's %d", pr.name, pr.probe.HTTPGet.Port, admin)
			}
		}
		ann := k.Deployment.Spec.Template.Metadata.Annotations
		if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/path"] != "/metrics" || ann["prometheus.io/port"] != strconv.Itoa(admin) {
			fail("pod annotations: want prometheus.io/scrape \"true\", path /metrics, port %d; have %v", admin, ann)
		}
	}

	// gRPC port: the writer's Service.
	if f.GRPCListen != "" {
		if grpc, err := listenPort("listen", f.GRPCListen); err != nil {
			fail("%v", err)
		} else {
			if p, ok := k.namedPort("grpc"); !ok || p != grpc {
				fail("container port grpc is %d, listen says %d", p, grpc)
			}
			found := false
			for name, s := range k.Services {
				for _, sp := range s.Spec.Ports {
					if p, ok := k.port(sp.TargetPort); ok && p == grpc && k.selects(s.Spec.Selector) {
						found = true
					} else {
						fail("Service %s port %s targets %q, not the gRPC port %d of the pods", name, sp.Name, sp.TargetPort, grpc)
					}
				}
			}
			if !found {
				fail("no Service selects the pods on the gRPC port %d", grpc)
			}
		}
	}

	if len(k.PDBs) == 0 {
		fail("no PodDisruptionBudget")
	}
	for name, p := range k.PDBs {
		if !k.selects(p.Spec.Selector.MatchLabels) {
			fail("PodDisruptionBudget %s does not select the pods", name)
		}
		if (p.Spec.MinAvailable == nil) == (p.Spec.MaxUnavailable == nil) {
			fail("PodDisruptionBudget %s: set one of minAvailable, maxUnavailable", name)
		}
	}

	// mTLS files come from a mounted Secret, with the keys cert-manager writes.
	for _, file := range f.TLSFiles {
		if _, err := k.SecretAt(path.Dir(file)); err != nil {
			fail("tls file %s: %v", file, err)
		}
		switch path.Base(file) {
		case "tls.crt", "tls.key", "ca.crt":
		default:
			fail("tls file %s: want a Secret key tls.crt, tls.key or ca.crt", file)
		}
	}

	// Credentials come from a mounted Secret too, under any key.
	for _, file := range f.SecretFiles {
		if _, err := k.SecretAt(path.Dir(file)); err != nil {
			fail("secret file %s: %v", file, err)
		}
	}

	// The platform must wait out the drain.
	need := f.ShutdownTimeout + drainMargin
	if ps := c.Lifecycle.PreStop; ps != nil && ps.Sleep != nil {
		need += time.Duration(ps.Sleep.Seconds) * time.Second
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second < need {
		fail("terminationGracePeriodSeconds must be at least %v (shutdown_timeout %v, preStop, %v margin)", need, f.ShutdownTimeout, drainMargin)
	}

	nonRoot := (pod.SecurityContext.RunAsNonRoot != nil && *pod.SecurityContext.RunAsNonRoot) ||
		(c.SecurityContext.RunAsNonRoot != nil && *c.SecurityContext.RunAsNonRoot)
	if !nonRoot {
		fail("runAsNonRoot is not set")
	}
	if p := c.SecurityContext.ReadOnlyRootFilesystem; p == nil || !*p {
		fail("readOnlyRootFilesystem is not set")
	}
	if p := c.SecurityContext.AllowPrivilegeEscalation; p == nil || *p {
		fail("allowPrivilegeEscalation is not false")
	}

	req, lim := c.Resources.Requests["memory"], c.Resources.Limits["memory"]
	rq, err1 := mebibytes(req)
	lm, err2 := mebibytes(lim)
	switch {
	case err1 != nil || err2 != nil:
		fail("memory requests and limits: %v", errors.Join(err1, err2))
	case lm > MaxMemoryMiB || rq > lm:
		fail("memory request %s, limit %s: want request ≤ limit ≤ %dMi", req, lim, MaxMemoryMiB)
	}
	if c.Resources.Requests["cpu"] == "" || c.Resources.Limits["cpu"] == "" {
		fail("cpu requests and limits are not set")
	}

	if r := k.Deployment.Spec.Replicas; r != nil && *r > 1 && !f.Replicable {
		fail("several replicas of a configuration that must run alone (a fetcher without lease.address owns every shard)")
	}
	return errs
}
