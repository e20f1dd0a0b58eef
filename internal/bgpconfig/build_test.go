package bgpconfig

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
	"github.com/ironlb/ironlb/internal/allocator"
	"github.com/ironlb/ironlb/internal/bfdprofile"
	"github.com/ironlb/ironlb/internal/election"
)

// Builders for terse test objects.

func bgpPeer(name string, myASN, peerASN uint32, addr string, mod ...func(*v1beta2.BGPPeerSpec)) v1beta2.BGPPeer {
	p := v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1beta2.BGPPeerSpec{MyASN: myASN, ASN: peerASN, Address: addr}}
	for _, m := range mod {
		m(&p.Spec)
	}
	return p
}

func bgpAd(name string, mod ...func(*v1beta1.BGPAdvertisementSpec)) v1beta1.BGPAdvertisement {
	a := v1beta1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, m := range mod {
		m(&a.Spec)
	}
	return a
}

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
func i32(v int32) *int32                   { return &v }
func u32(v uint32) *uint32                 { return &v }

func svc(key string, addrs ...string) Service {
	s := Service{Key: key, Pool: "default", Endpoints: []election.Endpoint{{Node: "node-a", Ready: true}}}
	for _, a := range addrs {
		s.Addrs = append(s.Addrs, netip.MustParseAddr(a))
	}
	return s
}

// eq compares netip values.
var eq = cmpopts.EquateComparable(netip.Addr{}, netip.Prefix{})

var (
	thisNode    = Node{Name: "node-a", Labels: map[string]string{"zone": "a", "kubernetes.io/hostname": "node-a"}}
	defaultPool = Pool{Name: "default", Labels: map[string]string{"tier": "public"},
		Entries: [][]netip.Prefix{{netip.MustParsePrefix("198.51.100.0/24")}, {netip.MustParsePrefix("2001:db8:100::/64")}}}
	routerID = netip.MustParseAddr("10.0.0.10")
)

func base() Input {
	return Input{Node: thisNode, DefaultRouterID: routerID, Pools: []Pool{defaultPool}}
}

func addr(s string) netip.Addr     { return netip.MustParseAddr(s) }
func pfx(s string) netip.Prefix    { return netip.MustParsePrefix(s) }
func comm(hi, lo uint32) Community { return Community(hi<<16 | lo) }

