package controller

import (
	"context"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/ironlb/ironlb/internal/testbed/testenv"
)

// These tests run the controller against a real kube-apiserver and etcd (internal/testbed/testenv): Service
// status is a subresource, resource versions conflict, CRDs validate — behaviour a fake client lacks.

const ns = "metallb-system"

type harness struct {
	t   *testing.T
	env *testenv.Env
	cs  kubernetes.Interface
	// webhookAddr is where the controller's admission webhook listens, when the test runs it.
	webhookAddr string
	// reg holds the metrics of the controller start last started.
	reg *prometheus.Registry
}

// metric returns the value of the series of name whose labels include labels (name=value pairs),
// and whether there is one.
func (h *harness) metric(name string, labels ...string) (float64, bool) {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			switch {
			case m.Gauge != nil:
				return m.GetGauge().GetValue(), true
			case m.Counter != nil:
				return m.GetCounter().GetValue(), true
			}
		}
	}
	return 0, false
}

// waitMetric waits until metric(name, labels...) is want, failing t if it does not come.
func (h *harness) waitMetric(t *testing.T, want float64, name string, labels ...string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got, ok := h.metric(name, labels...)
		if ok && got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%v = %v (present %v), want %v", name, labels, got, ok, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func newHarness(t *testing.T) *harness { return newHarnessWithCRDs(t, "../../config/crd/bases") }

func newHarnessWithCRDs(t *testing.T, crdDir string) *harness {
	env := testenv.Start(t)
	cs := kubernetes.NewForConfigOrDie(env.Config)
	crds, _ := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
	if len(crds) == 0 {
		t.Fatalf("no CRDs in %s", crdDir)
	}
	for _, f := range crds {
		if out, err := env.Kubectl("apply", "--server-side", "-f", f); err != nil {
			t.Fatalf("installing %s: %v\n%s", f, err, out)
		}
	}
	if out, err := env.Kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=30s"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The ServiceAccount admission plugin needs the default SA in every namespace it admits pods to; we
	// create no pods, but Services need nothing more.
	return &harness{t: t, env: env, cs: cs}
}

// start runs a controller until the returned stop is called (or the test ends).
func (h *harness) start() (stop func()) {
	return h.startWith(Config{Namespace: ns, FlushInterval: 100 * time.Millisecond})
}

// startWith runs a controller with cfg (its Kubeconfig set to the test apiserver's) until the
// returned stop is called (or the test ends).
func (h *harness) startWith(cfg Config) (stop func()) {
	cfg.Kubeconfig = h.env.Kubeconfig
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	reg := prometheus.NewRegistry()
	h.reg = reg
	cfg.registry = reg
	go func() {
		done <- Run(ctx, cfg)
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				h.t.Errorf("controller returned %v", err)
			}
		case <-time.After(10 * time.Second):
			h.t.Errorf("controller did not stop within 10s of its context ending")
		}
	}
	h.t.Cleanup(stop)
	return stop
}

func (h *harness) apply(yaml string) {
	h.t.Helper()
	f := filepath.Join(h.t.TempDir(), "obj.yaml")
	if err := os.WriteFile(f, []byte(yaml), 0o644); err != nil {
		h.t.Fatal(err)
	}
	if out, err := h.env.Kubectl("apply", "-f", f); err != nil {
		h.t.Fatalf("kubectl apply: %v\n%s\n%s", err, out, yaml)
	}
}

func pool(name string, addrs ...string) string {
	return fmt.Sprintf("apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n  addresses: [%s]\n",
		name, ns, `"`+strings.Join(addrs, `", "`)+`"`)
}

func (h *harness) createService(name string, mutate ...func(*corev1.Service)) {
	h.t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}},
	}
	for _, m := range mutate {
		m(svc)
	}
	if _, err := h.cs.CoreV1().Services("default").Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		h.t.Fatalf("creating service %s: %v", name, err)
	}
}

// ip waits until the Service has exactly want as its first ingress address ("" = none for a while).
func (h *harness) waitIP(name, want string) {
	h.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var got string
	for time.Now().Before(deadline) {
		got = h.ip(name)
		if got == want && want != "" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got != want {
		h.t.Fatalf("service %s: external IP %q, want %q", name, got, want)
	}
}

func (h *harness) ip(name string) string {
	s, err := h.cs.CoreV1().Services("default").Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "<gone>"
	}
	if err != nil || len(s.Status.LoadBalancer.Ingress) == 0 {
		return ""
	}
	return s.Status.LoadBalancer.Ingress[0].IP
}

