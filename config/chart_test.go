package manifests_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	yaml "go.yaml.in/yaml/v3"

	"github.com/ironlb/ironlb/internal/testbed/testenv"
)

// The chart's own checks: helm lint, values.schema.json, and every object it renders, with every toggle
// on and in a namespace other than metallb-system, accepted by a real apiserver.

// allOn turns every toggle and knob of the chart on, so that each template renders its every branch.
var allOn = []string{
	"proxy.enabled=true",
	"prometheus.podMonitor.enabled=true",
	"prometheus.podMonitor.additionalLabels.release=kps",
	"prometheus.podMonitor.annotations.a=b",
	"prometheus.serviceMonitor.enabled=true",
	"prometheus.serviceMonitor.additionalLabels.release=kps",
	"prometheus.serviceMonitor.annotations.a=b",
	"prometheus.prometheusRule.enabled=true",
	"prometheus.prometheusRule.additionalLabels.release=kps",
	"grafanaDashboard.enabled=true",
	"grafanaDashboard.annotations.grafana_folder=ironlb",
	"imagePullSecrets[0].name=regcred",
	"image.pullPolicy=Always",
	"image.tag=v9.9.9",
	"controller.replicas=3",
	"controller.podDisruptionBudget.maxUnavailable=1",
	"proxy.logLevel=debug", "controller.logLevel=info", "speaker.logLevel=warn",
}

func init() {
	for _, c := range []string{"controller", "speaker", "proxy"} {
		allOn = append(allOn,
			c+".extraArgs[0]=--extra-"+c,
			c+".resources.requests.cpu=50m",
			c+".resources.limits.memory=128Mi",
			c+".nodeSelector.kubernetes\\.io/os=linux",
			c+".tolerations[0].key=dedicated",
			c+".tolerations[0].operator=Exists",
			c+".affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=kubernetes.io/arch",
			c+".affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
			c+".priorityClassName=system-node-critical",
			c+".podAnnotations.note="+c,
			c+".labels.team=net",
		)
	}
}

func setArgs(set []string) []string {
	var out []string
	for _, s := range set {
		out = append(out, "--set", s)
	}
	return out
}

// helmCmd runs helm with its caches and configuration in the test's directories.
func helmCmd(t *testing.T, helm string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(helm, args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

func TestChartLint(t *testing.T) {
	helm := tool(t, "helm")
	for name, set := range map[string][]string{"defaults": nil, "every toggle on": allOn} {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"lint", "--strict", "--namespace", "lb-system", "../charts/ironlb"}, setArgs(set)...)
			if out, errOut, err := helmCmd(t, helm, args...); err != nil {
				t.Errorf("helm lint --strict: %v\n%s%s", err, out, errOut)
			}
		})
	}
}

// schemaErrors are values values.schema.json refuses, each with the error helm gives for it.
var schemaErrors = []struct {
	name, set, want string
}{
	{"a wrong type", "controller.replicas=two", "- at '/controller/replicas': got string, want integer"},
	{"a wrong type in MetalLB's rules values", "prometheus.prometheusRule.addressPoolUsage.thresholds[0].percent=high", "- at '/prometheus/prometheusRule/addressPoolUsage/thresholds/0/percent': got string, want integer"},
	{"a percentage out of range", "prometheus.prometheusRule.addressPoolUsage.thresholds[0].percent=101", "- at '/prometheus/prometheusRule/addressPoolUsage/thresholds/0/percent': maximum: got 101, want 100"},
	{"an unknown key", "speaker.tolerateMaster=true", "- at '/speaker': additional properties 'tolerateMaster' not allowed"},
	{"a value of the chart before the release namespace", "namespace=lb-system", "- at '': additional properties 'namespace' not allowed"},
	{"a bad log level", "proxy.logLevel=verbose", "- at '/proxy/logLevel': value must be one of '', 'all', 'debug', 'info', 'warn', 'error', 'none'"},
	{"a bad speaker log level", "speaker.logLevel=trace", "- at '/speaker/logLevel': value must be one of '', 'all', 'debug', 'info', 'warn', 'error', 'none'"},
	// One image for every role: the proxy has no image of its own (image.* is the proxy's too).
	{"a proxy image of its own", "proxy.image.repository=ghcr.io/ironlb/ironlb-proxy", "- at '/proxy': additional properties 'image' not allowed"},
	{"a bad pull policy", "image.pullPolicy=Sometimes", "- at '/image/pullPolicy': value must be one of '', 'Always', 'IfNotPresent', 'Never'"},
	{"a pull secret without a name", "imagePullSecrets[0].nam=regcred", "- at '/imagePullSecrets/0': missing property 'name'"},
	{"a PodDisruptionBudget that is neither a number nor a percentage", "controller.podDisruptionBudget.minAvailable=half", "'half' does not match pattern '^[0-9]+%$'"},
}

