package config

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
	"github.com/ironlb/ironlb/internal/allocator"
	"github.com/ironlb/ironlb/internal/bgpconfig"
)

// FuzzParsePools feeds arbitrary address strings, priorities and namespace lists into two pools:
// ParsePools never panics, every pool is either valid or in Invalid with its reason, no two valid
// pools overlap, and the webhook's ValidatePool refuses a pool alone exactly when ParsePools does.
func FuzzParsePools(f *testing.F) {
	f.Add("172.18.255.200-172.18.255.250", "10.0.0.0/24", "fd00::/120", 0, "a")
	f.Add("10.0.0.9-10.0.0.1", "::ffff:10.0.0.0/120", "10.0.0.5-10.0.0.6", -1, "a,a")
	f.Add("", " 10.0.0.0/8 ", "0.0.0.0/0", 5, "")
	f.Fuzz(func(t *testing.T, a1, a2, a3 string, prio int, nss string) {
		p1 := pool("one", a1, a2)
		p1.Spec.AllocateTo = &v1beta1.ServiceAllocation{Priority: prio}
		if nss != "" {
			p1.Spec.AllocateTo.Namespaces = strings.Split(nss, ",")
		}
		p2 := pool("two", a3)
		p2.CreationTimestamp = metav1.NewTime(time.Unix(1, 0)) // "two" is older: it wins an overlap
		ps, err := ParsePools([]v1beta1.IPAddressPool{p1, p2}, nil)
		if ps == nil {
			t.Fatal("nil pools")
		}
		if (err != nil) != (len(ps.Invalid) > 0) {
			t.Fatalf("error %v with invalid pools %v", err, ps.Invalid)
		}
		for _, n := range []string{"one", "two"} {
			_, ok := ps.ByName[n]
			if _, bad := ps.Invalid[n]; ok == bad {
				t.Fatalf("pool %s valid=%v invalid=%v", n, ok, bad)
			}
		}
		var all []allocator.Range
		for _, n := range ps.Names {
			for _, r := range ps.ByName[n].Ranges {
				if !r.First.IsValid() || r.Last.Less(r.First) || r.First.Is4() != r.Last.Is4() || r.First.Is4In6() {
					t.Fatalf("pool %s: bad range %+v", n, r)
				}
				for _, o := range all {
					if rangesOverlap(o, r) {
						t.Fatalf("valid pools overlap: %+v and %+v", o, r)
					}
				}
				all = append(all, r)
			}
		}
		if alone, _ := ParsePools([]v1beta1.IPAddressPool{p1}, nil); (ValidatePool(&p1, nil) == nil) != (len(alone.Invalid) == 0) {
			t.Fatalf("ValidatePool and ParsePools disagree on %v", p1.Spec)
		}
	})
}

// FuzzRequest feeds arbitrary annotations and address fields into a Service: Request never panics,
// every error wraps ErrBadService, and a request it returns asks for valid, unmapped addresses, at
// most one per family.
func FuzzRequest(f *testing.F) {
	f.Add("my-ippool", "172.18.255.200", "web", "", "", false, "")
	f.Add("", "10.0.0.1,fd00::1", "", "", "", true, "RequireDualStack")
	f.Add(" p ", "::ffff:10.0.0.1", "k", "10.0.0.2", "legacy", false, "PreferDualStack")
	f.Add("", "10.0.0.1, 10.0.0.2", "", "", "", false, "")
	f.Fuzz(func(t *testing.T, pool, ips, key, lbIP, legacyPool string, v6 bool, policy string) {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "s", Annotations: map[string]string{}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerIP: lbIP,
				Ports: []corev1.ServicePort{{Port: 80}}}}
		set := func(k, v string) {
			if v != "" {
				svc.Annotations[k] = v
			}
		}
		set(AnnotationAddressPool, pool)
		set(AnnotationLoadBalancerIPs, ips)
		set(AnnotationAllowSharedIP, key)
		set("metallb.universe.tf/address-pool", legacyPool)
		if v6 {
			svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
		}
		if policy != "" {
			p := corev1.IPFamilyPolicy(policy)
			svc.Spec.IPFamilyPolicy = &p
		}
		ps, _ := ParsePools([]v1beta1.IPAddressPool{{ObjectMeta: metav1.ObjectMeta{Name: "p"},
			Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"10.0.0.0/24"}}}}, nil)
		req, _, err := Request(svc, ps)
		if err != nil {
			if !errors.Is(err, ErrBadService) {
				t.Fatalf("error %v does not wrap ErrBadService", err)
			}
			return
		}
		if ips != "" && lbIP != "" {
			t.Fatal("loadBalancerIP and the annotation both set, and accepted")
		}
		fams := map[bool]bool{}
		for _, a := range req.Requested {
			if !a.IsValid() || a.Is4In6() || fams[a.Is4()] {
				t.Fatalf("requested %v", req.Requested)
			}
			fams[a.Is4()] = true
		}
		if req.Pool != strings.TrimSpace(req.Pool) || len(req.Families) == 0 {
			t.Fatalf("request %+v", req)
		}
		if legacyPool != "" && pool == "" && req.Pool != strings.TrimSpace(legacyPool) {
			t.Fatalf("legacy pool annotation %q read as %q", legacyPool, req.Pool)
		}
	})
}

