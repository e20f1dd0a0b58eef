package nftrules

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"sigs.k8s.io/knftables"
)

// DefaultMasqueradeMark is the packet mark bit that asks nat-postrouting to masquerade (kube-proxy's
// default, bit 14).
const DefaultMasqueradeMark = 0x4000

// Config is fixed for a Builder's lifetime.
type Config struct {
	// Family is knftables.IPv4Family or knftables.IPv6Family, and must be the family of the
	// Interface whose transactions the Builder fills.
	Family knftables.Family
	// MasqueradeMark is the mark bit that requests masquerading; 0 means DefaultMasqueradeMark.
	// It must be a single bit.
	MasqueradeMark uint32
	// MasqueradeAll masquerades all ClusterIP traffic, not just traffic from outside
	// Node.ClusterCIDRs (kube-proxy's --masquerade-all).
	MasqueradeAll bool
	// MaglevTableSize is the number of buckets in Maglev tables, a prime; 0 means
	// DefaultMaglevTableSize. A Service port with more than a quarter as many endpoints gets the
	// next larger table (which remaps its clients once).
	MaglevTableSize int
	// SkipMark, if not 0, are packet-mark bits that leave a packet to another table: nat-prerouting
	// returns for packets with any of them set before it looks for Services (DSRMarkMask: the
	// DSR table routes or DNATs them itself).
	SkipMark uint32
}

// Builder writes the rules of one family into knftables transactions. It holds no state
// between calls and is safe for concurrent use.
type Builder struct {
	cfg        Config
	v6         bool
	ipX        string // "ip" or "ip6"
	addrType   string // "ipv4_addr" or "ipv6_addr"
	noLoopback Stmt   // excludes loopback destinations from node ports
	// The family's keys, shared by the rules that use them (never modified).
	saddr, daddr, pair, tuple []Expr
}

// ErrConfig is wrapped by New's errors.
var ErrConfig = errors.New("invalid nftrules config")

// New checks cfg, fills in defaults and returns a Builder. Errors wrap ErrConfig.
func New(cfg Config) (*Builder, error) {
	b := &Builder{cfg: cfg}
	switch cfg.Family {
	case knftables.IPv4Family:
		b.ipX, b.addrType = "ip", "ipv4_addr"
	case knftables.IPv6Family:
		b.v6, b.ipX, b.addrType = true, "ip6", "ipv6_addr"
	default:
		return nil, fmt.Errorf("%w: family %q is neither ip nor ip6", ErrConfig, cfg.Family)
	}
	saddr, daddr := Expr{Field: FieldSaddr, IP6: b.v6}, Expr{Field: FieldDaddr, IP6: b.v6}
	b.saddr, b.daddr, b.pair = []Expr{saddr}, []Expr{daddr}, []Expr{saddr, daddr}
	b.tuple = []Expr{daddr, keyL4Proto[0], keyThDport[0]}
	b.noLoopback = notMatch(b.daddr, PrefixValue(netip.MustParsePrefix("127.0.0.0/8")))
	if b.v6 {
		b.noLoopback = notMatch(b.daddr, AddrValue(netip.IPv6Loopback()))
	}
	if b.cfg.MasqueradeMark == 0 {
		b.cfg.MasqueradeMark = DefaultMasqueradeMark
	}
	if m := b.cfg.MasqueradeMark; m&(m-1) != 0 {
		return nil, fmt.Errorf("%w: masquerade mark %#x is not a single bit", ErrConfig, m)
	}
	if b.cfg.MaglevTableSize == 0 {
		b.cfg.MaglevTableSize = DefaultMaglevTableSize
	}
	if s := b.cfg.MaglevTableSize; !isPrime(s) || s > 65521 {
		return nil, fmt.Errorf("%w: maglev table size %d is not a prime up to 65521", ErrConfig, s)
	}
	return b, nil
}

// Config returns the Builder's configuration with defaults filled in.
func (b *Builder) Config() Config { return b.cfg }