// TestChartSchema checks that values.schema.json refuses bad values with helm's own error, before
// rendering anything.
func TestChartSchema(t *testing.T) {
	helm := tool(t, "helm")
	for _, tt := range schemaErrors {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, err := helmCmd(t, helm, "template", "ironlb", "../charts/ironlb", "--set", tt.set)
			if err == nil {
				t.Fatalf("helm template --set %s: no error", tt.set)
			}
			if !strings.Contains(errOut, "values don't meet the specifications of the schema(s) in the following chart(s):\nironlb:\n") || !strings.Contains(errOut, tt.want) {
				t.Errorf("helm template --set %s: got\n%s\nwant helm's schema error with %q", tt.set, errOut, tt.want)
			}
			if out != "" {
				t.Errorf("helm template --set %s rendered objects:\n%s", tt.set, out)
			}
		})
	}
}

// TestChartOneImage checks that every role, the proxy too, runs the one image: image.repository at
// image.tag, the chart's appVersion by default, in every container of the controller, the speaker
// and the proxy.
func TestChartOneImage(t *testing.T) {
	helm := tool(t, "helm")
	b, err := os.ReadFile("../charts/ironlb/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		AppVersion string `yaml:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &chart); err != nil || chart.AppVersion == "" {
		t.Fatalf("Chart.yaml: appVersion %q, %v", chart.AppVersion, err)
	}
	tests := []struct {
		name string
		set  []string
		want string
	}{
		{"defaults", []string{"proxy.enabled=true"}, "ghcr.io/ironlb/ironlb:" + chart.AppVersion},
		{"another registry and tag", []string{"proxy.enabled=true", "image.repository=registry.local:5000/lb/ironlb", "image.tag=v9.9.9"},
			"registry.local:5000/lb/ironlb:v9.9.9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"template", "ironlb", "../charts/ironlb", "--namespace", "metallb-system"}, setArgs(tt.set)...)
			out, errOut, err := helmCmd(t, helm, args...)
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, errOut)
			}
			got := map[string][]string{} // workload name: its containers' images
			for _, o := range objects(t, "helm template", []byte(out)) {
				spec := dig(o, "spec", "template", "spec")
				if spec == nil {
					continue
				}
				name := fmt.Sprint(dig(o, "metadata", "name"))
				for _, list := range []string{"initContainers", "containers"} {
					for _, c := range asList(dig(spec, list)) {
						got[name] = append(got[name], fmt.Sprint(dig(c, "image")))
					}
				}
			}
			for _, w := range []string{"ironlb-controller", "ironlb-speaker", "ironlb-proxy"} {
				if len(got[w]) == 0 {
					t.Errorf("no %s rendered, or no container in it", w)
				}
			}
			for w, imgs := range got {
				for _, img := range imgs {
					if img != tt.want {
						t.Errorf("%s runs %s, want %s (every role runs the one image)", w, img, tt.want)
					}
				}
			}
		})
	}
}

