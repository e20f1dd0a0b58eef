package lab

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	yaml "go.yaml.in/yaml/v3"

	manifests "github.com/ironlb/ironlb/config"
)

// ironlb comes into the lab the way docs/install.md tells a user to install it: `make chart` packages
// charts/ironlb, `helm push` puts the package in the lab's registry as an OCI artifact, and
// `helm upgrade --install ironlb oci://REGISTRY/charts/ironlb` installs it with the image pointing at
// the registry's mirror of ghcr.io/ironlb/ironlb. helm runs inside the client's namespace (mypc), as
// a developer's machine on the lab's network would: the root namespace has no route to the bridge.
// The naming and the values are pure (tested by table); installChart is the adapter.

// HelmVersion is the pinned helm release (HELM_VERSION in hack/versions.env; hack/helm.sh builds it).
const HelmVersion = "v3.22.0"

const (
	// ChartRelease and ChartNamespace are the release lab up installs, as docs/install.md names it.
	ChartRelease   = "ironlb"
	ChartNamespace = "metallb-system"
	// ChartRepo is the path in the lab's registry the chart is pushed under: oci://REG/charts/ironlb.
	ChartRepo = "charts"
	// IronLBImage is the chart's default image (values.yaml image.repository), every role's, the
	// proxy's too; the lab points it at the registry's mirror.
	IronLBImage = "ghcr.io/ironlb/ironlb"
)

// DefaultHelm is where hack/helm.sh puts helm for the pinned version, beside the Kubernetes binaries.
func DefaultHelm() string {
	return filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(DefaultK8sBin()))), "helm", HelmVersion, "helm")
}

// DefaultChart is where `make chart` writes the packaged chart (relative to the repository).
const DefaultChart = "bin/chart"

// ChartMeta is the part of a packaged chart's Chart.yaml the lab uses.
type ChartMeta struct {
	Name       string `yaml:"name"`
	Version    string `yaml:"version"`
	AppVersion string `yaml:"appVersion"`
}

// FindChart resolves p to one packaged chart: p itself when it is a file, else the one *.tgz in the
// directory p (make chart's output).
func FindChart(p string) (string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("no packaged chart at %s (make chart writes it to %s; or pass --chart FILE.tgz): %w", p, DefaultChart, err)
	}
	if !st.IsDir() {
		return p, nil
	}
	m, err := filepath.Glob(filepath.Join(p, "*.tgz"))
	if err != nil {
		return "", err
	}
	if len(m) != 1 {
		return "", fmt.Errorf("%s holds %d packaged charts (*.tgz), want one (make chart writes it; or pass --chart FILE.tgz)", p, len(m))
	}
	return m[0], nil
}

// ReadChartMeta reads NAME/Chart.yaml from a packaged chart (a gzipped tar, as helm package writes).
func ReadChartMeta(r io.Reader) (ChartMeta, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return ChartMeta{}, fmt.Errorf("not a packaged chart (gzip): %w", err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return ChartMeta{}, errors.New("not a packaged chart: no NAME/Chart.yaml in it")
		}
		if err != nil {
			return ChartMeta{}, fmt.Errorf("not a packaged chart (tar): %w", err)
		}
		dir, file := path.Split(path.Clean(h.Name))
		if file != "Chart.yaml" || strings.Count(strings.Trim(dir, "/"), "/") != 0 || dir == "" {
			continue
		}
		var b bytes.Buffer
		if _, err := io.Copy(&b, io.LimitReader(tr, 1<<20)); err != nil {
			return ChartMeta{}, err
		}
		var m ChartMeta
		if err := yaml.Unmarshal(b.Bytes(), &m); err != nil {
			return ChartMeta{}, fmt.Errorf("%s: %w", h.Name, err)
		}
		if m.Name == "" || m.Version == "" {
			return ChartMeta{}, fmt.Errorf("%s: needs a name and a version", h.Name)
		}
		return m, nil
	}
}

// ChartPushRef is where `helm push` puts a chart in the registry reg: oci://REG/charts (helm adds the
// chart's name, and its version as the tag).
func ChartPushRef(reg string) string { return "oci://" + reg + "/" + ChartRepo }

// ChartRef is the reference `helm install` takes for the chart name in the registry reg.
func ChartRef(reg, name string) string { return ChartPushRef(reg) + "/" + name }

