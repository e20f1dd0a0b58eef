package manifests_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	yaml "go.yaml.in/yaml/v3"

	manifests "github.com/ironlb/ironlb/config"
)

// The install has three forms that must not drift: the files config/manifests.go embeds (what the lab
// applies), config/default (kubectl apply -k) and the Helm chart charts/ironlb (generated from config/
// by hack/genchart). These tests hold them together.

var baseDirs = []string{"crd/bases", "controller", "speaker"}

// TestKustomizationLists checks that each base folder's generated kustomization.yml lists exactly the
// folder's manifests, so config/default installs what the lab does (hack/generate.sh rewrites them).
func TestKustomizationLists(t *testing.T) {
	for _, d := range baseDirs {
		files, _ := filepath.Glob(filepath.Join(d, "*.yaml"))
		var want []string
		for _, f := range files {
			want = append(want, filepath.Base(f))
		}
		b, err := os.ReadFile(filepath.Join(d, "kustomization.yml"))
		if err != nil {
			t.Fatalf("%v (run hack/generate.sh)", err)
		}
		var k struct {
			Resources []string `yaml:"resources"`
		}
		if err := yaml.Unmarshal(b, &k); err != nil {
			t.Fatalf("%s/kustomization.yml: %v", d, err)
		}
		if diff := cmp.Diff(want, k.Resources); diff != "" {
			t.Errorf("%s/kustomization.yml resources (-folder +listed); run hack/generate.sh:\n%s", d, diff)
		}
	}
}

// versions reads hack/versions.env.
func versions(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open("../hack/versions.env")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "="); ok && !strings.HasPrefix(k, "#") {
			out[k] = v
		}
	}
	return out
}

func cacheDir() string {
	if c := os.Getenv("IRONLB_CACHE"); c != "" {
		return c
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "ironlb")
}

// tool returns the path of kubectl or helm as hack/k8s-binaries.sh and hack/helm.sh build them, and
// skips the test when it is missing.
func tool(t *testing.T, name string) string {
	t.Helper()
	v := versions(t)
	var path, how string
	switch name {
	case "kubectl":
		dir := os.Getenv("IRONLB_K8S_BIN")
		if dir == "" {
			dir = filepath.Join(cacheDir(), "kubernetes", v["KUBE_VERSION"]+"-etcd"+v["ETCD_VERSION"], "bin")
		}
		path, how = filepath.Join(dir, "kubectl"), "hack/k8s-binaries.sh (make k8s)"
	case "helm":
		path, how = filepath.Join(cacheDir(), "helm", v["HELM_VERSION"], "helm"), "hack/helm.sh"
	}
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("IRONLB_E2E") == "1" {
			t.Fatalf("%s not found at %s; %s builds it", name, path, how)
		}
		t.Skipf("%s not found at %s; %s builds it", name, path, how)
	}
	return path
}

func run(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// objects parses a YAML stream into objects keyed "apiVersion kind namespace/name".
func objects(t *testing.T, what string, data []byte) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var o map[string]any
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if o == nil {
			continue // an empty document (a template toggled off)
		}
		md, _ := o["metadata"].(map[string]any)
		key := fmt.Sprintf("%v %v %v/%v", o["apiVersion"], o["kind"], md["namespace"], md["name"])
		if _, dup := out[key]; dup {
			t.Fatalf("%s: %s twice", what, key)
		}
		out[key] = o
	}
	if len(out) == 0 {
		t.Fatalf("%s: no objects", what)
	}
	return out
}

