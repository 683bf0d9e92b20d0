package deploy

import (
	"fmt"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// MaxMemoryMiB is the memory limit each tier must stay within.
const MaxMemoryMiB = 512

// monitoringNamespaceLabel names one namespace in a namespace selector;
// Kubernetes sets it on every namespace.
const monitoringNamespaceLabel = "kubernetes.io/metadata.name"

// check is one run of Kubernetes.Check: every disagreement is collected,
// so one test run names them all.
type check struct {
	k    *Kubernetes
	f    Facts
	errs []error
}

func (c *check) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%s: %s", c.k.Dir, fmt.Sprintf(format, args...)))
}

// tierPorts are the container ports the configuration listens on; 0 when
// the configuration does not say (or says something unusable).
type tierPorts struct{ admin, grpc int }

// namespace wants every object in the one namespace the overlay creates.
func (c *check) namespace() {
	ns := ""
	for _, o := range c.k.namespaced {
		switch {
		case o.GetNamespace() == "":
			c.fail("%s has no namespace: the overlay sets one for every object", o.GetName())
		case ns == "":
			ns = o.GetNamespace()
		case o.GetNamespace() != ns:
			c.fail("%s is in namespace %s, the others in %s", o.GetName(), o.GetNamespace(), ns)
		}
	}
	if ns != "" && !slices.ContainsFunc(c.k.Namespaces, func(n *corev1.Namespace) bool { return n.Name == ns }) {
		c.fail("no Namespace %s: the overlay creates the namespace it deploys into", ns)
	}
}

// container checks the image and how it is started.
func (c *check) container() {
	ctr := c.k.Container
	if ctr.Image != ImageName(c.f.Tier) {
		c.fail("image %q, want the placeholder %q (built by deploy/image; an overlay's images: names your registry)", ctr.Image, ImageName(c.f.Tier))
	}
	if len(ctr.Command) > 0 {
		c.fail("command %q replaces the image's entrypoint, the binary /ferry: pass arguments only", ctr.Command)
	}
	if !c.k.selects(c.k.Deployment.Spec.Selector) {
		c.fail("the Deployment's selector does not match its pod labels")
	}
}

// ports checks the container ports, probes and scrape annotations against
// the listen addresses, and returns the ports for the other checks.
func (c *check) ports() tierPorts {
	var p tierPorts
	if admin, err := listenPort("admin.listen", c.f.AdminListen); err != nil {
		c.fail("%v", err)
	} else {
		p.admin = admin
		if n, ok := c.k.namedPort("admin"); !ok || n != admin {
			c.fail("container port admin is %d, admin.listen says %d", n, admin)
		}
		c.probes(admin)
		ann := c.k.Deployment.Spec.Template.Annotations
		if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/path"] != "/metrics" || ann["prometheus.io/port"] != strconv.Itoa(admin) {
			c.fail("pod annotations: want prometheus.io/scrape \"true\", path /metrics, port %d; have %v", admin, ann)
		}
	}
	if c.f.GRPCListen != "" {
		if grpc, err := listenPort("listen", c.f.GRPCListen); err != nil {
			c.fail("%v", err)
		} else {
			p.grpc = grpc
			if n, ok := c.k.namedPort("grpc"); !ok || n != grpc {
				c.fail("container port grpc is %d, listen says %d", n, grpc)
			}
		}
	}
	return p
}

// probes wants readiness on /readyz and liveness on /healthz, both on the
// admin port.
func (c *check) probes(admin int) {
	ctr := c.k.Container
	for _, pr := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"readinessProbe", ctr.ReadinessProbe, "/readyz"}, {"livenessProbe", ctr.LivenessProbe, "/healthz"}} {
		if pr.probe == nil || pr.probe.HTTPGet == nil {
			c.fail("%s: want an httpGet of %s", pr.name, pr.path)
			continue
		}
		if pr.probe.HTTPGet.Path != pr.path {
			c.fail("%s path %q, want %s", pr.name, pr.probe.HTTPGet.Path, pr.path)
		}
		if n := c.k.port(pr.probe.HTTPGet.Port); n != admin {
			c.fail("%s port %q is not admin.listen's %d", pr.name, pr.probe.HTTPGet.Port.String(), admin)
		}
	}
}

