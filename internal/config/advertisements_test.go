package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
	"github.com/ironlb/ironlb/internal/allocator"
	"github.com/ironlb/ironlb/internal/bgpconfig"
)

// checkErr fails t unless err is nil when want is "", or contains want and wraps is (when set).
func checkErr(t *testing.T, err error, want string, is error) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("refused: %v", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("error %v, want one containing %q", err, want)
	case is != nil && !errors.Is(err, is):
		t.Fatalf("error %v does not wrap %v", err, is)
	}
}

func sel(kv ...string) metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return metav1.LabelSelector{MatchLabels: m}
}

func expr(key string, op metav1.LabelSelectorOperator, values ...string) metav1.LabelSelector {
	return metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: op, Values: values}}}
}

// TestValidateL2Advertisement: MetalLB's l2AdvertisementFromCR refusals, and interface names.
func TestValidateL2Advertisement(t *testing.T) {
	for _, tt := range []struct {
		name string
		spec v1beta1.L2AdvertisementSpec
		want string
		is   error
	}{
		{"seed 000's (empty spec)", v1beta1.L2AdvertisementSpec{}, "", nil},
		{"missing pool: may come later", v1beta1.L2AdvertisementSpec{IPAddressPools: []string{"later"}}, "", nil},
		{"everything valid", v1beta1.L2AdvertisementSpec{IPAddressPools: []string{"a", "b"}, Interfaces: []string{"eth0", "bond0.100", "enp0s31f6"},
			NodeSelectors:          []metav1.LabelSelector{sel("rack", "a"), expr("zone", metav1.LabelSelectorOpIn, "x", "y")},
			IPAddressPoolSelectors: []metav1.LabelSelector{sel("team", "web")}, ServiceSelectors: []metav1.LabelSelector{expr("tier", metav1.LabelSelectorOpExists)}}, "", nil},
		{"pool listed twice", v1beta1.L2AdvertisementSpec{IPAddressPools: []string{"a", "b", "a"}},
			`L2Advertisement ad: spec.ipAddressPools[2]: listed twice: "a" is also [0]`, ErrDuplicate},
		{"bad nodeSelector operator", v1beta1.L2AdvertisementSpec{NodeSelectors: []metav1.LabelSelector{expr("rack", "Near", "a")}},
			`L2Advertisement ad: spec.nodeSelectors[0]: invalid label selector: "Near" is not a valid label selector operator`, bgpconfig.ErrInvalidSelector},
		{"bad nodeSelector label value", v1beta1.L2AdvertisementSpec{NodeSelectors: []metav1.LabelSelector{sel("rack", "a b")}},
			"spec.nodeSelectors[0]: invalid label selector", bgpconfig.ErrInvalidSelector},
		{"In without values", v1beta1.L2AdvertisementSpec{IPAddressPoolSelectors: []metav1.LabelSelector{expr("team", metav1.LabelSelectorOpIn)}},
			"spec.ipAddressPoolSelectors[0]: invalid label selector", bgpconfig.ErrInvalidSelector},
		{"bad serviceSelector", v1beta1.L2AdvertisementSpec{ServiceSelectors: []metav1.LabelSelector{expr("app", metav1.LabelSelectorOpExists, "x")}},
			"spec.serviceSelectors[0]: invalid label selector", bgpconfig.ErrInvalidSelector},
		{"nodeSelector listed twice", v1beta1.L2AdvertisementSpec{NodeSelectors: []metav1.LabelSelector{sel("rack", "a"), sel("rack", "a")}},
			"spec.nodeSelectors[1]: listed twice: same as [0] (rack=a)", ErrDuplicate},
		{"same selector, values in another order", v1beta1.L2AdvertisementSpec{NodeSelectors: []metav1.LabelSelector{
			expr("zone", metav1.LabelSelectorOpIn, "x", "y"), expr("zone", metav1.LabelSelectorOpIn, "y", "x")}},
			"spec.nodeSelectors[1]: listed twice: same as [0]", ErrDuplicate},
		{"value listed twice in an expression", v1beta1.L2AdvertisementSpec{NodeSelectors: []metav1.LabelSelector{expr("zone", metav1.LabelSelectorOpIn, "x", "x")}},
			`spec.nodeSelectors[0]: listed twice: a value of matchExpressions[0] (key "zone")`, ErrDuplicate},
		{"expression listed twice", v1beta1.L2AdvertisementSpec{ServiceSelectors: []metav1.LabelSelector{{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "a", Operator: metav1.LabelSelectorOpExists}, {Key: "a", Operator: metav1.LabelSelectorOpExists}}}}},
			"spec.serviceSelectors[0]: listed twice: matchExpressions[1] is also [0]", ErrDuplicate},
		{"interface name too long", v1beta1.L2AdvertisementSpec{Interfaces: []string{"eth0", "averyverylongname"}},
			`spec.interfaces[1]: invalid interface name: "averyverylongname" is longer than 15 bytes`, ErrInvalidInterface},
		{"interface name of 15 bytes", v1beta1.L2AdvertisementSpec{Interfaces: []string{"abcdefghijklmno"}}, "", nil},
		{"interface name with a slash", v1beta1.L2AdvertisementSpec{Interfaces: []string{"eth0/1"}}, `"eth0/1" contains '/', ':' or white space`, ErrInvalidInterface},
		{"interface alias with a colon", v1beta1.L2AdvertisementSpec{Interfaces: []string{"eth0:1"}}, "contains", ErrInvalidInterface},
		{"interface name with a space", v1beta1.L2AdvertisementSpec{Interfaces: []string{"eth 0"}}, "contains", ErrInvalidInterface},
		{"empty interface name", v1beta1.L2AdvertisementSpec{Interfaces: []string{""}}, "spec.interfaces[0]: invalid interface name: empty", ErrInvalidInterface},
		{"interface ..", v1beta1.L2AdvertisementSpec{Interfaces: []string{".."}}, `invalid interface name: ".."`, ErrInvalidInterface},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := &v1beta1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "ad", Namespace: "metallb-system"}, Spec: tt.spec}
			checkErr(t, ValidateL2Advertisement(a), tt.want, tt.is)
		})
	}
}