// FuzzValidatePeer feeds arbitrary strings and numbers into a BGPPeer: ValidatePeer never panics,
// and it accepts only peers with an AS pair and a parseable unicast peer address.
func FuzzValidatePeer(f *testing.F) {
	f.Add(uint32(64513), uint32(64512), "172.18.255.254", "", "", "", int64(90), int64(30), "", "", "")
	f.Add(uint32(0), uint32(0), "::1", "fd00::2", "fd00::3", "internal", int64(2), int64(9), "pw", "sec", "prof")
	f.Fuzz(func(t *testing.T, my, peerAS uint32, addr, src, routerID, dyn string, hold, ka int64, pw, secret, bfdProfile string) {
		p := &v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "metallb-system"},
			Spec: v1beta2.BGPPeerSpec{MyASN: my, ASN: peerAS, Address: addr, SrcAddress: src, RouterID: routerID,
				DynamicASN: v1beta2.DynamicASNMode(dyn), Password: pw, PasswordSecret: corev1.SecretReference{Name: secret},
				BFDProfile: bfdProfile,
				HoldTime:   &metav1.Duration{Duration: time.Duration(hold) * time.Second}, KeepaliveTime: &metav1.Duration{Duration: time.Duration(ka) * time.Second}}}
		if ValidatePeer(p) != nil {
			return
		}
		a, err := netip.ParseAddr(addr)
		if err != nil || a.IsUnspecified() || a.IsMulticast() || my == 0 || (peerAS == 0) == (dyn == "") {
			t.Fatalf("accepted %+v", p.Spec)
		}
		if pw != "" && secret != "" {
			t.Fatalf("accepted password and passwordSecret: %+v", p.Spec)
		}
	})
}

// FuzzValidateAdvertisements feeds arbitrary communities, aggregation lengths, interface names and
// selector parts into the advertisement and Community checks: they never panic; a BGPAdvertisement
// admitted has only communities bgpconfig.ParseCommunity reads, aliases, or names without ':' (left
// to later), and is one the speakers' Build accepts with its aliases resolved; a Community admitted
// has values ParseCommunity reads; an L2Advertisement admitted names only interfaces of 1–15 bytes.
func FuzzValidateAdvertisements(f *testing.F) {
	f.Add("65535:65282", "large:1:2:3", int32(32), "eth0", "rack", "In", "a")
	f.Add("70000:1", "gold", int32(33), "eth0/1", "rack", "Near", "")
	f.Add("1:2:3", "", int32(0), "averyverylongname", "", "Exists", "x")
	f.Fuzz(func(t *testing.T, c1, c2 string, agg int32, ifname, key, op, val string) {
		objs := Objects{Pools: []v1beta1.IPAddressPool{pool("p", "10.0.0.0/28")},
			Communities: []v1beta1.Community{{ObjectMeta: metav1.ObjectMeta{Name: "aliases"},
				Spec: v1beta1.CommunitySpec{Communities: []v1beta1.CommunityAlias{{Name: "gold", Value: "65000:1"}}}}}}
		s := metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: metav1.LabelSelectorOperator(op)}}}
		if val != "" {
			s.MatchExpressions[0].Values = []string{val}
		}
		a := &v1beta1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "a"},
			Spec: v1beta1.BGPAdvertisementSpec{Communities: []string{c1, c2}, AggregationLength: &agg, NodeSelectors: []metav1.LabelSelector{s}}}
		if ValidateBGPAdvertisement(a, objs) == nil {
			for _, c := range a.Spec.Communities {
				if _, err := bgpconfig.ParseCommunity(c); err != nil && c != "gold" && strings.Contains(c, ":") {
					t.Fatalf("admitted community %q", c)
				}
			}
			resolved := a.DeepCopy()
			resolved.Spec.Communities = []string{"gold"}
			if _, errs := bgpconfig.Build(bgpconfig.Input{Advertisements: []v1beta1.BGPAdvertisement{*resolved}, Communities: objs.Communities,
				Pools: []bgpconfig.Pool{{Name: "p", Entries: [][]netip.Prefix{{netip.MustParsePrefix("10.0.0.0/28")}}}}}); len(errs) > 0 {
				t.Fatalf("admitted %+v, which the speakers refuse: %v", a.Spec, errs)
			}
		}
		c := &v1beta1.Community{ObjectMeta: metav1.ObjectMeta{Name: "c"},
			Spec: v1beta1.CommunitySpec{Communities: []v1beta1.CommunityAlias{{Name: "x", Value: c1}, {Name: c2, Value: "1:1"}}}}
		if ValidateCommunity(c, objs) == nil {
			if _, err := bgpconfig.ParseCommunity(c1); err != nil || c2 == "" || c2 == "x" || c2 == "gold" {
				t.Fatalf("admitted Community %+v", c.Spec)
			}
		}
		l2 := &v1beta1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "l"},
			Spec: v1beta1.L2AdvertisementSpec{Interfaces: []string{ifname}, NodeSelectors: []metav1.LabelSelector{s}}}
		if ValidateL2Advertisement(l2) == nil {
			if len(ifname) == 0 || len(ifname) > 15 || strings.ContainsAny(ifname, "/: ") {
				t.Fatalf("admitted interface %q", ifname)
			}
			if _, err := metav1.LabelSelectorAsSelector(&s); err != nil {
				t.Fatalf("admitted selector %+v: %v", s, err)
			}
		}
	})
}