func (h *harness) events(name, reason string) []string { return h.eventsIn("default", name, reason) }

// eventsIn lists the messages of the events with reason about the object name in namespace.
func (h *harness) eventsIn(namespace, name, reason string) []string {
	evs, _ := h.cs.CoreV1().Events(namespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + name + ",reason=" + reason})
	var out []string
	for _, e := range evs.Items {
		out = append(out, e.Message)
	}
	sort.Strings(out)
	return out
}

func (h *harness) waitEvent(name, reason, contains string) {
	h.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range h.events(name, reason) {
			if strings.Contains(m, contains) {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.t.Fatalf("no %s event containing %q for %s (have %v)", reason, contains, name, h.events(name, reason))
}

func TestControllerAgainstAPIServer(t *testing.T) {
	h := newHarness(t)
	h.apply(pool("my-ippool", "172.18.255.200-172.18.255.250"))
	stop := h.start()

	t.Run("seed 000: svc1..3 get .200 .201 .202", func(t *testing.T) {
		for _, s := range []string{"svc1", "svc2", "svc3"} {
			h.createService(s)
		}
		h.waitIP("svc1", "172.18.255.200")
		h.waitIP("svc2", "172.18.255.201")
		h.waitIP("svc3", "172.18.255.202")
		h.waitEvent("svc1", "IPAllocated", `Assigned IP ["172.18.255.200"]`)
	})

	t.Run("restart keeps every address, even with a new Service created while down", func(t *testing.T) {
		stop()
		h.createService("svc4") // created while the controller is down: must not take .200-.202
		stop = h.start()
		h.waitIP("svc4", "172.18.255.203")
		for s, ip := range map[string]string{"svc1": "172.18.255.200", "svc2": "172.18.255.201", "svc3": "172.18.255.202"} {
			if got := h.ip(s); got != ip {
				t.Errorf("%s: %q after restart, want %s", s, got, ip)
			}
		}
	})

	t.Run("release on delete and on type change; lowest free is reused", func(t *testing.T) {
		if err := h.cs.CoreV1().Services("default").Delete(context.Background(), "svc2", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		h.createService("svc5")
		h.waitIP("svc5", "172.18.255.201")
		s, _ := h.cs.CoreV1().Services("default").Get(context.Background(), "svc3", metav1.GetOptions{})
		s.Spec.Type = corev1.ServiceTypeClusterIP
		s.Spec.ExternalTrafficPolicy = ""
		if _, err := h.cs.CoreV1().Services("default").Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		h.createService("svc6")
		h.waitIP("svc6", "172.18.255.202")
	})

	t.Run("failures are events, and nobody else loses an address", func(t *testing.T) {
		h.createService("wants-outside", func(s *corev1.Service) {
			s.Annotations = map[string]string{"metallb.io/loadBalancerIPs": "10.99.0.1"}
		})
		h.waitEvent("wants-outside", "AllocationFailed", "10.99.0.1")
		h.createService("unknown-pool", func(s *corev1.Service) {
			s.Annotations = map[string]string{"metallb.io/address-pool": "nope"}
		})
		h.waitEvent("unknown-pool", "AllocationFailed", "nope")
		h.createService("taken", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "172.18.255.200" })
		h.waitEvent("taken", "AllocationFailed", "172.18.255.200")
		h.createService("both", func(s *corev1.Service) {
			s.Spec.LoadBalancerIP = "172.18.255.240"
			s.Annotations = map[string]string{"metallb.io/loadBalancerIPs": "172.18.255.241"}
		})
		h.waitEvent("both", "AllocationFailed", "both set")
		if got := h.ip("svc1"); got != "172.18.255.200" {
			t.Errorf("svc1 lost its address: %q", got)
		}
	})

	t.Run("sharing: same key and disjoint ports share; a port clash does not", func(t *testing.T) {
		share := func(port int32) func(*corev1.Service) {
			return func(s *corev1.Service) {
				s.Annotations = map[string]string{"metallb.io/allow-shared-ip": "web", "metallb.io/loadBalancerIPs": "172.18.255.220"}
				s.Spec.Ports[0].Port = port
			}
		}
		h.createService("share-a", share(80))
		h.createService("share-b", share(443))
		h.waitIP("share-a", "172.18.255.220")
		h.waitIP("share-b", "172.18.255.220")
		h.createService("share-c", share(80))
		h.waitEvent("share-c", "AllocationFailed", "172.18.255.220")
	})

	t.Run("a pool shrinking under a Service moves it, with an event", func(t *testing.T) {
		h.apply(pool("my-ippool", "172.18.255.200-172.18.255.210", "172.18.255.220-172.18.255.230"))
		h.createService("high", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "172.18.255.225" })
		h.waitIP("high", "172.18.255.225")
		s, _ := h.cs.CoreV1().Services("default").Get(context.Background(), "high", metav1.GetOptions{})
		s.Spec.LoadBalancerIP = ""
		if _, err := h.cs.CoreV1().Services("default").Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		h.apply(pool("my-ippool", "172.18.255.200-172.18.255.210", "172.18.255.220-172.18.255.224"))
		h.waitEvent("high", "AddressRevoked", "no longer")
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) && (h.ip("high") == "172.18.255.225" || h.ip("high") == "") {
			time.Sleep(50 * time.Millisecond)
		}
		if got := h.ip("high"); got == "172.18.255.225" || got == "" {
			t.Errorf("high kept %q after its address left the pool", got)
		}
	})

	t.Run("pool status and configuration state", func(t *testing.T) {
		deadline := time.Now().Add(10 * time.Second)
		var out string
		for time.Now().Before(deadline) {
			out, _ = h.env.Kubectl("get", "configurationstate", "controller", "-n", ns, "-o", "jsonpath={.status.result}")
			if out == "Valid" {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if out != "Valid" {
			t.Errorf("ConfigurationState controller result %q, want Valid", out)
		}
		st, _ := h.env.Kubectl("get", "ipaddresspool", "my-ippool", "-n", ns, "-o", "jsonpath={.status.assignedIPv4}")
		if st == "" || st == "0" {
			t.Errorf("pool status assignedIPv4 = %q", st)
		}
		// MetalLB's metrics: the configuration loaded, the pool's gauges as in its status (the
		// ranges .200-.210 and .220-.224: 16 addresses; svc1, svc4, svc5, svc6, high and the two
		// sharers of .220, 7 Services, hold 6 of them), and the processed updates.
		h.waitMetric(t, 1, "metallb_k8s_client_config_loaded_bool")
		h.waitMetric(t, 0, "metallb_k8s_client_config_stale_bool")
		h.waitMetric(t, 16, "metallb_allocator_addresses_total", "pool", "my-ippool")
		h.waitMetric(t, 16, "metallb_allocator_ipv4_addresses_total", "pool", "my-ippool")
		h.waitMetric(t, 0, "metallb_allocator_ipv6_addresses_total", "pool", "my-ippool")
		h.waitMetric(t, 6, "metallb_allocator_addresses_in_use_total", "pool", "my-ippool")
		h.waitMetric(t, 6, "metallb_allocator_ipv4_addresses_in_use_total", "pool", "my-ippool")
		h.waitMetric(t, 7, "metallb_allocator_services_allocated_total", "pool", "my-ippool")
		if st != "6" {
			t.Errorf("pool status assignedIPv4 = %q, the gauge says 6", st)
		}
		if n, _ := h.metric("metallb_k8s_client_updates_total"); n == 0 {
			t.Error("metallb_k8s_client_updates_total is 0")
		}
	})

	t.Run("dual stack: one address per family", func(t *testing.T) {
		h.apply(pool("dual", "10.70.0.0/24", "fd00:70::/120"))
		require := corev1.IPFamilyPolicyRequireDualStack
		h.createService("dual", func(s *corev1.Service) {
			s.Annotations = map[string]string{"metallb.io/address-pool": "dual"}
			s.Spec.IPFamilyPolicy = &require
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
		})
		deadline := time.Now().Add(15 * time.Second)
		var got []string
		for time.Now().Before(deadline) {
			s, _ := h.cs.CoreV1().Services("default").Get(context.Background(), "dual", metav1.GetOptions{})
			got = nil
			for _, in := range s.Status.LoadBalancer.Ingress {
				got = append(got, in.IP)
			}
			if len(got) == 2 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if len(got) != 2 || got[0] != "10.70.0.0" && got[0] != "10.70.0.1" || !strings.HasPrefix(got[1], "fd00:70::") {
			t.Errorf("dual-stack service got %v, want one IPv4 from 10.70.0.0/24 and one IPv6 from fd00:70::/120", got)
		}
	})

	t.Run("pool conditions: Exhausted and Valid=False, ConfigurationState Invalid", func(t *testing.T) {
		h.apply(pool("tiny", "10.60.0.1/32"))
		onTiny := func(s *corev1.Service) { s.Annotations = map[string]string{"metallb.io/address-pool": "tiny"} }
		h.createService("tiny-1", onTiny)
		h.waitIP("tiny-1", "10.60.0.1")
		h.createService("tiny-2", onTiny)
		h.waitEvent("tiny-2", "AllocationFailed", "PoolExhausted")
		h.waitJSONPath("ipaddresspool", "tiny", `{.status.conditions[?(@.type=="Exhausted")].status}`, "True")
		h.apply(pool("dup", "172.18.255.205/32")) // overlaps my-ippool; no webhook here, so the controller must refuse it
		h.waitJSONPath("ipaddresspool", "dup", `{.status.conditions[?(@.type=="Valid")].reason}`, "InvalidConfiguration")
		h.waitJSONPath("configurationstate", "controller", "{.status.result}", "Invalid")
		if got := h.ip("svc1"); got != "172.18.255.200" {
			t.Errorf("svc1 lost its address to an invalid pool: %q", got)
		}
		// MetalLB's alerts' inputs: the tiny pool is exhausted (in use >= total), and the
		// configuration is stale, having loaded before.
		h.waitMetric(t, 1, "metallb_allocator_addresses_in_use_total", "pool", "tiny")
		h.waitMetric(t, 1, "metallb_allocator_addresses_total", "pool", "tiny")
		h.waitMetric(t, 1, "metallb_k8s_client_config_stale_bool")
		h.waitMetric(t, 1, "metallb_k8s_client_config_loaded_bool")
		// Fixed: no longer stale.
		h.apply(pool("dup", "10.61.0.1/32"))
		h.waitMetric(t, 0, "metallb_k8s_client_config_stale_bool")
		// A deleted pool's series go.
		if out, err := h.env.Kubectl("delete", "ipaddresspool", "dup", "-n", ns); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		deadline := time.Now().Add(15 * time.Second)
		for _, ok := h.metric("metallb_allocator_addresses_total", "pool", "dup"); ok; _, ok = h.metric("metallb_allocator_addresses_total", "pool", "dup") {
			if time.Now().After(deadline) {
				t.Fatal("metallb_allocator_addresses_total{pool=dup} still there after the pool was deleted")
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// TestWaitingServiceReportedOnce: a Service waiting for an address is decided again whenever another
// releases one; deciding it again with the same outcome records no new event (400 differential
// sequences once recorded ~21,900 identical AllocationFailed events and the recorder fell 15 s behind).
func TestWaitingServiceReportedOnce(t *testing.T) {
	h := newHarness(t)
	h.apply(pool("one", "10.62.0.1/32"))
	h.start()
	onOne := func(s *corev1.Service) { s.Annotations = map[string]string{"metallb.io/address-pool": "one"} }
	h.createService("holder", onOne)
	h.waitIP("holder", "10.62.0.1")
	h.createService("waiter", onOne)
	h.waitEvent("waiter", "AllocationFailed", "PoolExhausted")
	h.apply(pool("other", "10.63.0.0/29"))
	inOther := func(s *corev1.Service) { s.Annotations = map[string]string{"metallb.io/address-pool": "other"} }
	for i := range 5 { // each delete releases an address and decides "waiter" again
		name := fmt.Sprintf("churn-%d", i)
		h.createService(name, inOther)
		h.waitIP(name, "10.63.0.0")
		if err := h.cs.CoreV1().Services("default").Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		h.waitIP(name, "<gone>")
	}
	// A changed reason is said again: the pool the waiter asks for goes away.
	if out, err := h.env.Kubectl("annotate", "service", "waiter", "--overwrite", "metallb.io/address-pool=nope"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	h.waitEvent("waiter", "AllocationFailed", "UnknownPool")
	evs, err := h.cs.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.name=waiter,reason=AllocationFailed"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Count > 1 {
			t.Errorf("event %q recorded %d times, want once", e.Message, e.Count)
		}
	}
	if len(evs.Items) != 2 {
		t.Errorf("waiter has %d AllocationFailed events, want 2 (PoolExhausted, then UnknownPool)", len(evs.Items))
	}
}

func (h *harness) waitJSONPath(kind, name, path, want string) {
	h.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var out string
	for time.Now().Before(deadline) {
		out, _ = h.env.Kubectl("get", kind, name, "-n", ns, "-o", "jsonpath="+path)
		if out == want {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.t.Fatalf("%s %s %s = %q, want %q", kind, name, path, out, want)
}