// TestValidateBGPAdvertisement: MetalLB's bgpAdvertisementFromCR and validateBGPAdvPerPool
// refusals, the speakers' (bgpconfig.Build) on the advertisement, and what is left to later.
func TestValidateBGPAdvertisement(t *testing.T) {
	i32 := func(v int32) *int32 { return &v }
	pools := []v1beta1.IPAddressPool{
		pool("main", "172.18.255.200-172.18.255.250"),
		pool("wide", "10.60.0.0/24"),
		pool("v6", "fd00::/120"),
		pool("broken", "10.0.0.9-10.0.0.1"), // invalid: left out
	}
	pools[1].Labels = map[string]string{"team": "web"}
	ad := func(name string, mut func(*v1beta1.BGPAdvertisementSpec)) v1beta1.BGPAdvertisement {
		a := v1beta1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "metallb-system"}}
		if mut != nil {
			mut(&a.Spec)
		}
		return a
	}
	// An existing advertisement of pool wide from the rack-a nodes to r1, localPref unset (0).
	base := ad("base", func(s *v1beta1.BGPAdvertisementSpec) {
		s.IPAddressPools, s.Peers, s.NodeSelectors = []string{"wide"}, []string{"r1"}, []metav1.LabelSelector{sel("rack", "a")}
	})
	objs := Objects{Pools: pools, BGPAdvertisements: []v1beta1.BGPAdvertisement{base},
		Communities: []v1beta1.Community{{ObjectMeta: metav1.ObjectMeta{Name: "aliases"},
			Spec: v1beta1.CommunitySpec{Communities: []v1beta1.CommunityAlias{{Name: "gold", Value: "65000:1"}, {Name: "odd:name", Value: "large:1:2:3"}}}}},
		Nodes: map[string]map[string]string{"n1": {"rack": "a"}, "n2": {"rack": "b"}}}
	for _, tt := range []struct {
		name string
		mut  func(*v1beta1.BGPAdvertisementSpec)
		want string
		is   error
	}{
		{"seed 003's (empty spec)", nil, "", nil},
		{"communities of every form", func(s *v1beta1.BGPAdvertisementSpec) {
			s.Communities = []string{"65535:65282", "large:1:2:3", "gold", "odd:name"}
		}, "", nil},
		{"alias that may come later", func(s *v1beta1.BGPAdvertisementSpec) { s.Communities = []string{"later"} }, "", nil},
		{"missing pool and peer: may come later", func(s *v1beta1.BGPAdvertisementSpec) {
			s.IPAddressPools, s.Peers = []string{"later"}, []string{"later"}
		}, "", nil},
		{"standard community out of range", func(s *v1beta1.BGPAdvertisementSpec) { s.Communities = []string{"70000:1"} },
			`BGPAdvertisement ad: spec.communities[0]: invalid community: "70000:1"`, bgpconfig.ErrInvalidCommunity},
		{"large community out of range", func(s *v1beta1.BGPAdvertisementSpec) { s.Communities = []string{"large:1:2:4294967296"} },
			"spec.communities[0]: invalid community", bgpconfig.ErrInvalidCommunity},
		{"three fields", func(s *v1beta1.BGPAdvertisementSpec) { s.Communities = []string{"65000:1", "1:2:3"} },
			`spec.communities[1]: unknown community alias: "1:2:3" is neither a community nor a Community alias`, bgpconfig.ErrUnknownCommunity},
		{"community listed twice", func(s *v1beta1.BGPAdvertisementSpec) { s.Communities = []string{"65000:1", "65000:1"} },
			`spec.communities[1]: listed twice: "65000:1" is also [0]`, ErrDuplicate},
		{"peer listed twice", func(s *v1beta1.BGPAdvertisementSpec) { s.Peers = []string{"r1", "r1"} }, "spec.peers[1]: listed twice", ErrDuplicate},
		{"pool listed twice", func(s *v1beta1.BGPAdvertisementSpec) { s.IPAddressPools = []string{"main", "main"} }, "spec.ipAddressPools[1]: listed twice", ErrDuplicate},
		{"aggregationLength 33", func(s *v1beta1.BGPAdvertisementSpec) { s.AggregationLength = i32(33) },
			"BGPAdvertisement ad: spec.aggregationLength: invalid aggregation length: 33 is not within 1–32", bgpconfig.ErrInvalidAggregation},
		{"aggregationLength 0", func(s *v1beta1.BGPAdvertisementSpec) { s.AggregationLength = i32(0) }, "0 is not within 1–32", bgpconfig.ErrInvalidAggregation},
		{"aggregationLengthV6 129", func(s *v1beta1.BGPAdvertisementSpec) { s.AggregationLengthV6 = i32(129) },
			"spec.aggregationLengthV6: invalid aggregation length: 129 is not within 1–128", bgpconfig.ErrInvalidAggregation},
		{"aggregationLength shorter than a pool's CIDR", func(s *v1beta1.BGPAdvertisementSpec) {
			s.IPAddressPools, s.AggregationLength = []string{"wide"}, i32(16)
		}, `/16 is shorter than prefix 10.60.0.0/24 of pool "wide"`, bgpconfig.ErrInvalidAggregation},
		{"aggregationLength as long as the pool's CIDR", func(s *v1beta1.BGPAdvertisementSpec) {
			s.IPAddressPools, s.AggregationLength = []string{"wide"}, i32(24)
		}, "", nil},
		{"aggregation checked on pools chosen by selector", func(s *v1beta1.BGPAdvertisementSpec) {
			s.IPAddressPoolSelectors, s.AggregationLength = []metav1.LabelSelector{sel("team", "web")}, i32(8)
		}, `of pool "wide"`, bgpconfig.ErrInvalidAggregation},
		{"aggregationLengthV6 shorter than the v6 pool", func(s *v1beta1.BGPAdvertisementSpec) { s.AggregationLengthV6 = i32(64) },
			`/64 is shorter than prefix fd00::/120 of pool "v6"`, bgpconfig.ErrInvalidAggregation},
		{"aggregation with serviceSelectors", func(s *v1beta1.BGPAdvertisementSpec) {
			s.IPAddressPools, s.AggregationLength, s.ServiceSelectors = []string{"wide"}, i32(24), []metav1.LabelSelector{sel("app", "web")}
		}, "serviceSelectors cannot be combined", bgpconfig.ErrInvalidAggregation},
		{"bad nodeSelector", func(s *v1beta1.BGPAdvertisementSpec) {
			s.NodeSelectors = []metav1.LabelSelector{expr("rack", "Near", "a")}
		},
			"spec.nodeSelectors[0]: invalid label selector", bgpconfig.ErrInvalidSelector},
		{"nodeSelector listed twice", func(s *v1beta1.BGPAdvertisementSpec) {
			s.NodeSelectors = []metav1.LabelSelector{sel("rack", "a"), sel("rack", "a")}
		},
			"spec.nodeSelectors[1]: listed twice: same as [0] (rack=a)", ErrDuplicate},
		{"localPref differs from base's on the same update", func(s *v1beta1.BGPAdvertisementSpec) {
			s.IPAddressPools, s.LocalPref = []string{"wide"}, 200
		}, `spec.localPref: conflicting localPref: 200, but BGPAdvertisement base gives pool "wide"'s prefixes, aggregated alike, to the same peers from node n1 with localPref 0`, ErrLocalPrefConflict},
		{"localPref differs, pool chosen by selector", func(s *v1beta1.BGPAdvertisementSpec) {
			s.IPAddressPoolSelectors, s.LocalPref = []metav1.LabelSelector{sel("team", "web")}, 200
		}, "conflicting localPref", ErrLocalPrefConflict},
		{"localPref differs, all pools", func(s *v1beta1.BGPAdvertisementSpec) { s.LocalPref = 200 }, "conflicting localPref", ErrLocalPrefConflict},
		{"localPref equal", func(s *v1beta1.BGPAdvertisementSpec) { s.IPAddressPools = []string{"wide"} }, "", nil},
		{"localPref differs, other pool", func(s *v1beta1.BGPAdvertisementSpec) { s.IPAddressPools, s.LocalPref = []string{"main"}, 200 }, "", nil},
		{"localPref differs, other peers", func(s *v1beta1.BGPAdvertisementSpec) {
			s.IPAddressPools, s.LocalPref, s.Peers = []string{"wide"}, 200, []string{"r2"}
		}, "", nil},
		{"localPref differs, other nodes", func(s *v1beta1.BGPAdvertisementSpec) {
			s.IPAddressPools, s.LocalPref, s.NodeSelectors = []string{"wide"}, 200, []metav1.LabelSelector{sel("rack", "b")}
		}, "", nil},
		{"localPref differs, other aggregation", func(s *v1beta1.BGPAdvertisementSpec) {
			s.IPAddressPools, s.LocalPref, s.AggregationLength = []string{"wide"}, 200, i32(24)
		}, "", nil},
		{"localPref differs, serviceSelectors", func(s *v1beta1.BGPAdvertisementSpec) {
			s.IPAddressPools, s.LocalPref, s.ServiceSelectors = []string{"wide"}, 200, []metav1.LabelSelector{sel("app", "web")}
		}, "", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := ad("ad", tt.mut)
			checkErr(t, ValidateBGPAdvertisement(&a, objs), tt.want, tt.is)
		})
	}

	t.Run("updating base itself", func(t *testing.T) {
		b := base
		b.Spec.LocalPref = 300
		checkErr(t, ValidateBGPAdvertisement(&b, objs), "", nil)
	})
	t.Run("no nodes: no localPref conflict (as MetalLB)", func(t *testing.T) {
		a := ad("ad", func(s *v1beta1.BGPAdvertisementSpec) { s.IPAddressPools, s.LocalPref = []string{"wide"}, 200 })
		o := objs
		o.Nodes = nil
		checkErr(t, ValidateBGPAdvertisement(&a, o), "", nil)
	})
}

