package status

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	frrk8s "github.com/ironlb/ironlb/api/frrk8s/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/internal/testbed/testenv"
)

// TestAgainstAPIServer runs the command's code (Run) against a real kube-apiserver and etcd holding the
// metallb.io CRDs, a pool, an L2Advertisement, Services with status, ServiceL2Status objects and a
// controller event: first without the BGPSessionState CRD (tolerated), then with it.
func TestAgainstAPIServer(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(env.Config)
	dyn := dynamic.NewForConfigOrDie(env.Config)
	install := func(glob string) {
		files, _ := filepath.Glob(filepath.Join("../../config/crd/bases", glob))
		if len(files) == 0 {
			t.Fatalf("no CRDs %s", glob)
		}
		for _, f := range files {
			if out, err := env.Kubectl("apply", "--server-side", "-f", f); err != nil {
				t.Fatalf("installing %s: %v\n%s", f, err, out)
			}
		}
		if out, err := env.Kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=30s"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	install("metallb.io_*.yaml")
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	apply := func(y string) {
		f := filepath.Join(t.TempDir(), "obj.yaml")
		if err := os.WriteFile(f, []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := env.Kubectl("apply", "-f", f); err != nil {
			t.Fatalf("kubectl apply: %v\n%s\n%s", err, out, y)
		}
	}
	apply(`apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: my-ippool, namespace: metallb-system}
spec: {addresses: [172.18.255.200-172.18.255.202]}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: v6, namespace: metallb-system}
spec: {addresses: ["fd00:10::/64"]}
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: l2, namespace: metallb-system}
spec: {ipAddressPools: [my-ippool]}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: router, namespace: metallb-system}
spec: {myASN: 64513, peerASN: 64512, peerAddress: 172.18.0.1}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: bgp, namespace: metallb-system}
spec: {ipAddressPools: [v6]}
`)
	for _, s := range []struct{ name, ip string }{{"svc1", "172.18.255.200"}, {"svc2", "172.18.255.201"}, {"web6", "fd00:10::1"}, {"svc3", ""}} {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: "default"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}
		if strings.Contains(s.ip, ":") {
			single := corev1.IPFamilyPolicySingleStack
			svc.Spec.IPFamilies, svc.Spec.IPFamilyPolicy = []corev1.IPFamily{corev1.IPv6Protocol}, &single
		}
		created, err := cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating service %s: %v", s.name, err)
		}
		if s.ip == "" {
			now := metav1.NewTime(time.Now())
			ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "svc3.allocationfailed", Namespace: "default"},
				InvolvedObject: corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: "default", Name: s.name, UID: created.UID},
				Type:           corev1.EventTypeWarning, Reason: "AllocationFailed",
				Message: `Failed to allocate IP for "default/svc3": PoolExhausted: service default/svc3: no free IPv4 address in pools ["my-ippool"]`,
				Source:  corev1.EventSource{Component: ControllerComponent}, FirstTimestamp: now, LastTimestamp: now, Count: 1}
			if _, err := cs.CoreV1().Events("default").Create(ctx, ev, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		created.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: s.ip}}
		if _, err := cs.CoreV1().Services("default").UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("status of %s: %v", s.name, err)
		}
	}
	withStatus := func(gvr schema.GroupVersionResource, obj map[string]any, status map[string]any) {
		r := dyn.Resource(gvr).Namespace(ns)
		u, err := r.Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating %v: %v", obj["kind"], err)
		}
		u.Object["status"] = status
		if _, err := r.UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("status of %v: %v", obj["kind"], err)
		}
	}
	meta := func(kind, name, version string) map[string]any {
		return map[string]any{"apiVersion": version, "kind": kind, "metadata": map[string]any{"name": name, "namespace": ns}}
	}
	withStatus(v1beta1.ServiceL2StatusGVR, meta("ServiceL2Status", "l2-svc1", "metallb.io/v1beta1"),
		map[string]any{"node": "myk8s-worker", "serviceName": "svc1", "serviceNamespace": "default", "interfaces": []any{map[string]any{"name": "eth0"}}})
	withStatus(v1beta1.ServiceL2StatusGVR, meta("ServiceL2Status", "l2-svc2", "metallb.io/v1beta1"),
		map[string]any{"node": "myk8s-worker2", "serviceName": "svc2", "serviceNamespace": "default"})
	withStatus(v1beta1.ServiceBGPStatusGVR, meta("ServiceBGPStatus", "bgp-web6", "metallb.io/v1beta1"),
		map[string]any{"node": "myk8s-worker3", "serviceName": "web6", "serviceNamespace": "default", "peers": []any{"router"}})

	status := func(format string) string {
		var b bytes.Buffer
		if err := Run(ctx, Config{Kubeconfig: env.Kubeconfig, Namespace: ns, Output: format}, &b); err != nil {
			t.Fatalf("status -o %s: %v", format, err)
		}
		return b.String()
	}

	wantTable := `ADDRESS         SERVICE       POOL       MODE    NODES          PEERS
172.18.255.200  default/svc1  my-ippool  layer2  myk8s-worker   -
172.18.255.201  default/svc2  my-ippool  layer2  myk8s-worker2  -
fd00:10::1      default/web6  v6         bgp     myk8s-worker3  router

POOL       FAMILY  SIZE  USED  FREE   STATUS
my-ippool  IPv4    3     2     1      ok
v6         IPv6    2^64  1     ~2^64  ok

PENDING       REASON            MESSAGE
default/svc3  AllocationFailed  Failed to allocate IP for "default/svc3": PoolExhausted: service default/svc3: no free IPv4 address in pools ["my-ippool"]
`
	if got := status(""); got != wantTable {
		t.Errorf("table without BGPSessionState served:\n%s\nwant:\n%s", got, wantTable)
	}

	// With frr-k8s' BGPSessionState: the peer's session state shows.
	install("frrk8s.metallb.io_*.yaml")
	withStatus(frrk8s.BGPSessionStateGVR, meta("BGPSessionState", "myk8s-worker3-router", "frrk8s.metallb.io/v1beta1"),
		map[string]any{"node": "myk8s-worker3", "peer": "172.18.0.1", "bgpStatus": "Established", "bfdStatus": "N/A"})
	if got := status(OutputTable); !strings.Contains(got, "fd00:10::1      default/web6  v6         bgp     myk8s-worker3  router(Established)\n") {
		t.Errorf("table with BGPSessionState:\n%s", got)
	}
	var r Report
	if err := json.Unmarshal([]byte(status(OutputJSON)), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Addresses) != 3 || r.Addresses[2].Service != "default/web6" || len(r.Addresses[2].BGPNodes) != 1 ||
		r.Addresses[2].BGPNodes[0].Peers[0] != (Peer{Name: "router", Address: "172.18.0.1", BGP: "Established", BFD: "N/A"}) {
		t.Errorf("JSON addresses: %+v", r.Addresses)
	}
	if len(r.Pools) != 2 || r.Pools[1].IPv6 == nil || r.Pools[1].IPv6.Size.Exact() != "18446744073709551616" || r.Pools[0].IPv4.Free.Exact() != "1" {
		t.Errorf("JSON pools: %+v", r.Pools)
	}
	if len(r.Pending) != 1 || r.Pending[0].Service != "default/svc3" || r.Pending[0].Source != SourceEvent || r.Pending[0].Reason != "AllocationFailed" {
		t.Errorf("JSON pending: %+v", r.Pending)
	}
	if y := status(OutputYAML); !strings.Contains(y, "size: 18446744073709551616") {
		t.Errorf("YAML:\n%s", y)
	}
}
