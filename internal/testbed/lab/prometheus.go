package lab

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	manifests "github.com/ironlb/ironlb/config"
)

// The lab's Prometheus (lab up --prometheus) is Debian's prometheus package, run in the control-plane
// node's namespace like the rest of the control plane. It discovers ironlb's pods through the apiserver
// and scrapes them as the Prometheus Operator would from config/prometheus's PodMonitors: those very
// objects are translated into scrape configurations (PodMonitorScrapeConfigs), so the lab tests them.

// PrometheusBin is Debian's prometheus.
const PrometheusBin = "/usr/bin/prometheus"

// PrometheusPort is where the lab's Prometheus listens, on the control-plane node's address.
const PrometheusPort = 9090

// LabScrapeInterval replaces the PodMonitors' intervals in the lab, so that a short test sees rates.
const LabScrapeInterval = "5s"

// PodMonitor is the part of a Prometheus Operator PodMonitor (monitoring.coreos.com/v1) that ironlb's
// monitors use.
type PodMonitor struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels,omitempty"`
	} `json:"metadata"`
	Spec PodMonitorSpec `json:"spec"`
}

// PodMonitorSpec selects pods by label (in the monitor's namespace unless namespaceSelector names
// others) and says which of their ports to scrape.
type PodMonitorSpec struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	NamespaceSelector struct {
		MatchNames []string `json:"matchNames"`
	} `json:"namespaceSelector"`
	PodMetricsEndpoints []PodMetricsEndpoint `json:"podMetricsEndpoints"`
	// JobLabel names the pod label whose value becomes the job label (when the pod has it), as the
	// Prometheus Operator does: ironlb's monitors use app, so that job is "ironlb" and MetalLB's
	// alerting rules (job=~"ironlb.*", config/prometheus-rules) select them.
	JobLabel string `json:"jobLabel,omitempty"`
}

// PodMetricsEndpoint is one scraped port of the selected pods. Scheme, TLSConfig and
// BearerTokenSecret are how the controller's and the speaker's HTTPS metrics are scraped.
type PodMetricsEndpoint struct {
	Port              string             `json:"port"`
	Path              string             `json:"path"`
	Interval          string             `json:"interval"`
	Scheme            string             `json:"scheme,omitempty"`
	TLSConfig         *SafeTLSConfig     `json:"tlsConfig,omitempty"`
	BearerTokenSecret *SecretKeySelector `json:"bearerTokenSecret,omitempty"`
	Relabelings       []Relabeling       `json:"relabelings"`
}

// SafeTLSConfig is the part of the Prometheus Operator's TLS configuration ironlb's monitors use.
type SafeTLSConfig struct {
	InsecureSkipVerify bool `json:"insecureSkipVerify"`
}

// SecretKeySelector names a key of a Secret in the PodMonitor's namespace.
type SecretKeySelector struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// SecretFile is where the lab writes the value of a Secret's key that a PodMonitor names, under
// secretsDir, for Prometheus to read (credentials_file).
func SecretFile(secretsDir, namespace string, sel SecretKeySelector) string {
	return filepath.Join(secretsDir, namespace+"_"+sel.Name+"_"+sel.Key)
}

// Relabeling is a Prometheus Operator RelabelConfig (camelCase names).
type Relabeling struct {
	SourceLabels []string `json:"sourceLabels,omitempty"`
	Separator    string   `json:"separator,omitempty"`
	TargetLabel  string   `json:"targetLabel,omitempty"`
	Regex        string   `json:"regex,omitempty"`
	Replacement  *string  `json:"replacement,omitempty"`
	Action       string   `json:"action,omitempty"`
}

// relabel is Prometheus' own relabel_config.
type relabel struct {
	SourceLabels []string `json:"source_labels,omitempty"`
	Separator    string   `json:"separator,omitempty"`
	TargetLabel  string   `json:"target_label,omitempty"`
	Regex        string   `json:"regex,omitempty"`
	Replacement  *string  `json:"replacement,omitempty"`
	Action       string   `json:"action,omitempty"`
}