// Existing names the chains, sets and maps a table holds before a full sync, as listed from the
// kernel (knftables Interface.List "chains", "sets" and "maps"). Per-Service chains, maps and
// affinity sets in it that the new model does not use are cleaned up. The zero value means none
// (a new table).
type Existing struct {
	Chains, Sets, Maps []string
}

// Plan summarises what a Full or Incremental call wrote into the transaction.
type Plan struct {
	// Full is true if the whole ruleset was rewritten.
	Full bool
	// Changed are the Services whose rules were (re)written, sorted; all of them on a full sync.
	Changed []ServiceKey
	// StaleChains were flushed and are no longer referenced. Delete them (DeleteChains) in a
	// later transaction, at least a second later on kernels before 6.2, unless a later Plan lists
	// them in AddedChains again.
	StaleChains []string
	// AddedChains are per-Service chains this transaction creates or reuses.
	AddedChains []string
	// Skipped are Services left out because they are invalid (the error says why); the Service's
	// previous rules are removed.
	Skipped map[ServiceKey]error
	// Conflicts are map keys (address . protocol . port) claimed by more than one Service; the
	// first Service in key order keeps them. Only full syncs detect them.
	Conflicts []string
	// Ops counts the operations written.
	Ops int
}

// Writer receives the operations a Builder writes, in order. *knftables.Transaction is the
// usual one; nftapply also records them to apply incremental syncs over netlink.
type Writer interface {
	Add(knftables.Object)
	Flush(knftables.Object)
	Delete(knftables.Object)
}

var _ Writer = (*knftables.Transaction)(nil)

// RuleWriter is a Writer that also takes rules as statements. A Builder hands its rules to
// AddRule when its Writer has it, and to Add as text (Rule.Object) otherwise; nftapply's netlink
// writer encodes the statements without reading any text. The Builder does not modify r
// afterwards; neither may the writer.
type RuleWriter interface {
	Writer
	AddRule(r *Rule)
}

// DeleteChains adds the deletion of chains (from Plan.StaleChains) to tx.
func DeleteChains(tx Writer, chains []string) {
	for _, c := range chains {
		tx.Delete(&knftables.Chain{Name: c})
	}
}

// Full writes into tx a complete ruleset for m: the table, the fixed chains, sets and maps
// (flushed and refilled), every Service's chains and elements, and the cleanup of per-Service
// chains and affinity sets in existing that m no longer uses. Affinity sets still in use keep
// their contents. Errors, if any, surface when tx is run.
//
// st, if not nil, is the State of the table's last sync (or a new one); Full keeps the windows
// of dnat-endpoints that are still in use and leaves in st the State of this sync. With a nil
// (or new) State the windows are numbered in key order, so that Full is a function of m alone.
func (b *Builder) Full(tx Writer, m *Model, existing Existing, st *State) Plan {
	return b.FullSplit(tx, tx, m, existing, st)
}

// StateOf returns the State a Full sync of m with a new State leaves.
func (b *Builder) StateOf(m *Model) *State {
	st := &State{}
	b.FullSplit(nopWriter{}, nopWriter{}, m, Existing{}, st)
	return st
}

type nopWriter struct{}

func (nopWriter) Add(knftables.Object)    {}
func (nopWriter) Flush(knftables.Object)  {}
func (nopWriter) Delete(knftables.Object) {}

