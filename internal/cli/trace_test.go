package cli

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/ironlb/ironlb/internal/proxy/explain"
)

// traceObjects is a small cluster for `ironlb trace`: two nodes, a dual-stack LoadBalancer Service
// with a node port and externalTrafficPolicy Local, and its endpoints on both nodes (one
// terminating).
func traceObjects() explain.Objects {
	node := func(name, ip, ip6, podCIDR string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip},
				{Type: corev1.NodeInternalIP, Address: ip6}}}}
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10", "fd00:96::10"},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, HealthCheckNodePort: 32000,
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30080, TargetPort: intstr.FromInt32(8080)},
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(53)}}},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "172.18.255.200"}, {IP: "fd00:ff::1"}}}}}
	ports := []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(8080))},
		{Name: ptr.To("dns"), Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(int32(53))}}
	label := map[string]string{discoveryv1.LabelServiceName: "web"}
	return explain.Objects{
		Nodes:    []*corev1.Node{node("node-a", "172.18.0.2", "fd00:18::2", "10.244.0.0/24"), node("node-b", "172.18.0.3", "fd00:18::3", "10.244.1.0/24")},
		Services: []*corev1.Service{svc},
		Slices: []*discoveryv1.EndpointSlice{
			{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-v4", Labels: label}, AddressType: discoveryv1.AddressTypeIPv4, Ports: ports,
				Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.5"}, NodeName: ptr.To("node-a")},
					{Addresses: []string{"10.244.1.5"}, NodeName: ptr.To("node-b"),
						Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}}}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-v6", Labels: label}, AddressType: discoveryv1.AddressTypeIPv6, Ports: ports,
				Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"fd00:244::5"}, NodeName: ptr.To("node-b")}}},
		},
	}
}

// list splits a flag value as pflag's StringSlice does for a plain value.
func list(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// FuzzTraceArgs feeds arbitrary values of `ironlb trace`'s flags, then traces the query they
// parse to through a small cluster's rules: parsing never panics and its errors name the flag;
// a query that parses gets a report with at least one path (a verdict) or a clear error, never
// both and never neither; and the report is the same when traced again and when the objects are
// listed in the other order.
//
// Tracing builds, applies and parses a whole ruleset: it is nearly all of an execution's time. So
// the last two properties share one second trace, over the same objects (not fresh copies) listed
// in the other order: it differs from the first if tracing is not deterministic, if the first trace
// changed the objects it was given, or if the order matters.
func FuzzTraceArgs(f *testing.F) {
	f.Add("10.244.0.9", "172.18.255.200:80", "tcp", "", "", "", "", "", false, false)
	f.Add("192.0.2.7", "172.18.0.3:30080", "TCP", "primary", "10.244.0.0/16", "10.96.0.0/16", "node-b", "node-a", false, true)
	f.Add("fd00:244::9", "[fd00:ff::1]:80", "", "fd00:18::/64", "", "", "", "node-b", false, false)
	f.Add("172.18.0.2", "10.96.0.10:53", "udp", "", "", "", "", "", true, false)
	f.Add("10.244.0.9", "[fd00:ff::1]:80", "icmp", "x", "bad", "", "", "nope", false, false)
	f.Add("fe80::1%eth0", "[fd00:ff::1%eth0]:80", "sctp", ",,", " 10.0.0.0/8 ", "::ffff:10.0.0.0/104", "node-a,node-b", "", true, true)
	f.Fuzz(func(t *testing.T, from, to, proto, nodePorts, clusterCIDRs, svcCIDRs, dead, node string, fromHost, masqAll bool) {
		fl := traceFlags{from: from, to: to, proto: proto, node: node, fromHost: fromHost, masqAll: masqAll,
			nodePorts: list(nodePorts), clusterCIDRs: list(clusterCIDRs), svcCIDRs: list(svcCIDRs), dead: list(dead)}
		q, opts, err := fl.parse()
		if err != nil {
			if !strings.HasPrefix(err.Error(), "--") {
				t.Fatalf("error names no flag: %v", err)
			}
			return
		}
		objs := traceObjects()
		r, err := explain.Explain(objs, opts, q)
		if err != nil {
			if r != nil || err.Error() == "" {
				t.Fatalf("report %v with error %q", r, err)
			}
			return
		}
		if r == nil || r.Result == nil || len(r.Result.Paths) == 0 {
			t.Fatalf("no verdict and no error for %+v %+v", q, opts)
		}
		text := r.String()
		rev := explain.Objects{Nodes: slices.Clone(objs.Nodes), Services: slices.Clone(objs.Services), Slices: slices.Clone(objs.Slices)}
		slices.Reverse(rev.Nodes)
		slices.Reverse(rev.Slices)
		if again, err := explain.Explain(rev, opts, q); err != nil || again.String() != text {
			t.Fatalf("tracing again, the objects in the other order: %v\n%s\nthen\n%s", err, text, again)
		}
	})
}
