package controller

import (
	"fmt"
	"math/rand/v2"
)

// The generators of the differential admission test. Every choice comes from the round's rand (a PCG
// seeded with the test's seed and the round's number), so a seed replays every round. Values are
// drawn from small sets that straddle each rule's boundary (a valid value, the limits, one past them,
// a malformed one), and names and addresses from a few per round, so that overlaps, duplicates and
// references to other objects of the round are common.

// roundAddrs is a round's address space: its own IPv4 /24 and IPv6 /64.
type roundAddrs struct{ v4, v6 string }

func addrsFor(r int) roundAddrs {
	return roundAddrs{v4: fmt.Sprintf("10.%d.%d.", 100+(r/250)%150, r%250), v6: fmt.Sprintf("fd00:dd:%x::", r%65536)}
}

// chance is true with probability p.
func chance(r *rand.Rand, p float64) bool { return r.Float64() < p }

// genRound makes round n: 2–6 base objects, then 6–12 candidates.
func genRound(r *rand.Rand, n int) round {
	g := &gen{r: r, n: n, a: addrsFor(n), pfx: fmt.Sprintf("r%d-", n)}
	rd := round{n: n}
	nb := 2 + r.IntN(5)
	for i := range nb {
		rd.base = append(rd.base, g.object(fmt.Sprintf("b%d", i)))
	}
	nc := 6 + r.IntN(7)
	for i := range nc {
		op, o := opCreate, g.object(fmt.Sprintf("c%d", i))
		switch x := r.Float64(); {
		case x < 0.15: // a new spec for a base object (created only if both accepted it; else the update is "not found" on both)
			b := rd.base[r.IntN(len(rd.base))]
			if b.Kind != "Service" {
				op, o = opUpdate, g.objectOf(b.Kind, b.Name)
				o.Annotations = b.Annotations
			}
		case x < 0.22: // delete a base object (BFDProfiles in use are refused)
			b := rd.base[r.IntN(len(rd.base))]
			op, o = opDelete, b
		}
		rd.cands = append(rd.cands, struct {
			op diffOp
			o  diffObject
		}{op, o})
	}
	return rd
}

type gen struct {
	r   *rand.Rand
	n   int
	a   roundAddrs
	pfx string // every name of the round starts with it
}

var diffKinds = []string{"IPAddressPool", "IPAddressPool", "IPAddressPool", "L2Advertisement", "BGPAdvertisement", "BGPAdvertisement",
	"BGPPeer", "BGPPeer", "BFDProfile", "Community", "Service", "Service"}

func (g *gen) object(name string) diffObject {
	return g.objectOf(pickOne(g.r, diffKinds...), g.pfx+name)
}

func (g *gen) objectOf(kind, name string) diffObject {
	o := diffObject{Kind: kind, Name: name}
	switch kind {
	case "IPAddressPool":
		o.Spec = g.pool()
	case "L2Advertisement":
		o.Spec = g.l2adv()
	case "BGPAdvertisement":
		o.Spec = g.bgpadv()
	case "BGPPeer":
		o.Spec = g.peer()
	case "BFDProfile":
		o.Spec = g.bfd()
	case "Community":
		o.Spec = g.community()
	case "Service":
		o.Namespace = "default"
		o.Annotations, o.Spec = g.service()
	}
	return o
}

func (g *gen) poolName() string {
	return g.pfx + pickOne(g.r, "b0", "b1", "b2", "b3", "c0", "c1", "missing")
}

func (g *gen) v4(i int) string { return fmt.Sprintf("%s%d", g.a.v4, i) }
func (g *gen) v6(i int) string { return fmt.Sprintf("%s%x", g.a.v6, i) }

