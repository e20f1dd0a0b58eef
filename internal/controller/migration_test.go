package controller

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
	"github.com/ironlb/ironlb/internal/config"
	"github.com/ironlb/ironlb/internal/testbed/testenv"
)

// TestMigrationFromMetalLB is issue 8's migration test. It carries out docs/install.md's "Migrating from
// MetalLB" against a real apiserver, running the documented commands verbatim where a testenv can
// (steps 1, 4, 8 and step 5's `ironlb status`):
//
//  1. MetalLB v0.16.1's CRDs as MetalLB ships them (its config/crd kustomization: BGPPeer conversion by
//     MetalLB's webhook), a MetalLB configuration (pools with a range and IPv6, advertisements, a v1beta2
//     BGPPeer with a BFDProfile, a Community) and 31 LoadBalancer Services of every kind; MetalLB's real
//     controller assigns their addresses, then stops (step 3).
//  2. Step 4 replaces the CRDs and the conversion; step 5 starts ironlb's controller (the binary with the
//     Deployment's flags: testenv has no nodes to run the Deployment on).
//  3. Every Service keeps exactly its addresses and its ip-allocated-from-pool annotation; a new Service
//     gets a free address; a Service asking for a held one is refused; the MetalLB objects read in both
//     BGPPeer versions; a deleted Service's address is given again.
//
// It needs the Kubernetes binaries (testenv) and MetalLB's controller (hack/metallb.sh); without them it
// skips, except in CI (CI=true or IRONLB_E2E=1), where a missing MetalLB controller fails it.
func TestMigrationFromMetalLB(t *testing.T) {
	metallb := metallbControllerBin(t)
	t0 := time.Now()
	since := func() time.Duration { return time.Since(t0).Round(time.Millisecond) }
	env := testenv.Start(t)
	cs := kubernetes.NewForConfigOrDie(env.Config)
	dyn := dynamic.NewForConfigOrDie(env.Config)
	ctx := context.Background()
	dir := t.TempDir()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ironlb := filepath.Join(dir, "bin", "ironlb")
	if out, err := exec.Command("go", "build", "-o", ironlb, "github.com/ironlb/ironlb/cmd/ironlb").CombinedOutput(); err != nil {
		t.Fatalf("building ironlb: %v\n%s", err, out)
	}
	t.Logf("%s: apiserver up, ironlb built", since())
	steps := migrationSteps(t, filepath.Join(repo, "docs", "install.md"))
	// The documented commands run in bash with the built kubectl and ironlb first on the PATH.
	shell := func(step int, workdir string, lines []string) string {
		t.Helper()
		script := "set -euo pipefail\n" + strings.Join(lines, "\n") + "\n"
		cmd := exec.Command("bash", "-c", script)
		cmd.Dir = workdir
		cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig,
			"PATH="+env.Bin+string(os.PathListSeparator)+filepath.Dir(ironlb)+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("docs/install.md step %d failed: %v\n%s\n%s", step, err, script, out)
		}
		return string(out)
	}
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := env.Kubectl(args...)
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}

	// MetalLB's CRDs as its manifests carry them (the kustomization adds the BGPPeer conversion webhook),
	// created as Helm creates them: owned by another field manager than step 4's server-side apply, which
	// therefore leaves the conversion webhook in place (the hard case: the documented patch must remove it).
	kubectl("create", "--field-manager=helm", "-k", filepath.Join(metallbModuleDir(t), "config", "crd"))
	kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=30s")
	if got := kubectl("get", "crd", "bgppeers.metallb.io", "-o", "jsonpath={.spec.conversion.strategy}"); got != "Webhook" {
		t.Fatalf("MetalLB's BGPPeer CRD has conversion %q, want Webhook as MetalLB ships it", got)
	}
	for _, n := range []string{ns, "team-a", "team-b"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cfgFile := filepath.Join(dir, "metallb.yaml")
	if err := os.WriteFile(cfgFile, []byte(migrationMetalLBConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl("apply", "-f", cfgFile)
	services := migrationServices()
	for _, s := range services {
		if _, err := cs.CoreV1().Services(s.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating service %s/%s: %v", s.Namespace, s.Name, err)
		}
	}

	// MetalLB's controller (FRR mode: the BGPPeer has a BFD profile) assigns every address.
	stopMetalLB := startMetalLBController(t, cs, metallb, env.Kubeconfig, filepath.Join(dir, "metallb.log"))
	before := waitAllAssigned(t, cs, len(services), 2*time.Minute, filepath.Join(dir, "metallb.log"))
	checkMetalLBAssigned(t, before)
	t.Logf("%s: MetalLB assigned %d Services", since(), len(before))

	// Step 1: record (in the scratch directory: it writes files).
	shell(1, dir, steps[1])
	if b, err := os.ReadFile(filepath.Join(dir, "metallb-config.yaml")); err != nil || !strings.Contains(string(b), "kind: BGPPeer") || !strings.Contains(string(b), "kind: Community") {
		t.Fatalf("step 1 recorded no configuration (%v):\n%s", err, b)
	}
	// Step 3: stop MetalLB's controller (the test ran it as a process, not as a Deployment). Its
	// conversion webhook goes with it: BGPPeer v1beta1 is unreadable until step 4.
	stopMetalLB()
	if out, err := env.Kubectl("-n", ns, "get", "bgppeers.v1beta1.metallb.io"); err == nil {
		t.Fatalf("BGPPeer v1beta1 readable through MetalLB's conversion webhook with no webhook: the test does not start from MetalLB's CRDs\n%s", out)
	}

	// Step 4, verbatim, from a checkout (its paths are the repository's).
	t.Logf("step 4:\n%s", shell(4, repo, steps[4]))
	if got := kubectl("get", "crd", "bgppeers.metallb.io", "-o", "jsonpath={.spec.conversion.strategy} {.spec.conversion.webhook.clientConfig.service.name}"); got != "Webhook ironlb-webhook-service" {
		t.Errorf("after step 4 the BGPPeer CRD has conversion %q, want ironlb's webhook", got)
	}
	checkMetalLBObjects(t, dyn, false)

	// Step 5: ironlb's controller with the Deployment's arguments (leader election included), its
	// webhook on a local port: the apiserver cannot reach the Service here, so the CRD's conversion is
	// pointed at the port (the certificate for --webhook-service=localhost covers it).
	webhookAddr := freeAddr(t)
	_, port, _ := net.SplitHostPort(webhookAddr)
	kubectl("patch", "crd", "bgppeers.metallb.io", "--type=json", "-p",
		`[{"op":"replace","path":"/spec/conversion/webhook/clientConfig","value":{"url":"https://localhost:`+port+`/convert"}}]`)
	logFile := filepath.Join(dir, "ironlb.log")
	startIronlbController(t, ironlb, env.Kubeconfig, logFile, webhookAddr)
	waitLog(t, logFile, "initial load done", 60*time.Second)
	t.Logf("%s: ironlb's initial load done", since())
	var status []string
	for _, l := range steps[5] {
		if strings.HasPrefix(l, "ironlb ") {
			status = append(status, l)
		}
	}
	if len(status) == 0 {
		t.Fatalf("docs/install.md step 5 runs no `ironlb status`:\n%s", strings.Join(steps[5], "\n"))
	}
	if out := shell(5, dir, status); strings.Contains(out, "PENDING") {
		t.Errorf("ironlb status shows pending Services after the migration:\n%s", out)
	} else {
		t.Logf("ironlb status:\n%s", out)
	}

	// Step 8, verbatim: the documented comparison.
	if out := shell(8, dir, steps[8]); !strings.Contains(out, "every address kept") {
		t.Errorf("step 8 did not report every address kept:\n%s", out)
	}
	// And field by field, pool annotation included.
	after := assignedNow(t, cs)
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("addresses or pools changed by the migration (-MetalLB +ironlb):\n%s", diff)
	}
	held := map[string]string{} // address -> a Service holding it
	for k, a := range before {
		for _, ip := range a.IPs {
			held[ip] = k
		}
	}

	t.Run("a new Service gets a free address", func(t *testing.T) {
		s := lbService("default", "after-migration")
		if _, err := cs.CoreV1().Services("default").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got := waitAssigned(t, cs, "default", "after-migration", logFile)
		if len(got.IPs) != 1 || got.Pool != "main" {
			t.Fatalf("after-migration got %+v, want one address from pool main", got)
		}
		if h, ok := held[got.IPs[0]]; ok {
			t.Fatalf("after-migration got %s, held by %s since MetalLB", got.IPs[0], h)
		}
	})

	t.Run("a held address is refused to another Service", func(t *testing.T) {
		want := before["team-a/web-00"].IPs[0]
		s := lbService("default", "squatter")
		s.Annotations = map[string]string{"metallb.io/loadBalancerIPs": want}
		if _, err := cs.CoreV1().Services("default").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitServiceEvent(t, cs, "default", "squatter", "AllocationFailed", want, logFile)
		if got := assignedOf(t, cs, "default", "squatter"); len(got.IPs) != 0 {
			t.Fatalf("squatter got %v, held by team-a/web-00", got.IPs)
		}
		_ = cs.CoreV1().Services("default").Delete(ctx, "squatter", metav1.DeleteOptions{})
	})

	t.Run("MetalLB's objects read in both BGPPeer versions", func(t *testing.T) {
		checkMetalLBObjects(t, dyn, true)
	})

	t.Run("a deleted Service's address is given again", func(t *testing.T) {
		freed := before["default/plain-03"].IPs[0]
		if err := cs.CoreV1().Services("default").Delete(ctx, "plain-03", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// The controller may see a create before the delete: after a refusal, a new Service tries again.
		deadline := time.Now().Add(30 * time.Second)
		for i := 0; ; i++ {
			name := fmt.Sprintf("reuse-%d", i)
			s := lbService("team-b", name)
			s.Annotations = map[string]string{"metallb.io/loadBalancerIPs": freed}
			if _, err := cs.CoreV1().Services("team-b").Create(ctx, s, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			got := waitAssignedOrFailed(t, cs, "team-b", name, 10*time.Second)
			if slices.Equal(got.IPs, []string{freed}) && got.Pool == "main" {
				break
			}
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(logFile)
				t.Fatalf("%s got %+v, want %s (freed by plain-03) from pool main\n%s", name, got, freed, tailStr(string(b), 3000))
			}
			if err := cs.CoreV1().Services("team-b").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		// Everything else still as MetalLB left it.
		now := assignedNow(t, cs)
		for k, a := range before {
			if k == "default/plain-03" {
				continue
			}
			if diff := cmp.Diff(a, now[k]); diff != "" {
				t.Errorf("%s changed (-MetalLB +now):\n%s", k, diff)
			}
		}
	})
}

// assigned is what a Service holds: its ingress addresses in order and its pool annotation.
type assigned struct {
	IPs  []string
	Pool string
}

// migrationMetalLBConfig is a MetalLB configuration as users write it: every kind MetalLB's controller
// and speaker read, a pool with a CIDR and a range, a dual-stack pool that is only used on request.
const migrationMetalLBConfig = `
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: main, namespace: metallb-system}
spec:
  addresses: [10.50.0.0/27, 10.50.1.10-10.50.1.40]
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: dual, namespace: metallb-system}
spec:
  addresses: [10.51.0.0/28, "fd00:51::10-fd00:51::ff"]
  autoAssign: false
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: l2, namespace: metallb-system}
spec:
  ipAddressPools: [main]
---
apiVersion: metallb.io/v1beta1
kind: BFDProfile
metadata: {name: fast, namespace: metallb-system}
spec:
  receiveInterval: 50
  transmitInterval: 50
  detectMultiplier: 3
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: router, namespace: metallb-system}
spec:
  myASN: 64513
  peerASN: 64512
  peerAddress: 172.18.255.254
  holdTime: 9s
  bfdProfile: fast
---
apiVersion: metallb.io/v1beta1
kind: Community
metadata: {name: communities, namespace: metallb-system}
spec:
  communities:
  - name: no-advertise
    value: "65535:65282"
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: bgp, namespace: metallb-system}
spec:
  ipAddressPools: [dual]
  communities: [no-advertise]
`

func lbService(namespace, name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(80)}}},
	}
}

