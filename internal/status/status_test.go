package status

import (
	"math/big"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
	"github.com/ironlb/ironlb/internal/allocator"
)

const ns = "metallb-system"

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// countCmp compares Counts by value (and netip.Addr with ==).
var countCmp = cmp.Options{cmp.Comparer(func(x, y Count) bool { return x.Cmp(y) == 0 }), cmpopts.EquateComparable(netip.Addr{})}

func pool(name string, addrs ...string) v1beta1.IPAddressPool {
	return v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: v1beta1.IPAddressPoolSpec{Addresses: addrs}}
}

// svc is a LoadBalancer Service in default created at t0+age seconds, holding ips.
func svc(name string, age int, ips ...string) corev1.Service {
	s := corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Second))},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80}}},
	}
	for _, ip := range ips {
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	return s
}

func with(s corev1.Service, f func(*corev1.Service)) corev1.Service { f(&s); return s }

func l2ad(name string, pools ...string) v1beta1.L2Advertisement {
	return v1beta1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: v1beta1.L2AdvertisementSpec{IPAddressPools: pools}}
}

func bgpad(name string, pools ...string) v1beta1.BGPAdvertisement {
	return v1beta1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: v1beta1.BGPAdvertisementSpec{IPAddressPools: pools}}
}

func l2status(service, node string, ifaces ...string) v1beta1.ServiceL2Status {
	st := v1beta1.ServiceL2Status{ObjectMeta: metav1.ObjectMeta{Name: "l2-" + service + "-" + node, Namespace: ns},
		Status: v1beta1.MetalLBServiceL2Status{Node: node, ServiceName: service, ServiceNamespace: "default"}}
	for _, i := range ifaces {
		st.Status.Interfaces = append(st.Status.Interfaces, v1beta1.InterfaceInfo{Name: i})
	}
	return st
}

func bgpstatus(service, node string, peers ...string) v1beta1.ServiceBGPStatus {
	return v1beta1.ServiceBGPStatus{ObjectMeta: metav1.ObjectMeta{Name: "bgp-" + service + "-" + node, Namespace: ns},
		Status: v1beta1.MetalLBServiceBGPStatus{Node: node, ServiceName: service, ServiceNamespace: "default", Peers: peers}}
}

func peer(name, addr string) v1beta2.BGPPeer {
	return v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: v1beta2.BGPPeerSpec{MyASN: 64513, ASN: 64512, Address: addr}}
}

// warning is a Warning event on a Service from component, last seen at t0+at seconds.
func warning(service, uid, component, reason, msg string, at int) corev1.Event {
	return corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: service + "." + reason, Namespace: "default"},
		InvolvedObject: corev1.ObjectReference{Kind: "Service", Namespace: "default", Name: service, UID: types.UID(uid)},
		Type:           corev1.EventTypeWarning, Reason: reason, Message: msg,
		Source:        corev1.EventSource{Component: component},
		LastTimestamp: metav1.NewTime(t0.Add(time.Duration(at) * time.Second)),
	}
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func usage(size, used int64) *Usage {
	return &Usage{Size: CountOf(size), Used: CountOf(used), Free: CountOf(size - used)}
}

