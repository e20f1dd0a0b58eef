package lab

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	yaml "go.yaml.in/yaml/v3"
)

// tgz writes a gzipped tar of files (name -> content).
func tgz(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := tar.NewWriter(zw)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(files[n])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestReadChartMeta(t *testing.T) {
	chart := "apiVersion: v2\nname: ironlb\nversion: 0.1.0\nappVersion: v0.1.0\n"
	tests := []struct {
		name    string
		files   map[string]string
		want    ChartMeta
		wantErr string
	}{
		{"chart", map[string]string{"ironlb/Chart.yaml": chart, "ironlb/values.yaml": "a: 1\n"}, ChartMeta{"ironlb", "0.1.0", "v0.1.0"}, ""},
		// A subchart's Chart.yaml (ironlb/charts/sub/Chart.yaml) is not the chart's.
		{"subchart first", map[string]string{"ironlb/charts/sub/Chart.yaml": "name: sub\nversion: 9.9.9\n", "ironlb/Chart.yaml": chart}, ChartMeta{"ironlb", "0.1.0", "v0.1.0"}, ""},
		{"no Chart.yaml", map[string]string{"ironlb/values.yaml": "a: 1\n"}, ChartMeta{}, "no NAME/Chart.yaml"},
		{"Chart.yaml at the top", map[string]string{"Chart.yaml": chart}, ChartMeta{}, "no NAME/Chart.yaml"},
		{"no version", map[string]string{"ironlb/Chart.yaml": "name: ironlb\n"}, ChartMeta{}, "needs a name and a version"},
		{"bad YAML", map[string]string{"ironlb/Chart.yaml": "name: [\n"}, ChartMeta{}, "ironlb/Chart.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadChartMeta(bytes.NewReader(tgz(t, tt.files)))
			checkResult(t, got, err, tt.want, tt.wantErr)
		})
	}
	if _, err := ReadChartMeta(strings.NewReader("not gzip")); err == nil || !strings.Contains(err.Error(), "not a packaged chart") {
		t.Errorf("plain text: err %v, want 'not a packaged chart'", err)
	}
}