// services wants every Service on the pods to carry the gRPC port or the
// admin port, never both: the gRPC Service is what the other region
// reaches, and the admin port (metrics, status) stays inside.
func (c *check) services(p tierPorts) {
	onGRPC := false
	for _, s := range c.k.Services {
		if !selectsLabels(&metav1.LabelSelector{MatchLabels: s.Spec.Selector}, c.k.podLabels()) {
			c.fail("Service %s does not select the pods", s.Name)
			continue
		}
		admin, grpc := false, false
		for _, sp := range s.Spec.Ports {
			switch t := c.k.servicePortTarget(sp); {
			case p.admin != 0 && t == p.admin:
				admin = true
			case p.grpc != 0 && t == p.grpc:
				grpc = true
			default:
				c.fail("Service %s port %s targets %q, which is neither the admin port %d nor the gRPC port", s.Name, sp.Name, sp.TargetPort.String(), p.admin)
			}
		}
		if admin && grpc {
			c.fail("Service %s carries both the gRPC and the admin port: keep the admin port off the gRPC Service", s.Name)
		}
		onGRPC = onGRPC || grpc
	}
	if p.grpc != 0 && !onGRPC {
		c.fail("no Service selects the pods on the gRPC port %d", p.grpc)
	}
}

// monitors wants a ServiceMonitor scraping /metrics on the admin port of
// every Service it selects.
func (c *check) monitors(p tierPorts) {
	scraped := false
	for _, m := range c.k.Monitors {
		if ns := m.Spec.NamespaceSelector; ns.Any || (len(ns.MatchNames) > 0 && !slices.Equal(ns.MatchNames, []string{m.Namespace})) {
			c.fail("ServiceMonitor %s selects Services beyond its own namespace", m.Name)
		}
		var svcs []*corev1.Service
		for _, s := range c.k.Services {
			if selectsLabels(&m.Spec.Selector, s.Labels) {
				svcs = append(svcs, s)
			}
		}
		if len(svcs) == 0 {
			c.fail("ServiceMonitor %s selects no Service", m.Name)
			continue
		}
		if len(m.Spec.Endpoints) == 0 {
			c.fail("ServiceMonitor %s has no endpoints", m.Name)
		}
		for _, e := range m.Spec.Endpoints {
			if e.Path != "" && e.Path != "/metrics" {
				c.fail("ServiceMonitor %s scrapes path %s, not /metrics", m.Name, e.Path)
			}
			for _, s := range svcs {
				if t, ok := c.k.servicePortNamed(s, e.Port); !ok || p.admin == 0 || t != p.admin {
					c.fail("ServiceMonitor %s scrapes port %q of Service %s, which is not the admin port %d", m.Name, e.Port, s.Name, p.admin)
				} else if e.Path == "" || e.Path == "/metrics" {
					scraped = true
				}
			}
		}
	}
	if !scraped {
		c.fail("no ServiceMonitor scrapes /metrics on the admin port %d", p.admin)
	}
}

// policies wants NetworkPolicies that admit Prometheus (from its
// namespace) to the admin port, the fetchers (by address: they are in
// another region) to the gRPC port, and nothing else.
func (c *check) policies(p tierPorts) {
	selected, admin, grpc := false, false, false
	for _, np := range c.k.Policies {
		if !c.k.selects(&np.Spec.PodSelector) {
			c.fail("NetworkPolicy %s does not select the pods", np.Name)
			continue
		}
		selected = true
		if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
			c.fail("NetworkPolicy %s: policyTypes %v lacks Ingress", np.Name, np.Spec.PolicyTypes)
		}
		for i, r := range np.Spec.Ingress {
			if len(r.From) == 0 {
				c.fail("NetworkPolicy %s ingress rule %d admits every source", np.Name, i)
			}
			if len(r.Ports) == 0 {
				c.fail("NetworkPolicy %s ingress rule %d admits every port", np.Name, i)
			}
			for _, rp := range r.Ports {
				if rp.Port == nil || rp.EndPort != nil {
					c.fail("NetworkPolicy %s ingress rule %d opens a port range", np.Name, i)
					continue
				}
				switch n := c.k.port(*rp.Port); {
				case p.admin != 0 && n == p.admin:
					admin = true
					c.monitoringPeers(np.Name, r.From)
				case p.grpc != 0 && n == p.grpc:
					grpc = true
					c.fetcherPeers(np.Name, r.From)
				default:
					c.fail("NetworkPolicy %s opens port %s, which is neither the admin nor the gRPC port", np.Name, rp.Port.String())
				}
			}
		}
	}
	switch {
	case !selected:
		c.fail("no NetworkPolicy selects the pods: anything in the cluster reaches them")
	case !admin:
		c.fail("no NetworkPolicy admits Prometheus to the admin port %d", p.admin)
	case p.grpc != 0 && !grpc:
		c.fail("no NetworkPolicy admits the fetchers to the gRPC port %d", p.grpc)
	}
}