// migrationServices are 31 LoadBalancer Services of every kind MetalLB serves.
func migrationServices() []*corev1.Service {
	var out []*corev1.Service
	add := func(namespace, name string, mutate func(*corev1.Service)) {
		s := lbService(namespace, name)
		if mutate != nil {
			mutate(s)
		}
		out = append(out, s)
	}
	ann := func(kv ...string) func(*corev1.Service) {
		return func(s *corev1.Service) {
			s.Annotations = map[string]string{}
			for i := 0; i < len(kv); i += 2 {
				s.Annotations[kv[i]] = kv[i+1]
			}
		}
	}
	for i := range 12 {
		add("default", fmt.Sprintf("plain-%02d", i), nil)
	}
	for i := range 5 {
		add("team-a", fmt.Sprintf("web-%02d", i), nil)
	}
	add("default", "fixed-cidr", ann("metallb.io/loadBalancerIPs", "10.50.0.20"))
	add("team-b", "fixed-range", ann("metallb.io/loadBalancerIPs", "10.50.1.30"))
	add("team-b", "fixed-manual-pool", ann("metallb.io/loadBalancerIPs", "10.51.0.5")) // a pool without autoAssign
	add("default", "lb-ip-field", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "10.50.1.35" })
	add("default", "from-dual", ann("metallb.io/address-pool", "dual"))
	add("default", "deprecated-pool", ann("metallb.universe.tf/address-pool", "dual"))
	add("team-a", "dual-stack", func(s *corev1.Service) {
		ann("metallb.io/address-pool", "dual")(s)
		require := corev1.IPFamilyPolicyRequireDualStack
		s.Spec.IPFamilyPolicy = &require
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	})
	add("team-a", "v6-only", func(s *corev1.Service) {
		ann("metallb.io/address-pool", "dual")(s)
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
	})
	// Two Services on one requested address, and two on whatever address MetalLB chose for the key.
	add("default", "shared-http", ann("metallb.io/allow-shared-ip", "web", "metallb.io/loadBalancerIPs", "10.50.0.25"))
	add("default", "shared-https", func(s *corev1.Service) {
		ann("metallb.io/allow-shared-ip", "web", "metallb.io/loadBalancerIPs", "10.50.0.25")(s)
		s.Spec.Ports[0].Port = 443
	})
	add("team-b", "dns-udp", func(s *corev1.Service) {
		ann("metallb.io/allow-shared-ip", "dns")(s)
		s.Spec.Selector = map[string]string{"app": "dns"}
		s.Spec.Ports = []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)}}
	})
	add("team-b", "dns-tcp", func(s *corev1.Service) {
		ann("metallb.io/allow-shared-ip", "dns")(s)
		s.Spec.Selector = map[string]string{"app": "dns"}
		s.Spec.Ports = []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)}}
	})
	add("default", "local", func(s *corev1.Service) {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	})
	add("team-b", "local-main", func(s *corev1.Service) {
		ann("metallb.io/address-pool", "main")(s)
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	})
	return out
}