// FullSplit is Full writing into two writers: into base the table and everything that does not
// depend on Services (fixed chains, sets and maps, flushed and refilled, and their rules) and the
// declarations of per-Service maps and affinity sets (they refer to nothing), into services the
// rest (per-Service chains, sets, maps, rules and elements, and the cleanup of
// existing ones). Full is FullSplit(tx, tx, ...). Applied one after the other, base first, they
// make the same ruleset as Full, but not atomically: between the two, the fixed maps are empty.
// nftapply uses it to write a new table's Services over netlink.
func (b *Builder) FullSplit(base, services Writer, m *Model, existing Existing, st *State) Plan {
	e := emitter{tx: base}
	b.writeBase(&e, &m.Node)
	e.tx = services

	keys := sortedKeys(m.Services)
	objs := make([]*objects, 0, len(keys))
	plan := Plan{Full: true}
	rb := newRebuild(st)
	for _, k := range keys {
		o, err := b.serviceObjects(m.Services[k], &m.Node, rb.window)
		if err != nil {
			if plan.Skipped == nil {
				plan.Skipped = map[ServiceKey]error{}
			}
			plan.Skipped[k] = err
			continue
		}
		if o.empty() {
			continue
		}
		plan.Changed = append(plan.Changed, k)
		objs = append(objs, o)
	}

	nChains, nElems := 0, 0
	for _, o := range objs {
		nChains += len(o.chains)
		nElems += len(o.elems)
	}
	activeChains := make(map[string]bool, nChains)
	activeSets := map[string]bool{}
	activeMaps := make(map[string]bool, len(objs))
	activeDNAT := map[string]int{}
	plan.AddedChains = make([]string, 0, nChains)
	for _, o := range objs {
		for i := range o.chains {
			activeChains[o.chains[i].name] = true
			plan.AddedChains = append(plan.AddedChains, o.chains[i].name)
		}
		for i := range o.sets {
			activeSets[o.sets[i].name] = true
		}
		for _, mp := range o.maps {
			activeMaps[mp] = true
		}
		for _, mp := range o.dnatMaps {
			activeDNAT[mp]++
		}
	}
	for _, c := range existing.Chains {
		if IsServiceChain(c) && !activeChains[c] {
			e.flushChain(c)
			plan.StaleChains = append(plan.StaleChains, c)
		}
	}
	for _, o := range objs {
		for i := range o.chains {
			e.addChain(o.chains[i].name, true)
		}
	}
	// Stale sets and maps go at once: the chains that referred to them were flushed above.
	for _, s := range existing.Sets {
		if IsAffinitySet(s) && !activeSets[s] {
			e.deleteSet(s)
		}
	}
	deleted := map[string]bool{}
	for _, mp := range existing.Maps {
		if (IsServiceMap(mp) && !activeMaps[mp] || IsDNATMap(mp) && activeDNAT[mp] == 0) && !deleted[mp] {
			e.deleteMap(mp)
			deleted[mp] = true
		}
	}
	e.tx = base // declarations that refer to nothing; the maps' typeof is left to nft by nftapply
	for _, o := range objs {
		for i := range o.sets {
			b.addSet(&e, &o.sets[i])
		}
		for _, mp := range o.maps {
			e.addMap(mp)
		}
	}
	dnatMaps := make([]string, 0, len(activeDNAT))
	for mp := range activeDNAT {
		dnatMaps = append(dnatMaps, mp)
	}
	slices.Sort(dnatMaps)
	for _, mp := range dnatMaps {
		b.addDNATMap(&e, mp)
	}
	e.tx = services
	for _, o := range objs {
		for i := range o.chains {
			e.addRules(&o.chains[i])
		}
	}
	seen := make(map[string]string, nElems) // container and key -> owning service
	for i, o := range objs {
		owner := plan.Changed[i].String()
		for j := range o.elems {
			el := &o.elems[j]
			id := el.id()
			if prev, dup := seen[id]; dup {
				if prev != owner {
					plan.Conflicts = append(plan.Conflicts, fmt.Sprintf("%s: %s (%s, %s)", el.container, strings.Join(el.key, " . "), prev, owner))
				}
				continue
			}
			seen[id] = owner
			e.addElem(el)
		}
	}
	used := map[string]bool{}
	for _, o := range objs {
		for _, w := range o.windows {
			used[w] = true
		}
	}
	next := rb.finish(used)
	next.dnatMaps = activeDNAT
	for _, o := range objs {
		for _, a := range o.hairpin {
			next.hairpin[a]++
		}
	}
	hairpin := make([]netip.Addr, 0, len(next.hairpin))
	for a := range next.hairpin {
		hairpin = append(hairpin, a)
	}
	slices.SortFunc(hairpin, netip.Addr.Compare)
	for _, a := range hairpin {
		e.addElem(hairpinElem(a))
	}
	next.set(st)
	plan.Ops = e.ops
	return plan
}