func keys(m map[string]map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func union(ms ...map[string]map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func same(t *testing.T, what string, want, got map[string]map[string]any) {
	t.Helper()
	if diff := cmp.Diff(keys(want), keys(got)); diff != "" {
		t.Errorf("%s: objects (-want +got):\n%s", what, diff)
		return
	}
	for _, k := range keys(want) {
		if diff := cmp.Diff(want[k], got[k]); diff != "" {
			t.Errorf("%s: %s (-want +got):\n%s", what, k, diff)
		}
	}
}

// TestKustomizeDefaultIsTheLabInstall renders config/default and compares it with what the lab applies.
func TestKustomizeDefaultIsTheLabInstall(t *testing.T) {
	kubectl := tool(t, "kubectl")
	var bundle strings.Builder
	for _, d := range baseDirs {
		b, err := manifests.Bundle(d)
		if err != nil {
			t.Fatal(err)
		}
		bundle.WriteString(b)
	}
	same(t, "kubectl kustomize config/default vs config/manifests.go",
		objects(t, "manifests.Bundle", []byte(bundle.String())), objects(t, "config/default", run(t, kubectl, "kustomize", "default")))
	def := objects(t, "config/default", run(t, kubectl, "kustomize", "default"))
	for _, o := range []string{"overlays/l2", "overlays/bgp"} {
		same(t, o, def, objects(t, o, run(t, kubectl, "kustomize", o)))
	}
}

// chartOnly makes the chart's rendering comparable with kubectl kustomize's. It removes what only the
// chart has, on purpose: the annotation on CRDs (helm uninstall keeps them, and with them every pool),
// the chart's labels (helm.sh/chart, app.kubernetes.io/*: _helpers.tpl) on objects and pods, and the
// controller's PodDisruptionBudget (controller.podDisruptionBudget).
func chartOnly(objs map[string]map[string]any) map[string]map[string]any {
	strip := func(md map[string]any) {
		l, ok := md["labels"].(map[string]any)
		if !ok {
			return
		}
		for k := range l {
			if k == "helm.sh/chart" || strings.HasPrefix(k, "app.kubernetes.io/") {
				delete(l, k)
			}
		}
		if len(l) == 0 {
			delete(md, "labels")
		}
	}
	for k, o := range objs {
		if o["kind"] == "PodDisruptionBudget" {
			delete(objs, k)
			continue
		}
		md := o["metadata"].(map[string]any)
		strip(md)
		if a, ok := md["annotations"].(map[string]any); ok && o["kind"] == "CustomResourceDefinition" {
			if a["helm.sh/resource-policy"] != "keep" {
				continue // left in place: the comparison shows it missing
			}
			delete(a, "helm.sh/resource-policy")
		}
		if spec, ok := o["spec"].(map[string]any); ok {
			if tpl, ok := spec["template"].(map[string]any); ok {
				if md, ok := tpl["metadata"].(map[string]any); ok {
					strip(md)
				}
			}
		}
	}
	return objs
}

// withoutReleaseNamespace removes config/default's metallb-system Namespace: helm installs into an
// existing release namespace (helm install -n metallb-system --create-namespace), so the chart has none.
func withoutReleaseNamespace(objs map[string]map[string]any) map[string]map[string]any {
	delete(objs, "v1 Namespace <nil>/metallb-system")
	return objs
}

// TestChartRendersKustomize renders charts/ironlb with helm into metallb-system and config/ with
// kubectl kustomize, and compares the objects, toggle by toggle.
func TestChartRendersKustomize(t *testing.T) {
	kubectl, helm := tool(t, "kubectl"), tool(t, "helm")
	kust := func(dir string) map[string]map[string]any {
		return objects(t, dir, run(t, kubectl, "kustomize", dir))
	}
	chart := func(set ...string) map[string]map[string]any {
		args := []string{"template", "ironlb", "../charts/ironlb", "--namespace", "metallb-system"}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		return chartOnly(objects(t, "helm "+strings.Join(args, " "), run(t, helm, args...)))
	}
	def := withoutReleaseNamespace(kust("default"))
	tests := []struct {
		name string
		want map[string]map[string]any
		set  []string
	}{
		{"defaults = config/default", def, nil},
		{"proxy.enabled = config/overlays/with-proxy", withoutReleaseNamespace(kust("overlays/with-proxy")), []string{"proxy.enabled=true"}},
		{"prometheus.podMonitor.enabled = config/default + config/prometheus", union(def, kust("prometheus")), []string{"prometheus.podMonitor.enabled=true"}},
		{"prometheus.prometheusRule.enabled = config/default + config/prometheus-rules", union(def, kust("prometheus-rules")), []string{"prometheus.prometheusRule.enabled=true"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { same(t, tt.name, tt.want, chart(tt.set...)) })
	}

	t.Run("every CRD is kept on uninstall", func(t *testing.T) {
		n := 0
		for k, o := range objects(t, "helm template", run(t, helm, "template", "ironlb", "../charts/ironlb")) {
			if o["kind"] == "CustomResourceDefinition" {
				n++
				if a, _ := o["metadata"].(map[string]any)["annotations"].(map[string]any); a["helm.sh/resource-policy"] != "keep" {
					t.Errorf("%s lacks helm.sh/resource-policy: keep", k)
				}
			}
		}
		if n == 0 {
			t.Error("no CRD rendered")
		}
	})
}

// TestChartIsGenerated checks that the chart, and the image tags in config/, are what hack/genchart
// makes of config/ and VERSION now (the same check hack/generate.sh --check makes, without git).
func TestChartIsGenerated(t *testing.T) {
	tmp := t.TempDir()
	dirs := []string{"crd/bases", "controller", "speaker", "proxy", "prometheus"}
	for _, src := range dirs {
		copyDir(t, src, filepath.Join(tmp, "config", src), "*.yaml")
	}
	copyDir(t, "grafana", filepath.Join(tmp, "config/grafana"), "*.json")
	copyFile(t, "../VERSION", filepath.Join(tmp, "VERSION"))
	// The chart as committed: genchart keeps the hand-written files, rewrites and removes the
	// generated ones.
	chart := map[string]string{"": "*.*", "templates": "*.*", "dashboards": "*.*"}
	for sub, glob := range chart {
		copyDir(t, filepath.Join("../charts/ironlb", sub), filepath.Join(tmp, "charts/ironlb", sub), glob)
	}
	out, err := exec.Command("go", "run", "../hack/genchart", "-root", tmp).CombinedOutput()
	if err != nil {
		t.Fatalf("go run ./hack/genchart: %v\n%s", err, out)
	}
	var gen, have []string
	for sub, glob := range chart {
		g, _ := filepath.Glob(filepath.Join(tmp, "charts/ironlb", sub, glob))
		h, _ := filepath.Glob(filepath.Join("../charts/ironlb", sub, glob))
		gen, have = append(gen, g...), append(have, h...)
	}
	// genchart also sets the manifests' image tags to VERSION, and writes config/prometheus-rules.
	for _, d := range append(dirs, "prometheus-rules") {
		g, _ := filepath.Glob(filepath.Join(tmp, "config", d, "*.yaml"))
		h, _ := filepath.Glob(filepath.Join(d, "*.yaml"))
		gen, have = append(gen, g...), append(have, h...)
	}
	if diff := cmp.Diff(names(gen), names(have)); diff != "" {
		t.Fatalf("chart files (-generated +committed); run hack/generate.sh:\n%s", diff)
	}
	for i := range gen {
		g, _ := os.ReadFile(gen[i])
		h, _ := os.ReadFile(have[i])
		if !bytes.Equal(g, h) {
			t.Errorf("%s differs from what hack/genchart generates from config/; run hack/generate.sh", have[i])
		}
	}
}

func names(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = filepath.Base(p)
	}
	return out
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func copyDir(t *testing.T, src, dst, glob string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(src, glob))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
