package config

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/internal/allocator"
)

func pool(name string, addrs ...string) v1beta1.IPAddressPool {
	return v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1beta1.IPAddressPoolSpec{Addresses: addrs}}
}

func TestParsePools(t *testing.T) {
	f := false
	withAuto := pool("manual", "10.0.1.0/24")
	withAuto.Spec.AutoAssign = &f
	pinned := pool("team-a", "10.0.2.0/24")
	pinned.Spec.AllocateTo = &v1beta1.ServiceAllocation{Priority: 10, Namespaces: []string{"a"},
		NamespaceSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"team": "a"}}}}
	dupNS := pool("dup", "10.0.3.0/24")
	dupNS.Spec.AllocateTo = &v1beta1.ServiceAllocation{Namespaces: []string{"x", "x"}}
	tests := []struct {
		name    string
		pools   []v1beta1.IPAddressPool
		want    []string // valid pool names
		wantErr []string // substrings of the error
	}{
		{"seed 000", []v1beta1.IPAddressPool{pool("my-ippool", "172.18.255.200-172.18.255.250")}, []string{"my-ippool"}, nil},
		{"ipv4 and ipv6", []v1beta1.IPAddressPool{pool("dual", "10.0.0.0/24", "fc00::/120")}, []string{"dual"}, nil},
		{"reversed range", []v1beta1.IPAddressPool{pool("rev", "10.0.0.9-10.0.0.1")}, nil, []string{"ipaddresspool rev"}},
		{"malformed", []v1beta1.IPAddressPool{pool("bad", "10.0.0.0/33")}, nil, []string{"ipaddresspool bad"}},
		{"empty", []v1beta1.IPAddressPool{pool("empty")}, nil, []string{"ipaddresspool empty", "at least one"}},
		{"overlap between pools keeps the first by name", []v1beta1.IPAddressPool{pool("b", "10.0.0.0/24"), pool("a", "10.0.0.128-10.0.0.130")},
			[]string{"a"}, []string{"ipaddresspool b", "overlaps", "ipaddresspool a"}},
		{"cidr inside a range of another pool", []v1beta1.IPAddressPool{pool("a", "10.0.0.1-10.0.0.200"), pool("b", "10.0.0.64/26")},
			[]string{"a"}, []string{"ipaddresspool b", "overlaps"}},
		{"overlap inside one pool", []v1beta1.IPAddressPool{pool("self", "10.0.0.0/24", "10.0.0.5/32")}, nil, []string{"same pool"}},
		{"one bad pool does not hide the good ones", []v1beta1.IPAddressPool{pool("good", "10.0.0.0/24"), pool("bad", "nonsense")},
			[]string{"good"}, []string{"ipaddresspool bad"}},
		{"duplicate namespace", []v1beta1.IPAddressPool{dupNS}, nil, []string{"listed twice"}},
		{"autoAssign false and pinned pools are valid", []v1beta1.IPAddressPool{withAuto, pinned}, []string{"manual", "team-a"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps, err := ParsePools(tt.pools, map[string]map[string]string{"a": nil, "b": {"team": "a"}})
			if diff := cmp.Diff(tt.want, ps.Names); diff != "" {
				t.Errorf("valid pools (-want +got):\n%s", diff)
			}
			if len(tt.wantErr) == 0 && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			for _, w := range tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("error %v should contain %q", err, w)
				}
			}
		})
	}
}

func TestCandidatesOrder(t *testing.T) {
	a := pool("a-default", "10.0.0.0/24")
	b := pool("b-prio5", "10.0.1.0/24")
	b.Spec.AllocateTo = &v1beta1.ServiceAllocation{Priority: 5}
	c := pool("c-team", "10.0.2.0/24")
	c.Spec.AllocateTo = &v1beta1.ServiceAllocation{Priority: 20, NamespaceSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"team": "x"}}}}
	d := pool("d-svcsel", "10.0.3.0/24")
	d.Spec.AllocateTo = &v1beta1.ServiceAllocation{Priority: 1, ServiceSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"tier": "db"}}}}
	f := false
	e := pool("e-manual", "10.0.4.0/24")
	e.Spec.AutoAssign = &f
	ps, err := ParsePools([]v1beta1.IPAddressPool{a, b, c, d, e}, map[string]map[string]string{"teamx": {"team": "x"}, "other": nil})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		ns     string
		labels map[string]string
		want   []string
	}{
		{"other", nil, []string{"b-prio5", "a-default"}},
		{"teamx", nil, []string{"c-team", "b-prio5", "a-default"}},
		{"teamx", map[string]string{"tier": "db"}, []string{"d-svcsel", "c-team", "b-prio5", "a-default"}},
	} {
		if diff := cmp.Diff(tt.want, ps.Candidates(tt.ns, tt.labels)); diff != "" {
			t.Errorf("candidates for %s %v (-want +got):\n%s", tt.ns, tt.labels, diff)
		}
	}
}

