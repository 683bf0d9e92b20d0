package deploy

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// KubernetesOverlay is the kustomize overlay that deploys a tier, relative
// to deploy/: the fetchers run in the source region, the writers in the
// target region.
func KubernetesOverlay(tier string) string {
	if tier == "fetcher" {
		return "kubernetes/overlays/source-region"
	}
	return "kubernetes/overlays/target-region"
}

// scheme knows every Kubernetes API type the overlays may render: an object
// of any other kind is an error, so nothing ships that the checks below
// have not read. cert-manager's Certificate is decoded by certificate.go.
var scheme = newScheme()

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme,
		autoscalingv2.AddToScheme, networkingv1.AddToScheme, monitoringv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err) // the registrations are fixed at build time
		}
	}
	return s
}

// strictDecoder refuses unknown and duplicate fields, so a misspelt or
// misplaced key (which the API server would drop, or refuse) fails the
// tests instead of shipping.
var strictDecoder = serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()

// kustomizeFS copies the embedded kubernetes/ tree into an in-memory file
// system, the form kustomize reads; tests add broken overlays to it.
func kustomizeFS() (filesys.FileSystem, error) {
	mem := filesys.MakeFsInMemory()
	err := fs.WalkDir(files, "kubernetes", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := files.ReadFile(name)
		if err != nil {
			return err
		}
		return mem.WriteFile(name, data)
	})
	if err != nil {
		return nil, fmt.Errorf("copy the manifests for kustomize: %w", err)
	}
	return mem, nil
}

// render builds the kustomization in dir with kustomize's own API, as
// `kubectl apply -k` would, and decodes every object strictly into its API
// type (*Certificate for cert-manager's).
func render(fsys filesys.FileSystem, dir string) ([]runtime.Object, error) {
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	var out []runtime.Object
	for _, r := range m.Resources() {
		data, err := r.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", dir, r.CurId(), err)
		}
		obj, err := decodeObject(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", dir, r.CurId(), err)
		}
		out = append(out, obj)
	}
	return out, nil
}

func decodeObject(data []byte) (runtime.Object, error) {
	var tm metav1.TypeMeta // the header only: the rest is decoded strictly below
	if err := json.Unmarshal(data, &tm); err != nil {
		return nil, err
	}
	if tm.APIVersion == certificateAPIVersion && tm.Kind == "Certificate" {
		return decodeCertificate(data)
	}
	obj, _, err := strictDecoder.Decode(data, nil, nil)
	return obj, err
}

// Kubernetes is one tier's objects as its overlay renders them: one
// Deployment whose container is named ferry-<tier>, and what goes with it.
type Kubernetes struct {
	Dir        string
	Tier       string
	Namespaces []*corev1.Namespace
	Deployment *appsv1.Deployment
	Container  *corev1.Container
	ConfigMaps map[string]*corev1.ConfigMap
	Services   []*corev1.Service
	PDBs       []*policyv1.PodDisruptionBudget
	HPAs       []*autoscalingv2.HorizontalPodAutoscaler
	Policies   []*networkingv1.NetworkPolicy
	Monitors   []*monitoringv1.ServiceMonitor
	Certs      []*Certificate
	// namespaced are the objects that live in a namespace.
	namespaced []metav1.Object
}

// LoadKubernetes renders the overlay in dir (KubernetesOverlay) from the
// embedded manifests and sorts out the tier's objects.
func LoadKubernetes(dir, tier string) (*Kubernetes, error) {
	fsys, err := kustomizeFS()
	if err != nil {
		return nil, err
	}
	return loadKubernetesFS(fsys, dir, tier)
}

