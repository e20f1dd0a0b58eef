package explain

import (
	"errors"
	"flag"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ironlb/ironlb/internal/proxy/convert"
)

var update = flag.Bool("update", false, "rewrite testdata/")

func node(name, ip, podCIDR string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}},
	}
}

func svc(name, clusterIP string, mut func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIPs: []string{clusterIP},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}},
	}
	if mut != nil {
		mut(s)
	}
	return s
}

type ep struct {
	addr, node  string
	ready, term bool
}

func eps(svcName string, port int32, proto corev1.Protocol, portName string, list ...ep) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "demo", Name: svcName + "-abc", Labels: map[string]string{discoveryv1.LabelServiceName: svcName}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(portName), Protocol: ptr.To(proto), Port: ptr.To(port)}},
	}
	for _, e := range list {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{e.addr}, NodeName: ptr.To(e.node),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(e.ready), Serving: ptr.To(e.ready || e.term), Terminating: ptr.To(e.term)},
		})
	}
	return es
}

// cluster is a three-node cluster with a ClusterIP Service (random), a LoadBalancer Service
// (Maglev, externalTrafficPolicy Local, source ranges), another (Maglev, Cluster policy), a
// round-robin UDP Service and a Service without endpoints.
func cluster() Objects {
	return Objects{
		Nodes: []*corev1.Node{
			node("node-a", "192.168.0.10", "10.244.1.0/24"),
			node("node-b", "192.168.0.11", "10.244.2.0/24"),
			node("node-c", "192.168.0.12", "10.244.3.0/24"),
		},
		Services: []*corev1.Service{
			svc("web", "10.96.0.10", nil),
			svc("shop", "10.96.0.20", func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Annotations = map[string]string{convert.AnnotationAlgorithm: "maglev"}
				s.Spec.Ports[0].NodePort = 30080
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 32000
				s.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/24"}
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.168.1.240"}}
			}),
			svc("dns", "10.96.0.53", func(s *corev1.Service) {
				s.Annotations = map[string]string{convert.AnnotationAlgorithm: "round-robin"}
				s.Spec.Ports = []corev1.ServicePort{{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}}
			}),
			svc("empty", "10.96.0.99", nil),
			svc("api", "10.96.0.30", func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Annotations = map[string]string{convert.AnnotationAlgorithm: "maglev"}
				s.Spec.Ports[0].NodePort = 30081
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.168.1.241"}}
			}),
		},
		Slices: []*discoveryv1.EndpointSlice{
			eps("web", 8080, corev1.ProtocolTCP, "http",
				ep{"10.244.1.5", "node-a", true, false}, ep{"10.244.2.5", "node-b", true, false},
				ep{"10.244.3.5", "node-c", false, false}, ep{"10.244.3.6", "node-c", false, true}),
			eps("shop", 8443, corev1.ProtocolTCP, "http",
				ep{"10.244.1.7", "node-a", true, false}, ep{"10.244.2.7", "node-b", true, false}),
			eps("api", 8080, corev1.ProtocolTCP, "http",
				ep{"10.244.1.8", "node-a", true, false}, ep{"10.244.2.8", "node-b", true, false}, ep{"10.244.3.8", "node-c", true, false}),
			eps("dns", 5353, corev1.ProtocolUDP, "dns",
				ep{"10.244.2.53", "node-b", true, false}, ep{"10.244.3.53", "node-c", true, false}),
		},
	}
}

var (
	a  = netip.MustParseAddr
	ap = netip.MustParseAddrPort
)

func TestExplainGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		q    Query
	}{
		{"pod to ClusterIP (node chosen by pod CIDR)", Options{}, Query{From: a("10.244.1.9"), To: ap("10.96.0.10:80")}},
		{"hairpin: endpoint to its own Service", Options{Node: "node-a"}, Query{From: a("10.244.1.5"), To: ap("10.96.0.10:80")}},
		{"host to ClusterIP", Options{Node: "node-a"}, Query{From: a("192.168.0.10"), To: ap("10.96.0.10:80"), FromHost: true}},
		{"node-b declared dead", Options{Node: "node-a", DeadNodes: []string{"node-b"}}, Query{From: a("10.244.1.9"), To: ap("10.96.0.10:80")}},
		{"wrong port of a ClusterIP", Options{Node: "node-a"}, Query{From: a("10.244.1.9"), To: ap("10.96.0.10:81")}},
		{"Service without endpoints", Options{Node: "node-a"}, Query{From: a("10.244.1.9"), To: ap("10.96.0.99:80")}},
		{"client to load-balancer IP, Maglev, Local policy", Options{Node: "node-a"}, Query{From: a("203.0.113.50"), To: ap("192.168.1.240:80")}},
		{"client to load-balancer IP, Maglev, Cluster policy", Options{Node: "node-b"}, Query{From: a("203.0.113.50"), To: ap("192.168.1.241:80")}},
		{"source outside loadBalancerSourceRanges", Options{Node: "node-a"}, Query{From: a("198.51.100.7"), To: ap("192.168.1.240:80")}},
		{"node port on a node without local endpoints", Options{Node: "node-c"}, Query{From: a("203.0.113.50"), To: ap("192.168.0.12:30080")}},
		{"UDP round-robin", Options{Node: "node-a"}, Query{From: a("10.244.1.9"), To: ap("10.96.0.53:53"), Protocol: "udp"}},
		{"not a Service", Options{Node: "node-a"}, Query{From: a("10.244.1.9"), To: ap("10.244.2.5:8080")}},
		{"direct server return, source port unknown", Options{Node: "node-c", ExternalMode: nftrules.ExternalDSR}, Query{From: a("203.0.113.50"), To: ap("192.168.1.241:80")}},
		{"direct server return, entry node-c", Options{Node: "node-c", ExternalMode: nftrules.ExternalDSR}, Query{From: a("203.0.113.50"), To: ap("192.168.1.241:80"), SrcPort: 40000}},
		{"direct server return, another flow", Options{Node: "node-c", ExternalMode: nftrules.ExternalDSR}, Query{From: a("203.0.113.50"), To: ap("192.168.1.241:80"), SrcPort: 40002}},
		{"direct server return, pods take the snat path", Options{Node: "node-a", ExternalMode: nftrules.ExternalDSR}, Query{From: a("10.244.1.9"), To: ap("192.168.1.241:80"), SrcPort: 40000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Explain(cluster(), tc.opts, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, r.String())
		})
	}
}

