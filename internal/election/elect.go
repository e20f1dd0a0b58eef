package election

import (
	"cmp"
	"net/netip"
	"slices"
	"time"
)

// Local endpoint tiers of a node: every active externalTrafficPolicy Local Service has a ready
// endpoint on it (tierReady), or at least a serving one (tierServing), or some has none (tierNone).
const (
	tierReady = iota
	tierServing
	tierNone
)

// candidate is an eligible node during an election. It is kept small: an election over 100 nodes
// fits its candidates in a stack buffer.
type candidate struct {
	score   hash
	idx     int32 // index in the nodes slice
	tier    uint8
	settled bool
}

// Elect chooses the node that announces the addresses of in, among nodes, at time now (used only with
// in.HoldDown). It is a pure function of its arguments: the order of nodes, services, endpoints and
// advertisements does not change the result, and every speaker given the same view elects the same
// node.
//
// A node is eligible when, in this order (the first failing rule is its reason): its name is unique,
// its speaker is alive and ready, it is not excluded, its network is available, an advertisement
// selects it, it has an interface that advertisement allows, and for every externalTrafficPolicy Local
// Service that has endpoints it holds a ready or serving endpoint. Eligible nodes whose local
// endpoints are all ready are preferred over nodes with only serving (terminating) ones.
//
// Among the preferred eligible nodes, the announcer is:
//   - in.Current, if in.Sticky and in.Current is among them;
//   - otherwise the first in Rank order among the settled ones (ready for at least in.HoldDown) and
//     in.Current, so a node in hold-down never displaces an eligible announcer and is not chosen in a
//     failover while a settled node remains;
//   - otherwise (no settled node and no current one) the first in Rank order.
//
// With the zero failback policy this is MetalLB's election, except that MetalLB picks nodes lacking
// the advertisement's interfaces and then fails to announce, where Elect skips them.
func Elect(in Input, nodes []Node, now time.Time) Decision {
	d := Decision{PerNode: make(map[string]Reason, len(nodes))}
	d.Key, d.Addrs = addresses(in.Services)

	var block Reason
	switch {
	case !d.Key.IsValid():
		block = NoAddress
	case len(in.Advertisements) == 0:
		block = NoAdvertisement
	case !anyActive(in.Services):
		block = NoEndpoints
	}
	var local localTiers
	if block == "" {
		local = newLocalTiers(in.Services)
	}

	var buf [128]candidate
	cands := buf[:0]
	dups := false
	for i := range nodes {
		n := &nodes[i]
		if n.Name == "" {
			continue
		}
		if _, seen := d.PerNode[n.Name]; seen {
			d.PerNode[n.Name] = DuplicateNode
			dups = true
			continue
		}
		r := nodeReason(n, in.Advertisements)
		if r == "" && block != "" {
			r = block
		}
		tier := tierReady
		if r == "" && local.n > 0 {
			if tier = local.tier(n.Name); tier == tierNone {
				r = NoLocalEndpoint
			}
		}
		if r != "" {
			d.PerNode[n.Name] = r
			continue
		}
		d.PerNode[n.Name] = Outranked // placeholder: marks the name as seen
		cands = append(cands, candidate{idx: int32(i), tier: uint8(tier)})
	}
	if dups {
		cands = slices.DeleteFunc(cands, func(c candidate) bool { return d.PerNode[nodes[c.idx].Name] == DuplicateNode })
	}

	switch {
	case block != "":
		d.Reason = block
		return d
	case len(cands) == 0:
		d.Reason = NoEligibleNode
		for _, r := range d.PerNode {
			if r == NoLocalEndpoint {
				d.Reason = NoLocalEndpoint
				break
			}
		}
		return d
	}

	// Keep the best tier only, and hash those nodes.
	best := uint8(tierNone)
	for i := range cands {
		best = min(best, cands[i].tier)
	}
	key := keyString(d.Key)
	elig, cur := cands[:0], -1
	for _, c := range cands {
		n := &nodes[c.idx]
		if c.tier != best {
			d.PerNode[n.Name] = ServingOnly
			continue
		}
		c.score = score(n.Name, key)
		c.settled = in.HoldDown <= 0 || !now.Before(n.ReadySince.Add(in.HoldDown))
		if in.Current != "" && n.Name == in.Current {
			cur = len(elig)
		}
		elig = append(elig, c)
	}
	// before reports whether a ranks ahead of b.
	before := func(a, b *candidate) bool {
		if c := a.score.compare(b.score); c != 0 {
			return c < 0
		}
		return nodes[a.idx].Name < nodes[b.idx].Name
	}

	sticky := in.Sticky && cur >= 0
	w := cur
	if !sticky {
		w = -1
		for i := range elig {
			if (elig[i].settled || i == cur) && (w < 0 || before(&elig[i], &elig[w])) {
				w = i
			}
		}
		if w < 0 { // nobody settled and no current announcer: the first in rank
			w = 0
			for i := range elig {
				if before(&elig[i], &elig[w]) {
					w = i
				}
			}
		}
	}
	win := &elig[w]
	for i := range elig {
		name := nodes[elig[i].idx].Name
		switch {
		case i == w, before(win, &elig[i]):
			// The winner, or Outranked, which its placeholder already says.
		case sticky:
			d.PerNode[name] = StickyCurrent
		default:
			d.PerNode[name] = HoldDown
		}
	}
	winner := &nodes[win.idx]
	delete(d.PerNode, winner.Name)
	d.Node = winner.Name
	d.Reason = Announced
	d.Interfaces, _ = AnnounceInterfaces(in.Advertisements, *winner)

	if in.Spread {
		anySettled := slices.ContainsFunc(elig, func(c candidate) bool { return c.settled })
		for i := range elig {
			if !anySettled || elig[i].settled || i == w {
				d.Spread = append(d.Spread, nodes[elig[i].idx].Name)
			}
		}
		slices.Sort(d.Spread)
	}
	return d
}