// checkMetalLBAssigned checks that MetalLB's controller did what the Services ask (the test's premise).
func checkMetalLBAssigned(t *testing.T, got map[string]assigned) {
	t.Helper()
	want := map[string]assigned{
		"default/fixed-cidr":       {[]string{"10.50.0.20"}, "main"},
		"team-b/fixed-range":       {[]string{"10.50.1.30"}, "main"},
		"team-b/fixed-manual-pool": {[]string{"10.51.0.5"}, "dual"},
		"default/lb-ip-field":      {[]string{"10.50.1.35"}, "main"},
		"default/shared-http":      {[]string{"10.50.0.25"}, "main"},
		"default/shared-https":     {[]string{"10.50.0.25"}, "main"},
	}
	for k, w := range want {
		if diff := cmp.Diff(w, got[k]); diff != "" {
			t.Errorf("MetalLB assigned %s unexpectedly (-want +got):\n%s", k, diff)
		}
	}
	for k, a := range got {
		if a.Pool == "" {
			t.Errorf("MetalLB left %s without %s", k, config.AnnotationAllocatedFromPool)
		}
	}
	if ds := got["team-a/dual-stack"]; len(ds.IPs) != 2 {
		t.Errorf("MetalLB gave dual-stack %v, want an IPv4 and an IPv6 address", ds.IPs)
	}
	if v6 := got["team-a/v6-only"]; len(v6.IPs) != 1 || !netip.MustParseAddr(v6.IPs[0]).Is6() {
		t.Errorf("MetalLB gave v6-only %v, want one IPv6 address", v6.IPs)
	}
}