// clusterScoped are the kinds the chart renders that have no namespace.
var clusterScoped = []string{"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "ValidatingWebhookConfiguration",
	"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}

// elsewhere are the objects that stay in their namespace wherever ironlb is installed: what lets the
// controller read the apiserver's EndpointSlices (default) and the speaker kube-proxy's ConfigMap
// (kube-system).
var elsewhere = map[string]bool{
	"rbac.authorization.k8s.io/v1 Role default/ironlb-controller-apiserver-endpoints":        true,
	"rbac.authorization.k8s.io/v1 RoleBinding default/ironlb-controller-apiserver-endpoints": true,
	"rbac.authorization.k8s.io/v1 Role kube-system/ironlb-speaker-kube-proxy-config":         true,
	"rbac.authorization.k8s.io/v1 RoleBinding kube-system/ironlb-speaker-kube-proxy-config":  true,
}

// checkNamespaces checks that every namespaced object of a rendering is in ns (or ns-webhook, the
// webhook certificate's), and that whatever names ironlb's namespace names ns.
func checkNamespaces(t *testing.T, ns string, objs map[string]map[string]any) {
	t.Helper()
	for k, o := range objs {
		md := o["metadata"].(map[string]any)
		got, _ := md["namespace"].(string)
		kind := o["kind"].(string)
		switch {
		case slices.Contains(clusterScoped, kind):
			if got != "" {
				t.Errorf("%s: cluster-scoped, with a namespace", k)
			}
			if kind == "Namespace" && md["name"] != ns+"-webhook" {
				t.Errorf("%s: the chart creates no namespace but %s-webhook", k, ns)
			}
		case elsewhere[k]:
		case got == ns || got == ns+"-webhook" && strings.HasPrefix(kind, "Role"):
		default:
			t.Errorf("%s: not in the release namespace %s", k, ns)
		}
		// RBAC subjects, webhook and conversion services: the release namespace.
		var refs []string
		for _, s := range asList(o["subjects"]) {
			refs = append(refs, fmt.Sprint(s.(map[string]any)["namespace"]))
		}
		for _, w := range asList(o["webhooks"]) {
			refs = append(refs, fmt.Sprint(dig(w, "clientConfig", "service", "namespace")))
		}
		if c := dig(o, "spec", "conversion", "webhook", "clientConfig", "service", "namespace"); c != nil {
			refs = append(refs, fmt.Sprint(c))
		}
		for _, r := range refs {
			if r != ns {
				t.Errorf("%s names namespace %s, not %s", k, r, ns)
			}
		}
	}
}

// checkLabels checks that every object carries the chart's labels (_helpers.tpl), and every pod the
// selector labels and its component.
func checkLabels(t *testing.T, objs map[string]map[string]any) {
	t.Helper()
	want := map[string]string{"app.kubernetes.io/name": "ironlb", "app.kubernetes.io/instance": "ironlb", "app.kubernetes.io/managed-by": "Helm"}
	for k, o := range objs {
		labels, _ := dig(o, "metadata", "labels").(map[string]any)
		for l, v := range want {
			if labels[l] != v {
				t.Errorf("%s: label %s=%v, want %s", k, l, labels[l], v)
			}
		}
		if _, ok := labels["helm.sh/chart"]; !ok {
			t.Errorf("%s: no helm.sh/chart label", k)
		}
		if pod, ok := dig(o, "spec", "template", "metadata", "labels").(map[string]any); ok {
			for _, l := range []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component"} {
				if pod[l] == nil || pod[l] != labels[l] {
					t.Errorf("%s: pod label %s=%v, the object's %v", k, l, pod[l], labels[l])
				}
			}
		}
	}
}

func asList(v any) []any { l, _ := v.([]any); return l }

