package nftrules

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/knftables"
)

// objects are the chains, affinity sets and fixed-map elements of one Service in one family.
// Their order is the order they are written in.
type objects struct {
	chains []chain
	sets   []affinitySet
	maps   []string // per-Service verdict maps (their elements are in elems)
	elems  []elem
	// windows are the endpoint sets (service and local chain names) that own a window of
	// dnat-endpoints; hairpin the endpoint addresses they use, sorted, each once.
	windows  []string
	dnatMaps []string
	hairpin  []netip.Addr
}

func (o *objects) empty() bool { return len(o.chains) == 0 && len(o.elems) == 0 }

type chain struct {
	name  string
	rules []Rule
}

func (c *chain) add(comment string, stmts ...Stmt) {
	c.rules = append(c.rules, Rule{Chain: c.name, Stmts: stmts, Comment: comment})
}

func sameRules(a, b []Rule) bool {
	return slices.EqualFunc(a, b, func(x, y Rule) bool { return x.Equal(&y) })
}

type affinitySet struct {
	name    string
	timeout time.Duration
}

// elem is an element of a fixed set (set true) or map.
type elem struct {
	container string
	set       bool
	key       []string
	value     string
	comment   string
}

func (e *elem) id() string { return e.container + " " + strings.Join(e.key, " . ") }

// ErrInvalidService is wrapped by the errors in Plan.Skipped.
var ErrInvalidService = errors.New("invalid service")

// validate checks what goes into chain names and rules verbatim, so that no input can break the
// nft syntax: names and port names are DNS labels (a Service port's name is a DNS-1123 label, up to 63
// characters, as the apiserver validates it; the 15-character IANA service name is a container port's),
// protocols known, ports unique.
func validate(s *Service) error {
	if !label(s.Namespace, 63) || !label(s.Name, 63) {
		return fmt.Errorf("%w: %q/%q is not a valid namespace/name", ErrInvalidService, s.Namespace, s.Name)
	}
	if s.SessionAffinityTimeout < 0 || s.SessionAffinityTimeout > 86400*time.Second {
		return fmt.Errorf("%w: session affinity timeout %v out of range", ErrInvalidService, s.SessionAffinityTimeout)
	}
	if s.Algorithm > Maglev {
		return fmt.Errorf("%w: unknown algorithm %v", ErrInvalidService, s.Algorithm)
	}
	names := map[string]bool{}
	ports := map[string]bool{}
	for i := range s.Ports {
		p := &s.Ports[i]
		if p.Name != "" && !label(p.Name, 63) {
			return fmt.Errorf("%w: port name %q", ErrInvalidService, p.Name)
		}
		if !p.Protocol.valid() {
			return fmt.Errorf("%w: port %q protocol %q", ErrInvalidService, p.Name, p.Protocol)
		}
		if p.Port == 0 {
			return fmt.Errorf("%w: port %q is 0", ErrInvalidService, p.Name)
		}
		n := portBase(s, p)
		pp := string(p.Protocol) + "/" + strconv.Itoa(int(p.Port))
		if names[n] || ports[pp] {
			return fmt.Errorf("%w: duplicate port %q (%s)", ErrInvalidService, p.Name, pp)
		}
		names[n], ports[pp] = true, true
	}
	return nil
}