func TestAddresses(t *testing.T) {
	seed := Input{Namespace: ns,
		Pools:            []v1beta1.IPAddressPool{pool("my-ippool", "172.18.255.200-172.18.255.250")},
		L2Advertisements: []v1beta1.L2Advertisement{l2ad("my-l2")},
		Services: []corev1.Service{svc("svc1", 0, "172.18.255.200"), svc("svc2", 1, "172.18.255.201"),
			{ObjectMeta: metav1.ObjectMeta{Name: "cip", Namespace: "default"}}}, // ClusterIP: ignored
		L2Statuses: []v1beta1.ServiceL2Status{l2status("svc2", "myk8s-worker2", "eth0"), l2status("svc1", "myk8s-worker", "eth0")},
	}
	bgp := Input{Namespace: ns,
		Pools:             []v1beta1.IPAddressPool{pool("bgp-pool", "198.51.100.0/24")},
		BGPAdvertisements: []v1beta1.BGPAdvertisement{bgpad("adv", "bgp-pool")},
		BGPPeers:          []v1beta2.BGPPeer{peer("router", "172.18.0.1"), peer("router6", "FC00:F853:CCD:E793::1")},
		Services:          []corev1.Service{svc("web", 0, "198.51.100.1")},
		BGPStatuses: []v1beta1.ServiceBGPStatus{bgpstatus("web", "node-b", "router"), bgpstatus("web", "node-a", "router6", "router"),
			bgpstatus("web", "node-c", "gone")},
	}
	bgpSessions := bgp
	bgpSessions.SessionsServed = true
	bgpSessions.Sessions = []Session{
		{Node: "node-a", Peer: "172.18.0.1", BGP: "Established", BFD: "up"},
		{Node: "node-a", Peer: "fc00:f853:ccd:e793::1", BGP: "Established", BFD: "N/A"},
		{Node: "node-b", Peer: "172.18.0.1", BGP: "Active", BFD: "down"},
		{Node: "node-b", Peer: "172.18.0.1", VRF: "red", BGP: "Established"}, // another VRF: not this peer
	}
	labelled := pool("labelled", "10.1.0.0/24")
	labelled.Labels = map[string]string{"tier": "edge"}
	selAd := l2ad("by-label")
	selAd.Spec.IPAddressPoolSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"tier": "edge"}}}
	svcSelAd := bgpad("only-public")
	svcSelAd.Spec.ServiceSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"expose": "public"}}}
	public := with(svc("public", 0, "10.1.0.1"), func(s *corev1.Service) { s.Labels = map[string]string{"expose": "public"} })
	class := "other.example/lb"
	modes := Input{Namespace: ns,
		Pools:             []v1beta1.IPAddressPool{labelled, pool("dark", "10.2.0.0/24")},
		L2Advertisements:  []v1beta1.L2Advertisement{selAd},
		BGPAdvertisements: []v1beta1.BGPAdvertisement{svcSelAd},
		Services: []corev1.Service{public, svc("private", 1, "10.1.0.2"), svc("dark", 2, "10.2.0.1"),
			svc("nopool", 3, "192.0.2.7"), svc("dual", 4, "10.1.0.3", "::ffff:10.1.0.4"),
			with(svc("theirs", 5, "10.1.0.9"), func(s *corev1.Service) { s.Spec.LoadBalancerClass = &class })},
	}

	tests := []struct {
		name string
		in   Input
		want []Address
	}{
		{"seed 000: layer 2 from the announcing nodes' ServiceL2Status", seed, []Address{
			{IP: addr("172.18.255.200"), Service: "default/svc1", Pool: "my-ippool", Mode: ModeLayer2, L2Nodes: []L2Node{{"myk8s-worker", []string{"eth0"}}}},
			{IP: addr("172.18.255.201"), Service: "default/svc2", Pool: "my-ippool", Mode: ModeLayer2, L2Nodes: []L2Node{{"myk8s-worker2", []string{"eth0"}}}},
		}},
		{"bgp without BGPSessionState served: peers without state", bgp, []Address{
			{IP: addr("198.51.100.1"), Service: "default/web", Pool: "bgp-pool", Mode: ModeBGP, BGPNodes: []BGPNode{
				{Node: "node-a", Peers: []Peer{{Name: "router", Address: "172.18.0.1"}, {Name: "router6", Address: "FC00:F853:CCD:E793::1"}}},
				{Node: "node-b", Peers: []Peer{{Name: "router", Address: "172.18.0.1"}}},
				{Node: "node-c", Peers: []Peer{{Name: "gone"}}},
			}},
		}},
		{"bgp with sessions: state per node and peer, addresses compared canonically, VRF respected", bgpSessions, []Address{
			{IP: addr("198.51.100.1"), Service: "default/web", Pool: "bgp-pool", Mode: ModeBGP, BGPNodes: []BGPNode{
				{Node: "node-a", Peers: []Peer{{Name: "router", Address: "172.18.0.1", BGP: "Established", BFD: "up"},
					{Name: "router6", Address: "FC00:F853:CCD:E793::1", BGP: "Established", BFD: "N/A"}}},
				{Node: "node-b", Peers: []Peer{{Name: "router", Address: "172.18.0.1", BGP: "Active", BFD: "down"}}},
				{Node: "node-c", Peers: []Peer{{Name: "gone", BGP: StateUnknown, BFD: StateUnknown}}},
			}},
		}},
		{"modes from pool selectors and service selectors; addresses outside pools; other classes left out", modes, []Address{
			{IP: addr("10.1.0.1"), Service: "default/public", Pool: "labelled", Mode: ModeBoth},
			{IP: addr("10.1.0.2"), Service: "default/private", Pool: "labelled", Mode: ModeLayer2},
			{IP: addr("10.1.0.3"), Service: "default/dual", Pool: "labelled", Mode: ModeLayer2},
			{IP: addr("10.1.0.4"), Service: "default/dual", Pool: "labelled", Mode: ModeLayer2},
			{IP: addr("10.2.0.1"), Service: "default/dark", Pool: "dark", Mode: ModeNone},
			{IP: addr("192.0.2.7"), Service: "default/nopool", Mode: ModeNone},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Build(tt.in)
			if diff := cmp.Diff(tt.want, got.Addresses, countCmp); diff != "" {
				t.Errorf("addresses (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPools(t *testing.T) {
	avoid := pool("avoid", "10.0.0.0/23")
	avoid.Spec.AvoidBuggyIPs = true
	manual := pool("manual", "10.9.0.1-10.9.0.3")
	f := false
	manual.Spec.AutoAssign = &f
	overlaps := pool("b-overlaps", "10.9.0.0/24")
	overlaps.CreationTimestamp = metav1.NewTime(t0) // newer than manual: it loses the overlap
	two64 := new(big.Int).Lsh(big.NewInt(1), 64)
	tests := []struct {
		name     string
		pools    []v1beta1.IPAddressPool
		services []corev1.Service
		want     []Pool
	}{
		{"seed 000 range", []v1beta1.IPAddressPool{pool("my-ippool", "172.18.255.200-172.18.255.250")},
			[]corev1.Service{svc("a", 0, "172.18.255.200"), svc("b", 1, "172.18.255.250"), svc("pending", 2)},
			[]Pool{{Name: "my-ippool", Addresses: []string{"172.18.255.200-172.18.255.250"}, AutoAssign: true, IPv4: usage(51, 2)}}},
		{"a shared address counts once", []v1beta1.IPAddressPool{pool("p", "10.0.0.0/30")},
			[]corev1.Service{svc("a", 0, "10.0.0.1"), svc("b", 1, "10.0.0.1"), svc("c", 2, "10.0.0.2")},
			[]Pool{{Name: "p", Addresses: []string{"10.0.0.0/30"}, AutoAssign: true, IPv4: usage(4, 2)}}},
		{"avoidBuggyIPs leaves .0 and .255 out of the size", []v1beta1.IPAddressPool{avoid}, nil,
			[]Pool{{Name: "avoid", Addresses: []string{"10.0.0.0/23"}, AutoAssign: true, IPv4: usage(508, 0)}}},
		{"dual stack with a /64: exact counts per family", []v1beta1.IPAddressPool{pool("dual", "10.0.0.0/24", "fd00::/64", "fd01::1-fd01::2")},
			[]corev1.Service{svc("a", 0, "10.0.0.7", "fd00::7"), svc("b", 1, "fd01::2")},
			[]Pool{{Name: "dual", Addresses: []string{"10.0.0.0/24", "fd00::/64", "fd01::1-fd01::2"}, AutoAssign: true, IPv4: usage(256, 1),
				IPv6: &Usage{Size: Count{new(big.Int).Add(two64, big.NewInt(2))}, Used: CountOf(2), Free: Count{two64}}}}},
		{"the whole IPv6 space", []v1beta1.IPAddressPool{pool("all6", "::/0")}, nil,
			[]Pool{{Name: "all6", Addresses: []string{"::/0"}, AutoAssign: true,
				IPv6: &Usage{Size: Count{new(big.Int).Lsh(big.NewInt(1), 128)}, Used: CountOf(0), Free: Count{new(big.Int).Lsh(big.NewInt(1), 128)}}}}},
		{"invalid pools say why; autoAssign false shows", []v1beta1.IPAddressPool{overlaps, manual, pool("bad", "nonsense")},
			[]corev1.Service{svc("a", 0, "10.9.0.1")},
			[]Pool{
				{Name: "b-overlaps", Addresses: []string{"10.9.0.0/24"}, AutoAssign: true, Invalid: "range 10.9.0.0/24 overlaps 10.9.0.1-10.9.0.3 of ipaddresspool manual"},
				{Name: "bad", Addresses: []string{"nonsense"}, AutoAssign: true, Invalid: `addresses: invalid range "nonsense": want a CIDR (10.0.0.0/24) or a range (10.0.0.1-10.0.0.9)`},
				{Name: "manual", Addresses: []string{"10.9.0.1-10.9.0.3"}, AutoAssign: false, IPv4: usage(3, 1)},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Build(Input{Namespace: ns, Pools: tt.pools, Services: tt.services})
			if diff := cmp.Diff(tt.want, got.Pools, countCmp); diff != "" {
				t.Errorf("pools (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPending(t *testing.T) {
	full := []v1beta1.IPAddressPool{pool("tiny", "10.0.0.1-10.0.0.2")}
	class := "other.example/lb"
	at := func(s int) *time.Time { tm := t0.Add(time.Duration(s) * time.Second); return &tm }
	tests := []struct {
		name   string
		lbc    string
		pools  []v1beta1.IPAddressPool
		svcs   []corev1.Service
		events []corev1.Event
		want   []Pending
	}{
		{"the controller's latest Warning event wins", "", full,
			[]corev1.Service{svc("a", 0, "10.0.0.1"), svc("b", 1, "10.0.0.2"), svc("c", 2)},
			[]corev1.Event{
				warning("c", "uid-c", ControllerComponent, "AllocationFailed", "Failed to allocate IP for \"default/c\": PoolExhausted: old", 10),
				warning("c", "uid-c", ControllerComponent, "AllocationFailed", "Failed to allocate IP for \"default/c\": PoolExhausted: new", 20),
				warning("c", "uid-c", "ironlb-speaker", "Conflict", "not the controller", 30),
				{InvolvedObject: corev1.ObjectReference{Kind: "Service", Namespace: "default", Name: "c"}, Type: corev1.EventTypeNormal,
					Reason: "IPAllocated", Source: corev1.EventSource{Component: ControllerComponent}, LastTimestamp: metav1.NewTime(t0.Add(40 * time.Second))},
			},
			[]Pending{{Service: "default/c", Reason: "AllocationFailed", Message: "Failed to allocate IP for \"default/c\": PoolExhausted: new", Source: SourceEvent, Since: at(20)}}},
		{"without an event: allocation replayed in creation order", "", full,
			[]corev1.Service{svc("a", 0, "10.0.0.1"), svc("late", 9), svc("early", 1)},
			// a Warning for an earlier Service of the same name (another UID) is stale
			[]corev1.Event{warning("late", "uid-old", ControllerComponent, "AllocationFailed", "stale", 5)},
			[]Pending{
				{Service: "default/early", Reason: ReasonNotAssigned, Message: "10.0.0.2 is free in pool tiny but the controller has not assigned it: is ironlb-controller running?", Source: SourceComputed},
				{Service: "default/late", Reason: string(allocator.ErrPoolExhausted), Message: `service default/late: no free IPv4 address in pools ["tiny"]`, Source: SourceComputed},
			}},
		{"no pool at all", "", nil, []corev1.Service{svc("a", 0)}, nil,
			[]Pending{{Service: "default/a", Reason: ReasonNoPool, Message: "no valid IPAddressPool in namespace metallb-system", Source: SourceComputed}}},
		{"unknown pool, invalid Service, another class", "", full,
			[]corev1.Service{
				with(svc("named", 0), func(s *corev1.Service) { s.Annotations = map[string]string{"metallb.io/address-pool": "nope"} }),
				with(svc("both", 1), func(s *corev1.Service) {
					s.Spec.LoadBalancerIP = "10.0.0.1"
					s.Annotations = map[string]string{"metallb.io/loadBalancerIPs": "10.0.0.2"}
				}),
				with(svc("theirs", 2), func(s *corev1.Service) { s.Spec.LoadBalancerClass = &class }),
			}, nil,
			[]Pending{
				{Service: "default/both", Reason: ReasonInvalidService, Message: "invalid service: spec.loadBalancerIP and the metallb.io/loadBalancerIPs annotation are both set; use one", Source: SourceComputed},
				{Service: "default/named", Reason: string(allocator.ErrUnknownPool), Message: `service default/named: unknown pool "nope"`, Source: SourceComputed},
				{Service: "default/theirs", Reason: ReasonOtherClass, Message: `spec.loadBalancerClass "other.example/lb" is not served by ironlb (start the controller and speakers with --lb-class=other.example/lb to serve it)`, Source: SourceComputed},
			}},
		{"with --lb-class only that class is served: not the Services without one (MetalLB's rule)", "ours", full,
			[]corev1.Service{
				svc("classless", 0),
				with(svc("theirs", 1), func(s *corev1.Service) { s.Spec.LoadBalancerClass = &class }),
				with(svc("mine", 2), func(s *corev1.Service) { c := "ours"; s.Spec.LoadBalancerClass = &c }),
			}, nil,
			[]Pending{
				{Service: "default/classless", Reason: ReasonOtherClass, Message: `the Service has no spec.loadBalancerClass and ironlb serves only class "ours" (start the controller and speakers without --lb-class to serve Services without a class)`, Source: SourceComputed},
				{Service: "default/mine", Reason: ReasonNotAssigned, Message: "10.0.0.1 is free in pool tiny but the controller has not assigned it: is ironlb-controller running?", Source: SourceComputed},
				{Service: "default/theirs", Reason: ReasonOtherClass, Message: `spec.loadBalancerClass "other.example/lb" is not served by ironlb, which serves class "ours" (start the controller and speakers with --lb-class=other.example/lb to serve it)`, Source: SourceComputed},
			}},
		{"nothing pending", "", full, []corev1.Service{svc("a", 0, "10.0.0.1")}, nil, []Pending{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Build(Input{Namespace: ns, LBClass: tt.lbc, Pools: tt.pools, Services: tt.svcs, Events: tt.events})
			if diff := cmp.Diff(tt.want, got.Pending); diff != "" {
				t.Errorf("pending (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCountString(t *testing.T) {
	pow := func(n uint) *big.Int { return new(big.Int).Lsh(big.NewInt(1), n) }
	tests := []struct {
		n    *big.Int
		want string
	}{
		{big.NewInt(0), "0"},
		{big.NewInt(51), "51"},
		{big.NewInt(999_999_999_999), "999999999999"},
		{pow(40), "2^40"},
		{pow(64), "2^64"},
		{new(big.Int).Sub(pow(64), big.NewInt(1)), "~2^64"},
		{new(big.Int).Mul(big.NewInt(3), pow(62)), "~2^63.6"},
		{pow(128), "2^128"},
	}
	for _, tt := range tests {
		if got := (Count{tt.n}).String(); got != tt.want {
			t.Errorf("Count(%s).String() = %q, want %q", tt.n, got, tt.want)
		}
	}
	if got := CountOf(2).Sub(CountOf(5)).Exact(); got != "0" {
		t.Errorf("2 - 5 = %s, want 0 (free never goes negative)", got)
	}
}