func dig(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

// TestChartServerDryRun renders the chart with every toggle on, into metallb-system and into another
// namespace, and has a real apiserver validate every object (kubectl apply --dry-run=server
// --validate=strict: the API's schemas, unknown fields refused, admission). The Prometheus Operator's
// CRDs (PodMonitor, ServiceMonitor, PrometheusRule) are installed from testdata first, so those objects
// are validated too. It also installs a release whose values fail the schema: helm gives the same error
// as helm template, and nothing is left on the cluster.
func TestChartServerDryRun(t *testing.T) {
	helm := tool(t, "helm")
	env := testenv.Start(t)
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := env.Kubectl(args...)
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	kubectl("apply", "--server-side", "-f", "testdata/monitoring.coreos.com")
	kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/podmonitors.monitoring.coreos.com", "crd/servicemonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com")

	for _, ns := range []string{"metallb-system", "lb-system"} {
		t.Run(ns, func(t *testing.T) {
			args := append([]string{"template", "ironlb", "../charts/ironlb", "--namespace", ns}, setArgs(allOn)...)
			out, errOut, err := helmCmd(t, helm, args...)
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, errOut)
			}
			objs := objects(t, "helm template", []byte(out))
			checkNamespaces(t, ns, objs)
			checkLabels(t, objs)
			for _, kind := range []string{"Deployment", "DaemonSet", "PodDisruptionBudget", "PodMonitor", "ServiceMonitor", "PrometheusRule", "ConfigMap"} {
				if !slices.ContainsFunc(keys(objs), func(k string) bool { return strings.Contains(k, " "+kind+" ") }) {
					t.Errorf("no %s rendered with every toggle on", kind)
				}
			}
			// The release namespace exists before helm installs (helm install -n ns --create-namespace);
			// the dry run creates nothing, so the webhook certificate's namespace is created too.
			kubectl("create", "namespace", ns)
			kubectl("create", "namespace", ns+"-webhook")
			f := filepath.Join(t.TempDir(), "chart.yaml")
			if err := os.WriteFile(f, []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
			res, err := env.Kubectl("apply", "--dry-run=server", "--validate=strict", "-f", f)
			if err != nil {
				t.Fatalf("kubectl apply --dry-run=server: %v\n%s", err, res)
			}
			if n := strings.Count(res, "(server dry run)"); n != len(objs) {
				t.Errorf("the apiserver accepted %d objects of %d:\n%s", n, len(objs), res)
			}
			// The workloads' pods, as their controllers would create them: pod admission (the priority
			// classes, Pod Security on the namespace) runs on pods only.
			var pods []string
			for k, o := range objs {
				tpl, ok := dig(o, "spec", "template").(map[string]any)
				if !ok {
					continue
				}
				md := tpl["metadata"].(map[string]any)
				md["name"], md["namespace"] = "pod-of-"+fmt.Sprint(dig(o, "metadata", "name")), ns
				pod, err := yaml.Marshal(map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": tpl["spec"]})
				if err != nil {
					t.Fatalf("%s: %v", k, err)
				}
				pods = append(pods, string(pod))
			}
			// Their ServiceAccounts must exist (the ServiceAccount admission), which the dry run above
			// did not create.
			for _, sa := range []string{"ironlb-controller", "ironlb-speaker", "ironlb-proxy"} {
				kubectl("create", "serviceaccount", "-n", ns, sa)
			}
			if len(pods) != 3 {
				t.Errorf("%d pod templates, want the controller's, the speaker's and the proxy's", len(pods))
			}
			if err := os.WriteFile(f, []byte(strings.Join(pods, "---\n")), 0o644); err != nil {
				t.Fatal(err)
			}
			if res, err := env.Kubectl("create", "--dry-run=server", "--validate=strict", "-f", f); err != nil {
				t.Errorf("kubectl create --dry-run=server of the pods: %v\n%s", err, res)
			}
		})
	}

	t.Run("a value that fails the schema installs nothing", func(t *testing.T) {
		bad := schemaErrors[0]
		_, want, err := helmCmd(t, helm, "template", "ironlb", "../charts/ironlb", "--set", bad.set)
		if err == nil {
			t.Fatal("helm template: no error")
		}
		kubectl("create", "namespace", "bad-values")
		_, got, err := helmCmd(t, helm, "install", "ironlb", "../charts/ironlb", "--kubeconfig", env.Kubeconfig, "--namespace", "bad-values", "--set", bad.set)
		if err == nil {
			t.Fatal("helm install: no error")
		}
		// helm install says which action failed; the rest is the schema's error, as helm template gives it.
		if got = strings.Replace(got, "Error: INSTALLATION FAILED: ", "Error: ", 1); strings.TrimSpace(got) != strings.TrimSpace(want) {
			t.Errorf("helm install's error differs from helm template's:\n%s\nwant\n%s", got, want)
		}
		// Nothing of the chart: no release record, no object labelled by it.
		if out := kubectl("get", "secrets", "-n", "bad-values", "-l", "owner=helm", "-o", "name"); out != "" {
			t.Errorf("a helm release record was left:\n%s", out)
		}
		left := func() string {
			return kubectl("get", "crd,clusterroles,clusterrolebindings,validatingwebhookconfigurations,namespaces,roles,rolebindings,serviceaccounts,services,deployments,daemonsets", "-A", "-l", "app.kubernetes.io/instance=ironlb", "-o", "name")
		}
		if out := left(); out != "" {
			t.Errorf("objects left by the failed install:\n%s", out)
		}
		// The same install with good values does create them (the query above sees a chart's objects).
		if _, errOut, err := helmCmd(t, helm, "install", "ironlb", "../charts/ironlb", "--kubeconfig", env.Kubeconfig, "--namespace", "bad-values"); err != nil {
			t.Fatalf("helm install with the default values: %v\n%s", err, errOut)
		}
		if out := left(); !strings.Contains(out, "deployment.apps/ironlb-controller") {
			t.Errorf("helm install with the default values: no controller among\n%s", out)
		}
	})
}