// addressEntry is one entry of a pool's spec.addresses.
func (g *gen) addressEntry() string {
	r := g.r
	switch x := r.Float64(); {
	case x < 0.3:
		l := 26 + r.IntN(7)
		base := r.IntN(64)
		if chance(r, 0.85) {
			base &^= (1 << (32 - l)) - 1
		}
		return fmt.Sprintf("%s/%d", g.v4(base), l)
	case x < 0.6:
		a, b := r.IntN(64), r.IntN(64)
		if a > b && chance(r, 0.7) {
			a, b = b, a
		}
		return g.v4(a) + "-" + g.v4(b)
	case x < 0.72:
		l := 120 + r.IntN(9)
		base := r.IntN(64)
		if chance(r, 0.85) {
			base &^= (1 << (128 - l)) - 1
		}
		return fmt.Sprintf("%s/%d", g.v6(base), l)
	case x < 0.84:
		a, b := r.IntN(64), r.IntN(64)
		if a > b && chance(r, 0.7) {
			a, b = b, a
		}
		return g.v6(a) + "-" + g.v6(b)
	}
	return pickOne(r,
		g.a.v4+"300/24", g.v4(r.IntN(64)), g.v4(1)+"-"+g.v6(9), "", " "+g.v4(0)+"/30", g.v4(0)+"/33",
		"::ffff:"+g.v4(0)+"/124", g.v6(0)+"/129", g.v4(4)+" - "+g.v4(8), g.v4(0)+"/0x1c", g.v4(8)+"/29,"+g.v4(16)+"/29")
}

func (g *gen) selector() map[string]any {
	r := g.r
	switch x := r.Float64(); {
	case x < 0.5:
		return map[string]any{"matchLabels": map[string]any{pickOne(r, "team", "app", "zone"): pickOne(r, "a", "b")}}
	case x < 0.8:
		op := pickOne(r, "In", "NotIn", "Exists", "DoesNotExist")
		e := map[string]any{"key": pickOne(r, "team", "app"), "operator": op}
		if op == "In" || op == "NotIn" {
			e["values"] = []any{"a"}
		}
		return map[string]any{"matchExpressions": []any{e}}
	}
	// What does not parse.
	return pickOne(r,
		map[string]any{"matchLabels": map[string]any{"bad key!": "a"}},
		map[string]any{"matchLabels": map[string]any{"team": "bad value!"}},
		map[string]any{"matchExpressions": []any{map[string]any{"key": "team", "operator": "In"}}},
		map[string]any{"matchExpressions": []any{map[string]any{"key": "team", "operator": "Exists", "values": []any{"a"}}}},
		map[string]any{"matchExpressions": []any{map[string]any{"key": "team", "operator": "Like", "values": []any{"a"}}}},
	)
}

func (g *gen) selectors(p float64) []any {
	var out []any
	for chance(g.r, p) && len(out) < 3 {
		out = append(out, g.selector())
	}
	return out
}

func (g *gen) pool() map[string]any {
	r := g.r
	var addrs []any
	for i := 0; i < 1+r.IntN(3); i++ {
		addrs = append(addrs, g.addressEntry())
	}
	s := map[string]any{"addresses": addrs}
	if chance(r, 0.4) {
		s["autoAssign"] = chance(r, 0.5)
	}
	if chance(r, 0.2) {
		s["avoidBuggyIPs"] = chance(r, 0.7)
	}
	if chance(r, 0.3) {
		sa := map[string]any{}
		if chance(r, 0.6) {
			sa["priority"] = pickOne(r, 0, 1, 5, -1)
		}
		if chance(r, 0.4) {
			sa["namespaces"] = []any{pickOne(r, "team-a", "default", "Bad_NS")}
		}
		if sel := g.selectors(0.3); sel != nil {
			sa["namespaceSelectors"] = sel
		}
		if sel := g.selectors(0.3); sel != nil {
			sa["serviceSelectors"] = sel
		}
		s["serviceAllocation"] = sa
	}
	return s
}

func (g *gen) names(p float64, pick func() string) []any {
	var out []any
	for chance(g.r, p) && len(out) < 3 {
		out = append(out, pick())
	}
	if len(out) > 0 && chance(g.r, 0.1) {
		out = append(out, out[0]) // a duplicate
	}
	return out
}