// loadKubernetesFS is LoadKubernetes over any file system.
func loadKubernetesFS(fsys filesys.FileSystem, dir, tier string) (*Kubernetes, error) {
	objs, err := render(fsys, dir)
	if err != nil {
		return nil, err
	}
	k := &Kubernetes{Dir: dir, Tier: tier, ConfigMaps: map[string]*corev1.ConfigMap{}}
	for _, obj := range objs {
		if err := k.add(obj); err != nil {
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
	}
	if k.Deployment == nil {
		return nil, fmt.Errorf("%s: no Deployment", dir)
	}
	for i, c := range k.Deployment.Spec.Template.Spec.Containers {
		if c.Name == "ferry-"+tier {
			k.Container = &k.Deployment.Spec.Template.Spec.Containers[i]
			return k, nil
		}
	}
	return nil, fmt.Errorf("%s: the Deployment has no container named ferry-%s", dir, tier)
}

// add files one decoded object under its kind.
func (k *Kubernetes) add(obj runtime.Object) error {
	if o, ok := obj.(metav1.Object); ok {
		if _, isNS := obj.(*corev1.Namespace); !isNS {
			k.namespaced = append(k.namespaced, o)
		}
	}
	switch o := obj.(type) {
	case *corev1.Namespace:
		k.Namespaces = append(k.Namespaces, o)
	case *appsv1.Deployment:
		if k.Deployment != nil {
			return fmt.Errorf("Deployments %s and %s: want one per overlay", k.Deployment.Name, o.Name)
		}
		k.Deployment = o
	case *corev1.ConfigMap:
		k.ConfigMaps[o.Name] = o
	case *corev1.Service:
		k.Services = append(k.Services, o)
	case *policyv1.PodDisruptionBudget:
		k.PDBs = append(k.PDBs, o)
	case *autoscalingv2.HorizontalPodAutoscaler:
		k.HPAs = append(k.HPAs, o)
	case *networkingv1.NetworkPolicy:
		k.Policies = append(k.Policies, o)
	case *monitoringv1.ServiceMonitor:
		k.Monitors = append(k.Monitors, o)
	case *Certificate:
		k.Certs = append(k.Certs, o)
	default:
		// Known to the scheme, but no check reads it.
		return fmt.Errorf("%s: a kind the checks do not cover", obj.GetObjectKind().GroupVersionKind())
	}
	return nil
}

// mount returns the volume mounted at dir in the Ferry container.
func (k *Kubernetes) mount(dir string) (*corev1.Volume, corev1.VolumeMount, error) {
	for _, m := range k.Container.VolumeMounts {
		if path.Clean(m.MountPath) != path.Clean(dir) {
			continue
		}
		for i, v := range k.Deployment.Spec.Template.Spec.Volumes {
			if v.Name == m.Name {
				return &k.Deployment.Spec.Template.Spec.Volumes[i], m, nil
			}
		}
		return nil, m, fmt.Errorf("volume %s at %s is not in the pod", m.Name, dir)
	}
	return nil, corev1.VolumeMount{}, fmt.Errorf("nothing is mounted at %s", dir)
}

// configMapAt returns the ConfigMap of the volume mounted at dir.
func (k *Kubernetes) configMapAt(dir string) (string, error) {
	v, _, err := k.mount(dir)
	if err != nil {
		return "", err
	}
	if v.ConfigMap == nil {
		return "", fmt.Errorf("volume %s at %s is not a ConfigMap", v.Name, dir)
	}
	return v.ConfigMap.Name, nil
}

// SecretAt returns the Secret name of the volume mounted at dir.
func (k *Kubernetes) SecretAt(dir string) (string, error) {
	v, m, err := k.mount(dir)
	if err != nil {
		return "", err
	}
	if m.SubPath != "" {
		// The kubelet never updates subPath mounts: renewed certificates
		// would not reach Ferry.
		return "", fmt.Errorf("volume %s at %s uses subPath, so renewals never reach the files", v.Name, dir)
	}
	if v.Secret == nil {
		return "", fmt.Errorf("volume %s at %s is not a Secret", v.Name, dir)
	}
	return v.Secret.SecretName, nil
}

// Config returns the configuration file --config names, from the
// ConfigMap mounted at its folder.
func (k *Kubernetes) Config() (string, error) {
	file, err := configArg(k.Container.Args)
	if err != nil {
		return "", err
	}
	name, err := k.configMapAt(path.Dir(file))
	if err != nil {
		return "", fmt.Errorf("--config %s: %w", file, err)
	}
	cm, ok := k.ConfigMaps[name]
	if !ok {
		return "", fmt.Errorf("--config %s: no ConfigMap %s in %s", file, name, k.Dir)
	}
	text, ok := cm.Data[path.Base(file)]
	if !ok {
		return "", fmt.Errorf("--config %s: ConfigMap %s has no key %s", file, name, path.Base(file))
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

// Env returns the container's settings named with prefix, with
// downward-API samples.
func (k *Kubernetes) Env(prefix string) ([]string, error) {
	var out []string
	for _, e := range k.Container.Env {
		if !strings.HasPrefix(e.Name, prefix) {
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

// podLabels are the labels of the Deployment's pods.
func (k *Kubernetes) podLabels() map[string]string {
	return k.Deployment.Spec.Template.Labels
}

// selects reports whether the label selector picks the pods: an empty
// selector does not count (it would pick every pod of the namespace).
func (k *Kubernetes) selects(sel *metav1.LabelSelector) bool {
	return selectsLabels(sel, k.podLabels())
}

// Check returns every disagreement between the tier's Kubernetes objects
// and its configuration.
func (k *Kubernetes) Check(f Facts) []error {
	c := &check{k: k, f: f}
	c.namespace()
	c.container()
	ports := c.ports()
	c.services(ports)
	c.monitors(ports)
	c.policies(ports)
	c.disruptionBudgets()
	c.autoscalers()
	c.secrets()
	c.certificates()
	c.drain()
	c.security()
	c.resources()
	return c.errs
}

// LagMetric is the metric the fetchers' autoscaler follows
// (docs/metrics.md): the source's high watermark minus the committed
// offset, per partition.
const LagMetric = "ferry_lag_records"
