package config

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/internal/election"
)

func lbService(name, fromPool string, ips ...string) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer},
	}
	if fromPool != "" {
		s.Annotations = map[string]string{AnnotationAllocatedFromPool: fromPool}
	}
	for _, ip := range ips {
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	return s
}

// TestForgedStatusNotAnnounced: the speaker serves only addresses that lie in a pool, whatever a
// Service's status says (anyone allowed to write status could put any address there).
func TestForgedStatusNotAnnounced(t *testing.T) {
	pools := []v1beta1.IPAddressPool{
		pool("a", "172.18.255.200-172.18.255.250", "fd00:ff::/120"),
		pool("b", "172.18.200.0/24"),
		pool("v6", "fd00:aa::/120"),
	}
	svc := lbService
	for _, tc := range []struct {
		name      string
		svc       *corev1.Service
		wantPool  string // "" : not served
		wantAddrs []string
	}{
		{"in its pool", svc("s", "a", "172.18.255.201"), "a", []string{"172.18.255.201"}},
		{"in no pool (forged)", svc("s", "a", "8.8.8.8"), "", nil},
		{"forged, private range, no pool", svc("s", "", "10.0.0.1"), "", nil},
		{"annotation names a pool that does not hold it: the pool that does", svc("s", "a", "172.18.200.7"), "b", []string{"172.18.200.7"}},
		{"annotation names a missing pool", svc("s", "gone", "172.18.255.210"), "a", []string{"172.18.255.210"}},
		{"dual stack, both in the pool", svc("s", "a", "172.18.255.202", "fd00:ff::5"), "a", []string{"172.18.255.202", "fd00:ff::5"}},
		{"dual stack, second address forged", svc("s", "a", "172.18.255.202", "fd00:bad::5"), "a", []string{"172.18.255.202"}},
		{"dual stack, second address in another pool", svc("s", "a", "172.18.255.202", "fd00:aa::5"), "a", []string{"172.18.255.202"}},
		{"first address forged, second in a pool", svc("s", "", "1.2.3.4", "fd00:aa::5"), "", nil},
		{"not an address", svc("s", "a", "not-an-ip"), "", nil},
		{"IPv4-mapped IPv6 in the pool", svc("s", "a", "::ffff:172.18.255.203"), "a", []string{"172.18.255.203"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := BuildModel(ModelInput{Pools: pools, Services: []*corev1.Service{tc.svc}}).Services
			if tc.wantPool == "" {
				if len(got) != 0 {
					t.Fatalf("served %v from pool %s; want not served", got[0].Addrs, got[0].Pool)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("not served; want pool %s", tc.wantPool)
			}
			var addrs []string
			for _, a := range got[0].Addrs {
				addrs = append(addrs, a.String())
			}
			if got[0].Pool != tc.wantPool || !slices.Equal(addrs, tc.wantAddrs) {
				t.Fatalf("pool %s addrs %v; want pool %s addrs %v", got[0].Pool, addrs, tc.wantPool, tc.wantAddrs)
			}
		})
	}
}

// TestModelDrops has one row per DropReason: what is left out, with which reason, and what stays.
func TestModelDrops(t *testing.T) {
	good := pool("good", "172.18.255.200-172.18.255.250", "fd00:ff::/120")
	other := pool("other", "fd00:aa::/120")
	bad := pool("bad", "10.0.0.9-10.0.0.1")
	svcNotLB := lbService("cluster-ip", "")
	svcNotLB.Spec.Type = corev1.ServiceTypeClusterIP
	class := "other-lb"
	svcOtherClass := lbService("other-class", "", "172.18.255.201")
	svcOtherClass.Spec.LoadBalancerClass = &class
	badSel := v1beta1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "bad-selector", Namespace: "metallb-system"},
		Spec: v1beta1.L2AdvertisementSpec{IPAddressPools: []string{"good"}, IPAddressPoolSelectors: []metav1.LabelSelector{
			{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Bogus"}}},
			{MatchLabels: map[string]string{"tier": "x"}}}}}

	type want struct {
		drops    []Dropped
		services []string // keys in the model
		ads      int      // pool selectors kept in the first advertisement
	}
	for _, tc := range []struct {
		name string
		in   ModelInput
		want want
	}{{
		name: "Undecodable: carried from the input",
		in:   ModelInput{Dropped: []Dropped{{Kind: "IPAddressPool", Namespace: "metallb-system", Name: "x", Reason: Undecodable, Detail: "bad"}}},
		want: want{drops: []Dropped{{Kind: "IPAddressPool", Namespace: "metallb-system", Name: "x", Reason: Undecodable, Detail: "bad"}}},
	}, {
		name: "InvalidPool: its addresses are in no pool",
		in:   ModelInput{Pools: []v1beta1.IPAddressPool{good, bad}, Services: []*corev1.Service{lbService("s", "bad", "10.0.0.5")}},
		want: want{drops: []Dropped{{Kind: "IPAddressPool", Name: "bad", Reason: InvalidPool}, {Kind: "Service", Namespace: "ns", Name: "s", Reason: AddressInNoPool}}},
	}, {
		name: "InvalidSelector: a pool selector that does not parse; the advertisement selects nothing",
		in:   ModelInput{L2Advertisements: []v1beta1.L2Advertisement{badSel}},
		want: want{drops: []Dropped{{Kind: "L2Advertisement", Namespace: "metallb-system", Name: "bad-selector", Reason: InvalidSelector}}, ads: 0},
	}, {
		name: "InvalidSelector: a node selector that does not parse",
		in: ModelInput{L2Advertisements: []v1beta1.L2Advertisement{{ObjectMeta: metav1.ObjectMeta{Name: "bad-node", Namespace: "metallb-system"},
			Spec: v1beta1.L2AdvertisementSpec{NodeSelectors: []metav1.LabelSelector{{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "rack", Operator: metav1.LabelSelectorOpNotIn}}}}}}}},
		want: want{drops: []Dropped{{Kind: "L2Advertisement", Namespace: "metallb-system", Name: "bad-node", Reason: InvalidSelector}}},
	}, {
		name: "InvalidSelector: a service selector that does not parse",
		in: ModelInput{L2Advertisements: []v1beta1.L2Advertisement{{ObjectMeta: metav1.ObjectMeta{Name: "bad-svc", Namespace: "metallb-system"},
			Spec: v1beta1.L2AdvertisementSpec{ServiceSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"app": "a b"}}}}}}},
		want: want{drops: []Dropped{{Kind: "L2Advertisement", Namespace: "metallb-system", Name: "bad-svc", Reason: InvalidSelector}}},
	}, {
		name: "NotServed: not LoadBalancer, or another class (not reported)",
		in:   ModelInput{Pools: []v1beta1.IPAddressPool{good}, Services: []*corev1.Service{svcNotLB, svcOtherClass}},
		want: want{drops: []Dropped{{Kind: "Service", Namespace: "ns", Name: "cluster-ip", Reason: NotServed}, {Kind: "Service", Namespace: "ns", Name: "other-class", Reason: NotServed}}},
	}, {
		name: "NotServed: with LBClass, a Service without a class (MetalLB's --lb-class); the class's is served",
		in: ModelInput{LBClass: class, Pools: []v1beta1.IPAddressPool{good},
			Services: []*corev1.Service{lbService("classless", "", "172.18.255.202"), svcOtherClass}},
		want: want{drops: []Dropped{{Kind: "Service", Namespace: "ns", Name: "classless", Reason: NotServed}}, services: []string{"ns/other-class"}},
	}, {
		name: "NoAddress: pending (not reported)",
		in:   ModelInput{Pools: []v1beta1.IPAddressPool{good}, Services: []*corev1.Service{lbService("pending", "")}},
		want: want{drops: []Dropped{{Kind: "Service", Namespace: "ns", Name: "pending", Reason: NoAddress}}},
	}, {
		name: "InvalidAddress: left out, the next address serves",
		in:   ModelInput{Pools: []v1beta1.IPAddressPool{good}, Services: []*corev1.Service{lbService("s", "good", "nonsense", "172.18.255.201")}},
		want: want{drops: []Dropped{{Kind: "Service", Namespace: "ns", Name: "s", Reason: InvalidAddress}}, services: []string{"ns/s"}},
	}, {
		name: "AddressInNoPool: forged status",
		in:   ModelInput{Pools: []v1beta1.IPAddressPool{good}, Services: []*corev1.Service{lbService("s", "good", "8.8.8.8")}},
		want: want{drops: []Dropped{{Kind: "Service", Namespace: "ns", Name: "s", Reason: AddressInNoPool}}},
	}, {
		name: "AddressOutsidePool: the second address only",
		in:   ModelInput{Pools: []v1beta1.IPAddressPool{good, other}, Services: []*corev1.Service{lbService("s", "good", "172.18.255.201", "fd00:aa::5")}},
		want: want{drops: []Dropped{{Kind: "Service", Namespace: "ns", Name: "s", Reason: AddressOutsidePool}}, services: []string{"ns/s"}},
	}, {
		name: "NoServiceName: an EndpointSlice of no Service (not reported)",
		in:   ModelInput{EndpointSlices: []*discoveryv1.EndpointSlice{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "orphan"}}}},
		want: want{drops: []Dropped{{Kind: "EndpointSlice", Namespace: "ns", Name: "orphan", Reason: NoServiceName}}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			m := BuildModel(tc.in)
			var keys []string
			for _, s := range m.Services {
				keys = append(keys, s.Key)
			}
			if diff := cmp.Diff(tc.want.drops, m.Dropped, cmpopts.IgnoreFields(Dropped{}, "Detail"), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("dropped (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want.services, keys, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("services (-want +got):\n%s", diff)
			}
			if len(m.L2Advertisements) > 0 && len(m.L2Advertisements[0].PoolSelectors) != tc.want.ads {
				t.Errorf("pool selectors kept %d, want %d", len(m.L2Advertisements[0].PoolSelectors), tc.want.ads)
			}
			for _, d := range m.Dropped {
				if d.Reason.Reported() && d.Detail == "" && d.Reason != Undecodable {
					t.Errorf("%v: a reported drop without detail", d)
				}
			}
		})
	}
}