func TestValidatePool(t *testing.T) {
	existing := []v1beta1.IPAddressPool{pool("my-ippool", "172.18.255.200-172.18.255.250")}
	for _, tt := range []struct {
		p       v1beta1.IPAddressPool
		wantErr string
	}{
		{pool("ok", "172.18.254.0/24"), ""},
		{pool("my-ippool", "172.18.255.200-172.18.255.251"), ""}, // an update of itself
		{pool("clash", "172.18.255.240/28"), "overlaps 172.18.255.200-172.18.255.250 of ipaddresspool my-ippool"},
		{pool("rev", "172.18.1.9-172.18.1.1"), "addresses"},
		{pool("v4inv6", "::ffff:10.0.0.1/128"), ""},
	} {
		err := ValidatePool(&tt.p, existing)
		if tt.wantErr == "" && err != nil && tt.p.Name != "v4inv6" {
			t.Errorf("%s: unexpected %v", tt.p.Name, err)
		}
		if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%s: error %v, want it to contain %q", tt.p.Name, err, tt.wantErr)
		}
	}
}

func TestRequest(t *testing.T) {
	svc := func(mut func(*corev1.Service)) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns", Annotations: map[string]string{}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "x"},
				IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
				Ports:      []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}, {Port: 53, Protocol: corev1.ProtocolUDP}}}}
		mut(s)
		return s
	}
	for _, tt := range []struct {
		name       string
		svc        *corev1.Service
		want       allocator.Request
		deprecated []string
		bad        string
	}{
		{"plain", svc(func(*corev1.Service) {}), allocator.Request{Key: allocator.Key{Namespace: "ns", Name: "s"}, Families: []allocator.Family{allocator.IPv4},
			Ports: []allocator.Port{{Protocol: "TCP", Port: 80}, {Protocol: "UDP", Port: 53}}}, nil, ""},
		{"annotations (current wins over deprecated)", svc(func(s *corev1.Service) {
			s.Annotations["metallb.io/address-pool"] = "p1"
			s.Annotations["metallb.universe.tf/address-pool"] = "old"
			s.Annotations["metallb.universe.tf/allow-shared-ip"] = "k"
			s.Annotations["metallb.io/loadBalancerIPs"] = "10.0.0.5"
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}), allocator.Request{Key: allocator.Key{Namespace: "ns", Name: "s"}, Families: []allocator.Family{allocator.IPv4},
			Pool: "p1", SharingKey: "k", BackendKey: "app=x", Requested: []netip.Addr{netip.MustParseAddr("10.0.0.5")},
			Ports: []allocator.Port{{Protocol: "TCP", Port: 80}, {Protocol: "UDP", Port: 53}}}, []string{"metallb.universe.tf/allow-shared-ip"}, ""},
		{"loadBalancerIP and annotation", svc(func(s *corev1.Service) {
			s.Spec.LoadBalancerIP = "10.0.0.1"
			s.Annotations["metallb.io/loadBalancerIPs"] = "10.0.0.2"
		}), allocator.Request{}, nil, "both set"},
		{"garbage address", svc(func(s *corev1.Service) { s.Annotations["metallb.io/loadBalancerIPs"] = "10.0.0.x" }), allocator.Request{}, nil, "not an IP"},
		{"two of one family", svc(func(s *corev1.Service) { s.Annotations["metallb.io/loadBalancerIPs"] = "10.0.0.1,10.0.0.2" }), allocator.Request{}, nil, "same family"},
		{"wrong family", svc(func(s *corev1.Service) { s.Spec.LoadBalancerIP = "fc00::1" }), allocator.Request{}, nil, "IP family"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, dep, err := Request(tt.svc, nil)
			if tt.bad != "" {
				if !errors.Is(err, ErrBadService) || !strings.Contains(err.Error(), tt.bad) {
					t.Fatalf("error %v, want ErrBadService containing %q", err, tt.bad)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.deprecated, dep); diff != "" {
				t.Errorf("deprecated (-want +got):\n%s", diff)
			}
		})
	}
}

// TestServes is MetalLB's filterByLoadBalancerClass, one row per case: without --lb-class only
// Services without a class, with it only Services of exactly that class.
func TestServes(t *testing.T) {
	mine, other, empty := "ironlb", "other", ""
	for _, tt := range []struct {
		name  string
		typ   corev1.ServiceType
		class *string // the Service's spec.loadBalancerClass
		flag  string  // --lb-class
		want  Serving
	}{
		{"no flag, no class", corev1.ServiceTypeLoadBalancer, nil, "", Served},
		{"no flag, a class", corev1.ServiceTypeLoadBalancer, &other, "", OtherClass},
		{"no flag, empty class", corev1.ServiceTypeLoadBalancer, &empty, "", Served}, // MetalLB compares the strings
		{"flag, same class", corev1.ServiceTypeLoadBalancer, &mine, "ironlb", Served},
		{"flag, other class", corev1.ServiceTypeLoadBalancer, &other, "ironlb", OtherClass},
		{"flag, no class", corev1.ServiceTypeLoadBalancer, nil, "ironlb", OtherClass},
		{"not a LoadBalancer", corev1.ServiceTypeNodePort, nil, "", NotLoadBalancer},
		{"not a LoadBalancer, flag, same class", corev1.ServiceTypeClusterIP, &mine, "ironlb", NotLoadBalancer},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &corev1.Service{Spec: corev1.ServiceSpec{Type: tt.typ, LoadBalancerClass: tt.class}}
			if got := Serves(s, tt.flag); got != tt.want {
				t.Errorf("Serves(class %v, --lb-class=%q) = %s, want %s", tt.class, tt.flag, got, tt.want)
			}
			if got := Ours(s, tt.flag); got != (tt.want == Served) {
				t.Errorf("Ours = %v, want %v", got, tt.want == Served)
			}
		})
	}
}

