package lab

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	manifests "github.com/ironlb/ironlb/config"
)

func shippedMonitors(t *testing.T) []PodMonitor {
	t.Helper()
	stream, err := manifests.Bundle("prometheus")
	if err != nil {
		t.Fatal(err)
	}
	mons, err := ParsePodMonitors(stream)
	if err != nil {
		t.Fatal(err)
	}
	return mons
}

// The PodMonitors shipped in config/prometheus become one scrape job per role, selecting the role's pods
// by label and port name, with the speaker's node relabeling.
func TestPodMonitorScrapeConfigs(t *testing.T) {
	mons := shippedMonitors(t)
	scs, err := PodMonitorScrapeConfigs(mons, "http://127.0.0.1:9091/pods", "5s", "/secrets")
	if err != nil {
		t.Fatal(err)
	}
	jobs := map[string]map[string]any{}
	for _, sc := range scs {
		jobs[sc["job_name"].(string)] = sc
	}
	ports := map[string]string{"controller": "monitoring", "speaker": "monitoring", "proxy": "metrics"}
	for _, role := range []string{"controller", "speaker", "proxy"} {
		job := "podMonitor/metallb-system/ironlb-" + role + "/0"
		sc, ok := jobs[job]
		if !ok {
			t.Fatalf("no job %s in %v", job, scs)
		}
		b, _ := yaml.Marshal(sc)
		s := string(b)
		for _, want := range []string{
			"regex: (" + role + ");true", "__meta_kubernetes_pod_label_component", "regex: " + ports[role],
			"__meta_kubernetes_pod_container_port_name", "scrape_interval: 5s", "metrics_path: /metrics",
			"url: http://127.0.0.1:9091/pods?namespace=metallb-system", "target_label: job",
			// jobLabel app: job="ironlb", which MetalLB's alerting rules select.
			"- regex: (.+)\n  replacement: ${1}\n  source_labels:\n  - __meta_kubernetes_pod_label_app\n  target_label: job",
		} {
			if !strings.Contains(s, want) {
				t.Errorf("job %s lacks %q:\n%s", job, want, s)
			}
		}
		// Every role's metrics are HTTPS with the metrics reader's token.
		for _, want := range []string{"scheme: https", "insecure_skip_verify: true",
			"credentials_file: /secrets/metallb-system_ironlb-metrics-reader-token_token"} {
			if !strings.Contains(s, want) {
				t.Errorf("job %s lacks %q:\n%s", job, want, s)
			}
		}
		if hasNode := strings.Contains(s, "target_label: node"); hasNode != (role != "controller") {
			t.Errorf("job %s: node relabeling present=%v, want it for the per-node roles:\n%s", job, hasNode, s)
		}
	}
	if len(scs) != 3 {
		t.Errorf("%d scrape configs, want 3", len(scs))
	}
}