// LabValues are the values lab up gives the chart: the image (every role's) from the registry's
// mirror of the chart's image at appVersion (none with no registry: reg ""), the proxy on every node
// for --proxy=ironlb, and the PodMonitors and PrometheusRule for --prometheus (the lab's Prometheus reads
// them as the Prometheus Operator would).
func LabValues(reg, appVersion string, proxy, prometheus bool) (map[string]any, error) {
	v := map[string]any{}
	if reg != "" {
		if appVersion == "" {
			return nil, errors.New("the chart has no appVersion: the image tag is unknown")
		}
		m, err := MirrorName(reg, IronLBImage+":"+appVersion)
		if err != nil {
			return nil, err
		}
		v["image"] = map[string]any{"repository": strings.TrimSuffix(m, ":"+appVersion), "tag": appVersion}
	}
	if proxy {
		v["proxy"] = map[string]any{"enabled": true}
	}
	if prometheus {
		v["prometheus"] = map[string]any{
			"podMonitor":     map[string]any{"enabled": true},
			"prometheusRule": map[string]any{"enabled": true},
		}
	}
	return v, nil
}

// HelmInstallArgs is lab up's `helm upgrade --install` (install, or on an up lab an upgrade that
// changes nothing) of ref (an oci:// reference at version, or a packaged chart's file with version
// ""), with the values file and the user's --set values (helm's syntax, "" for none).
func HelmInstallArgs(ref, version, valuesFile, set string) []string {
	a := []string{"upgrade", "--install", ChartRelease, ref, "--namespace", ChartNamespace, "--create-namespace"}
	if version != "" {
		a = append(a, "--version", version)
	}
	if strings.HasPrefix(ref, "oci://") {
		a = append(a, "--plain-http")
	}
	a = append(a, "--values", valuesFile)
	if set != "" {
		a = append(a, "--set", set)
	}
	return a
}

func (l *Lab) helmDir() string { return filepath.Join(l.State.Dir, "helm") }

// Helm runs helm with args inside the client's namespace, with the lab's internal kubeconfig and
// helm's own directories under the state directory, and returns its combined output. A failure
// carries helm's own message.
func (l *Lab) Helm(ctx context.Context, args ...string) (string, error) {
	bin := l.Plan.Config.Helm
	if bin == "" {
		bin = DefaultHelm()
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("missing helm at %s (make helm builds it with hack/helm.sh; or pass --helm or set IRONLB_HELM)", bin)
	}
	cg, err := l.Cgroup("helm")
	if err != nil {
		return "", err
	}
	fd, err := cg.Open()
	if err != nil {
		return "", err
	}
	defer fd.Close()
	d := l.helmDir()
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + d, "KUBECONFIG=" + l.State.InternalKubeconfig(),
		"HELM_CACHE_HOME=" + filepath.Join(d, "cache"), "HELM_CONFIG_HOME=" + filepath.Join(d, "config"),
		"HELM_DATA_HOME=" + filepath.Join(d, "data")}
	cmd, err := Command(l.Plan.Config.Self, ExecSpec{NetNS: l.Plan.Client.Name, Argv: append([]string{bin}, args...), Env: env}, fd)
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			_ = cg.Kill(5 * time.Second)
		case <-done:
		}
	}()
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("helm %s: %w: %s", args[0], err, HelmError(out.String()))
	}
	return out.String(), nil
}

// registryUp checks the lab's registry answers, in one line when it does not.
func (l *Lab) registryUp(ctx context.Context) error {
	if err := l.RegistryPing(ctx); err != nil {
		return fmt.Errorf("the lab's registry at http://%s does not answer (%v); `ironlb lab status` shows it, `ironlb lab up` starts it again", l.Plan.RegistryAddr(), err)
	}
	return nil
}

// PushChart pushes the packaged chart file to the lab's registry with `helm push` (helm's own OCI
// media types and its version as the tag) and returns the reference helm installs it by.
func (l *Lab) PushChart(ctx context.Context, file string) (string, ChartMeta, error) {
	reg := l.Plan.RegistryAddr()
	if !reg.IsValid() {
		return "", ChartMeta{}, fmt.Errorf("lab %s has no registry (bring it up with --registry)", l.Plan.Config.Name)
	}
	meta, err := readChartFile(file)
	if err != nil {
		return "", ChartMeta{}, err
	}
	if err := l.registryUp(ctx); err != nil {
		return "", ChartMeta{}, err
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return "", ChartMeta{}, err
	}
	if _, err := l.Helm(ctx, "push", abs, ChartPushRef(reg.String()), "--plain-http"); err != nil {
		return "", ChartMeta{}, err
	}
	return ChartRef(reg.String(), meta.Name), meta, nil
}

func readChartFile(file string) (ChartMeta, error) {
	f, err := os.Open(file)
	if err != nil {
		return ChartMeta{}, err
	}
	defer f.Close()
	m, err := ReadChartMeta(f)
	if err != nil {
		return ChartMeta{}, fmt.Errorf("%s: %w", file, err)
	}
	return m, nil
}

