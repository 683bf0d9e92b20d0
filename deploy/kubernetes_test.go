package deploy

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// The Kubernetes manifests are rendered here exactly as `kubectl apply -k`
// renders them, with kustomize's Go API; the broken variants are overlays
// of the shipped overlays (a patch each), so they break what an operator's
// own overlay could break.

// testOverlay is where the broken overlays are written, next to the
// shipped ones.
const testOverlay = "kubernetes/overlays/test"

// brokenOverlay is the tier's overlay plus one patch (a strategic merge
// patch, or JSON 6902 operations on target "Kind/name") and any other
// kustomization lines, in a fresh copy of the manifests.
type brokenOverlay struct {
	patch  string
	target string // JSON 6902 operations apply to this "Kind/name"
	kust   string // more kustomization.yaml lines
	// resources are more objects, by file name in the test overlay.
	resources map[string]string
	// files replace shipped files, by name under deploy/.
	files map[string]string
}

func (b brokenOverlay) fs(t *testing.T, tier string) filesys.FileSystem {
	t.Helper()
	fsys, err := kustomizeFS()
	if err != nil {
		t.Fatal(err)
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../" +
		strings.TrimPrefix(KubernetesOverlay(tier), "kubernetes/overlays/") + "\n"
	for name, text := range b.resources {
		k += "  - " + name + "\n"
		write(t, fsys, testOverlay+"/"+name, text)
	}
	if b.patch != "" {
		k += "patches:\n  - path: patch.yaml\n"
		if b.target != "" {
			kind, name, _ := strings.Cut(b.target, "/")
			k += "    target:\n      kind: " + kind + "\n      name: " + name + "\n"
		}
		write(t, fsys, testOverlay+"/patch.yaml", b.patch)
	}
	write(t, fsys, testOverlay+"/kustomization.yaml", k+b.kust)
	for name, text := range b.files {
		write(t, fsys, name, text)
	}
	return fsys
}

func write(t *testing.T, fsys filesys.FileSystem, name, text string) {
	t.Helper()
	if err := fsys.WriteFile(name, []byte(text)); err != nil {
		t.Fatal(err)
	}
}

// load renders the broken overlay and reads it as deploytest does.
func (b brokenOverlay) load(t *testing.T, tier string) (*Kubernetes, error) {
	t.Helper()
	k, err := loadKubernetesFS(b.fs(t, tier), testOverlay, tier)
	if err != nil {
		return nil, err
	}
	if _, err := k.Config(); err != nil {
		return nil, err
	}
	if _, err := k.Env("FERRY_"); err != nil {
		return nil, err
	}
	return k, nil
}

func checkBroken(t *testing.T, tier string, b brokenOverlay, f Facts) []error {
	t.Helper()
	k, err := b.load(t, tier)
	if err != nil {
		return []error{err}
	}
	return k.Check(f)
}

// jsonPatch is a JSON 6902 patch replacing (or adding) one value.
func jsonPatch(op, path, value string) string {
	p := "- op: " + op + "\n  path: " + path + "\n"
	if value != "" {
		p += "  value: " + value + "\n"
	}
	return p
}

// TestKubernetesOverlaysRender renders each region's overlay and wants the
// tier's whole deployment in it, every object decoded into its API type.
func TestKubernetesOverlaysRender(t *testing.T) {
	for _, tc := range []struct {
		tier     string
		services int
	}{{"fetcher", 1}, {"writer", 2}} {
		t.Run(tc.tier, func(t *testing.T) {
			k, err := LoadKubernetes(KubernetesOverlay(tc.tier), tc.tier)
			if err != nil {
				t.Fatal(err)
			}
			counts := map[string]int{
				"Namespace": len(k.Namespaces), "ConfigMap": len(k.ConfigMaps), "Service": len(k.Services),
				"PodDisruptionBudget": len(k.PDBs), "HorizontalPodAutoscaler": len(k.HPAs),
				"NetworkPolicy": len(k.Policies), "ServiceMonitor": len(k.Monitors), "Certificate": len(k.Certs),
			}
			for kind, n := range counts {
				want := 1
				if kind == "Service" {
					want = tc.services
				}
				if n != want {
					t.Errorf("%d %s objects, want %d", n, kind, want)
				}
			}
			for _, o := range k.namespaced {
				if o.GetName() == "" || o.GetLabels()["app.kubernetes.io/part-of"] != "ferry" {
					t.Errorf("%s %v: want a name and app.kubernetes.io/part-of: ferry", o.GetName(), o.GetLabels())
				}
				if o.GetLabels()["region"] == "" {
					t.Errorf("%s: no region label from the overlay", o.GetName())
				}
			}
			if k.Deployment.Spec.Template.Labels["region"] == "" {
				t.Errorf("the pods carry no region label")
			}
			if _, ok := k.Deployment.Spec.Selector.MatchLabels["region"]; ok {
				t.Errorf("the Deployment's selector holds the region label: selectors cannot change once applied")
			}
		})
	}
}

// TestKubernetesDecodeIsStrict wants an unknown field (in an API type, a
// ServiceMonitor or a Certificate), an unknown kind, and a kind no check
// covers to fail rendering.
func TestKubernetesDecodeIsStrict(t *testing.T) {
	tests := []struct {
		name string
		b    brokenOverlay
		want string
	}{
		{"unknown field in a Deployment", brokenOverlay{
			patch:  jsonPatch("add", "/spec/template/spec/containers/0/readinessProbe/httpGet/paht", "/readyz"),
			target: "Deployment/ferry-fetcher"}, `unknown field "spec.template.spec.containers[0].readinessProbe.httpGet.paht"`},
		{"misplaced field in a Deployment", brokenOverlay{
			patch:  jsonPatch("add", "/spec/template/spec/terminationGracePeriod", "45"),
			target: "Deployment/ferry-fetcher"}, `unknown field "spec.template.spec.terminationGracePeriod"`},
		{"field of the wrong case", brokenOverlay{
			patch:  jsonPatch("add", "/spec/maxunavailable", "1"),
			target: "PodDisruptionBudget/ferry-fetcher"}, `unknown field "spec.maxunavailable"`},
		{"unknown field in a ServiceMonitor", brokenOverlay{
			patch:  jsonPatch("add", "/spec/endpoints/0/scrapeInterval", "30s"),
			target: "ServiceMonitor/ferry-fetcher"}, `unknown field "spec.endpoints[0].scrapeInterval"`},
		{"unknown field in a Certificate", brokenOverlay{
			patch:  jsonPatch("add", "/spec/uri", "spiffe://prod.example/ferry/fetcher"),
			target: "Certificate/ferry-fetcher"}, `unknown field "spec.uri"`},
		{"field of the wrong case in a Certificate", brokenOverlay{
			patch:  "- op: move\n  from: /spec/secretName\n  path: /spec/secretname\n",
			target: "Certificate/ferry-fetcher"}, `unknown field "spec.secretname"`},
		{"unknown kind", brokenOverlay{resources: map[string]string{
			"widget.yaml": "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n"}},
			`no kind "Widget" is registered`},
		{"kind no check covers", brokenOverlay{resources: map[string]string{
			"secret.yaml": "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n"}},
			"Kind=Secret: a kind the checks do not cover"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.b.load(t, "fetcher")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// kubeCase breaks a tier's overlay (or the facts) in one way and wants
// Check, or rendering, to say so.
type kubeCase struct {
	name  string
	b     brokenOverlay
	facts func(*Facts)
	want  string // "" for the unbroken overlay
}

// TestKubernetesCheckFindsBrokenManifests breaks each overlay in one way
// at a time and wants Check (or the loader) to say so, so the services'
// tests cannot pass on a check that never fails.
func TestKubernetesCheckFindsBrokenManifests(t *testing.T) {
	dep := func(tier string) string { return "Deployment/ferry-" + tier }
	ctr := "/spec/template/spec/containers/0"
	cases := map[string][]kubeCase{
		"fetcher": {
			{name: "unbroken"},
			{name: "readiness path", b: brokenOverlay{patch: jsonPatch("replace", ctr+"/readinessProbe/httpGet/path", "/ready"), target: dep("fetcher")}, want: "readinessProbe path"},
			{name: "liveness path", b: brokenOverlay{patch: jsonPatch("replace", ctr+"/livenessProbe/httpGet/path", "/readyz"), target: dep("fetcher")}, want: "livenessProbe path"},
			{name: "probe port", b: brokenOverlay{patch: jsonPatch("replace", ctr+"/readinessProbe/httpGet/port", "7403"), target: dep("fetcher")}, want: `readinessProbe port "7403"`},
			{name: "admin port", b: brokenOverlay{patch: jsonPatch("replace", ctr+"/ports/0/containerPort", "7403"), target: dep("fetcher")}, want: "container port admin"},
			{name: "scrape annotation", b: brokenOverlay{patch: jsonPatch("replace", "/spec/template/metadata/annotations/prometheus.io~1port", `"9090"`), target: dep("fetcher")}, want: "prometheus.io"},
			{name: "grace period", b: brokenOverlay{patch: jsonPatch("replace", "/spec/template/spec/terminationGracePeriodSeconds", "25"), target: dep("fetcher")}, want: "terminationGracePeriodSeconds"},
			{name: "read-only root", b: brokenOverlay{patch: jsonPatch("replace", ctr+"/securityContext/readOnlyRootFilesystem", "false"), target: dep("fetcher")}, want: "readOnlyRootFilesystem"},
			{name: "privilege escalation", b: brokenOverlay{patch: jsonPatch("remove", ctr+"/securityContext/allowPrivilegeEscalation", ""), target: dep("fetcher")}, want: "allowPrivilegeEscalation"},
			{name: "non-root", b: brokenOverlay{patch: jsonPatch("replace", "/spec/template/spec/securityContext/runAsNonRoot", "false"), target: dep("fetcher")}, want: "runAsNonRoot"},
			{name: "memory limit", b: brokenOverlay{patch: jsonPatch("replace", ctr+"/resources/limits/memory", "1Gi"), target: dep("fetcher")}, want: "memory request"},
			{name: "cpu request", b: brokenOverlay{patch: jsonPatch("remove", ctr+"/resources/requests/cpu", ""), target: dep("fetcher")}, want: "cpu requests and limits"},
			{name: "tls mount", b: brokenOverlay{patch: jsonPatch("replace", ctr+"/volumeMounts/1/mountPath", "/etc/ferry/certs"), target: dep("fetcher")}, want: "tls file /etc/ferry/tls/tls.crt: nothing is mounted"},
			{name: "tls subPath", b: brokenOverlay{patch: jsonPatch("add", ctr+"/volumeMounts/1/subPath", "tls.crt"), target: dep("fetcher")}, want: "uses subPath"},
			{name: "token mount", b: brokenOverlay{patch: jsonPatch("remove", ctr+"/volumeMounts/2", ""), target: dep("fetcher")}, want: "secret file /etc/ferry/consul/token"},
			{name: "config file", b: brokenOverlay{patch: jsonPatch("replace", ctr+"/args/1", "/etc/ferry/config/f.yaml"), target: dep("fetcher")}, want: "no key f.yaml"},
			{name: "image", b: brokenOverlay{kust: "images:\n  - name: ghcr.io/ferry-replicator/ferry-fetcher\n    newTag: latest\n"}, want: "image"},
			{name: "command", b: brokenOverlay{patch: jsonPatch("add", ctr+"/command", `["/bin/sh"]`), target: dep("fetcher")}, want: "replaces the image's entrypoint"},
			{name: "selector", b: brokenOverlay{patch: jsonPatch("replace", "/spec/selector/matchLabels/app.kubernetes.io~1name", "ferry"), target: dep("fetcher")}, want: "selector does not match"},
			{name: "namespace", b: brokenOverlay{resources: map[string]string{"stray.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: stray\n  namespace: default\n"}}, want: "stray is in namespace default"},
			{name: "replicas with an autoscaler", b: brokenOverlay{patch: jsonPatch("add", "/spec/replicas", "3"), target: dep("fetcher")}, want: "sets replicas while HorizontalPodAutoscaler"},
			{name: "no disruption budget", b: brokenOverlay{patch: "$patch: delete\napiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: ferry-fetcher\n"}, want: "no PodDisruptionBudget"},
			{name: "disruption budget limits", b: brokenOverlay{patch: jsonPatch("add", "/spec/minAvailable", "1"), target: "PodDisruptionBudget/ferry-fetcher"}, want: "set one of minAvailable, maxUnavailable"},
			{name: "autoscaler above shards", b: brokenOverlay{patch: jsonPatch("replace", "/spec/maxReplicas", "17"), target: "HorizontalPodAutoscaler/ferry-fetcher"}, want: "maxReplicas 17 is above the 16 shards"},
			{name: "autoscaler min above max", b: brokenOverlay{patch: jsonPatch("replace", "/spec/minReplicas", "20"), target: "HorizontalPodAutoscaler/ferry-fetcher"}, want: "minReplicas 20, maxReplicas 16"},
			{name: "autoscaler target", b: brokenOverlay{patch: jsonPatch("replace", "/spec/scaleTargetRef/name", "ferry"), target: "HorizontalPodAutoscaler/ferry-fetcher"}, want: "no HorizontalPodAutoscaler scales the Deployment"},
			{name: "autoscaler metric", b: brokenOverlay{patch: jsonPatch("replace", "/spec/metrics/0/external/metric/name", "ferry_lag"), target: "HorizontalPodAutoscaler/ferry-fetcher"}, want: "no External or Pods metric ferry_lag_records"},
			{name: "autoscaler link", b: brokenOverlay{patch: jsonPatch("replace", "/spec/metrics/0/external/metric/selector/matchLabels/link", "west-to-east"), target: "HorizontalPodAutoscaler/ferry-fetcher"}, want: "want link=east-to-west"},
			{name: "autoscaler total lag", b: brokenOverlay{patch: jsonPatch("replace", "/spec/metrics/0/external/target", `{"type": "Value", "value": "100k"}`), target: "HorizontalPodAutoscaler/ferry-fetcher"}, want: "want an AverageValue"},
			{name: "policy selects other pods", b: brokenOverlay{patch: jsonPatch("replace", "/spec/podSelector/matchLabels/app.kubernetes.io~1name", "ferry-writer"), target: "NetworkPolicy/ferry-fetcher"}, want: "no NetworkPolicy selects the pods"},
			{name: "policy from every namespace", b: brokenOverlay{patch: jsonPatch("replace", "/spec/ingress/0/from/0/namespaceSelector", "{}"), target: "NetworkPolicy/ferry-fetcher"}, want: "admits every namespace to the admin port"},
			{name: "policy from anywhere", b: brokenOverlay{patch: jsonPatch("remove", "/spec/ingress/0/from", ""), target: "NetworkPolicy/ferry-fetcher"}, want: "admits every source"},
			{name: "policy on every port", b: brokenOverlay{patch: jsonPatch("remove", "/spec/ingress/0/ports", ""), target: "NetworkPolicy/ferry-fetcher"}, want: "admits every port"},
			{name: "policy on another port", b: brokenOverlay{patch: jsonPatch("replace", "/spec/ingress/0/ports/0/port", "9090"), target: "NetworkPolicy/ferry-fetcher"}, want: "opens port 9090"},
			{name: "policy without ingress", b: brokenOverlay{patch: jsonPatch("replace", "/spec/policyTypes", `["Egress"]`), target: "NetworkPolicy/ferry-fetcher"}, want: "lacks Ingress"},
			{name: "admin Service port", b: brokenOverlay{patch: jsonPatch("replace", "/spec/ports/0/targetPort", "7403"), target: "Service/ferry-fetcher-admin"}, want: "neither the admin port 7402 nor the gRPC port"},
			{name: "monitor port", b: brokenOverlay{patch: jsonPatch("replace", "/spec/endpoints/0/port", "metrics"), target: "ServiceMonitor/ferry-fetcher"}, want: `scrapes port "metrics"`},
			{name: "monitor path", b: brokenOverlay{patch: jsonPatch("replace", "/spec/endpoints/0/path", "/stats"), target: "ServiceMonitor/ferry-fetcher"}, want: "scrapes path /stats"},
			{name: "monitor selector", b: brokenOverlay{patch: jsonPatch("replace", "/spec/selector/matchLabels/app.kubernetes.io~1component", "grpc"), target: "ServiceMonitor/ferry-fetcher"}, want: "selects no Service"},
			{name: "monitor namespaces", b: brokenOverlay{patch: jsonPatch("add", "/spec/namespaceSelector", `{"any": true}`), target: "ServiceMonitor/ferry-fetcher"}, want: "beyond its own namespace"},
			{name: "certificate secret", b: brokenOverlay{patch: jsonPatch("replace", "/spec/secretName", "ferry-tls"), target: "Certificate/ferry-fetcher"}, want: "no cert-manager Certificate fills the TLS Secret ferry-fetcher-tls"},
			{name: "certificate usage", b: brokenOverlay{patch: jsonPatch("replace", "/spec/usages", `["digital signature", "server auth"]`), target: "Certificate/ferry-fetcher"}, want: `lack "client auth"`},
			{name: "certificate identities", b: brokenOverlay{patch: jsonPatch("add", "/spec/uris/-", "spiffe://prod.example/ferry/other"), target: "Certificate/ferry-fetcher"}, want: "exactly one"},
			{name: "certificate renewal", b: brokenOverlay{patch: jsonPatch("replace", "/spec/renewBefore", "200h"), target: "Certificate/ferry-fetcher"}, want: "never valid long enough"},
			{name: "certificate issuer", b: brokenOverlay{patch: jsonPatch("replace", "/spec/issuerRef/name", `""`), target: "Certificate/ferry-fetcher"}, want: "names no issuer"},
			{name: "loopback admin", facts: func(f *Facts) { f.AdminListen = "127.0.0.1:7402" }, want: `admin.listen "127.0.0.1:7402" is loopback`},
			{name: "must run alone", facts: func(f *Facts) { f.Replicable = false }, want: "several replicas"},
			{name: "fewer shards", facts: func(f *Facts) { f.Shards = 8 }, want: "maxReplicas 16 is above the 8 shards"},
			{name: "longer drain", facts: func(f *Facts) { f.ShutdownTimeout = time.Minute }, want: "terminationGracePeriodSeconds"},
		},
		"writer": {
			{name: "unbroken"},
			{name: "gRPC Service on admin", b: brokenOverlay{patch: jsonPatch("replace", "/spec/ports/0/targetPort", "admin"), target: "Service/ferry-writer"}, want: "no Service selects the pods on the gRPC port 7400"},
			{name: "admin on the gRPC Service", b: brokenOverlay{patch: jsonPatch("add", "/spec/ports/-", `{"name": "admin", "port": 7401, "targetPort": "admin"}`), target: "Service/ferry-writer"}, want: "carries both the gRPC and the admin port"},
			{name: "gRPC Service selector", b: brokenOverlay{patch: jsonPatch("replace", "/spec/selector/app.kubernetes.io~1name", "ferry-fetcher"), target: "Service/ferry-writer"}, want: "Service ferry-writer does not select the pods"},
			{name: "gRPC port", b: brokenOverlay{patch: jsonPatch("replace", ctr+"/ports/0/containerPort", "7410"), target: dep("writer")}, want: "container port grpc"},
			{name: "preStop", b: brokenOverlay{patch: jsonPatch("replace", ctr+"/lifecycle/preStop/sleep/seconds", "30"), target: dep("writer")}, want: "terminationGracePeriodSeconds"},
			{name: "no disruption budget", b: brokenOverlay{patch: "$patch: delete\napiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: ferry-writer\n"}, want: "no PodDisruptionBudget"},
			{name: "autoscaler on memory", b: brokenOverlay{patch: jsonPatch("replace", "/spec/metrics/0/resource/name", "memory"), target: "HorizontalPodAutoscaler/ferry-writer"}, want: "no cpu Utilization metric"},
			{name: "fewer shards", facts: func(f *Facts) { f.Shards = 4 }, want: "maxReplicas 8 is above the 4 shards"},
			{name: "no autoscaler", b: brokenOverlay{patch: "$patch: delete\napiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata:\n  name: ferry-writer\n"}, want: "no HorizontalPodAutoscaler scales the Deployment"},
			{name: "gRPC from the cluster", b: brokenOverlay{patch: jsonPatch("replace", "/spec/ingress/0/from/0", `{"namespaceSelector": {}}`), target: "NetworkPolicy/ferry-writer"}, want: "the fetchers run in another region"},
			{name: "gRPC from everywhere", b: brokenOverlay{patch: jsonPatch("replace", "/spec/ingress/0/from/0/ipBlock/cidr", "0.0.0.0/0"), target: "NetworkPolicy/ferry-writer"}, want: "not every address"},
			{name: "gRPC closed", b: brokenOverlay{patch: jsonPatch("remove", "/spec/ingress/0", ""), target: "NetworkPolicy/ferry-writer"}, want: "no NetworkPolicy admits the fetchers to the gRPC port 7400"},
			{name: "admin from the fetchers' addresses", b: brokenOverlay{patch: jsonPatch("add", "/spec/ingress/0/ports/-", `{"port": "admin"}`), target: "NetworkPolicy/ferry-writer"}, want: "admits ipBlock 198.51.100.0/24 to the admin port"},
			{name: "no policy", b: brokenOverlay{patch: "$patch: delete\napiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: ferry-writer\n"}, want: "no NetworkPolicy selects the pods"},
			{name: "no monitor", b: brokenOverlay{patch: "$patch: delete\napiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata:\n  name: ferry-writer\n"}, want: "no ServiceMonitor scrapes /metrics on the admin port 7401"},
			{name: "certificate usage", b: brokenOverlay{patch: jsonPatch("replace", "/spec/usages", `["digital signature", "client auth"]`), target: "Certificate/ferry-writer"}, want: `lack "server auth"`},
			{name: "no certificate", b: brokenOverlay{patch: "$patch: delete\napiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata:\n  name: ferry-writer\n"}, want: "no cert-manager Certificate fills the TLS Secret ferry-writer-tls"},
		},
	}
	for tier, cs := range cases {
		for _, tc := range cs {
			t.Run(tier+"/"+tc.name, func(t *testing.T) {
				f := kubeFacts(tier)
				if tc.facts != nil {
					tc.facts(&f)
				}
				errs := checkBroken(t, tier, tc.b, f)
				expect(t, errs, tc.want)
				for _, err := range errs {
					if tc.want != "" && strings.Contains(err.Error(), tc.want) {
						t.Logf("found: %v", err)
					}
				}
			})
		}
	}
}

// kubeFacts is what the configurations the overlays embed say (the
// services' tests derive the same from the real loaders).
func kubeFacts(tier string) Facts {
	f := factsFor(tier, "/etc/ferry/tls")
	f.Shards = 16 // link.shards; the writers' one link has as many
	if tier == "fetcher" {
		f.Link = "east-to-west"
		f.SecretFiles = []string{"/etc/ferry/consul/token"}
	}
	return f
}

// TestKubernetesConfigChangeRollsPods edits a tier's configuration and
// wants a new ConfigMap name in the pod template, so applying the edit
// rolls the pods instead of leaving them on the old configuration.
func TestKubernetesConfigChangeRollsPods(t *testing.T) {
	for _, tier := range []string{"fetcher", "writer"} {
		t.Run(tier, func(t *testing.T) {
			name := "kubernetes/base/" + tier + "/" + tier + ".yaml"
			text, err := Read(name)
			if err != nil {
				t.Fatal(err)
			}
			before, err := brokenOverlay{}.load(t, tier)
			if err != nil {
				t.Fatal(err)
			}
			after, err := brokenOverlay{files: map[string]string{name: strings.Replace(text, "level: info", "level: debug", 1)}}.load(t, tier)
			if err != nil {
				t.Fatal(err)
			}
			b, errB := before.configMapAt("/etc/ferry/config")
			a, errA := after.configMapAt("/etc/ferry/config")
			if errB != nil || errA != nil {
				t.Fatal(errB, errA)
			}
			if a == b || !strings.HasPrefix(a, "ferry-"+tier+"-") {
				t.Errorf("ConfigMap %s before the edit, %s after: want a new ferry-%s-<hash> name", b, a, tier)
			}
			if cfg, _ := after.Config(); !strings.Contains(cfg, "level: debug") {
				t.Errorf("the pods do not read the edited configuration")
			}
		})
	}
}

// TestKubernetesCertificatesAgree wants each tier's Certificate to carry
// the identity the other tier admits (the Check already ties it to the
// Secret its own pods mount).
func TestKubernetesCertificatesAgree(t *testing.T) {
	kf, err := LoadKubernetes(KubernetesOverlay("fetcher"), "fetcher")
	if err != nil {
		t.Fatal(err)
	}
	kw, err := LoadKubernetes(KubernetesOverlay("writer"), "writer")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tier  string
		k     *Kubernetes
		peers []string
	}{{"fetcher", kf, decodeConfig(t, kw).TLS.AllowedIDs}, {"writer", kw, decodeConfig(t, kf).Writers.TLS.AllowedIDs}} {
		if len(c.k.Certs) != 1 {
			t.Fatalf("%s: %d Certificates, want one", c.tier, len(c.k.Certs))
		}
		for _, uri := range c.k.Certs[0].Spec.URIs {
			if !slices.Contains(c.peers, uri) {
				t.Errorf("%s: the Certificate's URI %s is not in the other tier's allowed_ids %v", c.tier, uri, c.peers)
			}
		}
	}
}

// TestKubernetesLagMetricDocumented wants the metric the fetchers scale on
// to be one Ferry documents exporting, and docs/deploy.md to give the
// Prometheus adapter's rule for it.
func TestKubernetesLagMetricDocumented(t *testing.T) {
	for file, want := range map[string]string{
		"../docs/metrics.md": "`" + LagMetric + "{link,topic,partition}`",
		"../docs/deploy.md":  "seriesQuery: '" + LagMetric + "{",
	} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), want) {
			t.Errorf("%s does not hold %q", file, want)
		}
	}
}

// TestKubernetesPodsRunAsTheImageUser wants the pods' user to be the one
// the image declares, so runAsNonRoot never meets a root image.
func TestKubernetesPodsRunAsTheImageUser(t *testing.T) {
	containerfile, err := os.ReadFile("image/Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, tier := range []string{"fetcher", "writer"} {
		k, err := LoadKubernetes(KubernetesOverlay(tier), tier)
		if err != nil {
			t.Fatal(err)
		}
		sc := k.Deployment.Spec.Template.Spec.SecurityContext
		if sc == nil || sc.RunAsUser == nil || sc.RunAsGroup == nil {
			t.Fatalf("%s: no runAsUser and runAsGroup", tier)
		}
		user := "USER " + itoa(*sc.RunAsUser) + ":" + itoa(*sc.RunAsGroup)
		if !strings.Contains(string(containerfile), "\n"+user+"\n") {
			t.Errorf("%s: the pods run as %q, which deploy/image/Containerfile does not say", tier, user)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