func TestBuildSessions(t *testing.T) {
	fast := bfdprofile.Profile{ReceiveInterval: 50 * time.Millisecond, TransmitInterval: 50 * time.Millisecond, DetectMultiplier: 3}
	tests := []struct {
		name string
		in   func(*Input)
		want []Session
	}{{
		name: "iBGP defaults",
		in: func(in *Input) {
			in.Peers = []v1beta2.BGPPeer{bgpPeer("r1", 64512, 64512, "192.0.2.1")}
		},
		want: []Session{{Name: "r1", Addr: addr("192.0.2.1"), Port: 179, LocalASN: 64512, PeerASN: 64512, IBGP: true,
			HoldTime: 90 * time.Second, KeepaliveTime: 30 * time.Second}},
	}, {
		name: "everything set",
		in: func(in *Input) {
			in.BFDProfiles = []v1beta1.BFDProfile{{ObjectMeta: metav1.ObjectMeta{Name: "fast"},
				Spec: v1beta1.BFDProfileSpec{ReceiveInterval: u32(50), TransmitInterval: u32(50), DetectMultiplier: u32(3)}}}
			in.Peers = []v1beta2.BGPPeer{bgpPeer("r1", 64512, 64513, "192.0.2.1", func(s *v1beta2.BGPPeerSpec) {
				s.Port, s.SrcAddress, s.RouterID = 1179, "192.0.2.2", "192.0.2.2"
				s.HoldTime, s.KeepaliveTime, s.ConnectTime = dur(9*time.Second), dur(3*time.Second), dur(5*time.Second)
				s.Password, s.BFDProfile, s.EnableGracefulRestart = "s3cret", "fast", true
			})}
		},
		want: []Session{{Name: "r1", Addr: addr("192.0.2.1"), Port: 1179, SourceAddr: addr("192.0.2.2"), LocalASN: 64512,
			PeerASN: 64513, HoldTime: 9 * time.Second, KeepaliveTime: 3 * time.Second, ConnectTime: 5 * time.Second,
			Password: "s3cret", BFDProfile: "fast", BFD: fast, GracefulRestart: true}},
	}, {
		name: "hold time alone derives keepalive",
		in: func(in *Input) {
			in.Peers = []v1beta2.BGPPeer{bgpPeer("r1", 64512, 64513, "192.0.2.1", func(s *v1beta2.BGPPeerSpec) { s.HoldTime = dur(30 * time.Second) })}
		},
		want: []Session{{Name: "r1", Addr: addr("192.0.2.1"), Port: 179, LocalASN: 64512, PeerASN: 64513,
			HoldTime: 30 * time.Second, KeepaliveTime: 10 * time.Second}},
	}, {
		name: "keepalive alone derives hold time",
		in: func(in *Input) {
			in.Peers = []v1beta2.BGPPeer{bgpPeer("r1", 64512, 64513, "192.0.2.1", func(s *v1beta2.BGPPeerSpec) { s.KeepaliveTime = dur(time.Second) })}
		},
		want: []Session{{Name: "r1", Addr: addr("192.0.2.1"), Port: 179, LocalASN: 64512, PeerASN: 64513,
			HoldTime: 3 * time.Second, KeepaliveTime: time.Second}},
	}, {
		name: "password from secret, localASN, dynamic external",
		in: func(in *Input) {
			in.Passwords = map[string]string{"bgp-auth": "fromsecret"}
			in.Peers = []v1beta2.BGPPeer{bgpPeer("r1", 64512, 0, "2001:db8::1", func(s *v1beta2.BGPPeerSpec) {
				s.DynamicASN, s.LocalASN = v1beta2.ExternalASNMode, 4200000000
				s.PasswordSecret = corev1.SecretReference{Name: "bgp-auth", Namespace: "metallb-system"}
			})}
		},
		want: []Session{{Name: "r1", Addr: addr("2001:db8::1"), Port: 179, LocalASN: 4200000000, DynamicASN: v1beta2.ExternalASNMode,
			HoldTime: 90 * time.Second, KeepaliveTime: 30 * time.Second, Password: "fromsecret"}},
	}, {
		name: "dynamic internal is iBGP with our AS number",
		in: func(in *Input) {
			in.Peers = []v1beta2.BGPPeer{bgpPeer("r1", 64512, 0, "192.0.2.1", func(s *v1beta2.BGPPeerSpec) { s.DynamicASN = v1beta2.InternalASNMode })}
		},
		want: []Session{{Name: "r1", Addr: addr("192.0.2.1"), Port: 179, LocalASN: 64512, PeerASN: 64512, IBGP: true,
			DynamicASN: v1beta2.InternalASNMode, HoldTime: 90 * time.Second, KeepaliveTime: 30 * time.Second}},
	}, {
		name: "node selectors",
		in: func(in *Input) {
			in.Peers = []v1beta2.BGPPeer{
				bgpPeer("b-zone-b", 64512, 64513, "192.0.2.2", func(s *v1beta2.BGPPeerSpec) {
					s.NodeSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"zone": "b"}}}
				}),
				bgpPeer("a-zone-a", 64512, 64513, "192.0.2.1", func(s *v1beta2.BGPPeerSpec) {
					s.NodeSelectors = []metav1.LabelSelector{
						{MatchLabels: map[string]string{"zone": "b"}},
						{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "zone", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "c"}}}},
					}
				}),
			}
		},
		want: []Session{{Name: "a-zone-a", Addr: addr("192.0.2.1"), Port: 179, LocalASN: 64512, PeerASN: 64513,
			HoldTime: 90 * time.Second, KeepaliveTime: 30 * time.Second}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := base()
			tt.in(&in)
			st, errs := Build(in)
			if len(errs) != 0 {
				t.Fatalf("errors: %v", errs)
			}
			if diff := cmp.Diff(tt.want, st.Sessions, eq); diff != "" {
				t.Errorf("sessions (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuildPaths(t *testing.T) {
	aliases := []v1beta1.Community{{ObjectMeta: metav1.ObjectMeta{Name: "aliases"}, Spec: v1beta1.CommunitySpec{
		Communities: []v1beta1.CommunityAlias{{Name: "no-advertise", Value: "65535:65282"}, {Name: "big", Value: "large:64512:1:2"}}}}}
	ibgp := bgpPeer("ibgp", 64512, 64512, "192.0.2.1")
	ebgp := bgpPeer("ebgp", 64512, 64513, "192.0.2.3")
	v6 := bgpPeer("v6", 64512, 64513, "2001:db8::1")
	onlyPaths := func(st State) map[string][]Path {
		out := map[string][]Path{}
		for _, s := range st.Sessions {
			out[s.Name] = s.Paths
		}
		return out
	}
	tests := []struct {
		name     string
		in       func(*Input)
		want     map[string][]Path
		services []ServiceStatus
	}{{
		name: "communities literal and aliased, localPref on iBGP only",
		in: func(in *Input) {
			in.Peers = []v1beta2.BGPPeer{ibgp, ebgp}
			in.Advertisements = []v1beta1.BGPAdvertisement{bgpAd("ad", func(s *v1beta1.BGPAdvertisementSpec) {
				s.LocalPref, s.Communities = 150, []string{"no-advertise", "64512:7", "large:1:2:3", "big"}
			})}
			in.Services = []Service{svc("ns/a", "198.51.100.7")}
		},
		want: map[string][]Path{
			"ibgp": {{Prefix: pfx("198.51.100.7/32"), Communities: []Community{comm(64512, 7), comm(65535, 65282)},
				LargeCommunities: []LargeCommunity{{1, 2, 3}, {64512, 1, 2}}, LocalPref: 150}},
			"ebgp": {{Prefix: pfx("198.51.100.7/32"), Communities: []Community{comm(64512, 7), comm(65535, 65282)},
				LargeCommunities: []LargeCommunity{{1, 2, 3}, {64512, 1, 2}}}},
		},
		services: []ServiceStatus{{Key: "ns/a", Reason: Announced, Peers: []string{"ebgp", "ibgp"}}},
	}, {
		name: "peers filter with per-peer attributes, merged on overlap",
		in: func(in *Input) {
			in.Peers = []v1beta2.BGPPeer{ibgp, ebgp}
			in.Advertisements = []v1beta1.BGPAdvertisement{
				bgpAd("to-ibgp", func(s *v1beta1.BGPAdvertisementSpec) {
					s.Peers, s.Communities, s.LocalPref = []string{"ibgp"}, []string{"1:1"}, 100
				}),
				bgpAd("to-both", func(s *v1beta1.BGPAdvertisementSpec) { s.Communities, s.LocalPref = []string{"2:2"}, 200 }),
				bgpAd("to-nobody", func(s *v1beta1.BGPAdvertisementSpec) { s.Peers = []string{"not-a-peer"} }),
			}
			in.Services = []Service{svc("ns/a", "198.51.100.7")}
		},
		want: map[string][]Path{
			"ibgp": {{Prefix: pfx("198.51.100.7/32"), Communities: []Community{comm(1, 1), comm(2, 2)}, LocalPref: 200}},
			"ebgp": {{Prefix: pfx("198.51.100.7/32"), Communities: []Community{comm(2, 2)}}},
		},
		services: []ServiceStatus{{Key: "ns/a", Reason: Announced, Peers: []string{"ebgp", "ibgp"}}},
	}, {
		name: "aggregation and families",
		in: func(in *Input) {
			in.Peers = []v1beta2.BGPPeer{ebgp, v6}
			in.Advertisements = []v1beta1.BGPAdvertisement{bgpAd("agg", func(s *v1beta1.BGPAdvertisementSpec) {
				s.AggregationLength, s.AggregationLengthV6 = i32(24), i32(64)
			})}
			in.Services = []Service{svc("ns/dual", "198.51.100.7", "2001:db8:100::7"), svc("ns/b", "198.51.100.9"),
				svc("ns/mapped", "::ffff:198.51.100.200")}
		},
		want: map[string][]Path{
			"ebgp": {{Prefix: pfx("198.51.100.0/24")}},
			"v6":   {{Prefix: pfx("2001:db8:100::/64")}},
		},
		services: []ServiceStatus{{Key: "ns/b", Reason: Announced, Peers: []string{"ebgp"}},
			{Key: "ns/dual", Reason: Announced, Peers: []string{"ebgp", "v6"}},
			{Key: "ns/mapped", Reason: Announced, Peers: []string{"ebgp"}}},
	}, {
		name: "why not",
		in: func(in *Input) {
			in.Peers = []v1beta2.BGPPeer{ebgp}
			in.Pools = append(in.Pools, Pool{Name: "private", Labels: map[string]string{"tier": "private"}},
				Pool{Name: "other"})
			in.Advertisements = []v1beta1.BGPAdvertisement{
				bgpAd("public", func(s *v1beta1.BGPAdvertisementSpec) {
					s.IPAddressPoolSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"tier": "public"}}}
				}),
				bgpAd("private-zone-b", func(s *v1beta1.BGPAdvertisementSpec) {
					s.IPAddressPools = []string{"private"}
					s.NodeSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"zone": "b"}}}
				}),
				bgpAd("labelled", func(s *v1beta1.BGPAdvertisementSpec) {
					s.IPAddressPools = []string{"other"}
					s.ServiceSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"bgp": "yes"}}}
				}),
			}
			noAddr := svc("ns/no-addr")
			unknown := svc("ns/unknown-pool", "203.0.113.1")
			unknown.Pool = "gone"
			private := svc("ns/private", "203.0.113.2")
			private.Pool = "private"
			other := svc("ns/other", "203.0.113.3")
			other.Pool = "other"
			otherYes := svc("ns/other-labelled", "203.0.113.4")
			otherYes.Pool, otherYes.Labels = "other", map[string]string{"bgp": "yes"}
			local := svc("ns/local-elsewhere", "198.51.100.1")
			local.Local, local.Endpoints = true, []election.Endpoint{{Node: "node-b", Ready: true}, {Node: "node-a", Ready: false}}
			localServing := svc("ns/local-serving", "198.51.100.2")
			localServing.Local, localServing.Endpoints = true, []election.Endpoint{{Node: "node-a", Serving: true}}
			noEps := svc("ns/no-endpoints", "198.51.100.3")
			noEps.Endpoints = []election.Endpoint{{Node: "node-a"}}
			v6only := svc("ns/v6-only", "2001:db8:100::1")
			in.Services = []Service{noAddr, unknown, private, other, otherYes, local, localServing, noEps, v6only}
		},
		want: map[string][]Path{
			"ebgp": {{Prefix: pfx("198.51.100.2/32")}, {Prefix: pfx("203.0.113.4/32")}},
		},
		services: []ServiceStatus{
			{Key: "ns/local-elsewhere", Reason: NoLocalEndpoint},
			{Key: "ns/local-serving", Reason: Announced, Peers: []string{"ebgp"}},
			{Key: "ns/no-addr", Reason: NoAddress},
			{Key: "ns/no-endpoints", Reason: NoEndpoints},
			{Key: "ns/other", Reason: NoAdvertisement},
			{Key: "ns/other-labelled", Reason: Announced, Peers: []string{"ebgp"}},
			{Key: "ns/private", Reason: NotSelected},
			{Key: "ns/unknown-pool", Reason: UnknownPool},
			{Key: "ns/v6-only", Reason: NoPeer},
		},
	}, {
		name: "excluded node keeps its sessions but advertises nothing",
		in: func(in *Input) {
			in.Node.Excluded = true
			in.Peers = []v1beta2.BGPPeer{ebgp}
			in.Advertisements = []v1beta1.BGPAdvertisement{bgpAd("ad")}
			in.Services = []Service{svc("ns/a", "198.51.100.7")}
		},
		want:     map[string][]Path{"ebgp": nil},
		services: []ServiceStatus{{Key: "ns/a", Reason: Excluded}},
	}, {
		name: "network unavailable",
		in: func(in *Input) {
			in.Node.NetworkUnavailable = true
			in.Peers = []v1beta2.BGPPeer{ebgp}
			in.Advertisements = []v1beta1.BGPAdvertisement{bgpAd("ad")}
			in.Services = []Service{svc("ns/a", "198.51.100.7")}
		},
		want:     map[string][]Path{"ebgp": nil},
		services: []ServiceStatus{{Key: "ns/a", Reason: NetworkUnavailable}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := base()
			in.Communities = aliases
			tt.in(&in)
			st, errs := Build(in)
			if len(errs) != 0 {
				t.Fatalf("errors: %v", errs)
			}
			if diff := cmp.Diff(tt.want, onlyPaths(st), eq); diff != "" {
				t.Errorf("paths (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.services, st.Services); diff != "" {
				t.Errorf("services (-want +got):\n%s", diff)
			}
			if st.RouterID != routerID {
				t.Errorf("router ID %v, want %v", st.RouterID, routerID)
			}
		})
	}
}