// installChart installs (or upgrades to the same) ironlb from the packaged chart: pushed to the lab's
// registry and installed from there, or from the file when the lab has no registry. A release that a
// failed first install left behind is uninstalled: nothing stays half-installed. (helm checks the
// values against values.schema.json before it creates anything.)
func (l *Lab) installChart(ctx context.Context) (ChartMeta, error) {
	c := l.Plan.Config
	src := c.Chart
	if src == "" {
		src = DefaultChart
	}
	file, err := FindChart(src)
	if err != nil {
		return ChartMeta{}, err
	}
	ref, version, reg := file, "", ""
	meta, err := readChartFile(file)
	if err != nil {
		return ChartMeta{}, err
	}
	if ap := l.Plan.RegistryAddr(); ap.IsValid() {
		if ref, meta, err = l.PushChart(ctx, file); err != nil {
			return ChartMeta{}, err
		}
		version, reg = meta.Version, ap.String()
	}
	if c.Prometheus {
		if err := l.applyMonitoringCRDs(ctx); err != nil {
			return ChartMeta{}, err
		}
	}
	vals, err := LabValues(reg, meta.AppVersion, c.ProxyMode == ProxyIronLB, c.Prometheus)
	if err != nil {
		return ChartMeta{}, err
	}
	b, err := yaml.Marshal(vals)
	if err != nil {
		return ChartMeta{}, err
	}
	vf := filepath.Join(l.helmDir(), "lab-values.yaml")
	if err := os.MkdirAll(l.helmDir(), 0o755); err != nil {
		return ChartMeta{}, err
	}
	if err := os.WriteFile(vf, b, 0o644); err != nil {
		return ChartMeta{}, err
	}
	_, serr := l.Helm(ctx, "status", ChartRelease, "--namespace", ChartNamespace)
	existed := serr == nil
	if _, err := l.Helm(ctx, HelmInstallArgs(ref, version, vf, c.ChartSet)...); err != nil {
		if !existed {
			_, _ = l.Helm(context.WithoutCancel(ctx), "uninstall", ChartRelease, "--namespace", ChartNamespace, "--ignore-not-found")
		}
		return ChartMeta{}, err
	}
	return meta, nil
}

// applyMonitoringCRDs applies the Prometheus Operator's PodMonitor and PrometheusRule CRDs
// (config/testdata, the versions the chart's objects are checked against), so that the chart's
// monitors and rules can be installed in a lab without the operator.
func (l *Lab) applyMonitoringCRDs(ctx context.Context) error {
	crds, err := manifests.MonitoringCRDs()
	if err != nil {
		return err
	}
	if err := l.kubectlApply(ctx, crds, "--server-side", "--force-conflicts"); err != nil {
		return err
	}
	return l.kubectlRun(ctx, "wait", "--for=condition=Established", "--timeout=30s", "crd/podmonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com")
}

// installChartLogged is installChart with lab up's progress line.
func (l *Lab) installChartLogged(ctx context.Context) error {
	t := time.Now()
	m, err := l.installChart(ctx)
	if err != nil {
		return fmt.Errorf("installing ironlb's chart: %w", err)
	}
	from := "its file"
	if ap := l.Plan.RegistryAddr(); ap.IsValid() {
		from = ChartRef(ap.String(), m.Name) + " --version " + m.Version
	}
	l.Log("✓ helm upgrade --install %s %s (chart %s-%s, app %s) in namespace %s (%.1fs)", ChartRelease, from, m.Name, m.Version, m.AppVersion, ChartNamespace, time.Since(t).Seconds())
	return nil
}

// chartPreflight checks lab up finds helm and the packaged chart.
func (l *Lab) chartPreflight() error {
	var errs []error
	bin := l.Plan.Config.Helm
	if bin == "" {
		bin = DefaultHelm()
	}
	if _, err := os.Stat(bin); err != nil {
		errs = append(errs, fmt.Errorf("missing helm at %s (make helm builds it with hack/helm.sh; or pass --helm or set IRONLB_HELM)", bin))
	}
	src := l.Plan.Config.Chart
	if src == "" {
		src = DefaultChart
	}
	if f, err := FindChart(src); err != nil {
		errs = append(errs, err)
	} else if _, err := readChartFile(f); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// HelmError is what of helm's output says why it failed: from its first "Error:" line on (its
// progress lines, "Pulled: ..." and the like, dropped), or all of it when it has none.
func HelmError(out string) string {
	if i := strings.Index(out, "Error: "); i >= 0 && (i == 0 || out[i-1] == '\n') {
		return strings.TrimSpace(out[i:])
	}
	return strings.TrimSpace(out)
}