// TestValidateCommunity: values the speakers parse, names given once.
func TestValidateCommunity(t *testing.T) {
	objs := Objects{Communities: []v1beta1.Community{
		{ObjectMeta: metav1.ObjectMeta{Name: "base"}, Spec: v1beta1.CommunitySpec{Communities: []v1beta1.CommunityAlias{{Name: "gold", Value: "65000:1"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: v1beta1.CommunitySpec{Communities: []v1beta1.CommunityAlias{{Name: "silver", Value: "65000:2"}}}},
	}}
	alias := func(name, value string) v1beta1.CommunityAlias {
		return v1beta1.CommunityAlias{Name: name, Value: value}
	}
	for _, tt := range []struct {
		name    string
		aliases []v1beta1.CommunityAlias
		want    string
		is      error
	}{
		{"valid", []v1beta1.CommunityAlias{alias("bronze", "65000:3"), alias("big", "large:64512:1:2")}, "", nil},
		{"updating c keeps its own alias", []v1beta1.CommunityAlias{alias("silver", "65000:20")}, "", nil},
		{"value out of range", []v1beta1.CommunityAlias{alias("x", "65536:1")}, `Community c: spec.communities[0]: invalid community: "65536:1"`, bgpconfig.ErrInvalidCommunity},
		{"value not a community", []v1beta1.CommunityAlias{alias("ok", "1:1"), alias("x", "gold")}, "spec.communities[1]: unknown community alias", bgpconfig.ErrUnknownCommunity},
		{"empty value", []v1beta1.CommunityAlias{alias("x", "")}, "spec.communities[0]", bgpconfig.ErrUnknownCommunity},
		{"alias without a name", []v1beta1.CommunityAlias{alias("", "1:1")}, "spec.communities[0]: unknown community alias: alias without a name", bgpconfig.ErrUnknownCommunity},
		{"name twice in the object", []v1beta1.CommunityAlias{alias("x", "1:1"), alias("x", "1:2")}, `spec.communities[1]: conflict: alias "x" is defined twice`, bgpconfig.ErrConflict},
		{"name defined by another Community", []v1beta1.CommunityAlias{alias("bronze", "1:1"), alias("gold", "1:2")},
			`Community c: spec.communities[1]: conflict: alias "gold" is already defined by Community base`, bgpconfig.ErrConflict},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &v1beta1.Community{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "metallb-system"}, Spec: v1beta1.CommunitySpec{Communities: tt.aliases}}
			checkErr(t, ValidateCommunity(c, objs), tt.want, tt.is)
		})
	}
}