// addDNATMap declares (and flushes) DNAT map mp.
func (b *Builder) addDNATMap(e *emitter, mp string) {
	p := dnatMapProtocol(mp)
	e.tx.Add(&knftables.Map{
		Name:    mp,
		TypeOf:  fmt.Sprintf("numgen random mod %d : %s daddr . %s dport", WindowSize, b.ipX, p),
		Flags:   []knftables.SetFlag{knftables.IntervalFlag},
		Comment: knftables.PtrTo(fmt.Sprintf("endpoints of random %s Services without affinity, windows %d-%d", strings.ToUpper(string(p)), dnatShard(mp)*WindowsPerMap, (dnatShard(mp)+1)*WindowsPerMap-1)),
	})
	e.tx.Flush(&knftables.Map{Name: mp})
	e.ops += 2
}

// hairpinElem is the hairpin-endpoints element of endpoint address a.
func hairpinElem(a netip.Addr) *elem {
	s := a.String()
	return &elem{container: setHairpin, set: true, key: []string{s, s}}
}

// writeBase writes the table and everything that does not depend on Services: fixed chains
// (added and flushed) with their rules, fixed sets and maps (added and flushed), and the node-port
// addresses.
func (b *Builder) writeBase(e *emitter, n *Node) {
	e.tx.Add(&knftables.Table{Comment: knftables.PtrTo("rules for ironlb proxy")})
	e.ops++
	for _, bc := range baseChains {
		c := &knftables.Chain{
			Name:     bc.name,
			Type:     knftables.PtrTo(bc.typ),
			Hook:     knftables.PtrTo(bc.hook),
			Priority: knftables.PtrTo(bc.prio),
		}
		e.tx.Add(c)
		e.tx.Flush(&knftables.Chain{Name: bc.name})
		e.ops += 2
	}
	for _, c := range []string{
		chainServices, chainMasquerading, chainMarkForMasquerade, chainFirewallCheck,
		chainServiceEndpointsCheck, chainNodePortEndpointsCheck, chainClusterIPsCheck, chainReject,
	} {
		e.addChain(c, true)
	}

	sets := []struct {
		name, comment string
		flags         []knftables.SetFlag
	}{
		{setClusterIPs, "active ClusterIPs", nil},
		{setNodePortIPs, "addresses that accept node-port traffic", nil},
		{setClusterCIDRs, "pod networks", []knftables.SetFlag{knftables.IntervalFlag}},
	}
	for _, s := range sets {
		e.tx.Add(&knftables.Set{Name: s.name, Type: b.addrType, Flags: s.flags, Comment: knftables.PtrTo(s.comment)})
		e.tx.Flush(&knftables.Set{Name: s.name})
		e.ops += 2
	}
	daddrMap := b.addrType + " . inet_proto . inet_service : verdict"
	portMap := "inet_proto . inet_service : verdict"
	maps := []struct{ name, typ, comment string }{
		{mapServiceIPs, daddrMap, "ClusterIP, external IP and load-balancer IP traffic"},
		{mapServiceNodePorts, portMap, "node-port traffic"},
		{mapNoEndpointServices, daddrMap, "drop or reject traffic to Services without endpoints"},
		{mapNoEndpointNodePorts, portMap, "drop or reject node-port traffic of Services without endpoints"},
		{mapFirewallIPs, daddrMap, "destinations subject to loadBalancerSourceRanges"},
	}
	for _, mp := range maps {
		e.tx.Add(&knftables.Map{Name: mp.name, Type: mp.typ, Comment: knftables.PtrTo(mp.comment)})
		e.tx.Flush(&knftables.Map{Name: mp.name})
		e.ops += 2
	}
	e.tx.Add(&knftables.Set{Name: setHairpin, Type: b.addrType + " . " + b.addrType,
		Comment: knftables.PtrTo("endpoints of dnat-endpoints maps, to masquerade when they reach themselves")})
	e.tx.Flush(&knftables.Set{Name: setHairpin})
	e.ops += 2

	if b.cfg.SkipMark != 0 {
		e.addRule(&Rule{Chain: chainNATPrerouting, Stmts: []Stmt{
			{Kind: StmtMatch, Key: []Expr{{Field: FieldMark, Meta: true, Mask: b.cfg.SkipMark}}, Op: OpNeq, Value: NumValue(0)}, verdict(Return)},
			Comment: "direct server return: the DSR table routes or DNATs these"})
	}
	for _, j := range jumps {
		var stmts []Stmt
		if j.ctNew {
			stmts = append(stmts, match(keyCtState, SymValue("new")))
		}
		e.addRule(&Rule{Chain: j.from, Stmts: append(stmts, jump(j.to))})
	}
	mark := b.cfg.MasqueradeMark
	e.addRule(&Rule{Chain: chainMarkForMasquerade, Stmts: []Stmt{markSet(mark, false)}})
	e.addRule(&Rule{Chain: chainMasquerading, Stmts: []Stmt{match(keyCtStatus, SymValue("dnat")),
		lookup(b.pair, setHairpin), markSet(mark, false)}, Comment: "hairpin through dnat-endpoints maps"})
	e.addRule(&Rule{Chain: chainMasquerading, Stmts: []Stmt{
		{Kind: StmtMatch, Key: []Expr{{Field: FieldMark, Mask: mark}}, Op: OpEq, Value: NumValue(0)}, verdict(Return)}})
	e.addRule(&Rule{Chain: chainMasquerading, Stmts: []Stmt{markSet(mark, true)}})
	e.addRule(&Rule{Chain: chainMasquerading, Stmts: []Stmt{{Kind: StmtMasquerade, Masq: MasqFullyRandom}}})
	e.addRule(&Rule{Chain: chainReject, Stmts: []Stmt{{Kind: StmtReject}}})

	nodePortMatch := []Stmt{lookup(b.daddr, setNodePortIPs)}
	if len(n.NodePortAddresses) == 0 {
		nodePortMatch = []Stmt{match(keyFibDaddrType, SymValue("local")), b.noLoopback}
	}
	nodePorts := func(m string) []Stmt { return append(slices.Clip(nodePortMatch), vmap(keyPortTuple, m)) }
	e.addRule(&Rule{Chain: chainServices, Stmts: []Stmt{vmap(b.tuple, mapServiceIPs)}})
	e.addRule(&Rule{Chain: chainServices, Stmts: nodePorts(mapServiceNodePorts)})
	e.addRule(&Rule{Chain: chainServiceEndpointsCheck, Stmts: []Stmt{vmap(b.tuple, mapNoEndpointServices)}})
	e.addRule(&Rule{Chain: chainNodePortEndpointsCheck, Stmts: nodePorts(mapNoEndpointNodePorts)})
	e.addRule(&Rule{Chain: chainFirewallCheck, Stmts: []Stmt{vmap(b.tuple, mapFirewallIPs)}})
	e.addRule(&Rule{Chain: chainClusterIPsCheck, Stmts: []Stmt{lookup(b.daddr, setClusterIPs), {Kind: StmtReject}},
		Comment: "reject traffic to invalid ports of ClusterIPs"})
	if cidrs := b.prefixes(n.ServiceCIDRs); len(cidrs) > 0 {
		m := match(b.daddr, PrefixValue(cidrs[0]))
		if len(cidrs) > 1 {
			m.Set = make([]Value, len(cidrs))
			for i, c := range cidrs {
				m.Set[i] = PrefixValue(c)
			}
		}
		e.addRule(&Rule{Chain: chainClusterIPsCheck, Stmts: []Stmt{m, verdict(Drop)}, Comment: "drop traffic to unallocated ClusterIPs"})
	}

	for _, p := range outermost(b.prefixes(n.ClusterCIDRs)) {
		e.addElem(&elem{container: setClusterCIDRs, set: true, key: []string{p.String()}})
	}
	for _, a := range b.addrs(n.NodePortAddresses) {
		if a.IsLoopback() {
			continue // localhost node ports are not supported (kube-proxy nftables mode)
		}
		e.addElem(&elem{container: setNodePortIPs, set: true, key: []string{a.String()}})
	}
}

