package lab

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"text/template"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

//go:embed manifests/kube-proxy.yaml
var kubeProxyYAML string

// KubeVersion is the pinned Kubernetes release (hack/versions.env); the kube-proxy image tag uses it.
const KubeVersion = "v1.37.2"

// EtcdVersion is the etcd release Kubernetes KubeVersion pins.
const EtcdVersion = "v3.7.0"

// DefaultK8sBin is where hack/k8s-binaries.sh puts the binaries for the pinned versions.
func DefaultK8sBin() string {
	cache := os.Getenv("IRONLB_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "ironlb")
	}
	return filepath.Join(cache, "kubernetes", KubeVersion+"-etcd"+EtcdVersion, "bin")
}

// DefaultE2EBin is where hack/e2e-binaries.sh puts the upstream e2e test binary (e2e.test) and agnhost
// for the pinned Kubernetes version ($IRONLB_E2E_BIN overrides). The agent runs the e2e suite's images
// (agnhost, pause, nginx, httpd) with the agnhost found there.
func DefaultE2EBin() string {
	if d := os.Getenv("IRONLB_E2E_BIN"); d != "" {
		return d
	}
	return filepath.Join(filepath.Dir(DefaultK8sBin()), "..", "e2e-"+KubeVersion, "bin")
}

// DefaultMetalLBBin is where `make metallb` puts MetalLB v0.16.1's controller and speaker, built from
// its Go module for side-by-side benchmarks ($IRONLB_METALLB_BIN overrides).
func DefaultMetalLBBin() string {
	if d := os.Getenv("IRONLB_METALLB_BIN"); d != "" {
		return d
	}
	return filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(DefaultK8sBin()))), "metallb-v0.16.1")
}

// Client returns a clientset that works from the root namespace.
func (l *Lab) Client() (*kubernetes.Clientset, error) {
	cfg, err := l.RESTConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// RESTConfig is the client configuration Client uses (for dynamic clients).
func (l *Lab) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.State.Kubeconfig())
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 200, 400
	return cfg, nil
}