func TestChooseNode(t *testing.T) {
	objs := cluster()
	if _, err := Explain(objs, Options{}, Query{From: a("203.0.113.50"), To: ap("10.96.0.10:80")}); !errors.Is(err, ErrNode) ||
		!strings.Contains(err.Error(), "node-a, node-b, node-c") {
		t.Errorf("ambiguous node: %v", err)
	}
	r, err := Explain(objs, Options{}, Query{From: a("192.168.0.11"), To: ap("10.96.0.10:80"), FromHost: true})
	if err != nil || r.Node != "node-b" {
		t.Errorf("node by address: %v %v", r, err)
	}
	if _, err := Explain(objs, Options{Node: "nope"}, Query{From: a("10.244.1.9"), To: ap("10.96.0.10:80")}); !errors.Is(err, ErrNode) {
		t.Errorf("unknown node: %v", err)
	}
	if _, err := Explain(objs, Options{Node: "node-a"}, Query{From: a("fd00::1"), To: ap("10.96.0.10:80")}); err == nil {
		t.Error("mixed families accepted")
	}
}

// golden compares got with testdata/<test name>.golden (go test -update rewrites it).
func golden(t *testing.T, got string) {
	t.Helper()
	name := strings.NewReplacer("/", "_", " ", "_", ":", "", ",", "", "(", "", ")", "").Replace(t.Name())
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update creates it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestExplainServiceCIDRs: the Service networks come from the cluster's ServiceCIDR objects, as
// the proxy reads them, unless Options.ServiceCIDRs is given: an unallocated address in them is
// dropped.
func TestExplainServiceCIDRs(t *testing.T) {
	q := Query{From: a("10.244.1.9"), To: ap("10.96.7.7:80")}
	objs := cluster()
	r, err := Explain(objs, Options{Node: "node-a"}, q)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(r.String(), "unallocated") {
		t.Errorf("no ServiceCIDR objects, yet:\n%s", r)
	}
	objs.ServiceCIDRs = []*networkingv1.ServiceCIDR{{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.96.0.0/16"}}}}
	r, err = Explain(objs, Options{Node: "node-a"}, q)
	if err != nil {
		t.Fatal(err)
	}
	if s := r.String(); !strings.Contains(s, "drop traffic to unallocated ClusterIPs") {
		t.Errorf("ServiceCIDR 10.96.0.0/16: 10.96.7.7 not dropped as unallocated:\n%s", s)
	}
	r, err = Explain(objs, Options{Node: "node-a", ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.200.0.0/16")}}, q)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(r.String(), "unallocated") {
		t.Errorf("Options.ServiceCIDRs 10.200.0.0/16 given, yet 10.96.7.7 dropped:\n%s", r)
	}
}

// TestExplainDSRRejoin: the alternate the trace names for a flow's backend node (where its rejoin
// rule sends a segment it holds no state of) is the backend node the trace finds while that node
// is declared dead: the owner of the flow's bucket during its absence.
func TestExplainDSRRejoin(t *testing.T) {
	for _, sport := range []uint16{40000, 40001, 40002, 40003} {
		q := Query{From: a("203.0.113.50"), To: ap("192.168.1.241:80"), SrcPort: sport}
		r, err := Explain(cluster(), Options{Node: "node-c", ExternalMode: nftrules.ExternalDSR}, q)
		if err != nil {
			t.Fatal(err)
		}
		d := r.DSR
		if d == nil || d.Owner == "" || d.Alternate == "" || d.Alternate == d.Owner {
			t.Fatalf("port %d: %+v", sport, d)
		}
		entry := "node-a"
		if d.Owner == entry {
			entry = "node-b"
		}
		away, err := Explain(cluster(), Options{Node: entry, ExternalMode: nftrules.ExternalDSR, DeadNodes: []string{d.Owner}}, q)
		if err != nil {
			t.Fatal(err)
		}
		if away.DSR == nil || away.DSR.Owner != d.Alternate {
			t.Errorf("port %d: bucket %d of %s, alternate %s; owner while %s is dead: %+v", sport, d.Bucket, d.Owner, d.Alternate, d.Owner, away.DSR)
		}
	}
}
