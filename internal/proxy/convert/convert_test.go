package convert

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ironlb/ironlb/internal/proxy/nftrules"
)

var (
	a   = netip.MustParseAddr
	pfx = netip.MustParsePrefix
)

const thisNode = "node-a"

// service returns ns1/web, ClusterIP 10.96.0.10, port http tcp 80 -> target "http".
func service(mut ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "web"},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeClusterIP,
			ClusterIP:  "10.96.0.10",
			ClusterIPs: []string{"10.96.0.10"},
			Ports:      []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		},
	}
	for _, m := range mut {
		m(s)
	}
	return s
}

type epSpec struct {
	addr                        string
	node                        string
	ready, serving, terminating *bool
	hints                       *discoveryv1.EndpointHints
}

// slice returns an EndpointSlice of ns1/web with the given ports (name -> port) and endpoints.
func slice(name string, ports map[string]int32, proto corev1.Protocol, eps ...epSpec) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for n, p := range ports {
		es.Ports = append(es.Ports, discoveryv1.EndpointPort{Name: ptr.To(n), Protocol: ptr.To(proto), Port: ptr.To(p)})
	}
	for _, e := range eps {
		ep := discoveryv1.Endpoint{Addresses: []string{e.addr},
			Conditions: discoveryv1.EndpointConditions{Ready: e.ready, Serving: e.serving, Terminating: e.terminating}, Hints: e.hints}
		if e.node != "" {
			ep.NodeName = ptr.To(e.node)
		}
		es.Endpoints = append(es.Endpoints, ep)
	}
	return es
}

func ready(addr, node string) epSpec { return epSpec{addr: addr, node: node} }

func nep(addr string, port uint16, node string) nftrules.Endpoint {
	return nftrules.Endpoint{Addr: a(addr), Port: port, Node: node, Ready: true, Serving: true, Local: node == thisNode}
}

func webPort(eps ...nftrules.Endpoint) []nftrules.Port {
	return []nftrules.Port{{Name: "http", Protocol: nftrules.TCP, Port: 80, Endpoints: eps}}
}

func base(mut ...func(*nftrules.Service)) *nftrules.Service {
	s := &nftrules.Service{Namespace: "ns1", Name: "web", ClusterIPs: []netip.Addr{a("10.96.0.10")}}
	for _, m := range mut {
		m(s)
	}
	return s
}