func TestBuildErrors(t *testing.T) {
	peer := func(mod func(*v1beta2.BGPPeerSpec)) func(*Input) {
		return func(in *Input) { in.Peers = []v1beta2.BGPPeer{bgpPeer("bad", 64512, 64513, "192.0.2.1", mod)} }
	}
	ad := func(mod func(*v1beta1.BGPAdvertisementSpec)) func(*Input) {
		return func(in *Input) { in.Advertisements = []v1beta1.BGPAdvertisement{bgpAd("bad", mod)} }
	}
	tests := []struct {
		name  string
		in    func(*Input)
		kind  string
		field string
		err   error
	}{
		{"myASN missing", peer(func(s *v1beta2.BGPPeerSpec) { s.MyASN = 0 }), "BGPPeer", "spec.myASN", ErrInvalidASN},
		{"myASN AS_TRANS", peer(func(s *v1beta2.BGPPeerSpec) { s.MyASN = 23456 }), "BGPPeer", "spec.myASN", ErrInvalidASN},
		{"localASN AS_TRANS", peer(func(s *v1beta2.BGPPeerSpec) { s.LocalASN = 23456 }), "BGPPeer", "spec.localASN", ErrInvalidASN},
		{"no peer ASN", peer(func(s *v1beta2.BGPPeerSpec) { s.ASN = 0 }), "BGPPeer", "spec.peerASN", ErrInvalidASN},
		{"peerASN and dynamicASN", peer(func(s *v1beta2.BGPPeerSpec) { s.DynamicASN = v1beta2.ExternalASNMode }), "BGPPeer", "spec.peerASN", ErrInvalidASN},
		{"bad dynamicASN", peer(func(s *v1beta2.BGPPeerSpec) { s.ASN, s.DynamicASN = 0, "sideways" }), "BGPPeer", "spec.dynamicASN", ErrInvalidASN},
		{"multihop iBGP", peer(func(s *v1beta2.BGPPeerSpec) { s.ASN, s.EBGPMultiHop = 64512, true }), "BGPPeer", "spec.ebgpMultiHop", ErrConflict},
		{"no address", peer(func(s *v1beta2.BGPPeerSpec) { s.Address = "" }), "BGPPeer", "spec.peerAddress", ErrInvalidAddress},
		{"bad address", peer(func(s *v1beta2.BGPPeerSpec) { s.Address = "192.0.2.300" }), "BGPPeer", "spec.peerAddress", ErrInvalidAddress},
		{"multicast address", peer(func(s *v1beta2.BGPPeerSpec) { s.Address = "224.0.0.5" }), "BGPPeer", "spec.peerAddress", ErrInvalidAddress},
		{"link-local address, no interface", peer(func(s *v1beta2.BGPPeerSpec) { s.Address = "fe80::1" }), "BGPPeer", "spec.peerAddress", ErrInvalidAddress},
		{"unnumbered", peer(func(s *v1beta2.BGPPeerSpec) { s.Address, s.Interface = "", "eth0" }), "BGPPeer", "spec.interface", ErrUnsupported},
		{"address and interface", peer(func(s *v1beta2.BGPPeerSpec) { s.Interface = "eth0" }), "BGPPeer", "spec.interface", ErrConflict},
		{"source of other family", peer(func(s *v1beta2.BGPPeerSpec) { s.SrcAddress = "2001:db8::2" }), "BGPPeer", "spec.sourceAddress", ErrInvalidAddress},
		{"IPv6 router ID", peer(func(s *v1beta2.BGPPeerSpec) { s.RouterID = "2001:db8::2" }), "BGPPeer", "spec.routerID", ErrInvalidAddress},
		{"vrf", peer(func(s *v1beta2.BGPPeerSpec) { s.VRFName = "red" }), "BGPPeer", "spec.vrf", ErrUnsupported},
		{"hold time 2s", peer(func(s *v1beta2.BGPPeerSpec) { s.HoldTime = dur(2 * time.Second) }), "BGPPeer", "spec.holdTime", ErrInvalidTimers},
		{"keepalive = hold", peer(func(s *v1beta2.BGPPeerSpec) { s.HoldTime, s.KeepaliveTime = dur(9*time.Second), dur(9*time.Second) }), "BGPPeer", "spec.holdTime", ErrInvalidTimers},
		{"keepalive > hold", peer(func(s *v1beta2.BGPPeerSpec) { s.HoldTime, s.KeepaliveTime = dur(9*time.Second), dur(20*time.Second) }), "BGPPeer", "spec.holdTime", ErrInvalidTimers},
		{"keepalive with hold 0", peer(func(s *v1beta2.BGPPeerSpec) { s.HoldTime, s.KeepaliveTime = dur(0), dur(time.Second) }), "BGPPeer", "spec.holdTime", ErrInvalidTimers},
		{"negative hold", peer(func(s *v1beta2.BGPPeerSpec) { s.HoldTime = dur(-time.Second) }), "BGPPeer", "spec.holdTime", ErrInvalidTimers},
		{"connect time 0.5s", peer(func(s *v1beta2.BGPPeerSpec) { s.ConnectTime = dur(500 * time.Millisecond) }), "BGPPeer", "spec.connectTime", ErrInvalidTimers},
		{"password and secret", peer(func(s *v1beta2.BGPPeerSpec) {
			s.Password, s.PasswordSecret = "a", corev1.SecretReference{Name: "s"}
		}), "BGPPeer", "spec.password", ErrInvalidPassword},
		{"password with newline", peer(func(s *v1beta2.BGPPeerSpec) { s.Password = "a\nb" }), "BGPPeer", "spec.password", ErrInvalidPassword},
		{"password too long", peer(func(s *v1beta2.BGPPeerSpec) { s.Password = string(make([]byte, 81)) }), "BGPPeer", "spec.password", ErrInvalidPassword},
		{"missing secret", peer(func(s *v1beta2.BGPPeerSpec) { s.PasswordSecret = corev1.SecretReference{Name: "nope"} }), "BGPPeer", "spec.passwordSecret", ErrSecretNotFound},
		{"secret of the wrong type", func(in *Input) {
			in.UnusableSecrets = map[string]string{"opaque": `Secret "opaque" has type Opaque, want kubernetes.io/basic-auth`}
			peer(func(s *v1beta2.BGPPeerSpec) { s.PasswordSecret = corev1.SecretReference{Name: "opaque"} })(in)
		}, "BGPPeer", "spec.passwordSecret", ErrUnusableSecret},
		{"unknown BFD profile", peer(func(s *v1beta2.BGPPeerSpec) { s.BFDProfile = "nope" }), "BGPPeer", "spec.bfdProfile", ErrUnknownBFDProfile},
		{"BFD multihop", func(in *Input) {
			in.BFDProfiles = []v1beta1.BFDProfile{{ObjectMeta: metav1.ObjectMeta{Name: "p"}}}
			peer(func(s *v1beta2.BGPPeerSpec) { s.BFDProfile, s.EBGPMultiHop = "p", true })(in)
		}, "BGPPeer", "spec.bfdProfile", ErrUnsupported},
		{"bad node selector", peer(func(s *v1beta2.BGPPeerSpec) {
			s.NodeSelectors = []metav1.LabelSelector{{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Near"}}}}
		}), "BGPPeer", "spec.nodeSelectors", ErrInvalidSelector},
		{"BFD receive interval 5", func(in *Input) {
			in.BFDProfiles = []v1beta1.BFDProfile{{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1beta1.BFDProfileSpec{ReceiveInterval: u32(5)}}}
		}, "BFDProfile", "spec.receiveInterval", ErrInvalidBFDProfile},
		{"BFD multiplier 1", func(in *Input) {
			in.BFDProfiles = []v1beta1.BFDProfile{{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1beta1.BFDProfileSpec{DetectMultiplier: u32(1)}}}
		}, "BFDProfile", "spec.detectMultiplier", ErrInvalidBFDProfile},
		{"bad alias value", func(in *Input) {
			in.Communities = []v1beta1.Community{{ObjectMeta: metav1.ObjectMeta{Name: "c"},
				Spec: v1beta1.CommunitySpec{Communities: []v1beta1.CommunityAlias{{Name: "x", Value: "65536:1"}}}}}
		}, "Community", "spec.communities[0]", ErrInvalidCommunity},
		{"duplicate alias", func(in *Input) {
			in.Communities = []v1beta1.Community{{ObjectMeta: metav1.ObjectMeta{Name: "c"},
				Spec: v1beta1.CommunitySpec{Communities: []v1beta1.CommunityAlias{{Name: "x", Value: "1:1"}, {Name: "x", Value: "1:2"}}}}}
		}, "Community", "spec.communities[1]", ErrConflict},
		{"unknown community alias", ad(func(s *v1beta1.BGPAdvertisementSpec) { s.Communities = []string{"gold"} }), "BGPAdvertisement", "spec.communities[0]", ErrUnknownCommunity},
		{"community out of range", ad(func(s *v1beta1.BGPAdvertisementSpec) { s.Communities = []string{"1:2", "large:1:2:4294967296"} }), "BGPAdvertisement", "spec.communities[1]", ErrInvalidCommunity},
		{"aggregation 33", ad(func(s *v1beta1.BGPAdvertisementSpec) { s.AggregationLength = i32(33) }), "BGPAdvertisement", "spec.aggregationLength", ErrInvalidAggregation},
		{"aggregation v6 0", ad(func(s *v1beta1.BGPAdvertisementSpec) { s.AggregationLengthV6 = i32(0) }), "BGPAdvertisement", "spec.aggregationLengthV6", ErrInvalidAggregation},
		{"aggregation wider than pool", ad(func(s *v1beta1.BGPAdvertisementSpec) { s.AggregationLength = i32(16) }), "BGPAdvertisement", "spec.aggregationLength", ErrInvalidAggregation},
		{"aggregation with service selectors", ad(func(s *v1beta1.BGPAdvertisementSpec) {
			s.AggregationLength = i32(24)
			s.ServiceSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"a": "b"}}}
		}), "BGPAdvertisement", "spec.serviceSelectors", ErrInvalidAggregation},
		{"bad pool selector", ad(func(s *v1beta1.BGPAdvertisementSpec) {
			s.IPAddressPoolSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"bad key!": "v"}}}
		}), "BGPAdvertisement", "spec.ipAddressPoolSelectors", ErrInvalidSelector},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := base()
			tt.in(&in)
			st, errs := Build(in)
			if len(errs) != 1 {
				t.Fatalf("got %d errors %v, want 1", len(errs), errs)
			}
			e := errs[0]
			if e.Kind != tt.kind || e.Name == "" || e.Field != tt.field || !errors.Is(e, tt.err) {
				t.Errorf("got %q (kind %s, field %s), want kind %s field %s wrapping %v", e, e.Kind, e.Field, tt.kind, tt.field, tt.err)
			}
			var ce *ConfigError
			if err := error(e); !errors.As(err, &ce) {
				t.Errorf("%v is not a *ConfigError", err)
			}
			if tt.kind == "BGPPeer" && len(st.Sessions) != 0 {
				t.Errorf("the invalid peer became a session: %+v", st.Sessions)
			}
		})
	}
}