// nodeReason checks the rules that depend on the node and the advertisements only.
func nodeReason(n *Node, ads []Advertisement) Reason {
	switch {
	case !n.Alive:
		return SpeakerDown
	case n.ReadySince.IsZero():
		return NotReady
	case n.Excluded:
		return Excluded
	case n.NetworkUnavailable:
		return NetworkUnavailable
	}
	selected, ifaceOK := false, false
	for i := range ads {
		a := &ads[i]
		if !a.Selects(n.Labels) {
			continue
		}
		selected = true
		if len(a.Interfaces) == 0 || hasAny(n.Interfaces, a.Interfaces) {
			ifaceOK = true
			break
		}
	}
	switch {
	case !selected:
		return NotSelected
	case !ifaceOK:
		return NoInterface
	}
	return ""
}

func hasAny(have, want []string) bool {
	for _, w := range want {
		if slices.Contains(have, w) {
			return true
		}
	}
	return false
}

// AnnounceInterfaces returns the interfaces n announces on for addresses selected by ads: the
// interfaces named by the advertisements that select n and that n has, sorted and without duplicates.
// A nil result with ok true means all of n's interfaces (an advertisement selecting n names none, as
// MetalLB's AllInterfaces). ok is false when no advertisement selects n or n has none of the named
// interfaces.
func AnnounceInterfaces(ads []Advertisement, n Node) (ifaces []string, ok bool) {
	selected := false
	for _, a := range ads {
		if !a.Selects(n.Labels) {
			continue
		}
		selected = true
		if len(a.Interfaces) == 0 {
			return nil, true
		}
		for _, i := range a.Interfaces {
			if slices.Contains(n.Interfaces, i) {
				ifaces = append(ifaces, i)
			}
		}
	}
	if !selected || len(ifaces) == 0 {
		return nil, false
	}
	slices.Sort(ifaces)
	return slices.Compact(ifaces), true
}