// TestValidateBFDProfile: MetalLB's ranges (checked before the fields ironlb refuses, so that an
// out-of-range value gets MetalLB's message), and deleting a profile in use. The fields ironlb
// does not implement are TestUnsupportedFields'.
func TestValidateBFDProfile(t *testing.T) {
	u := func(v uint32) *uint32 { return &v }
	for _, tt := range []struct {
		name string
		spec v1beta1.BFDProfileSpec
		want string
	}{
		{"defaults", v1beta1.BFDProfileSpec{}, ""},
		{"seed 003's 50 ms × 3", v1beta1.BFDProfileSpec{ReceiveInterval: u(50), TransmitInterval: u(50), DetectMultiplier: u(3)}, ""},
		{"bounds", v1beta1.BFDProfileSpec{ReceiveInterval: u(10), TransmitInterval: u(60000), DetectMultiplier: u(255)}, ""},
		{"receiveInterval 9", v1beta1.BFDProfileSpec{ReceiveInterval: u(9)}, "BFDProfile p: spec.receiveInterval: invalid bfd profile: 9 is not within 10–60000"},
		{"transmitInterval 60001", v1beta1.BFDProfileSpec{TransmitInterval: u(60001)}, "spec.transmitInterval: invalid bfd profile: 60001 is not within 10–60000"},
		{"detectMultiplier 1", v1beta1.BFDProfileSpec{DetectMultiplier: u(1)}, "spec.detectMultiplier: invalid bfd profile: 1 is not within 2–255"},
		{"detectMultiplier 256", v1beta1.BFDProfileSpec{DetectMultiplier: u(256)}, "spec.detectMultiplier"},
		{"echoInterval 5", v1beta1.BFDProfileSpec{EchoInterval: u(5)}, "spec.echoInterval"},
		{"minimumTtl 0", v1beta1.BFDProfileSpec{MinimumTTL: u(0)}, "spec.minimumTtl: invalid bfd profile: 0 is not within 1–254"},
		{"minimumTtl 255", v1beta1.BFDProfileSpec{MinimumTTL: u(255)}, "spec.minimumTtl"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var is error
			if tt.want != "" {
				is = bgpconfig.ErrInvalidBFDProfile
			}
			checkErr(t, ValidateBFDProfile(&v1beta1.BFDProfile{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: tt.spec}), tt.want, is)
		})
	}

	peers := []v1beta2.BGPPeer{
		{ObjectMeta: metav1.ObjectMeta{Name: "r2"}, Spec: v1beta2.BGPPeerSpec{BFDProfile: "fast"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "r1"}, Spec: v1beta2.BGPPeerSpec{BFDProfile: "fast"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "r3"}},
	}
	checkErr(t, BFDProfileInUse("fast", peers), "BFDProfile fast: in use: BGPPeer r1 uses it (spec.bfdProfile)", ErrInUse)
	checkErr(t, BFDProfileInUse("slow", peers), "", nil)
	checkErr(t, BFDProfileInUse("fast", nil), "", nil)
}

