package manifests_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	yaml "go.yaml.in/yaml/v3"
)

// alertGroups reads the rule groups of config/prometheus-rules' PrometheusRule (MetalLB's alerting
// rules, hack/genchart/rules.go).
func alertGroups(t *testing.T) []map[string]any {
	t.Helper()
	b, err := os.ReadFile("prometheus-rules/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		Kind string
		Spec struct {
			Groups []map[string]any
		}
	}
	if err := yaml.Unmarshal(b, &pr); err != nil {
		t.Fatal(err)
	}
	if pr.Kind != "PrometheusRule" || len(pr.Spec.Groups) == 0 {
		t.Fatalf("prometheus-rules/rules.yaml: kind %q, %d groups", pr.Kind, len(pr.Spec.Groups))
	}
	return pr.Spec.Groups
}

type alertRule struct {
	Alert, Expr string
}

func alertRules(t *testing.T) []alertRule {
	t.Helper()
	var out []alertRule
	for _, g := range alertGroups(t) {
		b, _ := yaml.Marshal(g["rules"])
		var rs []alertRule
		if err := yaml.Unmarshal(b, &rs); err != nil {
			t.Fatal(err)
		}
		out = append(out, rs...)
	}
	return out
}

// TestAlertRulesAreMetalLBs: the rules are MetalLB v0.16.1's chart's, all of them.
func TestAlertRulesAreMetalLBs(t *testing.T) {
	var names []string
	for _, r := range alertRules(t) {
		names = append(names, r.Alert)
	}
	want := []string{"MetalLBStaleConfig", "MetalLBConfigNotLoaded", "MetalLBAddressPoolExhausted", "MetalLBAddressPoolUsage75Percent",
		"MetalLBAddressPoolUsage85Percent", "MetalLBAddressPoolUsage95Percent", "MetalLBBGPSessionDown"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("alerts (-want +got):\n%s", diff)
	}
}

// TestAlertRulesMetricsExist checks that every metric the rules' expressions read is one ironlb
// exports under MetalLB's name: defined in internal/metallbmetrics, which the controller and the
// speaker register (their tests read these series from their registries).
func TestAlertRulesMetricsExist(t *testing.T) {
	mlb := registeredMetrics(t, "../internal/metallbmetrics")
	all := registeredMetrics(t, "../internal")
	for _, r := range alertRules(t) {
		names := metricNames(r.Expr)
		if len(names) == 0 {
			t.Errorf("%s: %q reads no metric", r.Alert, r.Expr)
		}
		for _, n := range names {
			if !mlb[n] || !all[n] {
				t.Errorf("%s: %q reads %s, which ironlb does not export (internal/metallbmetrics)", r.Alert, r.Expr, n)
			}
		}
	}
}

// promtool returns Debian's promtool (package prometheus; hack/deps.sh installs it), skipping the
// test when it is missing outside CI.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" || os.Getenv("IRONLB_E2E") == "1" {
			t.Fatalf("promtool not found: hack/deps.sh installs it (Debian package prometheus)")
		}
		t.Skip("promtool not found (Debian package prometheus; hack/deps.sh installs it)")
	}
	return p
}

// TestAlertRulesPromtool checks the rules with promtool (every expression parses, every template
// expands) and runs promtool's rule tests: each alert fires on the series ironlb exports.
func TestAlertRulesPromtool(t *testing.T) {
	tool := promtool(t)
	dir := t.TempDir()
	b, err := yaml.Marshal(map[string]any{"groups": alertGroups(t)})
	if err != nil {
		t.Fatal(err)
	}
	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(tool, "check", "rules", rules).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	// The series are shaped as ironlb exports them (labels from its metrics and from the
	// PodMonitors: job="ironlb", pod, container).
	tests := `rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
- interval: 1m
  input_series:
  - series: 'metallb_bgp_session_up{job="ironlb",pod="ironlb-speaker-a",container="speaker",peer="172.18.255.254:179"}'
    values: '1 0 0 0 0'
  - series: 'metallb_k8s_client_config_stale_bool{job="ironlb",pod="ironlb-speaker-a",container="speaker"}'
    values: '0 1 1 1 1'
  - series: 'metallb_k8s_client_config_loaded_bool{job="ironlb",pod="ironlb-speaker-a",container="speaker"}'
    values: '1 1 1 1 1'
  - series: 'metallb_allocator_addresses_in_use_total{job="ironlb",pod="ironlb-controller-a",container="controller",pool="tiny"}'
    values: '1 1 1 1 1'
  - series: 'metallb_allocator_addresses_total{job="ironlb",pod="ironlb-controller-a",container="controller",pool="tiny"}'
    values: '1 1 1 1 1'
  - series: 'metallb_allocator_addresses_in_use_total{job="ironlb",pod="ironlb-controller-a",container="controller",pool="big"}'
    values: '1 1 1 1 1'
  - series: 'metallb_allocator_addresses_total{job="ironlb",pod="ironlb-controller-a",container="controller",pool="big"}'
    values: '100 100 100 100 100'
  alert_rule_test:
  - eval_time: 4m
    alertname: MetalLBBGPSessionDown
    exp_alerts:
    - exp_labels: {severity: critical, job: ironlb, pod: ironlb-speaker-a, container: speaker, peer: "172.18.255.254:179"}
      exp_annotations:
        summary: 'BGP session down on ironlb-speaker-a'
        message: 'ironlb - MetalLB speaker on ironlb-speaker-a has BGP session 172.18.255.254:179 down for > 1 minute'
  - eval_time: 4m
    alertname: MetalLBStaleConfig
    exp_alerts:
    - exp_labels: {severity: warning, job: ironlb, pod: ironlb-speaker-a, container: speaker}
      exp_annotations:
        summary: 'Stale config on ironlb-speaker-a'
        description: 'ironlb - MetalLB speaker on ironlb-speaker-a has a stale config for > 1 minute'
  - eval_time: 4m
    alertname: MetalLBConfigNotLoaded
    exp_alerts: []
  # on(pool) keeps the pool label alone, so MetalLB's annotations name no pod (as with MetalLB). The
  # pool gauges must have MetalLB's single pool label for on(pool) to match one to one.
  - eval_time: 4m
    alertname: MetalLBAddressPoolExhausted
    exp_alerts:
    - exp_labels: {severity: critical, pool: tiny}
      exp_annotations:
        summary: 'Exhausted address pool on '
        description: ' - MetalLB  on  has exhausted address pool tiny for > 1 minute'
  - eval_time: 4m
    alertname: MetalLBAddressPoolUsage95Percent
    exp_alerts:
    - exp_labels: {severity: critical, pool: tiny}
      exp_annotations:
        summary: 'Exhausted address pool on '
        message: ' - MetalLB  on  has address pool tiny past 95% usage for > 1 minute'
  - eval_time: 4m
    alertname: MetalLBAddressPoolUsage75Percent
    exp_alerts:
    - exp_labels: {severity: warning, pool: tiny}
      exp_annotations:
        summary: 'Exhausted address pool on '
        message: ' - MetalLB  on  has address pool tiny past 75% usage for > 1 minute'
`
	if err := os.WriteFile(filepath.Join(dir, "tests.yaml"), []byte(tests), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tool, "test", "rules", "tests.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	// A rule file promtool refuses fails the test: the check is not vacuous.
	bad := filepath.Join(dir, "bad.yaml")
	broken := strings.Replace(string(b), "== 0", "== == 0", 1)
	if err := os.WriteFile(bad, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command(tool, "check", "rules", bad).Run(); err == nil {
		t.Error("promtool accepted a broken expression")
	}
}