func (g *gen) l2adv() map[string]any {
	r := g.r
	s := map[string]any{}
	if p := g.names(0.6, g.poolName); p != nil {
		s["ipAddressPools"] = p
	}
	if sel := g.selectors(0.25); sel != nil {
		s["ipAddressPoolSelectors"] = sel
	}
	if sel := g.selectors(0.25); sel != nil {
		s["nodeSelectors"] = sel
	}
	if chance(r, 0.3) {
		s["interfaces"] = g.names(0.9, func() string {
			return pickOne(r, "eth0", "eth1", "bond0.100", "", "with space", "averyveryverylongname", "..", "a/b")
		})
	}
	return s
}

func (g *gen) communityValue() any {
	r := g.r
	if chance(r, 0.3) {
		return g.pfx + pickOne(r, "gold", "silver", "missing")
	}
	return pickOne(r, "65000:1", "65535:65282", "70000:1", "1:70000", "large:1:2:3", "large:1:2", "large:4294967296:1:1", "1:2:3", "abc:def", "0:0")
}

func (g *gen) bgpadv() map[string]any {
	r := g.r
	s := map[string]any{}
	if chance(r, 0.4) {
		s["aggregationLength"] = pickOne(r, 0, 1, 24, 28, 30, 32, 33)
	}
	if chance(r, 0.25) {
		s["aggregationLengthV6"] = pickOne(r, 0, 64, 120, 124, 128, 129)
	}
	if chance(r, 0.3) {
		s["localPref"] = pickOne(r, 0, 100, 200)
	}
	if c := g.names(0.35, func() string { return fmt.Sprint(g.communityValue()) }); c != nil {
		s["communities"] = c
	}
	if p := g.names(0.6, g.poolName); p != nil {
		s["ipAddressPools"] = p
	}
	if sel := g.selectors(0.2); sel != nil {
		s["ipAddressPoolSelectors"] = sel
	}
	if sel := g.selectors(0.2); sel != nil {
		s["nodeSelectors"] = sel
	}
	if p := g.names(0.2, func() string { return g.pfx + pickOne(r, "b0", "b1", "c0", "missing") }); p != nil {
		s["peers"] = p
	}
	return s
}

func (g *gen) peer() map[string]any {
	r := g.r
	s := map[string]any{"myASN": pickOne(r, 64512, 64512, 64513, 0, 23456, 4294967295)}
	switch x := r.Float64(); {
	case x < 0.75:
		s["peerASN"] = pickOne(r, 64512, 64513, 65000, 0, 23456)
	case x < 0.9:
		s["dynamicASN"] = pickOne(r, "internal", "external")
	case x < 0.95:
		s["peerASN"] = 64513
		s["dynamicASN"] = "external"
	}
	s["peerAddress"] = pickOne(r, g.v4(200), g.v4(201), g.v4(202), g.v6(200), "fe80::1", "not-an-ip", g.v4(200)+"/32", "")
	if chance(r, 0.2) {
		s["peerPort"] = pickOne(r, 179, 1179, 0, 65535)
	}
	if chance(r, 0.35) {
		s["holdTime"] = pickOne(r, "0s", "1s", "3s", "90s", "10m", "2.5s")
	}
	if chance(r, 0.3) {
		s["keepaliveTime"] = pickOne(r, "0s", "1s", "30s", "100s")
	}
	if chance(r, 0.15) {
		s["ebgpMultiHop"] = true
	}
	if chance(r, 0.25) {
		s["bfdProfile"] = g.pfx + pickOne(r, "b0", "b1", "c0", "missing")
	}
	switch x := r.Float64(); {
	case x < 0.1:
		s["password"] = "s3cret"
	case x < 0.15:
		s["passwordSecret"] = map[string]any{"name": "bgp-secret", "namespace": ns}
	case x < 0.18:
		s["password"] = "s3cret"
		s["passwordSecret"] = map[string]any{"name": "bgp-secret", "namespace": ns}
	}
	if chance(r, 0.15) {
		s["sourceAddress"] = pickOne(r, g.v4(250), g.v6(250), "bad")
	}
	if sel := g.selectors(0.15); sel != nil {
		s["nodeSelectors"] = sel
	}
	if chance(r, 0.05) {
		s["vrf"] = "red"
	}
	if chance(r, 0.05) {
		s["enableGracefulRestart"] = true
	}
	if chance(r, 0.08) {
		s["connectTime"] = pickOne(r, "10s", "0s", "70000s")
	}
	if chance(r, 0.05) {
		s["disableMP"] = true
	}
	return s
}