// monitoringPeers wants the admin port open to one namespace by name.
func (c *check) monitoringPeers(policy string, peers []networkingv1.NetworkPolicyPeer) {
	for _, peer := range peers {
		ns := peer.NamespaceSelector
		if peer.IPBlock != nil || ns == nil || ns.MatchLabels[monitoringNamespaceLabel] == "" || len(ns.MatchExpressions) > 0 {
			c.fail("NetworkPolicy %s admits %s to the admin port: want only the monitoring namespace, by %s", policy, describePeer(peer), monitoringNamespaceLabel)
		}
	}
}

// fetcherPeers wants the gRPC port open to address blocks only, none of
// them everything.
func (c *check) fetcherPeers(policy string, peers []networkingv1.NetworkPolicyPeer) {
	for _, peer := range peers {
		if peer.IPBlock == nil || peer.PodSelector != nil || peer.NamespaceSelector != nil {
			c.fail("NetworkPolicy %s admits %s to the gRPC port: the fetchers run in another region, want their addresses (ipBlock)", policy, describePeer(peer))
			continue
		}
		if pf, err := netip.ParsePrefix(peer.IPBlock.CIDR); err != nil || pf.Bits() == 0 {
			c.fail("NetworkPolicy %s admits %s to the gRPC port: want the fetchers' addresses, not every address", policy, describePeer(peer))
		}
	}
}

func describePeer(p networkingv1.NetworkPolicyPeer) string {
	var parts []string
	if p.IPBlock != nil {
		parts = append(parts, "ipBlock "+p.IPBlock.CIDR)
	}
	if p.NamespaceSelector != nil {
		parts = append(parts, describeSelector("namespace", p.NamespaceSelector))
	}
	if p.PodSelector != nil {
		parts = append(parts, describeSelector("pod", p.PodSelector))
	}
	return strings.Join(parts, " and ")
}

// describeSelector names what a policy peer's selector picks; an empty one
// picks every namespace (or every pod of the namespace).
func describeSelector(what string, sel *metav1.LabelSelector) string {
	if len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0 {
		return "every " + what
	}
	return what + "s {" + metav1.FormatLabelSelector(sel) + "}"
}

// disruptionBudgets wants a budget on the pods, with one limit.
func (c *check) disruptionBudgets() {
	if len(c.k.PDBs) == 0 {
		c.fail("no PodDisruptionBudget")
	}
	for _, p := range c.k.PDBs {
		if !c.k.selects(p.Spec.Selector) {
			c.fail("PodDisruptionBudget %s does not select the pods", p.Name)
		}
		if (p.Spec.MinAvailable == nil) == (p.Spec.MaxUnavailable == nil) {
			c.fail("PodDisruptionBudget %s: set one of minAvailable, maxUnavailable", p.Name)
		}
	}
}

// autoscalers wants one HorizontalPodAutoscaler on the Deployment, on CPU
// for writers and on lag for fetchers, never above the shards (Facts.Shards).
func (c *check) autoscalers() {
	d := c.k.Deployment
	if r := d.Spec.Replicas; r != nil && *r > 1 && !c.f.Replicable {
		c.fail("several replicas of a configuration that must run alone (a fetcher without lease.address owns every shard)")
	}
	var hpa *autoscalingv2.HorizontalPodAutoscaler
	for _, h := range c.k.HPAs {
		ref := h.Spec.ScaleTargetRef
		if ref.APIVersion != "apps/v1" || ref.Kind != "Deployment" || ref.Name != d.Name {
			c.fail("HorizontalPodAutoscaler %s scales %s %s %s, not the Deployment %s", h.Name, ref.APIVersion, ref.Kind, ref.Name, d.Name)
			continue
		}
		hpa = h
	}
	if hpa == nil {
		c.fail("no HorizontalPodAutoscaler scales the Deployment")
		return
	}
	if d.Spec.Replicas != nil {
		c.fail("the Deployment sets replicas while HorizontalPodAutoscaler %s scales it: every apply would reset the count", hpa.Name)
	}
	lo, hi := int32(1), hpa.Spec.MaxReplicas
	if hpa.Spec.MinReplicas != nil {
		lo = *hpa.Spec.MinReplicas
	}
	if lo < 1 || lo > hi {
		c.fail("HorizontalPodAutoscaler %s: minReplicas %d, maxReplicas %d", hpa.Name, lo, hi)
	}
	if hi > 1 && !c.f.Replicable {
		c.fail("several replicas of a configuration that must run alone (a fetcher without lease.address owns every shard): HorizontalPodAutoscaler %s allows %d", hpa.Name, hi)
	}
	if c.f.Shards > 0 && int(hi) > c.f.Shards {
		c.fail("HorizontalPodAutoscaler %s: maxReplicas %d is above the %d shards: a replica beyond one per shard idles", hpa.Name, hi, c.f.Shards)
	}
	if c.f.Tier == "fetcher" {
		c.lagMetric(hpa)
	} else {
		c.cpuMetric(hpa)
	}
}