func TestService(t *testing.T) {
	http := map[string]int32{"http": 8080}
	for _, tc := range []struct {
		name     string
		svc      *corev1.Service
		slices   []*discoveryv1.EndpointSlice
		want     *nftrules.Service
		skip     SkipReason
		warnings []WarningReason
	}{{
		name:   "ClusterIP with a local and a remote endpoint",
		svc:    service(),
		slices: []*discoveryv1.EndpointSlice{slice("web-1", http, corev1.ProtocolTCP, ready("10.244.2.5", "node-b"), ready("10.244.1.5", thisNode))},
		want: base(func(s *nftrules.Service) {
			s.Ports = webPort(nep("10.244.1.5", 8080, thisNode), nep("10.244.2.5", 8080, "node-b"))
		}),
	}, {
		name: "topology hints (trafficDistribution) carried per endpoint",
		svc: service(func(s *corev1.Service) {
			s.Spec.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferSameNode)
		}),
		slices: []*discoveryv1.EndpointSlice{slice("web-1", http, corev1.ProtocolTCP, epSpec{addr: "10.244.1.5", node: thisNode,
			hints: &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-a"}}, ForNodes: []discoveryv1.ForNode{{Name: thisNode}}}},
			ready("10.244.2.5", "node-b"))},
		want: base(func(s *nftrules.Service) {
			local := nep("10.244.1.5", 8080, thisNode)
			local.ZoneHints, local.NodeHints = []string{"zone-a"}, []string{thisNode}
			s.Ports = webPort(local, nep("10.244.2.5", 8080, "node-b"))
		}),
	}, {
		name: "named targetPort resolves per EndpointSlice",
		svc:  service(),
		slices: []*discoveryv1.EndpointSlice{
			slice("web-1", http, corev1.ProtocolTCP, ready("10.244.1.5", thisNode)),
			slice("web-2", map[string]int32{"http": 9090}, corev1.ProtocolTCP, ready("10.244.2.5", "node-b")),
			slice("web-3", map[string]int32{"metrics": 9100}, corev1.ProtocolTCP, ready("10.244.3.5", "node-c")),
			slice("web-4", http, corev1.ProtocolUDP, ready("10.244.4.5", "node-c")),
		},
		want: base(func(s *nftrules.Service) {
			s.Ports = webPort(nep("10.244.1.5", 8080, thisNode), nep("10.244.2.5", 9090, "node-b"))
		}),
	}, {
		name: "multiple ports and protocols",
		svc: service(func(s *corev1.Service) {
			s.Spec.Ports = []corev1.ServicePort{
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53},
				{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53},
				{Name: "sctp", Protocol: corev1.ProtocolSCTP, Port: 7777},
			}
		}),
		slices: []*discoveryv1.EndpointSlice{
			slice("web-1", map[string]int32{"dns": 5353}, corev1.ProtocolUDP, ready("10.244.1.5", thisNode)),
			slice("web-2", map[string]int32{"dns-tcp": 5353}, corev1.ProtocolTCP, ready("10.244.1.5", thisNode)),
		},
		want: base(func(s *nftrules.Service) {
			s.Ports = []nftrules.Port{
				{Name: "dns", Protocol: nftrules.UDP, Port: 53, Endpoints: []nftrules.Endpoint{nep("10.244.1.5", 5353, thisNode)}},
				{Name: "dns-tcp", Protocol: nftrules.TCP, Port: 53, Endpoints: []nftrules.Endpoint{nep("10.244.1.5", 5353, thisNode)}},
				{Name: "sctp", Protocol: nftrules.SCTP, Port: 7777},
			}
		}),
	}, {
		name: "endpoint conditions",
		svc:  service(),
		slices: []*discoveryv1.EndpointSlice{slice("web-1", http, corev1.ProtocolTCP,
			epSpec{addr: "10.244.1.1", node: thisNode},                                                                         // unset: ready
			epSpec{addr: "10.244.1.2", node: thisNode, ready: ptr.To(false)},                                                   // not ready, serving as ready
			epSpec{addr: "10.244.1.3", node: "node-b", ready: ptr.To(false), serving: ptr.To(true), terminating: ptr.To(true)}, // serving-terminating
			epSpec{addr: "10.244.1.4", ready: ptr.To(false), serving: ptr.To(false), terminating: ptr.To(true)},                // no node
		)},
		want: base(func(s *nftrules.Service) {
			s.Ports = webPort(
				nep("10.244.1.1", 8080, thisNode),
				nftrules.Endpoint{Addr: a("10.244.1.2"), Port: 8080, Node: thisNode, Local: true},
				nftrules.Endpoint{Addr: a("10.244.1.3"), Port: 8080, Node: "node-b", Serving: true, Terminating: true},
				nftrules.Endpoint{Addr: a("10.244.1.4"), Port: 8080, Terminating: true},
			)
		}),
	}, {
		name: "FQDN slices and endpoints without or with bad addresses are ignored",
		svc:  service(),
		slices: func() []*discoveryv1.EndpointSlice {
			fq := slice("web-fqdn", http, corev1.ProtocolTCP, ready("example.com", "node-b"))
			fq.AddressType = discoveryv1.AddressTypeFQDN
			bad := slice("web-1", http, corev1.ProtocolTCP, ready("not-an-ip", "node-b"), ready("10.244.1.5", thisNode))
			bad.Endpoints = append(bad.Endpoints, discoveryv1.Endpoint{})
			return []*discoveryv1.EndpointSlice{fq, bad}
		}(),
		want: base(func(s *nftrules.Service) { s.Ports = webPort(nep("10.244.1.5", 8080, thisNode)) }),
	}, {
		name: "LoadBalancer: NodePort, ingress IPs (not Proxy mode, not hostnames), externalIPs, ETP Local, health check",
		svc: service(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.Ports[0].NodePort = 30080
			s.Spec.ExternalIPs = []string{"192.168.1.250"}
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Spec.HealthCheckNodePort = 32000
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{
				{IP: "192.168.1.240"},
				{IP: "192.168.1.241", IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)},
				{IP: "192.168.1.242", IPMode: ptr.To(corev1.LoadBalancerIPModeProxy)},
				{Hostname: "lb.example.com"},
			}
		}),
		want: base(func(s *nftrules.Service) {
			s.Ports = []nftrules.Port{{Name: "http", Protocol: nftrules.TCP, Port: 80, NodePort: 30080}}
			s.ExternalIPs = []netip.Addr{a("192.168.1.250")}
			s.LoadBalancerIPs = []netip.Addr{a("192.168.1.240"), a("192.168.1.241")}
			s.ExternalTrafficPolicyLocal = true
			s.HealthCheckNodePort = 32000
		}),
	}, {
		name: "a loadBalancerClass that is not ours still gets ClusterIP, NodePort and ingress IPs",
		svc: service(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.LoadBalancerClass = ptr.To("example.com/other")
			s.Spec.Ports[0].NodePort = 30080
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.7"}}
		}),
		want: base(func(s *nftrules.Service) {
			s.Ports = []nftrules.Port{{Name: "http", Protocol: nftrules.TCP, Port: 80, NodePort: 30080}}
			s.LoadBalancerIPs = []netip.Addr{a("203.0.113.7")}
		}),
	}, {
		name: "ITP Local, ETP Cluster without health check",
		svc: service(func(s *corev1.Service) {
			s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
			s.Spec.HealthCheckNodePort = 32000 // ignored without ETP Local
		}),
		want: base(func(s *nftrules.Service) {
			s.Ports = webPort()
			s.InternalTrafficPolicyLocal = true
		}),
	}, {
		name: "session affinity with and without timeout",
		svc: service(func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}}
		}),
		want: base(func(s *nftrules.Service) {
			s.Ports = webPort()
			s.SessionAffinityClientIP, s.SessionAffinityTimeout = true, time.Minute
		}),
	}, {
		name: "session affinity default timeout",
		svc:  service(func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP }),
		want: base(func(s *nftrules.Service) {
			s.Ports = webPort()
			s.SessionAffinityClientIP, s.SessionAffinityTimeout = true, nftrules.DefaultAffinityTimeout
		}),
	}, {
		name: "loadBalancerSourceRanges, one invalid",
		svc: service(func(s *corev1.Service) {
			s.Spec.LoadBalancerSourceRanges = []string{" 203.0.113.0/25", "10.1.2.3", "198.51.100.7/24", "bogus"}
		}),
		want: base(func(s *nftrules.Service) {
			s.Ports = webPort()
			s.LoadBalancerSourceRanges = []netip.Prefix{pfx("203.0.113.0/25"), pfx("10.1.2.3/32"), pfx("198.51.100.0/24")}
		}),
		warnings: []WarningReason{BadSourceRange},
	}, {
		name: "algorithm annotation",
		svc:  service(func(s *corev1.Service) { s.Annotations = map[string]string{AnnotationAlgorithm: "maglev"} }),
		want: base(func(s *nftrules.Service) { s.Ports = webPort(); s.Algorithm = nftrules.Maglev }),
	}, {
		name: "round-robin",
		svc:  service(func(s *corev1.Service) { s.Annotations = map[string]string{AnnotationAlgorithm: "round-robin"} }),
		want: base(func(s *nftrules.Service) { s.Ports = webPort(); s.Algorithm = nftrules.RoundRobin }),
	}, {
		name:     "invalid algorithm falls back to random with a warning",
		svc:      service(func(s *corev1.Service) { s.Annotations = map[string]string{AnnotationAlgorithm: "least-conn"} }),
		want:     base(func(s *nftrules.Service) { s.Ports = webPort() }),
		warnings: []WarningReason{BadAlgorithm},
	}, {
		name: "external mode dsr",
		svc:  service(func(s *corev1.Service) { s.Annotations = map[string]string{AnnotationExternalMode: "dsr"} }),
		want: base(func(s *nftrules.Service) { s.Ports = webPort(); s.ExternalMode = nftrules.ExternalDSR }),
	}, {
		name: "external mode snat",
		svc:  service(func(s *corev1.Service) { s.Annotations = map[string]string{AnnotationExternalMode: " snat"} }),
		want: base(func(s *nftrules.Service) { s.Ports = webPort(); s.ExternalMode = nftrules.ExternalSNAT }),
	}, {
		name:     "invalid external mode falls back to the default with a warning",
		svc:      service(func(s *corev1.Service) { s.Annotations = map[string]string{AnnotationExternalMode: "direct"} }),
		want:     base(func(s *nftrules.Service) { s.Ports = webPort() }),
		warnings: []WarningReason{BadExternalMode},
	}, {
		name: "dual-stack ClusterIPs, bad externalIP",
		svc: service(func(s *corev1.Service) {
			s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:10:96::10"}
			s.Spec.ExternalIPs = []string{"1.2.3"}
		}),
		want: base(func(s *nftrules.Service) {
			s.ClusterIPs = []netip.Addr{a("10.96.0.10"), a("fd00:10:96::10")}
			s.Ports = webPort()
		}),
		warnings: []WarningReason{BadAddress},
	}, {
		name:     "unsupported protocol drops the port",
		svc:      service(func(s *corev1.Service) { s.Spec.Ports[0].Protocol = "ICMP" }),
		want:     base(),
		warnings: []WarningReason{BadProtocol},
	}, {
		name: "headless",
		svc:  service(func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "None", []string{"None"} }),
		skip: SkipHeadless,
	}, {
		name: "headless label",
		svc:  service(func(s *corev1.Service) { s.Labels = map[string]string{LabelHeadless: ""} }),
		skip: SkipHeadless,
	}, {
		name: "ExternalName",
		svc: service(func(s *corev1.Service) {
			s.Spec.Type, s.Spec.ExternalName, s.Spec.ClusterIP, s.Spec.ClusterIPs = corev1.ServiceTypeExternalName, "example.com", "", nil
		}),
		skip: SkipExternalName,
	}, {
		name: "no ClusterIP yet",
		svc:  service(func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "", nil }),
		skip: SkipNoClusterIP,
	}, {
		name: "another proxy's",
		svc:  service(func(s *corev1.Service) { s.Labels = map[string]string{LabelServiceProxyName: "other"} }),
		skip: SkipOtherProxy,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, skip, warns := Service(tc.svc, tc.slices, thisNode)
			if skip != tc.skip {
				t.Errorf("skip = %v, want %v", skip, tc.skip)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateComparable(netip.Addr{}, netip.Prefix{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			var reasons []WarningReason
			for _, w := range warns {
				reasons = append(reasons, w.Reason)
			}
			if diff := cmp.Diff(tc.warnings, reasons); diff != "" {
				t.Errorf("warnings (-want +got):\n%s\n%v", diff, warns)
			}
		})
	}
}