// addresses returns the election key (the smallest of the Services' first addresses; with one Service,
// or Services sharing the same addresses in the same order, that is MetalLB's lbIPs[0]) and all
// addresses, normalised, sorted and without duplicates.
func addresses(svcs []Service) (key netip.Addr, all []netip.Addr) {
	for _, s := range svcs {
		first := true
		for _, a := range s.Addrs {
			if !a.IsValid() {
				continue
			}
			a = normAddr(a)
			if first && (!key.IsValid() || a.Less(key)) {
				key = a
			}
			first = false
			all = append(all, a)
		}
	}
	slices.SortFunc(all, netip.Addr.Compare)
	return key, slices.Compact(all)
}

func active(s *Service) bool {
	return slices.ContainsFunc(s.Endpoints, Endpoint.canServe)
}

func anyActive(svcs []Service) bool {
	for i := range svcs {
		if active(&svcs[i]) {
			return true
		}
	}
	return false
}

// localTiers counts, per node, the active externalTrafficPolicy Local Services with a ready endpoint
// there and those with a ready or serving one. Services without any endpoint that can serve are left
// out: they need no node, and must not keep the other Services on the address from being announced.
type localTiers struct {
	n       int // active Local Services
	ready   map[string]int
	serving map[string]int
}

func newLocalTiers(svcs []Service) localTiers {
	var lt localTiers
	var seen map[string]uint8
	for i := range svcs {
		s := &svcs[i]
		if !s.Local || !active(s) {
			continue
		}
		if lt.n == 0 {
			lt.ready, lt.serving, seen = map[string]int{}, map[string]int{}, map[string]uint8{}
		}
		lt.n++
		clear(seen)
		for _, e := range s.Endpoints {
			if e.Node == "" || !e.canServe() {
				continue
			}
			const r, sv = 1, 2
			st := seen[e.Node]
			if st&sv == 0 {
				lt.serving[e.Node]++
				st |= sv
			}
			if e.Ready && st&r == 0 {
				lt.ready[e.Node]++
				st |= r
			}
			seen[e.Node] = st
		}
	}
	return lt
}

func (lt localTiers) tier(node string) int {
	switch {
	case lt.ready[node] == lt.n:
		return tierReady
	case lt.serving[node] == lt.n:
		return tierServing
	}
	return tierNone
}

// Group partitions services into the sets whose addresses must be announced by one node: Services
// sharing an address, directly or through other Services, and so all addresses of a dual-stack
// Service, go together. Each group is the Services of one Input. Services without a valid address are
// left out. Services are sorted by Key within a group (stably), and groups by their election key.
func Group(services []Service) [][]Service {
	parent := make([]int, len(services))
	for i := range parent {
		parent[i] = i
	}
	find := func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	owner := map[netip.Addr]int{}
	valid := make([]bool, len(services))
	for i, s := range services {
		for _, a := range s.Addrs {
			if !a.IsValid() {
				continue
			}
			valid[i] = true
			a = normAddr(a)
			if j, ok := owner[a]; ok {
				ri, rj := find(i), find(j)
				parent[max(ri, rj)] = min(ri, rj)
			} else {
				owner[a] = i
			}
		}
	}
	idx := map[int]int{}
	var groups [][]Service
	for i, s := range services {
		if !valid[i] {
			continue
		}
		r := find(i)
		g, ok := idx[r]
		if !ok {
			g = len(groups)
			idx[r] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], s)
	}
	type keyed struct {
		key netip.Addr
		svc []Service
	}
	ks := make([]keyed, len(groups))
	for i, g := range groups {
		slices.SortStableFunc(g, func(a, b Service) int { return cmp.Compare(a.Key, b.Key) })
		k, _ := addresses(g)
		ks[i] = keyed{k, g}
	}
	slices.SortFunc(ks, func(a, b keyed) int { return a.key.Compare(b.key) })
	for i := range ks {
		groups[i] = ks[i].svc
	}
	return groups
}