type baseChain struct {
	name string
	typ  knftables.BaseChainType
	hook knftables.BaseChainHook
	prio knftables.BaseChainPriority
}

// baseChains run source-range filtering before DNAT (-110), DNAT at dstnat (-100), the
// no-endpoint and ClusterIP checks after it (0: reject is not allowed in prerouting on kernels
// before 5.9), and masquerading at srcnat (100).
var baseChains = []baseChain{
	{chainFilterPreroutingPreDNAT, knftables.FilterType, knftables.PreroutingHook, "-110"},
	{chainFilterOutputPreDNAT, knftables.FilterType, knftables.OutputHook, "-110"},
	{chainFilterInput, knftables.FilterType, knftables.InputHook, "0"},
	{chainFilterForward, knftables.FilterType, knftables.ForwardHook, "0"},
	{chainFilterOutput, knftables.FilterType, knftables.OutputHook, "0"},
	{chainNATPrerouting, knftables.NATType, knftables.PreroutingHook, "-100"},
	{chainNATOutput, knftables.NATType, knftables.OutputHook, "-100"},
	{chainNATPostrouting, knftables.NATType, knftables.PostroutingHook, "100"},
}

var jumps = []struct {
	from  string
	ctNew bool // ct state new
	to    string
}{
	{chainFilterPreroutingPreDNAT, true, chainFirewallCheck},
	{chainFilterOutputPreDNAT, true, chainFirewallCheck},
	{chainFilterInput, true, chainNodePortEndpointsCheck},
	{chainFilterInput, true, chainServiceEndpointsCheck},
	{chainFilterForward, true, chainServiceEndpointsCheck},
	{chainFilterForward, true, chainClusterIPsCheck},
	{chainFilterOutput, true, chainServiceEndpointsCheck},
	{chainFilterOutput, true, chainClusterIPsCheck},
	{chainNATPrerouting, false, chainServices},
	{chainNATOutput, false, chainServices},
	{chainNATPostrouting, false, chainMasquerading},
}

// addrs returns the valid, unzoned addresses of the Builder's family, unmapped, in order.
func (b *Builder) addrs(in []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, a := range in {
		a = a.Unmap()
		if a.IsValid() && a.Zone() == "" && a.Is6() == b.v6 && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// prefixes returns the valid prefixes of the Builder's family, masked, in order.
func (b *Builder) prefixes(in []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range in {
		if !p.IsValid() || p.Addr().Zone() != "" || p.Addr().Is4In6() || p.Addr().Is6() != b.v6 {
			continue
		}
		p = p.Masked()
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// outermost drops prefixes contained in others: an interval set refuses overlapping elements.
func outermost(ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for i, p := range ps {
		inside := false
		for j, q := range ps {
			if i != j && q.Bits() <= p.Bits() && q.Contains(p.Addr()) && (q.Bits() < p.Bits() || j < i) {
				inside = true
				break
			}
		}
		if !inside {
			out = append(out, p)
		}
	}
	return out
}

func sortedKeys(m map[ServiceKey]*Service) []ServiceKey {
	keys := make([]ServiceKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)
	return keys
}

func compareKeys(a, b ServiceKey) int {
	if c := cmp.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}