// TestSelectorErrors: an advertisement with a selector that does not parse, in any of its three
// lists, is reported once (its first bad selector) and selects nothing; valid ones are not reported.
func TestSelectorErrors(t *testing.T) {
	bad := metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Near", Values: []string{"a"}}}}
	badValue := metav1.LabelSelector{MatchLabels: map[string]string{"team": "a b"}}
	good := metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}
	meta := func(n string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: n, Namespace: "metallb-system"} }
	l2 := []v1beta1.L2Advertisement{
		{ObjectMeta: meta("l2-ok"), Spec: v1beta1.L2AdvertisementSpec{IPAddressPoolSelectors: []metav1.LabelSelector{good}}},
		{ObjectMeta: meta("l2-pool"), Spec: v1beta1.L2AdvertisementSpec{IPAddressPoolSelectors: []metav1.LabelSelector{good, bad}}},
		{ObjectMeta: meta("l2-node"), Spec: v1beta1.L2AdvertisementSpec{NodeSelectors: []metav1.LabelSelector{badValue}}},
	}
	bgp := []v1beta1.BGPAdvertisement{
		{ObjectMeta: meta("bgp-svc"), Spec: v1beta1.BGPAdvertisementSpec{ServiceSelectors: []metav1.LabelSelector{bad}, IPAddressPoolSelectors: []metav1.LabelSelector{good}}},
		{ObjectMeta: meta("bgp-ok"), Spec: v1beta1.BGPAdvertisementSpec{NodeSelectors: []metav1.LabelSelector{good}}},
		{ObjectMeta: meta("bgp-pool"), Spec: v1beta1.BGPAdvertisementSpec{IPAddressPoolSelectors: []metav1.LabelSelector{badValue, bad}}},
	}
	var got []string
	for _, e := range SelectorErrors(l2, bgp) {
		if !errors.Is(e, bgpconfig.ErrInvalidSelector) {
			t.Errorf("%v does not wrap ErrInvalidSelector", e)
		}
		got = append(got, e.Kind+" "+e.Name+" "+e.Field)
	}
	want := []string{
		"BGPAdvertisement bgp-pool spec.ipAddressPoolSelectors[0]",
		"BGPAdvertisement bgp-svc spec.serviceSelectors[0]",
		"L2Advertisement l2-node spec.nodeSelectors[0]",
		"L2Advertisement l2-pool spec.ipAddressPoolSelectors[1]",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("SelectorErrors (-want +got):\n%s", diff)
	}
	// The model agrees: the bad advertisements select no pool, even the one that also names it.
	p := &Pool{Pool: allocator.Pool{Name: "p"}, Labels: map[string]string{"team": "a"}}
	m := BuildModel(ModelInput{L2Advertisements: l2})
	for _, a := range m.L2Advertisements {
		if sel := a.Selects(p); sel != (a.Name == "l2-ok") {
			t.Errorf("%s selects pool p: %v", a.Name, sel)
		}
	}
}