// metallbControllerBin is MetalLB's controller as hack/metallb.sh builds it (or $METALLB_CONTROLLER): the
// test skips without it, except in CI (CI=true, or IRONLB_E2E=1 as for the other tools), where it fails.
func metallbControllerBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("METALLB_CONTROLLER")
	if bin == "" {
		b, err := os.ReadFile("../../hack/versions.env")
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^METALLB_VERSION=(\S+)$`).FindSubmatch(b)
		if m == nil {
			t.Fatal("hack/versions.env has no METALLB_VERSION")
		}
		cache := os.Getenv("IRONLB_CACHE")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache", "ironlb")
		}
		bin = filepath.Join(cache, "metallb-"+string(m[1]), "controller")
	}
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") == "true" || os.Getenv("IRONLB_E2E") == "1" {
			t.Fatalf("MetalLB's controller not found at %s: hack/metallb.sh builds it (.ci/run and make test run it)", bin)
		}
		t.Skipf("MetalLB's controller not found at %s; hack/metallb.sh builds it (.ci/run and make test run it)", bin)
	}
	return bin
}

// startMetalLBController runs MetalLB's controller as scale_test.go does (webhook disabled, a Pod for it
// to find) and returns a stop that kills it; the test's cleanup stops it too.
func startMetalLBController(t *testing.T, cs kubernetes.Interface, bin, kubeconfig, logFile string) (stop func()) {
	t.Helper()
	return startMetalLBControllerWith(t, cs, bin, kubeconfig, logFile, nil)
}

// startMetalLBControllerWith is startMetalLBController with more environment variables and flags;
// the flags follow the defaults and override them (Go's flag package keeps the last value).
func startMetalLBControllerWith(t *testing.T, cs kubernetes.Interface, bin, kubeconfig, logFile string, env []string, extra ...string) (stop func()) {
	t.Helper()
	ctx := context.Background()
	_, _ = cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "metallb-controller"},
		Spec: corev1.PodSpec{AutomountServiceAccountToken: new(bool), Containers: []corev1.Container{{Name: "c", Image: "quay.io/metallb/controller:v0.16.1"}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--namespace", ns, "--pod-name", "metallb-controller", "--webhook-mode", "disabled",
		"--disable-cert-rotation", "--log-level", "info", "--port", "0", "--health-probe-port", "0")
	cmd.Args = append(cmd.Args, extra...)
	cmd.Env = append(append(os.Environ(), "KUBECONFIG="+kubeconfig, "METALLB_BGP_TYPE=frr"), env...)
	return startProcess(t, cmd, logFile)
}

// startIronlbController runs `ironlb controller` with the Deployment's arguments (config/controller),
// the webhook and metrics listeners off.
func startIronlbController(t *testing.T, bin, kubeconfig, logFile, webhookAddr string) (stop func()) {
	t.Helper()
	cmd := exec.Command(bin, "controller", "--namespace="+ns, "--kubeconfig", kubeconfig, "--identity=migration-test",
		"--webhook-addr="+webhookAddr, "--webhook-service=localhost", "--webhook-secret-namespace="+ns, "--metrics-bind-address=")
	return startProcess(t, cmd, logFile)
}

// startProcess starts cmd with its output in logFile; the returned stop (also run at cleanup) kills it.
func startProcess(t *testing.T, cmd *exec.Cmd, logFile string) (stop func()) {
	t.Helper()
	logf, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatal(err)
	}
	done := false
	stop = func() {
		if done {
			return
		}
		done = true
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
	}
	t.Cleanup(stop)
	return stop
}

func waitLog(t *testing.T, logFile, contains string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		b, _ := os.ReadFile(logFile)
		if strings.Contains(string(b), contains) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q not logged in %s:\n%s", contains, limit, tailStr(string(b), 3000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// assignedNow lists every LoadBalancer Service's addresses and pool annotation, by namespace/name.
func assignedNow(t *testing.T, cs kubernetes.Interface) map[string]assigned {
	t.Helper()
	l, err := cs.CoreV1().Services("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]assigned{}
	for i := range l.Items {
		s := &l.Items[i]
		if s.Spec.Type == corev1.ServiceTypeLoadBalancer {
			out[s.Namespace+"/"+s.Name] = assignedIn(s)
		}
	}
	return out
}

func assignedIn(s *corev1.Service) assigned {
	a := assigned{Pool: s.Annotations[config.AnnotationAllocatedFromPool]}
	for _, in := range s.Status.LoadBalancer.Ingress {
		a.IPs = append(a.IPs, in.IP)
	}
	return a
}

func assignedOf(t *testing.T, cs kubernetes.Interface, namespace, name string) assigned {
	t.Helper()
	s, err := cs.CoreV1().Services(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return assignedIn(s)
}

// waitAllAssigned waits until n LoadBalancer Services hold an address (the dual-stack one two) and
// returns what they hold.
func waitAllAssigned(t *testing.T, cs kubernetes.Interface, n int, limit time.Duration, logFile string) map[string]assigned {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		got := assignedNow(t, cs)
		var missing []string
		for k, a := range got {
			if len(a.IPs) == 0 || (k == "team-a/dual-stack" && len(a.IPs) < 2) {
				missing = append(missing, k)
			}
		}
		if len(got) == n && len(missing) == 0 {
			return got
		}
		if time.Now().After(deadline) {
			slices.Sort(missing)
			b, _ := os.ReadFile(logFile)
			t.Fatalf("after %s, %d of %d Services lack an address: %v\n%s", limit, len(missing), len(got), missing, tailStr(string(b), 3000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func waitAssigned(t *testing.T, cs kubernetes.Interface, namespace, name, logFile string) assigned {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if a := assignedOf(t, cs, namespace, name); len(a.IPs) > 0 && a.Pool != "" {
			return a
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logFile)
			t.Fatalf("%s/%s has no address after 30s\n%s", namespace, name, tailStr(string(b), 3000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitAssignedOrFailed waits for an address or an AllocationFailed event; it returns what the Service holds.
func waitAssignedOrFailed(t *testing.T, cs kubernetes.Interface, namespace, name string, limit time.Duration) assigned {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if a := assignedOf(t, cs, namespace, name); len(a.IPs) > 0 && a.Pool != "" {
			return a
		}
		if len(serviceEvents(t, cs, namespace, name, "AllocationFailed")) > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return assignedOf(t, cs, namespace, name)
}

func serviceEvents(t *testing.T, cs kubernetes.Interface, namespace, name, reason string) []string {
	t.Helper()
	evs, err := cs.CoreV1().Events(namespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + name + ",reason=" + reason})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs.Items {
		out = append(out, e.Message)
	}
	return out
}

func waitServiceEvent(t *testing.T, cs kubernetes.Interface, namespace, name, reason, contains, logFile string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range serviceEvents(t, cs, namespace, name, reason) {
			if strings.Contains(m, contains) {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	b, _ := os.ReadFile(logFile)
	t.Fatalf("no %s event containing %q for %s/%s (have %v)\n%s", reason, contains, namespace, name,
		serviceEvents(t, cs, namespace, name, reason), tailStr(string(b), 3000))
}

// checkMetalLBObjects reads every MetalLB configuration object back, the BGPPeer as v1beta2 and, with
// v1beta1 (ironlb's conversion webhook running), as v1beta1 too, waiting for the webhook a while.
func checkMetalLBObjects(t *testing.T, dyn dynamic.Interface, v1beta1Too bool) {
	t.Helper()
	ctx := context.Background()
	for _, r := range []struct {
		gvr  schema.GroupVersionResource
		name string
	}{
		{v1beta1.IPAddressPoolGVR, "main"},
		{v1beta1.IPAddressPoolGVR, "dual"},
		{v1beta1.L2AdvertisementGVR, "l2"},
		{v1beta1.BGPAdvertisementGVR, "bgp"},
		{v1beta1.BFDProfileGVR, "fast"},
		{v1beta1.CommunityGVR, "communities"},
		{v1beta1.BGPPeerGVR, "router"},
		{v1beta2.BGPPeerGVR, "router"},
	} {
		if r.gvr == v1beta1.BGPPeerGVR && !v1beta1Too {
			continue
		}
		u, err := dyn.Resource(r.gvr).Namespace(ns).Get(ctx, r.name, metav1.GetOptions{})
		for deadline := time.Now().Add(30 * time.Second); err != nil && r.gvr == v1beta1.BGPPeerGVR && time.Now().Before(deadline); {
			time.Sleep(200 * time.Millisecond)
			u, err = dyn.Resource(r.gvr).Namespace(ns).Get(ctx, r.name, metav1.GetOptions{})
		}
		if err != nil {
			t.Errorf("reading %s %s/%s: %v", r.gvr, ns, r.name, err)
			continue
		}
		if r.gvr.Resource != "bgppeers" {
			continue
		}
		spec, _ := u.Object["spec"].(map[string]any)
		if spec["peerAddress"] != "172.18.255.254" || fmt.Sprint(spec["peerASN"]) != "64512" || spec["bfdProfile"] != "fast" {
			t.Errorf("BGPPeer %s reads as %v", r.gvr.Version, spec)
		}
	}
}

// migrationSteps returns the shell lines of each numbered step of docs/install.md's "Migrating from
// MetalLB" (its ```sh blocks, dedented), by step number.
func migrationSteps(t *testing.T, path string) map[int][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "\n## Migrating from MetalLB\n")
	if i < 0 {
		t.Fatalf("%s has no section \"Migrating from MetalLB\"", path)
	}
	doc = doc[i+1:]
	if j := strings.Index(doc[3:], "\n## "); j >= 0 {
		doc = doc[:j+3]
	}
	stepRe := regexp.MustCompile(`(?m)^(\d+)\. \*\*`)
	blockRe := regexp.MustCompile("(?s)\n[ ]*```sh\n(.*?)\n[ ]*```")
	locs := stepRe.FindAllStringSubmatchIndex(doc, -1)
	steps := map[int][]string{}
	for k, loc := range locs {
		end := len(doc)
		if k+1 < len(locs) {
			end = locs[k+1][0]
		}
		var n int
		fmt.Sscan(doc[loc[2]:loc[3]], &n)
		for _, m := range blockRe.FindAllStringSubmatch(doc[loc[0]:end], -1) {
			for _, l := range strings.Split(m[1], "\n") {
				if l = strings.TrimSpace(l); l != "" {
					steps[n] = append(steps[n], l)
				}
			}
		}
	}
	for _, n := range []int{1, 4, 5, 8} {
		if len(steps[n]) == 0 {
			t.Fatalf("%s: step %d of the migration has no commands", path, n)
		}
	}
	return steps
}