// TestModelServices: what a served Service carries for both modes, and which advertisements select
// its pool (by name, by selector, all pools when naming none; none at all when a selector of the
// advertisement does not parse: fail closed).
func TestModelServices(t *testing.T) {
	p := pool("p", "172.18.255.200-172.18.255.250")
	p.Labels = map[string]string{"tier": "front"}
	q := pool("q", "172.18.0.0/24")
	ad := func(name string, pools []string, sels ...metav1.LabelSelector) v1beta1.L2Advertisement {
		return v1beta1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1beta1.L2AdvertisementSpec{IPAddressPools: pools, IPAddressPoolSelectors: sels, Interfaces: []string{"eth0"},
				NodeSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"zone": "a"},
					MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: metav1.LabelSelectorOpIn, Values: []string{"v"}}}}}}}
	}
	bogus := metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Bogus"}}}
	svc := lbService("web", "p", "172.18.255.201")
	svc.Labels = map[string]string{"app": "web"}
	svc.Annotations[AnnotationSpread] = "true"
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	f := false
	m := BuildModel(ModelInput{
		Pools: []v1beta1.IPAddressPool{p, q},
		L2Advertisements: []v1beta1.L2Advertisement{
			ad("all", nil), ad("by-name", []string{"p"}), ad("by-label", nil, metav1.LabelSelector{MatchLabels: map[string]string{"tier": "front"}}),
			ad("other-pool", []string{"q"}), ad("only-bad-selector", nil, bogus), ad("named-and-bad-selector", []string{"p"}, bogus),
		},
		Services: []*corev1.Service{svc},
		EndpointSlices: []*discoveryv1.EndpointSlice{
			{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-b", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
				Endpoints: []discoveryv1.Endpoint{{NodeName: ptr("n2"), Conditions: discoveryv1.EndpointConditions{Ready: &f, Serving: ptr(true)}}}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-a", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
				Endpoints: []discoveryv1.Endpoint{{NodeName: ptr("n1")}, {}}},
		},
	})
	adv := func(name string) election.Advertisement {
		return election.Advertisement{Name: name, Interfaces: []string{"eth0"}, NodeSelectors: []election.Selector{{MatchLabels: map[string]string{"zone": "a"},
			MatchExpressions: []election.Requirement{{Key: "k", Operator: election.In, Values: []string{"v"}}}}}}
	}
	want := []Service{{Key: "ns/web", Labels: map[string]string{"app": "web"}, Pool: "p", Addrs: []netip.Addr{netip.MustParseAddr("172.18.255.201")},
		Local: true, Spread: true,
		Endpoints: []election.Endpoint{{Node: "n1", Ready: true}, {Ready: true}, {Node: "n2", Serving: true}},
		L2:        []election.Advertisement{adv("all"), adv("by-label"), adv("by-name")}}} // not the two with a bad selector
	if diff := cmp.Diff(want, m.Services, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		t.Errorf("services (-want +got):\n%s", diff)
	}
}