func TestFindChart(t *testing.T) {
	dir := t.TempDir()
	if _, err := FindChart(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "make chart") {
		t.Errorf("missing: err %v, want one naming make chart", err)
	}
	if _, err := FindChart(dir); err == nil || !strings.Contains(err.Error(), "holds 0 packaged charts") {
		t.Errorf("empty dir: err %v", err)
	}
	one := filepath.Join(dir, "ironlb-0.1.0.tgz")
	if err := os.WriteFile(one, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := FindChart(dir); err != nil || got != one {
		t.Errorf("dir with one: %q %v, want %q", got, err, one)
	}
	if got, err := FindChart(one); err != nil || got != one {
		t.Errorf("file: %q %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ironlb-0.2.0.tgz"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := FindChart(dir); err == nil || !strings.Contains(err.Error(), "holds 2 packaged charts") {
		t.Errorf("dir with two: err %v", err)
	}
}

func TestChartRefs(t *testing.T) {
	if got := ChartPushRef("172.18.255.253:5000"); got != "oci://172.18.255.253:5000/charts" {
		t.Errorf("ChartPushRef = %q", got)
	}
	if got := ChartRef("172.18.255.253:5000", "ironlb"); got != "oci://172.18.255.253:5000/charts/ironlb" {
		t.Errorf("ChartRef = %q", got)
	}
}

func TestLabValues(t *testing.T) {
	const reg = "172.18.255.253:5000"
	img := map[string]any{"repository": reg + "/ghcr.io/ironlb/ironlb", "tag": "v0.1.0"}
	tests := []struct {
		name              string
		reg, app          string
		proxy, prometheus bool
		want              map[string]any
		wantErr           string
	}{
		{"registry", reg, "v0.1.0", false, false, map[string]any{"image": img}, ""},
		// The proxy runs image, as every role: no image of its own.
		{"registry, proxy", reg, "v0.1.0", true, false, map[string]any{"image": img, "proxy": map[string]any{"enabled": true}}, ""},
		{"registry, prometheus", reg, "v0.1.0", false, true, map[string]any{"image": img,
			"prometheus": map[string]any{"podMonitor": map[string]any{"enabled": true}, "prometheusRule": map[string]any{"enabled": true}}}, ""},
		// No registry (the IPv6-only lab's default): the chart's own images.
		{"no registry", "", "v0.1.0", false, false, map[string]any{}, ""},
		{"no registry, proxy", "", "", true, false, map[string]any{"proxy": map[string]any{"enabled": true}}, ""},
		{"no appVersion", reg, "", false, false, nil, "no appVersion"},
		{"bad registry", "a b", "v0.1.0", false, false, nil, "mirror registry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LabValues(tt.reg, tt.app, tt.proxy, tt.prometheus)
			checkResult(t, got, err, tt.want, tt.wantErr)
		})
	}
}

func TestHelmInstallArgs(t *testing.T) {
	got := HelmInstallArgs("oci://r:5000/charts/ironlb", "0.1.0", "/s/v.yaml", "controller.replicas=1")
	want := []string{"upgrade", "--install", "ironlb", "oci://r:5000/charts/ironlb", "--namespace", "metallb-system", "--create-namespace",
		"--version", "0.1.0", "--plain-http", "--values", "/s/v.yaml", "--set", "controller.replicas=1"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("registry (-want +got):\n%s", d)
	}
	got = HelmInstallArgs("/bin/chart/ironlb-0.1.0.tgz", "", "/s/v.yaml", "")
	want = []string{"upgrade", "--install", "ironlb", "/bin/chart/ironlb-0.1.0.tgz", "--namespace", "metallb-system", "--create-namespace",
		"--values", "/s/v.yaml"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("file (-want +got):\n%s", d)
	}
}

func TestHelmVersionMatchesPin(t *testing.T) {
	b, err := os.ReadFile("../../../hack/versions.env")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^HELM_VERSION=(\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("hack/versions.env has no HELM_VERSION")
	}
	if string(m[1]) != HelmVersion {
		t.Errorf("hack/versions.env pins HELM_VERSION=%q, the lab expects HelmVersion %q", m[1], HelmVersion)
	}
}

// TestLabValuesRender renders charts/ironlb with the lab's values (helm template, when hack/helm.sh
// has built helm): they pass values.schema.json, and every ironlb container's image is the
// registry's mirror, which the lab's node agent maps to the ironlb binary.
func TestLabValuesRender(t *testing.T) {
	helm := DefaultHelm()
	if _, err := os.Stat(helm); err != nil {
		t.Skipf("no helm at %s (make helm)", helm)
	}
	const reg = "172.18.255.253:5000"
	vals, err := LabValues(reg, "v9.8.7", true, true)
	if err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(vals)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	vf := filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(vf, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(helm, "template", ChartRelease, "../../../charts/ironlb", "--namespace", ChartNamespace, "--values", vf)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+dir, "HELM_CONFIG_HOME="+dir, "HELM_DATA_HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	images := regexp.MustCompile(`(?m)^\s+image: (\S+)$`).FindAllStringSubmatch(string(out), -1)
	seen := map[string]bool{}
	for _, m := range images {
		seen[strings.Trim(m[1], `"`)] = true
	}
	// One image, the registry's mirror of ironlb's, for the controller, the speaker and the proxy.
	want := map[string]bool{reg + "/ghcr.io/ironlb/ironlb:v9.8.7": true}
	if d := cmp.Diff(want, seen); d != "" {
		t.Errorf("images (-want +got):\n%s", d)
	}
	for _, kind := range []string{"kind: PodMonitor", "kind: PrometheusRule", "kind: DaemonSet"} {
		if !strings.Contains(string(out), kind) {
			t.Errorf("rendered chart has no %q", kind)
		}
	}
	// The same command with a value the schema refuses fails with helm's message and renders nothing.
	bad := exec.Command(helm, "template", ChartRelease, "../../../charts/ironlb", "--values", vf, "--set", "controller.replicas=two")
	bad.Env = cmd.Env
	out, err = bad.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "values don't meet the specifications of the schema") {
		t.Errorf("controller.replicas=two: err %v, output:\n%s", err, out)
	}
}

func TestHelmError(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"Release \"ironlb\" does not exist. Installing it now.\nPulled: r/charts/ironlb:0.1.0\nDigest: sha256:00\nError: values don't meet the specifications of the schema(s) in the following chart(s):\nironlb:\n- at '/controller/replicas': got string, want integer\n",
			"Error: values don't meet the specifications of the schema(s) in the following chart(s):\nironlb:\n- at '/controller/replicas': got string, want integer"},
		{"Error: INSTALLATION FAILED: boom\n", "Error: INSTALLATION FAILED: boom"},
		{"  killed\n", "killed"},
		{"x Error: not at a line start\n", "x Error: not at a line start"},
		{"", ""},
	} {
		if got := HelmError(tt.in); got != tt.want {
			t.Errorf("HelmError(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// checkResult is a table row's check: an error containing wantErr when that is set, else no error
// and got equal to want.
func checkResult[T any](t *testing.T, got T, err error, want T, wantErr string) {
	t.Helper()
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("err %v, want one saying %q", err, wantErr)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}