// Kubectl runs the built kubectl against the lab with args, wiring stdio to the given streams.
func (l *Lab) Kubectl(ctx context.Context, stdin *os.File, stdout, stderr *os.File, args ...string) error {
	cmd := exec.CommandContext(ctx, l.bin("kubectl"), append([]string{"--kubeconfig", l.State.Kubeconfig()}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	return cmd.Run()
}

func (l *Lab) kubectlRun(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, l.bin("kubectl"), append([]string{"--kubeconfig", l.State.Kubeconfig()}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func (l *Lab) kubectlApply(ctx context.Context, manifest string, flags ...string) error {
	cmd := exec.CommandContext(ctx, l.bin("kubectl"), append([]string{"--kubeconfig", l.State.Kubeconfig(), "apply", "-f", "-"}, flags...)...)
	cmd.Stdin = strings.NewReader(manifest)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubectl apply: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// preflight checks what Up needs from the machine.
func (l *Lab) preflight() error {
	var errs []error
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "kubectl"} {
		if _, err := os.Stat(l.bin(b)); err != nil {
			errs = append(errs, fmt.Errorf("missing %s (build the Kubernetes binaries with hack/k8s-binaries.sh, or pass --k8s-bin)", l.bin(b)))
		}
	}
	for _, t := range []string{"ip", "iptables", "nft"} {
		if _, err := exec.LookPath(t); err != nil {
			errs = append(errs, fmt.Errorf("missing %s on PATH (apt-get install iproute2 iptables nftables)", t))
		}
	}
	if l.Plan.Config.BGP {
		for _, d := range routerDaemons {
			if _, err := os.Stat(filepath.Join(FRRDir, d)); err != nil {
				errs = append(errs, fmt.Errorf("missing %s (--bgp runs FRR as the router: apt-get install frr)", filepath.Join(FRRDir, d)))
			}
		}
		if _, err := exec.LookPath("vtysh"); err != nil {
			errs = append(errs, errors.New("missing vtysh on PATH (apt-get install frr)"))
		}
	}
	if _, err := os.Stat(l.corednsBin()); err != nil {
		errs = append(errs, fmt.Errorf("missing %s (the cluster DNS: build CoreDNS with hack/coredns-binary.sh, or pass --coredns-bin)", l.corednsBin()))
	}
	if l.Plan.Config.Registry {
		if _, err := os.Stat(l.registryBin()); err != nil {
			errs = append(errs, fmt.Errorf("missing %s (build the registry with hack/registry-binary.sh, or pass --registry-bin, or --registry=false)", l.registryBin()))
		}
	}
	errs = append(errs, l.runtimePreflight()...) // --runtime=runc: runc, a static ironlb (runtimeimages.go)
	if err := l.chartPreflight(); err != nil {
		errs = append(errs, err)
	}
	if os.Geteuid() != 0 {
		errs = append(errs, errors.New("the lab needs root (network namespaces, cgroups)"))
	}
	if _, err := cgroupRoot(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Present reports what of this lab exists now: namespaces, live processes, the record on disk.
func (l *Lab) Present() (netns []string, procs int, recorded bool) {
	cg, err := l.Cgroup()
	if err == nil {
		procs = len(cg.Procs())
	}
	_, err = os.Stat(l.State.PlanFile())
	return l.labNetNS(), procs, err == nil
}

// Healthy reports whether a lab that is up answers: every host namespace exists and the apiserver
// answers through the host kubeconfig.
func (l *Lab) Healthy(ctx context.Context) error {
	for _, h := range l.Plan.AllHosts() {
		if !NetNSExists(h.Name) {
			return fmt.Errorf("namespace %s is missing", h.Name)
		}
	}
	cs, err := l.Client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	return err
}

// Up brings the lab up, or makes sure an existing healthy one is complete. On failure or cancellation
// everything made so far is removed (unless keep is set).
func (l *Lab) Up(ctx context.Context, keep bool) (err error) {
	if err := l.preflight(); err != nil {
		return err
	}
	start := time.Now()
	if prev, perr := l.State.ReadPlan(); perr == nil {
		if prev.Config != l.Plan.Config {
			return fmt.Errorf("a lab %q is already up with other settings (%s); run `ironlb lab down` first", prev.Config.Name, l.State.PlanFile())
		}
		if herr := l.Healthy(ctx); herr == nil {
			l.Log("lab %s is already up; checking it is complete", l.Plan.Config.Name)
			return l.finish(ctx, start)
		} else {
			l.Log("found a half-present lab (%v); removing it first", herr)
		}
		if derr := l.Down(context.WithoutCancel(ctx)); derr != nil {
			return fmt.Errorf("removing the half-present lab: %w", derr)
		}
	} else if ns, procs, _ := l.Present(); len(ns) > 0 || procs > 0 {
		l.Log("found leftovers of an earlier lab (namespaces %v, %d processes); removing them first", ns, procs)
		if derr := l.Down(context.WithoutCancel(ctx)); derr != nil {
			return fmt.Errorf("removing leftovers: %w", derr)
		}
	}
	defer func() {
		if err == nil || keep {
			return
		}
		if ctx.Err() != nil {
			l.Log("interrupted; removing the lab")
		} else {
			l.Log("lab up failed; removing the lab (use --keep-on-failure to inspect it)")
			l.tailLogs()
		}
		if derr := l.Down(context.WithoutCancel(ctx)); derr != nil {
			err = errors.Join(err, derr)
		}
	}()
	if err := l.State.WritePlan(l.Plan); err != nil {
		return err
	}
	t := time.Now()
	if err := l.createNetwork(ctx); err != nil {
		return err
	}
	l.Log("✓ network: bridge %s on %s, nodes %s, client %s at %s (%.1fs)", l.Plan.Config.NodeNet(), l.Plan.BridgeNS,
		strings.Join(l.nodeNames(), " "), l.Plan.Client.Name, l.Plan.Client.Addr, time.Since(t).Seconds())
	t = time.Now()
	if err := l.writePKI(); err != nil {
		return err
	}
	if err := l.writeHosts(); err != nil {
		return err
	}
	if err := l.writeNodeResolvConf(); err != nil {
		return err
	}
	l.Log("✓ certificates and kubeconfigs (%.2fs)", time.Since(t).Seconds())
	l.setRealtimeBudget()
	t = time.Now()
	for _, n := range l.Plan.Nodes { // agents wait for the apiserver themselves
		if err := l.startAgent(n); err != nil {
			return err
		}
	}
	if err := l.startControlPlane(ctx); err != nil {
		return err
	}
	if err := l.startAPIProxy(ctx); err != nil {
		return err
	}
	l.Log("✓ control plane in %s: etcd, kube-apiserver, kube-controller-manager, kube-scheduler (%.1fs)",
		l.Plan.ControlPlane().Name, time.Since(t).Seconds())
	return l.finish(ctx, start)
}

func (l *Lab) nodeNames() []string {
	var n []string
	for _, h := range l.Plan.Nodes {
		n = append(n, h.Name)
	}
	return n
}

func (l *Lab) writePKI() error {
	cp := l.Plan.ControlPlane()
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.IP(cp.Addr.AsSlice()), net.IP(l.Plan.KubernetesServiceIP().AsSlice())}
	if cp.Addr6.IsValid() {
		ips = append(ips, net.IP(cp.Addr6.AsSlice()), net.IP(nthAddr(l.Plan.Config.ServiceCIDR6, 1).AsSlice()))
	}
	dns := []string{"localhost", cp.Name, "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	pki := l.State.PKI()
	if err := pki.Generate(dns, ips); err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	kc, err := pki.Kubeconfig(l.Plan.Config.Name, l.Plan.APIServerURL())
	if err != nil {
		return err
	}
	return os.WriteFile(l.State.InternalKubeconfig(), kc, 0o600)
}

// finish installs the add-ons (kube-proxy) and waits until every node is Ready and kube-proxy runs on it.
func (l *Lab) finish(ctx context.Context, start time.Time) error {
	t := time.Now()
	if r := l.Plan.Registry; r.Name != "" {
		if err := l.startRegistry(ctx); err != nil {
			return fmt.Errorf("registry: %w", err)
		}
		l.Log("✓ registry %s at http://%s (distribution %s, storage %s) (%.1fs)", r.Name, l.Plan.RegistryAddr(),
			RegistryVersion, filepath.Join(l.registryDir(), "storage"), time.Since(t).Seconds())
		t = time.Now()
	}
	if l.Plan.Config.Runtime == RuntimeRunc { // the images the runc runtime runs (runtimeimages.go)
		imgs, err := l.pushRuntimeImages(ctx)
		if err != nil {
			return fmt.Errorf("images for --runtime=runc: %w", err)
		}
		for _, im := range imgs {
			l.Log("  pushed %s (%d names, first %s)", im.Digest, len(im.Refs), im.Refs[0])
		}
		l.Log("✓ images for the runc runtime built and pushed (%.1fs)", time.Since(t).Seconds())
		t = time.Now()
	}
	if r := l.Plan.Router; r.Name != "" {
		if err := l.startRouter(ctx); err != nil {
			return fmt.Errorf("router: %w", err)
		}
		l.Log("✓ router %s at %s (FRR: zebra, bfdd, bgpd; AS %d, nodes peer from AS %d), %s behind it at %s (%.1fs)",
			r.Name, r.Addr, RouterASN, NodeASN, l.Plan.Client2.Name, l.Plan.Client2.Addr, time.Since(t).Seconds())
		t = time.Now()
	}
	if err := l.installProxy(ctx); err != nil {
		return err
	}
	if err := l.installDNS(ctx); err != nil { // early, so that no other Service takes kube-dns's address
		return err
	}
	if err := l.WaitNodesReady(ctx, 90*time.Second); err != nil {
		return err
	}
	l.Log("✓ %d nodes Ready with pod CIDRs from kube-controller-manager (%.1fs; %.1fs after start)", len(l.Plan.Nodes),
		time.Since(t).Seconds(), time.Since(start).Seconds())
	t = time.Now()
	if l.Plan.Config.ProxyMode == ProxyIronLB {
		if err := l.WaitDaemonSet(ctx, "metallb-system", "ironlb-proxy", 90*time.Second); err != nil {
			return err
		}
		l.Log("✓ ironlb proxy (the chart's proxy.enabled, instead of kube-proxy) running on every node (%.1fs)", time.Since(t).Seconds())
	} else {
		if err := l.WaitDaemonSet(ctx, "kube-system", "kube-proxy", 90*time.Second); err != nil {
			return err
		}
		l.Log("✓ kube-proxy (%s mode) running on every node (%.1fs)", l.Plan.Config.ProxyMode, time.Since(t).Seconds())
	}
	t = time.Now()
	if err := l.installDNSDeployment(ctx); err != nil {
		return err
	}
	// CoreDNS gets ready (its readiness probe runs every 10 s, as kubeadm's) while ironlb is installed:
	// neither needs the other.
	tDNS, dnsReady := t, make(chan error, 1)
	go func() { dnsReady <- l.WaitDeployment(ctx, "kube-system", "coredns", 90*time.Second) }()
	t = time.Now()
	if err := l.installIronLB(ctx); err != nil {
		return err
	}
	l.Log("✓ ironlb from its chart (metallb.io CRDs, controller with admission webhook, speaker on every node) ready (%.1fs)", time.Since(t).Seconds())
	if err := <-dnsReady; err != nil {
		return err
	}
	l.Log("✓ cluster DNS: CoreDNS %s (2 replicas) behind the kube-dns Service at %s, domain %s (%.1fs)", CoreDNSVersion,
		l.Plan.ClusterDNSIP(), ClusterDomain, time.Since(tDNS).Seconds())
	if l.Plan.Config.Prometheus {
		t = time.Now()
		if err := l.startPrometheus(ctx); err != nil {
			return fmt.Errorf("prometheus: %w", err)
		}
		l.Log("✓ Prometheus at %s in %s, scraping ironlb per config/prometheus every %s (%.1fs)", l.PrometheusURL(),
			l.Plan.ControlPlane().Name, LabScrapeInterval, time.Since(t).Seconds())
	}
	l.Log("lab %s is up in %.1fs", l.Plan.Config.Name, time.Since(start).Seconds())
	return nil
}

// installProxy applies the Service dataplane: kubeadm's kube-proxy DaemonSet in the chosen mode, or
// ironlb's proxy from its own manifests (config/proxy) with the ConfigMap that gives it the apiserver's
// real address (the kubernetes Service's ClusterIP is what it programs).
func (l *Lab) installProxy(ctx context.Context) error {
	c := l.Plan.Config
	if c.ProxyMode == ProxyIronLB {
		cm := fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: metallb-system}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: ironlb-proxy, namespace: metallb-system}
data: {apiServerHost: "%s", apiServerPort: "%d"}
`, l.Plan.ControlPlane().Addr, apiserverPort)
		if err := l.kubectlApply(ctx, cm); err != nil {
			return err
		}
		return l.installChartLogged(ctx) // the proxy is the chart's (proxy.enabled)
	}
	var buf bytes.Buffer
	clusterCIDR := joinPrefixes(c.PodCIDRs())
	err := template.Must(template.New("kube-proxy").Parse(kubeProxyYAML)).Execute(&buf, map[string]string{
		"ClusterCIDR": clusterCIDR, "Mode": c.ProxyMode, "Version": KubeVersion, "BindAddress": bindAny(c), "MetricsBindAddress": metricsBind(c),
		"Server": fmt.Sprintf("https://%s:%d", l.Plan.ControlPlane().Name, apiserverPort),
	})
	if err != nil {
		return err
	}
	return l.kubectlApply(ctx, buf.String())
}

// bindAny is the unspecified address of the lab's primary family, as kubeadm writes kube-proxy's
// bindAddress: 0.0.0.0, or :: in the IPv6-only lab.
func bindAny(c Config) string {
	if c.IPv6Only() {
		return "::"
	}
	return "0.0.0.0"
}

// metricsBind is kube-proxy's metricsBindAddress: 0.0.0.0 as before (its port defaulted), or
// [::]:10249 in the IPv6-only lab (an IPv6 address needs its port spelled).
func metricsBind(c Config) string {
	if c.IPv6Only() {
		return "[::]:10249"
	}
	return "0.0.0.0"
}

// installIronLB installs ironlb from its packaged chart (chart.go; with --proxy=ironlb installProxy did)
// and waits for the controller and its webhook, and a speaker on every node.
func (l *Lab) installIronLB(ctx context.Context) error {
	t := time.Now()
	if l.Plan.Config.ProxyMode != ProxyIronLB {
		if err := l.installChartLogged(ctx); err != nil {
			return err
		}
	}
	if err := l.WaitDeployment(ctx, "metallb-system", "ironlb-controller", 90*time.Second); err != nil {
		return err
	}
	if err := l.WaitDaemonSet(ctx, "metallb-system", "ironlb-speaker", 90*time.Second); err != nil {
		return err
	}
	l.Log("  every ironlb pod Ready %.1fs after helm started", time.Since(t).Seconds())
	return nil
}

// WaitDeployment waits until a Deployment has all its replicas updated and available.
func (l *Lab) WaitDeployment(ctx context.Context, ns, name string, timeout time.Duration) error {
	cs, err := l.Client()
	if err != nil {
		return err
	}
	var selector *metav1.LabelSelector
	err = poll(ctx, timeout, func() (bool, string, error) {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		selector = d.Spec.Selector
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		s := d.Status
		msg := fmt.Sprintf("deployment %s/%s: %d/%d available", ns, name, s.AvailableReplicas, want)
		return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.AvailableReplicas == want, msg, nil
	})
	if err != nil {
		return withPodsNotReady(ctx, cs, ns, selector, err)
	}
	return nil
}

// WaitNodesReady waits until every planned node is Ready and has a pod CIDR.
func (l *Lab) WaitNodesReady(ctx context.Context, timeout time.Duration) error {
	cs, err := l.Client()
	if err != nil {
		return err
	}
	return poll(ctx, timeout, func() (bool, string, error) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		ready := map[string]bool{}
		for _, n := range nodes.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && n.Spec.PodCIDR != "" {
					ready[n.Name] = true
				}
			}
		}
		var missing []string
		for _, n := range l.Plan.Nodes {
			if !ready[n.Name] {
				missing = append(missing, n.Name)
			}
		}
		return len(missing) == 0, "not Ready: " + strings.Join(missing, ", "), nil
	})
}

// WaitDaemonSet waits until a DaemonSet has a ready Pod on every node it wants.
func (l *Lab) WaitDaemonSet(ctx context.Context, ns, name string, timeout time.Duration) error {
	cs, err := l.Client()
	if err != nil {
		return err
	}
	var selector *metav1.LabelSelector
	err = poll(ctx, timeout, func() (bool, string, error) {
		ds, err := cs.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		selector = ds.Spec.Selector
		s := ds.Status
		msg := fmt.Sprintf("daemonset %s/%s: %d/%d ready", ns, name, s.NumberReady, s.DesiredNumberScheduled)
		return s.DesiredNumberScheduled > 0 && s.NumberReady == s.DesiredNumberScheduled && s.ObservedGeneration >= ds.Generation, msg, nil
	})
	if err != nil {
		return withPodsNotReady(ctx, cs, ns, selector, err)
	}
	return nil
}

// poll calls check every 100 ms until it is done, fails, or timeout passes (the last message is reported).
func poll(ctx context.Context, timeout time.Duration, check func() (bool, string, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		done, msg, err := check()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s: %s", timeout, msg)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// tailLogs prints the end of every component log, to explain a failed start.
func (l *Lab) tailLogs() {
	logs, _ := filepath.Glob(filepath.Join(l.State.Dir, "logs", "*", "*.log"))
	for _, f := range logs {
		b, err := os.ReadFile(f)
		if err != nil || len(b) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 8 {
			lines = lines[len(lines)-8:]
		}
		l.Log("--- %s (last lines)\n%s", f, strings.Join(lines, "\n"))
	}
}

// Down removes everything the lab made: processes (by cgroup), namespaces, host paths made for mount
// targets, and the state directory. It works from the record on disk or, without one, from the plan.
func (l *Lab) Down(ctx context.Context) error {
	var errs []error
	if cg, err := l.Cgroup(); err == nil {
		if err := cg.Remove(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, ns := range l.labNetNS() {
		if err := DeleteNetNS(ctx, ns); err != nil {
			errs = append(errs, err)
		}
	}
	if err := UnmountUnder(l.State.Dir); err != nil { // the runc runtime's container rootfs overlays
		errs = append(errs, err)
	}
	if left := l.State.RemoveCreated(); len(left) > 0 {
		l.Log("left in place (not empty): %s", strings.Join(left, " "))
	}
	if err := os.RemoveAll(l.State.Dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// StopNode cuts a node's power: every process of the node and its Pods is killed, the Pods' namespaces
// and the node's packet-filter state (its nftables ruleset and its conntrack table) go (as after a
// reboot), and its link to the bridge goes down.
func (l *Lab) StopNode(ctx context.Context, name string) error {
	h, ok := l.Plan.Host(name)
	if !ok || !h.IsNode() {
		return fmt.Errorf("no node %q in lab %s (nodes: %s)", name, l.Plan.Config.Name, strings.Join(l.nodeNames(), ", "))
	}
	if err := l.setLink(ctx, h, false); err != nil {
		return err
	}
	cg, err := l.Cgroup(h.Name)
	if err != nil {
		return err
	}
	if err := cg.Remove(); err != nil {
		return err
	}
	var errs []error
	for _, ns := range ListNetNS() {
		if strings.HasPrefix(ns, PodNetNSPrefix(h.Name)) {
			errs = append(errs, DeleteNetNS(ctx, ns))
		}
	}
	_ = InNetNS(h.Name, func() error { return exec.Command("nft", "flush", "ruleset").Run() })
	// The conntrack table too: a rebooted node remembers no flow (the dsr soak's run f of
	// 2026-11-27 met a "rebooted" node's entry of a flow it had forwarded before its cut).
	if err := FlushConntrack(h.Name); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// SetLink cuts (up=false) or restores a host's link to the bridge without stopping anything on it: a
// network partition between the host and everyone else.
func (l *Lab) SetLink(ctx context.Context, name string, up bool) error {
	h, ok := l.Plan.Host(name)
	if !ok {
		return fmt.Errorf("no host %q in lab %s", name, l.Plan.Config.Name)
	}
	return l.setLink(ctx, h, up)
}

// StartNode powers a node back on: its link comes up, its control-plane components (on the control-plane
// node) and its agent start, and the agent recreates its Pods.
func (l *Lab) StartNode(ctx context.Context, name string) error {
	h, ok := l.Plan.Host(name)
	if !ok || !h.IsNode() {
		return fmt.Errorf("no node %q in lab %s (nodes: %s)", name, l.Plan.Config.Name, strings.Join(l.nodeNames(), ", "))
	}
	if err := l.setLink(ctx, h, true); err != nil {
		return err
	}
	if h.Role == RoleControlPlane {
		if err := l.startControlPlane(ctx); err != nil {
			return err
		}
	}
	return l.startAgent(h)
}

// Exec runs argv inside a host's namespaces (network and hostname, with its own /sys), wired to the
// terminal, and returns its exit code.
func (l *Lab) Exec(ctx context.Context, host string, argv []string) (int, error) {
	h, ok := l.Plan.Host(host)
	if !ok && host != l.Plan.BridgeNS {
		var names []string
		for _, h := range l.Plan.AllHosts() {
			names = append(names, h.Name)
		}
		return 1, fmt.Errorf("no host %q in lab %s (hosts: %s)", host, l.Plan.Config.Name, strings.Join(names, ", "))
	}
	if !ok {
		h = Host{Name: host}
	}
	cg, err := l.Cgroup("exec")
	if err != nil {
		return 1, err
	}
	fd, err := cg.Open()
	if err != nil {
		return 1, err
	}
	defer fd.Close()
	env := append(os.Environ(), "KUBECONFIG="+l.State.InternalKubeconfig())
	if h.Role == RoleRouter && len(argv) > 0 && filepath.Base(argv[0]) == "vtysh" {
		argv = append([]string{argv[0], "--vty_socket", l.routerDir()}, argv[1:]...)
	}
	cmd, err := Command(l.Plan.Config.Self, ExecSpec{NetNS: h.Name, Hostname: h.Name, MountNS: true, Argv: argv, Env: env}, fd)
	if err != nil {
		return 1, err
	}
	cmd.SysProcAttr.Setsid = false
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	if err != nil {
		return 1, err
	}
	return 0, nil
}

// Status describes the lab for `lab status`.
func (l *Lab) Status(ctx context.Context) string {
	var b strings.Builder
	fmt.Fprintf(&b, "lab %s (state %s, kubeconfig %s)\n", l.Plan.Config.Name, l.State.Dir, l.State.Kubeconfig())
	fmt.Fprintf(&b, "%-24s %-14s %-16s %-18s %-6s %s\n", "HOST", "ROLE", "ADDRESS", "MAC", "LINK", "PROCESSES")
	for _, h := range l.Plan.AllHosts() {
		procs := 0
		if cg, err := l.Cgroup(h.Name); err == nil {
			procs = len(cg.Procs())
		}
		link := "down"
		if !NetNSExists(h.Name) {
			link = "absent"
		} else if h.Index < 0 {
			link = "-" // not on the bridge
		} else if out, err := exec.CommandContext(ctx, "ip", "-n", l.Plan.BridgeNS, "-br", "link", "show", bridgePort(h)).Output(); err == nil && strings.Contains(string(out), " UP ") {
			link = "up"
		}
		fmt.Fprintf(&b, "%-24s %-14s %-16s %-18s %-6s %d\n", h.Name, h.Role, h.Addr, h.MAC, link, procs)
	}
	var pods []string
	for _, ns := range l.labNetNS() {
		if strings.Contains(ns, "-p-") {
			pods = append(pods, ns)
		}
	}
	sort.Strings(pods)
	fmt.Fprintf(&b, "pod namespaces: %d\n", len(pods))
	if cg, err := l.Cgroup(); err == nil {
		fmt.Fprintf(&b, "processes: %d, resident memory: %.0f MiB\n", len(cg.Procs()), float64(cg.RSS())/(1<<20))
	}
	if err := l.Healthy(ctx); err != nil {
		fmt.Fprintf(&b, "apiserver: not answering (%v)\n", err)
	} else {
		fmt.Fprintf(&b, "apiserver: ready\n")
	}
	if ap := l.Plan.RegistryAddr(); ap.IsValid() {
		if err := l.RegistryPing(ctx); err != nil {
			fmt.Fprintf(&b, "registry: http://%s not answering (%v; log %s)\n", ap, err, l.State.LogFile(l.Plan.Registry.Name, "registry"))
		} else {
			fmt.Fprintf(&b, "registry: http://%s answering (push: ironlb lab push; storage %s)\n", ap, filepath.Join(l.registryDir(), "storage"))
		}
	}
	return b.String()
}

// RestartAPIServer crashes kube-apiserver (SIGKILL) and starts it again with the same flags, as a
// kubelet restarts a static pod; it returns when the apiserver is ready again.
func (l *Lab) RestartAPIServer(ctx context.Context) error {
	cg, err := l.Cgroup(l.Plan.ControlPlane().Name, "kube-apiserver")
	if err != nil {
		return err
	}
	if err := cg.Kill(10 * time.Second); err != nil {
		return err
	}
	return l.startControlPlane(ctx) // starts what is not running: the apiserver
}

// setRealtimeBudget gives the lab's cgroup the real-time CPU budget its nodes share out to the
// containers that ask for CAP_SYS_NICE (rtbudget.go). Without one they run at normal priority.
func (l *Lab) setRealtimeBudget() {
	cg, err := l.Cgroup()
	if err != nil {
		return
	}
	us := LabRealtimeUS(len(l.Plan.Nodes))
	switch err := cg.SetRealtime(us); {
	case errors.Is(err, ErrNoRealtimeGroups):
	case err != nil:
		l.Log("! no real-time CPU budget for the lab's containers (SCHED_FIFO will be refused in them): %v", err)
	default:
		l.Log("✓ real-time CPU budget: %d µs/s for %d nodes' CAP_SYS_NICE containers", us, len(l.Plan.Nodes))
	}
}