func TestModelNodes(t *testing.T) {
	m := BuildModel(ModelInput{Nodes: []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "n2", Labels: map[string]string{election.ExcludeLabel: ""}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "fc00::2"}, {Type: corev1.NodeInternalIP, Address: "172.18.0.2"}}}},
	}})
	want := []Node{
		{Name: "n1", InternalIP: netip.MustParseAddr("172.18.0.2")},
		{Name: "n2", Labels: map[string]string{election.ExcludeLabel: ""}, Excluded: true, NetworkUnavailable: true},
	}
	if diff := cmp.Diff(want, m.Nodes, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
	if n := m.Node("n2"); n == nil || !n.Excluded {
		t.Errorf("Node(n2) = %v", n)
	}
	if m.Node("n3") != nil {
		t.Error("Node(n3) found")
	}
}

func ptr[T any](v T) *T { return &v }

// FuzzBuildModel: every input object ends up in the model or in Dropped with a reason (a Service
// whose second address is left out, or an advertisement with a selector left out, in both), every
// served address lies in its Service's pool, and the input order does not change the model.
func FuzzBuildModel(f *testing.F) {
	f.Add("172.18.255.200-172.18.255.250", "fd00::/120", "172.18.255.201", "fd00::5", "p1", "In", true)
	f.Add("10.0.0.9-10.0.0.1", "10.0.0.0/33", "not-an-ip", "", "", "Bogus", false)
	f.Add("10.0.0.0/24", "10.0.0.0/25", "::ffff:10.0.0.1", "8.8.8.8", "p2", "Exists", true)
	f.Fuzz(func(t *testing.T, a1, a2, ip1, ip2, fromPool, op string, lb bool) {
		p1, p2 := pool("p1", a1), pool("p2", a2)
		p2.Labels = map[string]string{"k": "v"}
		ad := v1beta1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "ad"}, Spec: v1beta1.L2AdvertisementSpec{
			IPAddressPoolSelectors: []metav1.LabelSelector{{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: metav1.LabelSelectorOperator(op), Values: []string{"v"}}}}}}}
		s1 := lbService("one", fromPool, ip1, ip2)
		s2 := lbService("two", "", ip2)
		if !lb {
			s2.Spec.Type = corev1.ServiceTypeNodePort
		}
		in := ModelInput{Pools: []v1beta1.IPAddressPool{p1, p2}, L2Advertisements: []v1beta1.L2Advertisement{ad}, Services: []*corev1.Service{s1, s2}}
		m := BuildModel(in)
		dropped := func(kind, name string) bool {
			return slices.ContainsFunc(m.Dropped, func(d Dropped) bool { return d.Kind == kind && d.Name == name && d.Reason != "" })
		}
		for _, p := range in.Pools {
			if _, ok := m.Pools.ByName[p.Name]; ok == dropped("IPAddressPool", p.Name) {
				t.Fatalf("pool %s: in the model %v, dropped %v", p.Name, ok, !ok)
			}
		}
		if len(m.L2Advertisements) != 1 || len(m.L2Advertisements[0].PoolSelectors) == 0 && !dropped("L2Advertisement", "ad") {
			t.Fatalf("advertisement lost: %+v", m.L2Advertisements)
		}
		for _, s := range in.Services {
			i := slices.IndexFunc(m.Services, func(ms Service) bool { return ms.Key == "ns/"+s.Name })
			if i < 0 && !dropped("Service", s.Name) {
				t.Fatalf("service %s neither served nor dropped", s.Name)
			}
			if i < 0 {
				continue
			}
			ms := m.Services[i]
			p := m.Pools.ByName[ms.Pool]
			if p == nil || len(ms.Addrs) == 0 {
				t.Fatalf("service %s served from pool %q with %v", s.Name, ms.Pool, ms.Addrs)
			}
			for _, a := range ms.Addrs {
				if !p.Contains(a) {
					t.Fatalf("service %s: %s outside its pool %s", s.Name, a, p.Name)
				}
			}
			// An ingress entry without an IP (a hostname's) is no address: skipped, not dropped.
			ips := 0
			for _, ing := range s.Status.LoadBalancer.Ingress {
				if ing.IP != "" {
					ips++
				}
			}
			if len(ms.Addrs) < ips && !dropped("Service", s.Name) {
				t.Fatalf("service %s: an address left out without a reason", s.Name)
			}
		}
		rev := in
		rev.Pools = []v1beta1.IPAddressPool{p2, p1}
		rev.Services = []*corev1.Service{s2, s1}
		if diff := cmp.Diff(m, BuildModel(rev), cmpopts.EquateComparable(netip.Addr{}), cmpopts.IgnoreUnexported(Pool{}),
			cmpopts.IgnoreFields(Pool{}, "ServiceSelectors"), cmpopts.IgnoreFields(L2Advertisement{}, "Scope.PoolSelectors", "Scope.ServiceSelectors"), cmp.Comparer(func(a, b error) bool { return fmt.Sprint(a) == fmt.Sprint(b) })); diff != "" {
			t.Fatalf("the input order changes the model (-fwd +rev):\n%s", diff)
		}
	})
}