// lagMetric wants the fetchers scaled on the link's lag, per fetcher.
func (c *check) lagMetric(hpa *autoscalingv2.HorizontalPodAutoscaler) {
	for _, m := range hpa.Spec.Metrics {
		var id autoscalingv2.MetricIdentifier
		var target autoscalingv2.MetricTarget
		switch {
		case m.Type == autoscalingv2.ExternalMetricSourceType && m.External != nil:
			id, target = m.External.Metric, m.External.Target
		case m.Type == autoscalingv2.PodsMetricSourceType && m.Pods != nil:
			id, target = m.Pods.Metric, m.Pods.Target
		default:
			continue
		}
		if id.Name != LagMetric {
			continue
		}
		if target.Type != autoscalingv2.AverageValueMetricType || target.AverageValue == nil {
			c.fail("HorizontalPodAutoscaler %s: %s target %s: want an AverageValue, the lag one fetcher carries", hpa.Name, LagMetric, target.Type)
		}
		if c.f.Link != "" && (id.Selector == nil || id.Selector.MatchLabels["link"] != c.f.Link) {
			c.fail("HorizontalPodAutoscaler %s: %s selector %s: want link=%s, the configuration's link.name", hpa.Name, LagMetric, metav1.FormatLabelSelector(id.Selector), c.f.Link)
		}
		return
	}
	c.fail("HorizontalPodAutoscaler %s: no External or Pods metric %s (the fetchers scale on lag)", hpa.Name, LagMetric)
}

// cpuMetric wants the writers scaled on CPU utilization.
func (c *check) cpuMetric(hpa *autoscalingv2.HorizontalPodAutoscaler) {
	for _, m := range hpa.Spec.Metrics {
		if m.Type == autoscalingv2.ResourceMetricSourceType && m.Resource != nil && m.Resource.Name == corev1.ResourceCPU &&
			m.Resource.Target.Type == autoscalingv2.UtilizationMetricType && m.Resource.Target.AverageUtilization != nil {
			return
		}
	}
	c.fail("HorizontalPodAutoscaler %s: no cpu Utilization metric (the writers scale on CPU)", hpa.Name)
}

// secrets wants the mTLS files, with the keys cert-manager writes, and the
// credentials from mounted Secrets.
func (c *check) secrets() {
	for _, file := range c.f.TLSFiles {
		if _, err := c.k.SecretAt(path.Dir(file)); err != nil {
			c.fail("tls file %s: %v", file, err)
		}
		switch path.Base(file) {
		case "tls.crt", "tls.key", "ca.crt":
		default:
			c.fail("tls file %s: want a Secret key tls.crt, tls.key or ca.crt", file)
		}
	}
	for _, file := range c.f.SecretFiles {
		if _, err := c.k.SecretAt(path.Dir(file)); err != nil {
			c.fail("secret file %s: %v", file, err)
		}
	}
}

// certificates wants a cert-manager Certificate filling each Secret the
// mTLS files come from, usable by the tier.
func (c *check) certificates() {
	mounted := map[string]bool{}
	for _, file := range c.f.TLSFiles {
		if s, err := c.k.SecretAt(path.Dir(file)); err == nil {
			mounted[s] = true
		}
	}
	usage := "client auth" // fetchers dial the writers
	if c.f.Tier == "writer" {
		usage = "server auth"
	}
	filled := map[string]bool{}
	for _, cert := range c.k.Certs {
		s := cert.Spec
		if !mounted[s.SecretName] {
			c.fail("Certificate %s fills Secret %q, which the pods do not mount for the TLS files", cert.Name, s.SecretName)
		}
		filled[s.SecretName] = true
		if s.IssuerRef.Name == "" {
			c.fail("Certificate %s names no issuer", cert.Name)
		}
		if len(s.URIs) != 1 {
			c.fail("Certificate %s has URI SANs %v: Ferry admits a peer by exactly one (docs/security.md)", cert.Name, s.URIs)
		}
		if !slices.Contains(s.Usages, usage) {
			c.fail("Certificate %s usages %v lack %q", cert.Name, s.Usages, usage)
		}
		if s.Duration != nil && s.RenewBefore != nil && s.RenewBefore.Duration >= s.Duration.Duration {
			c.fail("Certificate %s renews %v before the end of a %v certificate: never valid long enough", cert.Name, s.RenewBefore.Duration, s.Duration.Duration)
		}
	}
	for s := range mounted {
		if !filled[s] {
			c.fail("no cert-manager Certificate fills the TLS Secret %s", s)
		}
	}
}