// label reports whether s is 1 to max characters of [a-z0-9-], not starting or ending with '-'.
func label(s string, max int) bool {
	if len(s) == 0 || len(s) > max || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// serviceObjects computes svc's objects in the Builder's family on node n, taking the windows of
// its endpoint sets in dnat-endpoints from win. A nil svc, or one without a ClusterIP in the
// family, has none.
func (b *Builder) serviceObjects(svc *Service, n *Node, win windowFunc) (*objects, error) {
	o := &objects{}
	if svc == nil {
		return o, nil
	}
	if err := validate(svc); err != nil {
		return o, err
	}
	clusterIPs := b.addrs(svc.ClusterIPs)
	if len(clusterIPs) == 0 {
		return o, nil
	}
	for _, ip := range clusterIPs {
		o.elems = append(o.elems, elem{container: setClusterIPs, set: true, key: []string{ip.String()}})
	}
	a := svcAddrs{
		cluster:  clusterIPs,
		external: b.addrs(svc.ExternalIPs),
		lb:       b.addrs(svc.LoadBalancerIPs),
	}
	for i := range svc.Ports {
		b.portObjects(o, svc, &svc.Ports[i], n, &a, win)
	}
	if len(o.hairpin) > 1 {
		slices.SortFunc(o.hairpin, netip.Addr.Compare)
		o.hairpin = slices.Compact(o.hairpin)
	}
	return o, nil
}

type svcAddrs struct{ cluster, external, lb []netip.Addr }

// portObjects adds one Service port's objects to o, deciding as kube-proxy's syncProxyRules does.
func (b *Builder) portObjects(o *objects, svc *Service, p *Port, n *Node, a *svcAddrs, win windowFunc) {
	base := portBase(svc, p)
	proto := string(p.Protocol)
	port := strconv.Itoa(int(p.Port))
	comment := svc.Namespace + "/" + svc.Name + ":" + p.Name
	if p.Name == "" {
		comment = svc.Namespace + "/" + svc.Name + ":" + port
	}
	sel := SelectEndpoints(svc, p, n, b.v6)

	external := len(a.external) > 0 || len(a.lb) > 0 || p.NodePort != 0
	etpLocal := svc.ExternalTrafficPolicyLocal && external
	itpLocal := svc.InternalTrafficPolicyLocal

	clusterChain := hashed(prefixService, base, "")
	localChain := hashed(prefixLocal, base, "")
	extChain := hashed(prefixExternal, base, "")
	fwChain := hashed(prefixFirewall, base, "")

	internalChain, hasInternal := clusterChain, sel.HasEndpoints
	if itpLocal {
		internalChain, hasInternal = localChain, len(sel.Local) > 0
	}
	externalPolicyChain, hasExternal := clusterChain, sel.HasEndpoints
	if etpLocal {
		externalPolicyChain, hasExternal = localChain, len(sel.Local) > 0
	}
	useExtChain := sel.HasEndpoints && external

	internalVerdict, externalVerdict := Verdict{Kind: Drop}.String(), Verdict{Kind: Drop}.String()
	if !sel.HasEndpoints {
		internalVerdict, externalVerdict = Verdict{Goto, chainReject}.String(), Verdict{Goto, chainReject}.String()
	}

	// Service chains for each policy in use.
	var chains []chain
	var internal, cluster, local *chain
	if !itpLocal || external {
		if len(sel.Cluster) > 0 {
			cluster = &chain{name: clusterChain}
		}
	}
	if itpLocal || etpLocal {
		if len(sel.Local) > 0 {
			local = &chain{name: localChain}
		}
	}

	// Random balancing without affinity goes through windows of dnat-endpoints, if there are
	// windows left for every endpoint set; anything else through endpoint chains.
	var wins map[string]uint32
	if svc.Algorithm == Random && !svc.SessionAffinityClientIP && win != nil {
		wins = map[string]uint32{}
		for _, c := range []*chain{cluster, local} {
			if c == nil {
				continue
			}
			id, ok := win(c.name)
			if !ok {
				wins = nil
				break
			}
			wins[c.name] = id
		}
	}

	// Per-endpoint chains and affinity sets.
	reachable := sel.Reachable()
	epChain := make(endpointNames, len(reachable))
	affSet := make(endpointNames, len(reachable))
	timeout := svc.SessionAffinityTimeout
	if timeout == 0 {
		timeout = DefaultAffinityTimeout
	}
	for _, ep := range reachable {
		if wins != nil {
			o.hairpin = append(o.hairpin, ep.Addr)
			continue
		}
		ap := netip.AddrPortFrom(ep.Addr, ep.Port)
		eb := endpointBase(base, ap)
		epChain[ap] = hashed(prefixEndpoint, eb, "")
		if svc.SessionAffinityClientIP {
			affSet[ap] = hashed(prefixAffinity, eb, timeout.String())
			o.sets = append(o.sets, affinitySet{affSet[ap], timeout})
		}
	}
	if wins != nil {
		reachable = nil // no endpoint chains
	}
	if hasInternal {
		internal = cluster
		if itpLocal {
			internal = local
		}
		for _, ip := range a.cluster {
			daddr, dport := match(b.daddr, AddrValue(ip)), match(keyDport[p.Protocol], NumValue(uint32(p.Port)))
			switch {
			case b.cfg.MasqueradeAll:
				internal.add("masquerade all ClusterIP traffic", daddr, dport, jump(chainMarkForMasquerade))
			case len(b.prefixes(n.ClusterCIDRs)) > 0:
				internal.add("masquerade traffic from outside the cluster",
					daddr, dport, notLookup(b.saddr, setClusterCIDRs), jump(chainMarkForMasquerade))
			}
		}
	}
	for _, c := range []struct {
		c   *chain
		eps []Endpoint
	}{{cluster, sel.Cluster}, {local, sel.Local}} {
		if c.c == nil {
			continue
		}
		if id, ok := wins[c.c.name]; ok {
			b.dnatWindow(o, c.c, p.Protocol, id, c.eps)
		} else {
			b.balance(o, c.c, svc, base, c.eps, epChain, affSet)
		}
		chains = append(chains, *c.c)
	}

	// The external chain: masquerade (Cluster policy) or short-circuit traffic that is not from
	// outside (Local policy), then the policy's chain.
	if useExtChain {
		ext := chain{name: extChain}
		if !etpLocal {
			ext.add("masquerade external traffic (Cluster policy)", jump(chainMarkForMasquerade))
		} else {
			if len(b.prefixes(n.ClusterCIDRs)) > 0 {
				ext.add("short-circuit pod traffic", lookup(b.saddr, setClusterCIDRs), gotoChain(clusterChain))
			}
			fibLocal := match(keyFibSaddrType, SymValue("local"))
			ext.add("masquerade local traffic", fibLocal, jump(chainMarkForMasquerade))
			ext.add("short-circuit local traffic", fibLocal, gotoChain(clusterChain))
		}
		if hasExternal {
			ext.add("", gotoChain(externalPolicyChain))
		}
		chains = append(chains, ext)
	}

	// loadBalancerSourceRanges.
	useFW := len(a.lb) > 0 && len(svc.LoadBalancerSourceRanges) > 0
	if useFW {
		fw := chain{name: fwChain}
		ranges := b.prefixes(svc.LoadBalancerSourceRanges)
		if len(ranges) == 0 {
			// Ranges were given, but none in this family: admit nobody rather than everybody.
			fw.add("no loadBalancerSourceRanges in this family", verdict(Drop))
		} else {
			sources := make([]Value, 0, len(ranges)+len(a.lb))
			fromNode := false
			for _, r := range ranges {
				sources = append(sources, PrefixValue(r))
				for _, ip := range n.IPs {
					fromNode = fromNode || r.Contains(ip.Unmap())
				}
			}
			if fromNode {
				// A VIP configured on the node loops back with itself as the source.
				for _, ip := range a.lb {
					sources = append(sources, AddrValue(ip))
				}
			}
			fw.add("", Stmt{Kind: StmtMatch, Key: b.saddr, Op: OpNeq, Set: sources}, verdict(Drop))
		}
		chains = append(chains, fw)
	}

	// Endpoint chains.
	for _, ep := range reachable {
		ap := netip.AddrPortFrom(ep.Addr, ep.Port)
		c := chain{name: epChain[ap]}
		c.add("", match(b.saddr, AddrValue(ep.Addr)), jump(chainMarkForMasquerade))
		if s, ok := affSet[ap]; ok {
			c.add("", Stmt{Kind: StmtUpdate, Name: s, Key: b.saddr})
		}
		c.add("", l4proto(p.Protocol), Stmt{Kind: StmtDNAT, Value: AddrPortValue(ap)})
		chains = append(chains, c)
	}
	o.chains = append(o.chains, chains...)

	// Map elements.
	tuple := func(ip netip.Addr) []string { return []string{ip.String(), proto, port} }
	for _, ip := range a.cluster {
		if hasInternal {
			o.elems = append(o.elems, elem{container: mapServiceIPs, key: tuple(ip), value: Verdict{Goto, internalChain}.String()})
		} else {
			o.elems = append(o.elems, elem{container: mapNoEndpointServices, key: tuple(ip), value: internalVerdict, comment: comment})
		}
	}
	for _, ip := range a.external {
		if useExtChain {
			o.elems = append(o.elems, elem{container: mapServiceIPs, key: tuple(ip), value: Verdict{Goto, extChain}.String()})
		}
		if !hasExternal {
			o.elems = append(o.elems, elem{container: mapNoEndpointServices, key: tuple(ip), value: externalVerdict, comment: comment})
		}
	}
	for _, ip := range a.lb {
		if useExtChain {
			o.elems = append(o.elems, elem{container: mapServiceIPs, key: tuple(ip), value: Verdict{Goto, extChain}.String()})
		}
		if useFW {
			o.elems = append(o.elems, elem{container: mapFirewallIPs, key: tuple(ip), value: Verdict{Goto, fwChain}.String(), comment: comment})
		}
		if !hasExternal {
			o.elems = append(o.elems, elem{container: mapNoEndpointServices, key: tuple(ip), value: externalVerdict, comment: comment})
		}
	}
	if p.NodePort != 0 {
		np := []string{proto, strconv.Itoa(int(p.NodePort))}
		if useExtChain {
			o.elems = append(o.elems, elem{container: mapServiceNodePorts, key: np, value: Verdict{Goto, extChain}.String()})
		}
		if !hasExternal {
			o.elems = append(o.elems, elem{container: mapNoEndpointNodePorts, key: np, value: externalVerdict, comment: comment})
		}
	}
}

// cascadeMax is the most endpoints a random or round-robin service chain picks from with a
// cascade of rules rather than a verdict map.
const cascadeMax = 8

// balance writes a service chain's endpoint choice: affinity lookups first, then the pick by the
// Service's algorithm.
//
// Random and round-robin over up to cascadeMax endpoints use no set at all: rule i of n says
// `numgen random mod (n-i) 0 goto endpoint-i` (each endpoint 1/n overall), or with `numgen inc`,
// whose per-rule counters advance on every packet that reaches them and so hand out exact turns.
// Per-Service sets, anonymous (`vmap { ... }`) or named, are what make large tables slow to load:
// the kernel finds a set by walking every set in the table, so 10,000 of them took 13-17 s to
// load instead of 3 s. Above cascadeMax endpoints, and for Maglev's table, the choice is one
// lookup in a verdict map named like the chain (maps and chains have separate namespaces), which
// also makes an endpoint swap a map-element update.
func (b *Builder) balance(o *objects, c *chain, svc *Service, base string, eps []Endpoint, epChain, affSet endpointNames) {
	names := make([]string, len(eps))
	for i, ep := range eps {
		ap := netip.AddrPortFrom(ep.Addr, ep.Port)
		names[i] = epChain[ap]
		if s, ok := affSet[ap]; ok {
			c.add("", lookup(b.saddr, s), gotoChain(names[i]))
		}
	}
	inc := svc.Algorithm == RoundRobin
	n := len(eps)
	if svc.Algorithm != Maglev && n <= cascadeMax || n == 1 {
		for i := range n - 1 {
			c.add("", match([]Expr{{Field: FieldNumgen, Inc: inc, Mod: uint32(n - i)}}, NumValue(0)), gotoChain(names[i]))
		}
		c.add("", gotoChain(names[n-1]))
		return
	}
	var table []int
	if svc.Algorithm == Maglev {
		keys := make([]string, n)
		for i, ep := range eps {
			keys[i] = netip.AddrPortFrom(ep.Addr, ep.Port).String()
		}
		size := maglevSize(b.cfg.MaglevTableSize, n)
		table = MaglevTable(keys, size)
		c.add("", vmap([]Expr{{Field: FieldJhash, IP6: b.v6, Mod: uint32(size), Seed: seed(base)}}, c.name))
	} else {
		c.add("", vmap([]Expr{{Field: FieldNumgen, Inc: inc, Mod: uint32(n)}}, c.name))
	}
	o.maps = append(o.maps, c.name)
	if table != nil {
		n = len(table)
	}
	for i := range n {
		target := i
		if table != nil {
			target = table[i]
		}
		o.elems = append(o.elems, elem{container: c.name, key: []string{strconv.Itoa(i)}, value: Verdict{Goto, names[target]}.String()})
	}
}

// dnatWindow writes a service chain that picks one of eps through window id of dnat-endpoints,
// and the window's elements.
func (b *Builder) dnatWindow(o *objects, c *chain, proto Protocol, id uint32, eps []Endpoint) {
	c.add("", l4proto(proto), Stmt{Kind: StmtDNATMap, IP6: b.v6, Name: dnatMap(proto, id),
		Key: []Expr{{Field: FieldNumgen, Mod: WindowSize, Offset: uint32(uint64(id) * WindowSize)}}})
	o.windows = append(o.windows, c.name)
	if mp := dnatMap(proto, id); !slices.Contains(o.dnatMaps, mp) {
		o.dnatMaps = append(o.dnatMaps, mp)
	}
	for i, ep := range eps {
		o.elems = append(o.elems, elem{container: dnatMap(proto, id), key: []string{windowRange(id, i, len(eps))},
			value: ep.Addr.String() + " . " + strconv.Itoa(int(ep.Port))})
	}
}

// lbMapTypeOf is the key type of the per-Service verdict maps: a 32-bit integer, as numgen and
// jhash produce (nft wants it written as an expression; any numgen or jhash would do).
const lbMapTypeOf = "numgen random mod 2 : verdict"

// endpointNames maps an endpoint to the name of its chain or affinity set.
type endpointNames = map[netip.AddrPort]string

// emitter writes objects into a transaction and counts the operations.
type emitter struct {
	tx  Writer
	ops int
}

func (e *emitter) addChain(name string, flush bool) {
	e.tx.Add(&knftables.Chain{Name: name})
	e.ops++
	if flush {
		e.flushChain(name)
	}
}

func (e *emitter) flushChain(name string) {
	e.tx.Flush(&knftables.Chain{Name: name})
	e.ops++
}

// addRule hands r to the writer as statements if it takes them (RuleWriter), else as text.
func (e *emitter) addRule(r *Rule) {
	if rw, ok := e.tx.(RuleWriter); ok {
		rw.AddRule(r)
	} else {
		e.tx.Add(r.Object())
	}
	e.ops++
}

func (e *emitter) addRules(c *chain) {
	for i := range c.rules {
		e.addRule(&c.rules[i])
	}
}

func (e *emitter) deleteSet(name string) {
	e.tx.Delete(&knftables.Set{Name: name})
	e.ops++
}

func (e *emitter) addMap(name string) {
	e.tx.Add(&knftables.Map{Name: name, TypeOf: lbMapTypeOf})
	e.tx.Flush(&knftables.Map{Name: name})
	e.ops += 2
}

func (e *emitter) deleteMap(name string) {
	e.tx.Delete(&knftables.Map{Name: name})
	e.ops++
}

func (b *Builder) addSet(e *emitter, s *affinitySet) {
	e.tx.Add(&knftables.Set{
		Name: s.name,
		Type: b.addrType,
		// "dynamic" because the packet path adds elements (nft adds it by itself otherwise, and a
		// later add without it would conflict).
		Flags:   []knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag},
		Timeout: knftables.PtrTo(s.timeout),
	})
	e.ops++
}

// object returns el as a knftables element of its set or map, without its comment. A map
// element's value is also needed to delete it when knftables emulates destroy.
func (el *elem) object() *knftables.Element {
	k := &knftables.Element{Key: el.key}
	if el.set {
		k.Set = el.container
	} else {
		k.Map = el.container
		k.Value = []string{el.value}
	}
	return k
}

func (e *emitter) addElem(el *elem) {
	k := el.object()
	if el.comment != "" {
		k.Comment = knftables.PtrTo(el.comment)
	}
	e.tx.Add(k)
	e.ops++
}

func (e *emitter) deleteElem(el *elem) {
	e.tx.Delete(el.object())
	e.ops++
}