// TestModelL2ServiceSelectors: an L2Advertisement with serviceSelectors applies only to the Services
// one of them matches; without, to every Service of its pools (MetalLB's l2AdsForService). Only
// the advertisements in Service.L2 give the election its candidate nodes and interfaces.
func TestModelL2ServiceSelectors(t *testing.T) {
	p := pool("p", "172.18.255.200-172.18.255.250")
	ad := func(name string, svcSels ...metav1.LabelSelector) v1beta1.L2Advertisement {
		return v1beta1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1beta1.L2AdvertisementSpec{ServiceSelectors: svcSels}}
	}
	app := func(v string) metav1.LabelSelector {
		return metav1.LabelSelector{MatchLabels: map[string]string{"app": v}}
	}
	ads := []v1beta1.L2Advertisement{
		ad("all"),
		ad("web-only", app("web")),
		ad("web-or-db", app("web"), app("db")),
		ad("not-canary", metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "canary", Operator: metav1.LabelSelectorOpDoesNotExist}}}),
	}
	svc := func(name string, lbls map[string]string, ip string) *corev1.Service {
		s := lbService(name, "p", ip)
		s.Labels = lbls
		return s
	}
	for _, tt := range []struct {
		name string
		ads  []v1beta1.L2Advertisement
		svc  *corev1.Service
		want []string // names in Service.L2
	}{
		{"labelled web: every advertisement matching it", ads, svc("web", map[string]string{"app": "web"}, "172.18.255.201"), []string{"all", "not-canary", "web-only", "web-or-db"}},
		{"labelled db", ads, svc("db", map[string]string{"app": "db"}, "172.18.255.202"), []string{"all", "not-canary", "web-or-db"}},
		{"no labels: only those without serviceSelectors or matching the absence", ads, svc("bare", nil, "172.18.255.203"), []string{"all", "not-canary"}},
		{"canary web", ads, svc("canary", map[string]string{"app": "web", "canary": "1"}, "172.18.255.204"), []string{"all", "web-only", "web-or-db"}},
		{"only a selective advertisement, not matching: announced by no node", []v1beta1.L2Advertisement{ad("web-only", app("web"))}, svc("db", map[string]string{"app": "db"}, "172.18.255.205"), nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := BuildModel(ModelInput{Pools: []v1beta1.IPAddressPool{p}, L2Advertisements: tt.ads, Services: []*corev1.Service{tt.svc}})
			if len(m.Services) != 1 {
				t.Fatalf("services %v, dropped %v", m.Services, m.Dropped)
			}
			var got []string
			for _, a := range m.Services[0].L2 {
				got = append(got, a.Name)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Service.L2 (-want +got):\n%s", diff)
			}
		})
	}
}