// drain wants the platform to wait out the drain before it kills.
func (c *check) drain() {
	need := c.f.ShutdownTimeout + drainMargin
	if l := c.k.Container.Lifecycle; l != nil && l.PreStop != nil && l.PreStop.Sleep != nil {
		need += time.Duration(l.PreStop.Sleep.Seconds) * time.Second
	}
	if g := c.k.Deployment.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second < need {
		c.fail("terminationGracePeriodSeconds must be at least %v (shutdown_timeout %v, preStop, %v margin)", need, c.f.ShutdownTimeout, drainMargin)
	}
}

// security wants a non-root user, a read-only root and no escalation.
func (c *check) security() {
	pod, ctr := c.k.Deployment.Spec.Template.Spec.SecurityContext, c.k.Container.SecurityContext
	nonRoot := (pod != nil && isTrue(pod.RunAsNonRoot)) || (ctr != nil && isTrue(ctr.RunAsNonRoot))
	if !nonRoot {
		c.fail("runAsNonRoot is not set")
	}
	if ctr == nil || !isTrue(ctr.ReadOnlyRootFilesystem) {
		c.fail("readOnlyRootFilesystem is not set")
	}
	if ctr == nil || ctr.AllowPrivilegeEscalation == nil || *ctr.AllowPrivilegeEscalation {
		c.fail("allowPrivilegeEscalation is not false")
	}
}

// resources wants memory within MaxMemoryMiB and CPU set (the writers'
// autoscaler measures CPU against the request).
func (c *check) resources() {
	r := c.k.Container.Resources
	req, lim := r.Requests[corev1.ResourceMemory], r.Limits[corev1.ResourceMemory]
	maxMem := resource.MustParse(strconv.Itoa(MaxMemoryMiB) + "Mi")
	if req.IsZero() || lim.IsZero() || lim.Cmp(maxMem) > 0 || req.Cmp(lim) > 0 {
		c.fail("memory request %s, limit %s: want request ≤ limit ≤ %dMi", req.String(), lim.String(), MaxMemoryMiB)
	}
	if cpu := r.Requests[corev1.ResourceCPU]; cpu.IsZero() {
		c.fail("cpu requests and limits are not set")
	} else if cpu := r.Limits[corev1.ResourceCPU]; cpu.IsZero() {
		c.fail("cpu requests and limits are not set")
	}
}

func isTrue(b *bool) bool { return b != nil && *b }

// selectsLabels reports whether sel picks the labels: an empty selector
// does not count (it would pick everything in the namespace).
func selectsLabels(sel *metav1.LabelSelector, have map[string]string) bool {
	if sel == nil || (len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0) {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && s.Matches(labels.Set(have))
}

// namedPort returns the Ferry container's port of that name.
func (k *Kubernetes) namedPort(name string) (int, bool) {
	for _, p := range k.Container.Ports {
		if p.Name == name {
			return int(p.ContainerPort), true
		}
	}
	return 0, false
}

// port resolves a probe's, Service's or policy's port reference (number
// or container port name); 0 if it names no port.
func (k *Kubernetes) port(ref intstr.IntOrString) int {
	if ref.Type == intstr.Int {
		return int(ref.IntVal)
	}
	n, _ := k.namedPort(ref.StrVal)
	return n
}

// servicePortTarget is the container port a Service port sends to
// (targetPort, which defaults to the Service port).
func (k *Kubernetes) servicePortTarget(sp corev1.ServicePort) int {
	if sp.TargetPort == (intstr.IntOrString{}) {
		return int(sp.Port)
	}
	return k.port(sp.TargetPort)
}

// servicePortNamed is the container port behind a Service's named port.
func (k *Kubernetes) servicePortNamed(s *corev1.Service, name string) (int, bool) {
	for _, sp := range s.Spec.Ports {
		if sp.Name == name {
			return k.servicePortTarget(sp), true
		}
	}
	return 0, false
}