// ParsePodMonitors reads the PodMonitors of a multi-document YAML stream; other kinds are skipped.
func ParsePodMonitors(stream string) ([]PodMonitor, error) {
	var out []PodMonitor
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(stream, -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var m PodMonitor
		if err := yaml.UnmarshalStrict([]byte(doc), &m); err != nil {
			var probe struct{ Kind string }
			if yaml.Unmarshal([]byte(doc), &probe) == nil && probe.Kind != "PodMonitor" {
				continue
			}
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if m.Kind != "PodMonitor" {
			continue
		}
		if m.Metadata.Name == "" || len(m.Spec.PodMetricsEndpoints) == 0 {
			return nil, fmt.Errorf("PodMonitor %q: needs a name and at least one podMetricsEndpoint", m.Metadata.Name)
		}
		out = append(out, m)
	}
	return out, nil
}

// PodSDPort is where the lab's pod discovery (PodSDHandler) listens, on the control-plane node's
// loopback.
const PodSDPort = 9091

var labelNameChars = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// PodMonitorScrapeConfigs translates PodMonitors into Prometheus scrape configurations the way the
// Prometheus Operator does (job podMonitor/<namespace>/<name>/<index>; pods kept by label selector and
// container port name; namespace, pod, container labels; the monitor's relabelings last). Pods are
// discovered over HTTP from sdURL (PodSDHandler, which gives the labels of Prometheus' kubernetes pod
// discovery: Debian builds Prometheus without it). interval, when set, replaces every endpoint's
// interval. A bearerTokenSecret becomes a credentials_file at SecretFile(secretsDir, ...), which the
// caller writes. It does no I/O.
func PodMonitorScrapeConfigs(mons []PodMonitor, sdURL, interval, secretsDir string) ([]map[string]any, error) {
	var out []map[string]any
	for _, m := range mons {
		namespaces := m.Spec.NamespaceSelector.MatchNames
		if len(namespaces) == 0 {
			namespaces = []string{m.Metadata.Namespace}
		}
		for i, ep := range m.Spec.PodMetricsEndpoints {
			if ep.Port == "" {
				return nil, fmt.Errorf("PodMonitor %s/%s endpoint %d: only named ports are supported", m.Metadata.Namespace, m.Metadata.Name, i)
			}
			var rl []relabel
			keys := make([]string, 0, len(m.Spec.Selector.MatchLabels))
			for k := range m.Spec.Selector.MatchLabels {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				l := labelNameChars.ReplaceAllString(k, "_")
				rl = append(rl, relabel{Action: "keep", Regex: "(" + regexp.QuoteMeta(m.Spec.Selector.MatchLabels[k]) + ");true",
					SourceLabels: []string{"__meta_kubernetes_pod_label_" + l, "__meta_kubernetes_pod_labelpresent_" + l}})
			}
			rl = append(rl,
				relabel{Action: "keep", SourceLabels: []string{"__meta_kubernetes_pod_container_port_name"}, Regex: regexp.QuoteMeta(ep.Port)},
				relabel{Action: "drop", SourceLabels: []string{"__meta_kubernetes_pod_phase"}, Regex: "(Failed|Succeeded)"},
				relabel{SourceLabels: []string{"__meta_kubernetes_namespace"}, TargetLabel: "namespace"},
				relabel{SourceLabels: []string{"__meta_kubernetes_pod_container_name"}, TargetLabel: "container"},
				relabel{SourceLabels: []string{"__meta_kubernetes_pod_name"}, TargetLabel: "pod"},
			)
			for _, r := range ep.Relabelings {
				rl = append(rl, relabel(r))
			}
			job := fmt.Sprintf("podMonitor/%s/%s/%d", m.Metadata.Namespace, m.Metadata.Name, i)
			rl = append(rl, relabel{TargetLabel: "job", Replacement: &job})
			if m.Spec.JobLabel != "" {
				one := "${1}"
				rl = append(rl, relabel{SourceLabels: []string{"__meta_kubernetes_pod_label_" + labelNameChars.ReplaceAllString(m.Spec.JobLabel, "_")},
					TargetLabel: "job", Regex: "(.+)", Replacement: &one})
			}
			path := ep.Path
			if path == "" {
				path = "/metrics"
			}
			every := ep.Interval
			if interval != "" {
				every = interval
			}
			sc := map[string]any{
				"job_name":     job,
				"metrics_path": path,
				"http_sd_configs": []any{map[string]any{
					"url":              sdURL + "?" + url.Values{"namespace": namespaces}.Encode(),
					"refresh_interval": cmp.Or(interval, "30s"),
				}},
				"relabel_configs": rl,
			}
			if every != "" {
				sc["scrape_interval"] = every
			}
			if ep.Scheme != "" {
				sc["scheme"] = ep.Scheme
			}
			if ep.TLSConfig != nil {
				sc["tls_config"] = map[string]any{"insecure_skip_verify": ep.TLSConfig.InsecureSkipVerify}
			}
			if sel := ep.BearerTokenSecret; sel != nil {
				sc["authorization"] = map[string]any{"type": "Bearer", "credentials_file": SecretFile(secretsDir, m.Metadata.Namespace, *sel)}
			}
			out = append(out, sc)
		}
	}
	return out, nil
}

// PrometheusConfig is the lab Prometheus' whole configuration file (YAML) for ironlb's PodMonitors,
// loading the rule files named (RuleFile's).
func PrometheusConfig(mons []PodMonitor, sdURL, interval, secretsDir string, ruleFiles ...string) (string, error) {
	scs, err := PodMonitorScrapeConfigs(mons, sdURL, interval, secretsDir)
	if err != nil {
		return "", err
	}
	cfg := map[string]any{
		"global":         map[string]any{"scrape_interval": interval, "evaluation_interval": interval},
		"scrape_configs": scs,
	}
	if len(ruleFiles) > 0 {
		cfg["rule_files"] = ruleFiles
	}
	b, err := yaml.Marshal(cfg)
	return string(b), err
}

// RuleFile turns the PrometheusRules of a multi-document YAML stream (config/prometheus-rules:
// MetalLB's alerting rules) into a Prometheus rule file, as the Prometheus Operator does: their
// spec.groups, in order. Other kinds are skipped; no PrometheusRule is an error.
func RuleFile(stream string) (string, error) {
	var groups []any
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(stream, -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var pr struct {
			Kind string
			Spec struct {
				Groups []any `json:"groups"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &pr); err != nil {
			return "", fmt.Errorf("document %d: %w", i, err)
		}
		if pr.Kind == "PrometheusRule" {
			groups = append(groups, pr.Spec.Groups...)
		}
	}
	if len(groups) == 0 {
		return "", fmt.Errorf("no PrometheusRule groups")
	}
	b, err := yaml.Marshal(map[string]any{"groups": groups})
	return string(b), err
}

func (l *Lab) podSDURL() string { return fmt.Sprintf("http://127.0.0.1:%d/pods", PodSDPort) }

func (l *Lab) prometheusDir() string { return filepath.Join(l.State.Dir, "prometheus") }

// PrometheusURL is the lab Prometheus' address, reachable from the lab's namespaces (e.g. `ironlb lab
// exec mypc -- curl URL/api/v1/query?query=up`).
func (l *Lab) PrometheusURL() string {
	return "http://" + netip.AddrPortFrom(l.Plan.ControlPlane().Addr, PrometheusPort).String()
}

// startPrometheus writes the configuration from config/prometheus (and the rules of
// config/prometheus-rules) and starts Prometheus in the control-plane node, then waits until it is
// ready.
func (l *Lab) startPrometheus(ctx context.Context) error {
	if _, err := os.Stat(PrometheusBin); err != nil {
		return fmt.Errorf("%s: %w (apt-get install prometheus)", PrometheusBin, err)
	}
	stream, err := manifests.Bundle("prometheus")
	if err != nil {
		return err
	}
	mons, err := ParsePodMonitors(stream)
	if err != nil {
		return fmt.Errorf("config/prometheus: %w", err)
	}
	dir := l.prometheusDir()
	// MetalLB's alerting rules, as installed with config/prometheus-rules: `ironlb lab promql ALERTS`.
	rstream, err := manifests.Bundle("prometheus-rules")
	if err != nil {
		return err
	}
	rules, err := RuleFile(rstream)
	if err != nil {
		return fmt.Errorf("config/prometheus-rules: %w", err)
	}
	rulesFile := filepath.Join(dir, "rules.yml")
	cfg, err := PrometheusConfig(mons, l.podSDURL(), LabScrapeInterval, filepath.Join(dir, "secrets"), rulesFile)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(rulesFile, []byte(rules), 0o644); err != nil {
		return err
	}
	if err := l.monitorSecrets(ctx, stream, mons, filepath.Join(dir, "secrets")); err != nil {
		return err
	}
	file := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, "promtool", "check", "config", file).CombinedOutput(); err != nil {
		return fmt.Errorf("promtool check config %s: %w\n%s", file, err, out)
	}
	cp := l.Plan.ControlPlane()
	if err := l.startDetached(cp.Name, "podsd", ExecSpec{NetNS: cp.Name, Argv: []string{l.Plan.Config.Self, "lab", "podsd",
		"--kubeconfig", l.State.InternalKubeconfig(), "--listen", fmt.Sprintf("127.0.0.1:%d", PodSDPort)}}); err != nil {
		return err
	}
	if err := l.startDetached(cp.Name, "prometheus", ExecSpec{NetNS: cp.Name, Argv: []string{PrometheusBin,
		"--config.file=" + file, "--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + netip.AddrPortFrom(cp.Addr, PrometheusPort).String(), "--log.level=warn"}}); err != nil {
		return err
	}
	return poll(ctx, 30*time.Second, func() (bool, string, error) {
		_, err := l.promGet(ctx, "/-/ready", nil)
		return err == nil, fmt.Sprintf("Prometheus ready (%v)", err), nil
	})
}

// promGet fetches a path of the lab's Prometheus from inside the control-plane node's namespace.
func (l *Lab) promGet(ctx context.Context, path string, q url.Values) ([]byte, error) {
	c := &http.Client{Transport: &http.Transport{DialContext: Dialer(l.Plan.ControlPlane().Name)}, Timeout: 10 * time.Second}
	u := l.PrometheusURL() + path
	if q != nil {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return b, fmt.Errorf("GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	return b, nil
}

// PromQuery evaluates an instant PromQL query on the lab's Prometheus and returns its raw JSON answer
// (the "data" object of /api/v1/query).
func (l *Lab) PromQuery(ctx context.Context, expr string) (json.RawMessage, error) {
	if !l.Plan.Config.Prometheus {
		return nil, fmt.Errorf("lab %s has no Prometheus (bring it up with --prometheus)", l.Plan.Config.Name)
	}
	b, err := l.promGet(ctx, "/api/v1/query", url.Values{"query": {expr}})
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("query %q: %w", expr, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %q: %s", expr, r.Error)
	}
	return r.Data, nil
}

// monitorSecrets does for the lab's Prometheus what the Prometheus Operator does: it applies the
// objects of config/prometheus that are not PodMonitors (the metrics reader's ServiceAccount, token
// Secret and RBAC), waits for the token controller to fill each Secret a PodMonitor names, and
// writes the key to SecretFile.
func (l *Lab) monitorSecrets(ctx context.Context, stream string, mons []PodMonitor, secretsDir string) error {
	if err := l.applyMonitorRBAC(ctx, stream); err != nil {
		return err
	}
	if err := os.MkdirAll(secretsDir, 0o700); err != nil {
		return err
	}
	cs, err := l.Client()
	if err != nil {
		return err
	}
	for _, m := range mons {
		for _, ep := range m.Spec.PodMetricsEndpoints {
			sel := ep.BearerTokenSecret
			if sel == nil {
				continue
			}
			var val []byte
			if err := poll(ctx, 30*time.Second, func() (bool, string, error) {
				s, err := cs.CoreV1().Secrets(m.Metadata.Namespace).Get(ctx, sel.Name, metav1.GetOptions{})
				if err == nil {
					val = s.Data[sel.Key]
				}
				return len(val) > 0, fmt.Sprintf("secret %s/%s key %s filled (%v)", m.Metadata.Namespace, sel.Name, sel.Key, err), nil
			}); err != nil {
				return err
			}
			if err := os.WriteFile(SecretFile(secretsDir, m.Metadata.Namespace, *sel), val, 0o600); err != nil {
				return err
			}
		}
	}
	return nil
}

// applyMonitorRBAC applies the objects of config/prometheus that are not PodMonitors: the metrics
// reader's ServiceAccount, its token Secret and its RBAC (get /metrics).
func (l *Lab) applyMonitorRBAC(ctx context.Context, stream string) error {
	var others []string
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(stream, -1) {
		var probe struct{ Kind string }
		if strings.TrimSpace(doc) != "" && yaml.Unmarshal([]byte(doc), &probe) == nil && probe.Kind != "" && probe.Kind != "PodMonitor" {
			others = append(others, doc)
		}
	}
	if len(others) == 0 {
		return nil
	}
	return l.kubectlApply(ctx, strings.Join(others, "\n---\n"))
}

// MetricsReader is the ServiceAccount of config/prometheus allowed to get the controller's, the
// speakers' and the proxies' /metrics.
const MetricsReader = "ironlb-metrics-reader"

// MetricsToken returns a bearer token (valid for an hour) of MetricsReader, for reading the
// controller's, the speakers' and the proxies' HTTPS metrics from the lab; it applies
// config/prometheus's RBAC first.
func (l *Lab) MetricsToken(ctx context.Context) (string, error) {
	stream, err := manifests.Bundle("prometheus")
	if err != nil {
		return "", err
	}
	if err := l.applyMonitorRBAC(ctx, stream); err != nil {
		return "", err
	}
	cs, err := l.Client()
	if err != nil {
		return "", err
	}
	hour := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts("metallb-system").CreateToken(ctx, MetricsReader,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &hour}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of %s: %w", MetricsReader, err)
	}
	return tr.Status.Token, nil
}