func TestWarningNamesTheProblem(t *testing.T) {
	_, _, warns := Service(service(func(s *corev1.Service) {
		s.Annotations = map[string]string{AnnotationAlgorithm: "least-conn"}
	}), nil, thisNode)
	if len(warns) != 1 || warns[0].String() != `InvalidLoadBalancingAlgorithm: annotation ironlb.io/load-balancing: unknown balancing algorithm "least-conn" (want random, round-robin or maglev); using random` {
		t.Errorf("warnings = %v", warns)
	}
}

func TestNode(t *testing.T) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: thisNode, Labels: map[string]string{corev1.LabelTopologyZone: "zone-a"}},
		Spec:       corev1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24", "fd00:10:244:1::/64"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeHostName, Address: "node-a"},
			{Type: corev1.NodeInternalIP, Address: "192.168.0.10"},
			{Type: corev1.NodeInternalIP, Address: "192.168.0.11"},
			{Type: corev1.NodeInternalIP, Address: "fd00:192:168::10"},
			{Type: corev1.NodeExternalIP, Address: "203.0.113.10"},
		}},
	}
	local := []netip.Addr{a("127.0.0.1"), a("192.168.0.10"), a("192.168.0.11"), a("172.17.0.1"), a("fe80::1"), a("fd00:192:168::10"), a("::1")}
	ips := []netip.Addr{a("192.168.0.10"), a("192.168.0.11"), a("fd00:192:168::10"), a("203.0.113.10")}
	podCIDRs := []netip.Prefix{pfx("10.244.1.0/24"), pfx("fd00:10:244:1::/64")}
	for _, tc := range []struct {
		name string
		cfg  NodeConfig
		dead map[string]bool
		want nftrules.Node
	}{{
		name: "zero value: all addresses, pod CIDRs from the node",
		cfg:  NodeConfig{Name: thisNode},
		want: nftrules.Node{Name: thisNode, IPs: ips, ClusterCIDRs: podCIDRs},
	}, {
		name: "flag unset: primary, as kube-proxy's nftables mode",
		cfg:  NodeConfig{Name: thisNode, NodePorts: mustNodePorts(t)},
		want: nftrules.Node{Name: thisNode, IPs: ips, ClusterCIDRs: podCIDRs,
			NodePortAddresses: []netip.Addr{a("192.168.0.10"), a("fd00:192:168::10")}},
	}, {
		name: "all",
		cfg:  NodeConfig{Name: thisNode, NodePorts: mustNodePorts(t, "all")},
		want: nftrules.Node{Name: thisNode, IPs: ips, ClusterCIDRs: podCIDRs},
	}, {
		name: "primary and a CIDR",
		cfg:  NodeConfig{Name: thisNode, NodePorts: mustNodePorts(t, "primary", "172.17.0.0/16")},
		want: nftrules.Node{Name: thisNode, IPs: ips, ClusterCIDRs: podCIDRs,
			NodePortAddresses: []netip.Addr{a("172.17.0.1"), a("192.168.0.10"), a("fd00:192:168::10")}},
	}, {
		name: "primary",
		cfg:  NodeConfig{Name: thisNode, NodePorts: NodePorts{Primary: true}, ClusterCIDRs: []netip.Prefix{pfx("10.244.0.0/16")}},
		want: nftrules.Node{Name: thisNode, IPs: ips, ClusterCIDRs: []netip.Prefix{pfx("10.244.0.0/16")},
			NodePortAddresses: []netip.Addr{a("192.168.0.10"), a("fd00:192:168::10")}},
	}, {
		name: "CIDRs select local addresses, never loopback or link-local",
		cfg:  NodeConfig{Name: thisNode, NodePorts: NodePorts{CIDRs: []netip.Prefix{pfx("192.168.0.0/16"), pfx("127.0.0.0/8"), pfx("::/0")}}},
		want: nftrules.Node{Name: thisNode, IPs: ips, ClusterCIDRs: podCIDRs,
			NodePortAddresses: []netip.Addr{a("192.168.0.10"), a("192.168.0.11"), a("fd00:192:168::10")}},
	}, {
		name: "zero CIDRs only mean all",
		cfg:  NodeConfig{Name: thisNode, NodePorts: NodePorts{CIDRs: []netip.Prefix{pfx("0.0.0.0/0"), pfx("::/0")}}},
		want: nftrules.Node{Name: thisNode, IPs: ips, ClusterCIDRs: podCIDRs},
	}, {
		name: "CIDRs matching nothing accept node ports nowhere",
		cfg:  NodeConfig{Name: thisNode, NodePorts: NodePorts{CIDRs: []netip.Prefix{pfx("10.99.0.0/16")}}},
		want: nftrules.Node{Name: thisNode, IPs: ips, ClusterCIDRs: podCIDRs, NodePortAddresses: []netip.Addr{netip.IPv4Unspecified()}},
	}, {
		name: "service CIDRs and dead nodes (never this one)",
		cfg:  NodeConfig{Name: thisNode, ServiceCIDRs: []netip.Prefix{pfx("10.96.0.0/16")}},
		dead: map[string]bool{"node-b": true, thisNode: true, "node-c": false},
		want: nftrules.Node{Name: thisNode, IPs: ips, ClusterCIDRs: podCIDRs, ServiceCIDRs: []netip.Prefix{pfx("10.96.0.0/16")},
			DeadNodes: map[string]bool{"node-b": true}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := Node(tc.cfg, node, local, tc.dead)
			tc.want.Zone = "zone-a" // the node's topology.kubernetes.io/zone label
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateComparable(netip.Addr{}, netip.Prefix{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func mustNodePorts(t *testing.T, vals ...string) NodePorts {
	t.Helper()
	n, err := ParseNodePorts(vals)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestNodePrimaryFallsBackToExternalIP: kube-proxy's node IPs are the InternalIPs, then the
// ExternalIPs, the first of each family; a loopback node IP pins nothing.
func TestNodePrimaryFallsBackToExternalIP(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: thisNode},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeExternalIP, Address: "2001:db8::10"},
			{Type: corev1.NodeInternalIP, Address: "192.168.0.10"},
			{Type: corev1.NodeExternalIP, Address: "203.0.113.10"},
		}}}
	got := Node(NodeConfig{Name: thisNode, NodePorts: mustNodePorts(t)}, node, nil, nil).NodePortAddresses
	want := []netip.Addr{a("192.168.0.10"), a("2001:db8::10")}
	if !slices.Equal(got, want) {
		t.Errorf("node-port addresses %v, want %v", got, want)
	}
	got = Node(NodeConfig{Name: thisNode, NodePorts: mustNodePorts(t), BindAddress: a("192.168.0.99")}, node, nil, nil).NodePortAddresses
	if want := []netip.Addr{a("192.168.0.99"), a("2001:db8::10")}; !slices.Equal(got, want) {
		t.Errorf("bindAddress: node-port addresses %v, want %v", got, want)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
	got = Node(NodeConfig{Name: thisNode, NodePorts: mustNodePorts(t)}, node, nil, nil).NodePortAddresses
	if want := []netip.Addr{netip.IPv4Unspecified()}; !slices.Equal(got, want) {
		t.Errorf("loopback node IP: node-port addresses %v, want %v (none)", got, want)
	}
}

func TestParseNodePorts(t *testing.T) {
	for _, tc := range []struct {
		in      []string
		want    string
		wantErr bool
	}{
		{nil, "primary", false},
		{[]string{""}, "primary", false},
		{[]string{"all"}, "all local addresses", false},
		{[]string{"localhost"}, "", true},
		{[]string{"primary"}, "primary", false},
		{[]string{"10.0.0.0/8, 192.168.1.1/24", "primary"}, "primary,10.0.0.0/8,192.168.1.0/24", false},
		{[]string{"0.0.0.0/0"}, "all local addresses", false},
		{[]string{"10.0.0.1"}, "", true},
	} {
		n, err := ParseNodePorts(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("%q: err = %v", tc.in, err)
			continue
		}
		if err == nil && n.String() != tc.want {
			t.Errorf("%q: %s, want %s", tc.in, n, tc.want)
		}
	}
}

func TestNodeEligible(t *testing.T) {
	n := &corev1.Node{}
	if !NodeEligible(n) || !NodeEligible(nil) {
		t.Error("plain node not eligible")
	}
	n.Spec.Taints = []corev1.Taint{{Key: "ToBeDeletedByClusterAutoscaler", Effect: corev1.TaintEffectNoSchedule}}
	if NodeEligible(n) {
		t.Error("node tainted for deletion is eligible")
	}
	n = &corev1.Node{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &metav1.Time{}}}
	if NodeEligible(n) {
		t.Error("node being deleted is eligible")
	}
}

// TestConverterReuse: unchanged objects give the same *Service (Incremental skips it) and no
// repeated issues; a changed EndpointSlice gives a new one.
func TestConverterReuse(t *testing.T) {
	svc := service(func(s *corev1.Service) {
		s.ResourceVersion, s.UID = "1", "u1"
		s.Annotations = map[string]string{AnnotationAlgorithm: "bogus"}
	})
	es := slice("web-1", map[string]int32{"http": 8080}, corev1.ProtocolTCP, ready("10.244.1.5", thisNode))
	es.ResourceVersion = "5"
	headless := service(func(s *corev1.Service) { s.Name, s.ResourceVersion, s.Spec.ClusterIPs = "hl", "2", []string{"None"} })
	c := NewConverter(thisNode)
	slicesOf := GroupSlices([]*discoveryv1.EndpointSlice{es})

	m1, issues := c.Services([]*corev1.Service{svc, headless}, slicesOf)
	if len(m1) != 1 || len(issues) != 2 {
		t.Fatalf("first conversion: %d services, issues %+v", len(m1), issues)
	}
	key := nftrules.ServiceKey{Namespace: "ns1", Name: "web"}
	m2, issues := c.Services([]*corev1.Service{svc, headless}, slicesOf)
	if m2[key] != m1[key] || len(issues) != 0 {
		t.Errorf("unchanged objects: pointer reused %v, issues %+v", m2[key] == m1[key], issues)
	}

	es2 := es.DeepCopy()
	es2.ResourceVersion = "6"
	es2.Endpoints[0].Conditions.Ready = ptr.To(false)
	m3, issues := c.Services([]*corev1.Service{svc}, GroupSlices([]*discoveryv1.EndpointSlice{es2}))
	if m3[key] == m1[key] || len(issues) != 1 {
		t.Errorf("changed slice: pointer reused %v, issues %+v", m3[key] == m1[key], issues)
	}
	if m3[key].Ports[0].Endpoints[0].Ready {
		t.Error("changed slice not converted")
	}
	if len(c.cache) != 1 {
		t.Errorf("cache keeps %d entries after a Service went, want 1", len(c.cache))
	}

	// Objects without resourceVersions are converted every time.
	plain := service()
	n1, _ := c.Services([]*corev1.Service{plain}, slicesOf)
	n2, _ := c.Services([]*corev1.Service{plain}, slicesOf)
	if n1[key] == n2[key] {
		t.Error("object without resourceVersion was cached")
	}
}

// TestEndpointOrderIndependentOfSlices: an endpoint listed in two EndpointSlices with different
// conditions (while the EndpointSlice controller moves it) converts to the same Service whatever
// the order the informer lists the slices in; with more than 12 endpoints the sort is no longer
// an insertion sort, and ties in address, port and node came out in the slices' order.
func TestEndpointOrderIndependentOfSlices(t *testing.T) {
	var eps []*discoveryv1.EndpointSlice
	for i := range 2 {
		var specs []epSpec
		for j := range 10 {
			specs = append(specs, epSpec{addr: fmt.Sprintf("10.0.0.%d", j), node: "node-b", ready: ptr.To(i == 0)})
		}
		eps = append(eps, slice(fmt.Sprintf("web-%d", i), map[string]int32{"http": 80}, corev1.ProtocolTCP, specs...))
	}
	want, _, _ := Service(service(), eps, thisNode)
	got, _, _ := Service(service(), []*discoveryv1.EndpointSlice{eps[1], eps[0]}, thisNode)
	if diff := cmp.Diff(want, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		t.Errorf("the slices' order changes the Service (-given +reversed):\n%s", diff)
	}
}

func TestServiceCIDRs(t *testing.T) {
	obj := func(name string, cidrs ...string) *networkingv1.ServiceCIDR {
		return &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: cidrs}}
	}
	for _, tc := range []struct {
		name    string
		objs    []*networkingv1.ServiceCIDR
		want    []netip.Prefix
		wantBad []string
	}{
		{name: "none", objs: nil, want: nil},
		{name: "kubernetes default, dual-stack",
			objs: []*networkingv1.ServiceCIDR{obj("kubernetes", "10.96.0.0/16", "fd00:10:96::/112")},
			want: []netip.Prefix{pfx("10.96.0.0/16"), pfx("fd00:10:96::/112")}},
		{name: "several objects: union, sorted, each once",
			objs: []*networkingv1.ServiceCIDR{obj("kubernetes", "10.96.0.0/16"), obj("extra", "10.201.0.0/16", "10.96.0.0/16"), obj("small", "10.0.0.0/24")},
			want: []netip.Prefix{pfx("10.0.0.0/24"), pfx("10.96.0.0/16"), pfx("10.201.0.0/16")}},
		{name: "a broken CIDR is left out and named",
			objs:    []*networkingv1.ServiceCIDR{obj("kubernetes", "10.96.0.0/16"), obj("broken", "10.300.0.0/16")},
			want:    []netip.Prefix{pfx("10.96.0.0/16")},
			wantBad: []string{"broken: 10.300.0.0/16"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, bad := ServiceCIDRs(tc.objs)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateComparable(netip.Prefix{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantBad, bad, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("bad (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNodeMACs(t *testing.T) {
	e := func(last byte) nftrules.EtherAddr { return nftrules.EtherAddr{0x02, 0x42, 0xac, 0x12, 0, last} }
	for _, tc := range []struct {
		name, value string
		absent      bool
		want        []nftrules.EtherAddr
		wantErr     string
	}{
		{name: "absent", absent: true},
		{name: "empty", value: ""},
		{name: "one", value: "02:42:ac:12:00:03", want: []nftrules.EtherAddr{e(3)}},
		{name: "sorted, once, any case, spaces", value: "02:42:AC:12:00:04, 02:42:ac:12:00:03,02:42:ac:12:00:04", want: []nftrules.EtherAddr{e(3), e(4)}},
		{name: "not a MAC", value: "02:42:ac:12:00:03,bogus", wantErr: `node n1: annotation ironlb.io/dsr-macs: "bogus" is not an Ethernet address`},
		{name: "EUI-64", value: "02:42:ac:12:00:03:00:01", wantErr: `"02:42:ac:12:00:03:00:01" is not an Ethernet address`},
		{name: "dashes", value: "02-42-ac-12-00-03", wantErr: `"02-42-ac-12-00-03" is not an Ethernet address`},
		{name: "empty item", value: "02:42:ac:12:00:03,", wantErr: `"" is not an Ethernet address`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
			if !tc.absent {
				n.Annotations = map[string]string{AnnotationDSRMACs: tc.value}
			}
			got, err := NodeMACs(n)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				if got != nil {
					t.Errorf("got %v with the error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if len(got) > 0 {
				back, err := ParseMACs(FormatMACs(got))
				if err != nil || !cmp.Equal(back, got) {
					t.Errorf("FormatMACs does not round-trip: %v, %v", back, err)
				}
			}
		})
	}
}