func (g *gen) bfd() map[string]any {
	r := g.r
	s := map[string]any{}
	ms := func() any { return pickOne(r, 5, 10, 300, 60000, 60001) }
	if chance(r, 0.5) {
		s["receiveInterval"] = ms()
	}
	if chance(r, 0.5) {
		s["transmitInterval"] = ms()
	}
	if chance(r, 0.4) {
		s["detectMultiplier"] = pickOne(r, 1, 2, 3, 255, 256)
	}
	if chance(r, 0.2) {
		s["echoInterval"] = pickOne(r, 9, 10, 50, 60001)
	}
	if chance(r, 0.2) {
		s["echoMode"] = chance(r, 0.5)
	}
	if chance(r, 0.2) {
		s["passiveMode"] = chance(r, 0.5)
	}
	if chance(r, 0.3) {
		s["minimumTtl"] = pickOne(r, 0, 1, 254, 255)
	}
	return s
}

func (g *gen) communitySpec() []any {
	r := g.r
	var out []any
	for i := 0; i < r.IntN(4); i++ {
		e := map[string]any{}
		if chance(r, 0.95) {
			e["name"] = pickOne(r, g.pfx+"gold", g.pfx+"silver", g.pfx+"bronze", "")
		}
		if chance(r, 0.95) {
			e["value"] = pickOne(r, "65000:1", "65000:2", "large:1:2:3", "70000:1", "abc", "1:2:3:4", "65535:65281")
		}
		out = append(out, e)
	}
	return out
}

func (g *gen) community() map[string]any { return map[string]any{"communities": g.communitySpec()} }

// service is a LoadBalancer Service with MetalLB's annotations.
func (g *gen) service() (map[string]string, map[string]any) {
	r := g.r
	ann := map[string]string{}
	addr := func() string {
		return pickOne(r, g.v4(r.IntN(64)), g.v4(r.IntN(64)), g.v6(r.IntN(64)), "bad", g.v4(1)+","+g.v6(1), g.v4(1)+","+g.v4(2), g.v4(1)+", "+g.v6(2))
	}
	spec := map[string]any{"type": "LoadBalancer", "selector": map[string]any{"app": pickOne(r, "a", "b")}}
	if chance(r, 0.45) {
		ann["metallb.io/loadBalancerIPs"] = addr()
	}
	if chance(r, 0.1) {
		spec["loadBalancerIP"] = addr()
	}
	if chance(r, 0.3) {
		ann["metallb.io/address-pool"] = g.poolName()
	}
	if chance(r, 0.4) {
		ann["metallb.io/allow-shared-ip"] = pickOne(r, "k1", "k2")
	}
	if chance(r, 0.25) {
		spec["externalTrafficPolicy"] = "Local"
	}
	if chance(r, 0.15) {
		spec["ipFamilyPolicy"] = pickOne(r, "SingleStack", "PreferDualStack", "RequireDualStack")
	}
	var ports []any
	for i := 0; i < 1+r.IntN(2); i++ {
		p := pickOne(r, 80, 443, 53)
		ports = append(ports, map[string]any{"name": fmt.Sprintf("p%d", i), "port": p, "protocol": pickOne(r, "TCP", "TCP", "UDP")})
	}
	spec["ports"] = ports
	return ann, spec
}