// TestBuildConflicts: a node has one router ID and one session per peer address; the BGPPeer that
// comes first by name keeps them, and the other one is reported and left out.
func TestBuildConflicts(t *testing.T) {
	in := base()
	in.Peers = []v1beta2.BGPPeer{
		bgpPeer("c-same-address", 64512, 64513, "192.0.2.1"),
		bgpPeer("a", 64512, 64513, "192.0.2.1", func(s *v1beta2.BGPPeerSpec) { s.RouterID = "10.1.1.1" }),
		bgpPeer("b-other-router-id", 64512, 64513, "192.0.2.3", func(s *v1beta2.BGPPeerSpec) { s.RouterID = "10.2.2.2" }),
		bgpPeer("d-same-router-id", 64512, 64513, "192.0.2.4", func(s *v1beta2.BGPPeerSpec) { s.RouterID = "10.1.1.1" }),
		bgpPeer("a", 64512, 64513, "192.0.2.9"),
	}
	st, errs := Build(in)
	var got []string
	for _, e := range errs {
		if !errors.Is(e, ErrConflict) {
			t.Errorf("%v is not a conflict", e)
		}
		got = append(got, e.Name+" "+e.Field)
	}
	if diff := cmp.Diff([]string{"a ", "b-other-router-id spec.routerID", "c-same-address spec.peerAddress"}, got); diff != "" {
		t.Errorf("errors (-want +got):\n%s\n%v", diff, errs)
	}
	var names []string
	for _, s := range st.Sessions {
		names = append(names, s.Name)
	}
	if diff := cmp.Diff([]string{"a", "d-same-router-id"}, names); diff != "" {
		t.Errorf("sessions (-want +got):\n%s", diff)
	}
	if st.RouterID != addr("10.1.1.1") {
		t.Errorf("router ID %v, want the explicit 10.1.1.1", st.RouterID)
	}
}