// Prometheus itself accepts the lab's configuration (promtool, from Debian's prometheus package).
func TestPrometheusConfigPromtool(t *testing.T) {
	if _, err := exec.LookPath("promtool"); err != nil {
		t.Skip("promtool not installed (apt-get install prometheus)")
	}
	dir := t.TempDir()
	mons := shippedMonitors(t)
	for _, m := range mons {
		for _, ep := range m.Spec.PodMetricsEndpoints {
			if ep.BearerTokenSecret != nil {
				if err := os.WriteFile(SecretFile(dir, m.Metadata.Namespace, *ep.BearerTokenSecret), []byte("token"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	stream, err := manifests.Bundle("prometheus-rules")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := RuleFile(stream)
	if err != nil {
		t.Fatal(err)
	}
	rulesFile := filepath.Join(dir, "rules.yml")
	if err := os.WriteFile(rulesFile, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rules, "alert: MetalLBBGPSessionDown") {
		t.Errorf("rule file lacks MetalLB's rules:\n%s", rules)
	}
	cfg, err := PrometheusConfig(mons, "http://127.0.0.1:9091/pods", "5s", dir, rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cfg, "rule_files:\n- "+rulesFile) {
		t.Errorf("configuration does not load the rules:\n%s", cfg)
	}
	// Without --syntax-only, promtool checks the rule files too.
	if out, err := exec.Command("promtool", "check", "config", file).CombinedOutput(); err != nil {
		t.Fatalf("promtool: %v\n%s\n%s", err, out, cfg)
	}
	if _, err := RuleFile("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"); err == nil {
		t.Error("RuleFile: no error without a PrometheusRule")
	}
}

func TestParsePodMonitorsErrors(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field": "apiVersion: monitoring.coreos.com/v1\nkind: PodMonitor\nmetadata: {name: a}\nspec:\n  podMetricsEndpoints: [{port: x}]\n  bogus: 1\n",
		"no endpoints":  "apiVersion: monitoring.coreos.com/v1\nkind: PodMonitor\nmetadata: {name: a}\nspec: {}\n",
		"no name":       "apiVersion: monitoring.coreos.com/v1\nkind: PodMonitor\nspec:\n  podMetricsEndpoints: [{port: x}]\n",
	} {
		if _, err := ParsePodMonitors(doc); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	mons, err := ParsePodMonitors("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\n---\n")
	if err != nil || len(mons) != 0 {
		t.Errorf("other kinds: %v %v, want skipped", mons, err)
	}
	if _, err := PodMonitorScrapeConfigs([]PodMonitor{{Spec: PodMonitorSpec{PodMetricsEndpoints: []PodMetricsEndpoint{{Path: "/metrics"}}}}}, "", "", ""); err == nil {
		t.Error("numeric-port endpoint: no error")
	}
}

// PodTargets labels targets as Prometheus' kubernetes pod discovery does: one per container port.
func TestPodTargets(t *testing.T) {
	yes := true
	pods := []corev1.Pod{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "metallb-system", Name: "speaker-x", UID: "u1",
			Labels:          map[string]string{"app": "ironlb", "app.kubernetes.io/name": "x"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Name: "ironlb-speaker", Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: "myk8s-worker", Containers: []corev1.Container{{Name: "speaker", Image: "ironlb",
			Ports: []corev1.ContainerPort{{Name: "monitoring", ContainerPort: 7472, Protocol: corev1.ProtocolTCP},
				{Name: "memberlist", ContainerPort: 7946, Protocol: corev1.ProtocolUDP}}}}},
		Status: corev1.PodStatus{PodIP: "172.18.0.3", HostIP: "172.18.0.3", Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}, {
		ObjectMeta: metav1.ObjectMeta{Namespace: "metallb-system", Name: "pending"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{{ContainerPort: 1}}}}},
	}}
	got := PodTargets(pods)
	if len(got) != 2 {
		t.Fatalf("%d targets, want 2 (the pod without an IP left out): %+v", len(got), got)
	}
	want := map[string]string{
		"__meta_kubernetes_namespace": "metallb-system", "__meta_kubernetes_pod_name": "speaker-x",
		"__meta_kubernetes_pod_node_name": "myk8s-worker", "__meta_kubernetes_pod_phase": "Running",
		"__meta_kubernetes_pod_ready": "true", "__meta_kubernetes_pod_label_app": "ironlb",
		"__meta_kubernetes_pod_labelpresent_app": "true", "__meta_kubernetes_pod_label_app_kubernetes_io_name": "x",
		"__meta_kubernetes_pod_container_name": "speaker", "__meta_kubernetes_pod_container_port_name": "monitoring",
		"__meta_kubernetes_pod_container_port_number": "7472", "__meta_kubernetes_pod_container_port_protocol": "TCP",
		"__meta_kubernetes_pod_controller_kind": "DaemonSet", "__meta_kubernetes_pod_controller_name": "ironlb-speaker",
	}
	if got[0].Targets[0] != "172.18.0.3:7472" {
		t.Errorf("target %v, want 172.18.0.3:7472", got[0].Targets)
	}
	for k, v := range want {
		if got[0].Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, got[0].Labels[k], v)
		}
	}
	if got[1].Labels["__meta_kubernetes_pod_container_port_name"] != "memberlist" || got[1].Targets[0] != "172.18.0.3:7946" {
		t.Errorf("second target %+v", got[1])
	}
}