func TestPoolWarnings(t *testing.T) {
	p := func(avoid bool, addrs ...string) *v1beta1.IPAddressPool {
		return &v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1beta1.IPAddressPoolSpec{Addresses: addrs, AvoidBuggyIPs: avoid}}
	}
	for _, tc := range []struct {
		name string
		pool *v1beta1.IPAddressPool
		want int
	}{
		{"IPv6 only, avoidBuggyIPs", p(true, "fd00::/120"), 1},
		{"dual stack, avoidBuggyIPs", p(true, "fd00::/120", "10.0.0.0/24"), 0},
		{"IPv4, avoidBuggyIPs", p(true, "10.0.0.0/24"), 0},
		{"IPv6 only, no avoidBuggyIPs", p(false, "fd00::/120"), 0},
		{"invalid", p(true, "fd00::/200"), 0},
	} {
		if got := PoolWarnings(tc.pool); len(got) != tc.want {
			t.Errorf("%s: %q, want %d warnings", tc.name, got, tc.want)
		}
	}
}

func TestInfraOverlaps(t *testing.T) {
	in := Infra{
		NodeAddrs:  map[string][]netip.Addr{"b": {netip.MustParseAddr("172.18.0.3")}, "a": {netip.MustParseAddr("172.18.0.2"), netip.MustParseAddr("fd00::2")}},
		PodCIDRs:   map[string][]netip.Prefix{"a": {netip.MustParsePrefix("10.244.0.0/24")}, "c": {netip.MustParsePrefix("10.244.2.0/24")}},
		ServiceIPs: []netip.Addr{netip.MustParseAddr("10.96.0.1"), netip.MustParseAddr("10.100.0.1")},
		ServiceCIDRs: map[string][]netip.Prefix{"kubernetes": {netip.MustParsePrefix("10.100.0.0/16"), netip.MustParsePrefix("fd00:10:96::/112")},
			"extra": {netip.MustParsePrefix("10.101.0.0/24")}},
		// One on a node (172.18.0.2 is node a's), one not.
		APIServerAddrs: []netip.Addr{netip.MustParseAddr("172.18.0.2"), netip.MustParseAddr("172.18.1.9")},
	}
	for _, tc := range []struct {
		name  string
		addrs []string
		want  []string
	}{
		{"clear of everything", []string{"172.18.255.200-172.18.255.250"}, nil},
		{"two node addresses, in node order", []string{"172.18.0.0/28"}, []string{
			"the pool holds 172.18.0.2, an address of node a", "the pool holds 172.18.0.3, an address of node b"}},
		{"an IPv6 node address", []string{"fd00::/120"}, []string{"the pool holds fd00::2, an address of node a"}},
		{"inside a pod CIDR", []string{"10.244.2.10-10.244.2.20"}, []string{"the pool overlaps 10.244.2.0/24, the pod CIDR of node c"}},
		{"around a pod CIDR", []string{"10.244.0.0/16"}, []string{"the pool overlaps 10.244.0.0/24, the pod CIDR of node a", "the pool overlaps 10.244.2.0/24, the pod CIDR of node c"}},
		{"the kubernetes Service", []string{"10.96.0.0/30"}, []string{"the pool holds 10.96.0.1, in the Service CIDR (the kubernetes Service, the apiserver's in-cluster address)"}},
		{"inside a ServiceCIDR, its kubernetes Service's address reported once", []string{"10.100.0.0-10.100.0.9"},
			[]string{"the pool overlaps 10.100.0.0/16, the Service CIDR (ServiceCIDR kubernetes)"}},
		{"around two ServiceCIDRs, in name order", []string{"10.100.0.0/14"}, []string{
			"the pool overlaps 10.101.0.0/24, the Service CIDR (ServiceCIDR extra)", "the pool overlaps 10.100.0.0/16, the Service CIDR (ServiceCIDR kubernetes)"}},
		{"an IPv6 ServiceCIDR", []string{"fd00:10:96::80-fd00:10:96::90"}, []string{"the pool overlaps fd00:10:96::/112, the Service CIDR (ServiceCIDR kubernetes)"}},
		{"the apiserver's address, not a node's", []string{"172.18.1.0/28"},
			[]string{"the pool holds 172.18.1.9, an address of the apiserver (an endpoint of the kubernetes Service)"}},
		{"the apiserver's address on a node: reported as the node's", []string{"172.18.0.2/32"}, []string{"the pool holds 172.18.0.2, an address of node a"}},
		{"invalid pool", []string{"10.96.0.0/33"}, nil},
	} {
		got := InfraOverlaps(&v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1beta1.IPAddressPoolSpec{Addresses: tc.addrs}}, in)
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}