func TestBuildRouterIDFallback(t *testing.T) {
	in := base()
	in.DefaultRouterID = netip.Addr{}
	in.Peers = []v1beta2.BGPPeer{
		bgpPeer("a", 64512, 64513, "2001:db8::1", func(s *v1beta2.BGPPeerSpec) { s.SrcAddress = "2001:db8::2" }),
		bgpPeer("b", 64512, 64513, "192.0.2.1", func(s *v1beta2.BGPPeerSpec) { s.SrcAddress = "192.0.2.2" }),
	}
	st, errs := Build(in)
	if len(errs) != 0 || st.RouterID != addr("192.0.2.2") {
		t.Errorf("router ID %v (errors %v), want the IPv4 source address 192.0.2.2", st.RouterID, errs)
	}
	in.Peers = nil
	if st, _ := Build(in); st.RouterID.IsValid() {
		t.Errorf("router ID %v without sessions, want none", st.RouterID)
	}
}

// TestBuildDeterministic: input order does not matter.
func TestBuildDeterministic(t *testing.T) {
	in := base()
	in.Peers = []v1beta2.BGPPeer{bgpPeer("b", 64512, 64513, "192.0.2.3"), bgpPeer("a", 64512, 64512, "192.0.2.1")}
	in.Advertisements = []v1beta1.BGPAdvertisement{
		bgpAd("x", func(s *v1beta1.BGPAdvertisementSpec) { s.Communities, s.LocalPref = []string{"9:9", "1:1"}, 10 }),
		bgpAd("y", func(s *v1beta1.BGPAdvertisementSpec) { s.Communities, s.LocalPref = []string{"5:5"}, 20 }),
	}
	in.Services = []Service{svc("ns/z", "198.51.100.9"), svc("ns/a", "198.51.100.1", "198.51.100.9")}
	want, _ := Build(in)
	in.Peers[0], in.Peers[1] = in.Peers[1], in.Peers[0]
	in.Advertisements[0], in.Advertisements[1] = in.Advertisements[1], in.Advertisements[0]
	in.Services[0], in.Services[1] = in.Services[1], in.Services[0]
	got, _ := Build(in)
	if diff := cmp.Diff(want, got, eq); diff != "" {
		t.Errorf("order changed the result (-want +got):\n%s", diff)
	}
}

func TestParseTimers(t *testing.T) {
	tests := []struct {
		hold, ka   *metav1.Duration
		wantH      time.Duration
		wantK      time.Duration
		wantErr    bool
		annotation string
	}{
		{nil, nil, 90 * time.Second, 30 * time.Second, false, "defaults"},
		{dur(0), nil, 0, 0, false, "hold 0: no keepalives"},
		{dur(0), dur(0), 0, 0, false, "both 0"},
		{dur(3 * time.Second), nil, 3 * time.Second, time.Second, false, "minimum hold"},
		{dur(3500 * time.Millisecond), nil, 3500 * time.Millisecond, 3500 * time.Millisecond / 3, false, "rounded down to 3s"},
		{dur(2999 * time.Millisecond), nil, 0, 0, true, "rounded down to 2s"},
		{nil, dur(500 * time.Millisecond), 0, 0, true, "derived hold 1.5s"},
		{dur(180 * time.Second), dur(60 * time.Second), 180 * time.Second, 60 * time.Second, false, "FRR's"},
		{dur(10 * time.Second), dur(10 * time.Second), 0, 0, true, "keepalive = hold"},
	}
	for _, tt := range tests {
		h, k, err := parseTimers(tt.hold, tt.ka)
		if (err != nil) != tt.wantErr || h != tt.wantH || k != tt.wantK {
			t.Errorf("%s: parseTimers = %v, %v, %v; want %v, %v, error %v", tt.annotation, h, k, err, tt.wantH, tt.wantK, tt.wantErr)
		}
		if err != nil && !errors.Is(err, ErrInvalidTimers) {
			t.Errorf("%s: %v is not ErrInvalidTimers", tt.annotation, err)
		}
	}
}

// MetalLB's rule for a range (validateBGPAdvPerPool): the aggregation length must not be shorter than
// the range's shortest prefix. 172.18.255.200-250 splits into /29, /28, /28, /29, /31, /32: /30 passes
// (MetalLB accepts it), /27 does not.
func TestAggregationOverARange(t *testing.T) {
	r, err := allocator.ParseRange("172.18.255.200-172.18.255.250")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		agg  int32
		fail bool
	}{{30, false}, {28, false}, {27, true}} {
		in := Input{
			Pools: []Pool{{Name: "r", Entries: [][]netip.Prefix{r[0].Prefixes()}}},
			Advertisements: []v1beta1.BGPAdvertisement{{ObjectMeta: metav1.ObjectMeta{Name: "a"},
				Spec: v1beta1.BGPAdvertisementSpec{AggregationLength: i32(tc.agg)}}},
		}
		_, errs := Build(in)
		if failed := len(errs) > 0; failed != tc.fail || failed && !errors.Is(errs[0], ErrInvalidAggregation) {
			t.Errorf("aggregationLength %d over the range: errors %v, want failure %v", tc.agg, errs, tc.fail)
		}
	}
}
