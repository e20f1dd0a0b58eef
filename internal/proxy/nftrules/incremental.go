package nftrules

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
)

// Incremental writes into tx the changes from old, the model of the last transaction that ran
// successfully, to m: for each Service that differs (or whose endpoints are on a node whose
// DeadNodes entry changed) it deletes the map elements that went or changed, rewrites the chains
// whose rules changed, flushes the chains that went (Plan.StaleChains), swaps affinity sets and
// adds the new elements. Unchanged Services cost a map lookup each: a *Service pointer equal to
// old's is not looked into.
//
// st is the State the sync of old left; Incremental updates it. A nil st stands for the State a
// Full sync of old with a new State leaves (StateOf), which costs a pass over every Service.
//
// If old is nil, or the Node differs in anything but DeadNodes, it writes Full(tx, m, ...)
// instead, cleaning up what old produced. If running tx fails, the kernel state is unknown: do a
// Full sync with the table's listed contents next. Errors surface when tx is run.
func (b *Builder) Incremental(tx Writer, old, m *Model, st *State) Plan {
	if old == nil {
		return b.Full(tx, m, Existing{}, st)
	}
	if st == nil {
		st = b.StateOf(old)
	}
	if !sameSettings(&old.Node, &m.Node) {
		return b.Full(tx, m, b.existing(old, st), st)
	}
	st.init()
	moved := deadChanged(old.Node.DeadNodes, m.Node.DeadNodes)

	var keys []ServiceKey
	for k, s := range m.Services {
		if o := old.Services[k]; changed(o, s, moved) {
			keys = append(keys, k)
		}
	}
	for k, o := range old.Services {
		if _, ok := m.Services[k]; !ok && o != nil {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, compareKeys)

	plan := Plan{}
	diffs := make([]objectsDiff, 0, len(keys))
	added := map[string]bool{} // windows handed out in this sync
	winOld := func(name string) (uint32, bool) {
		if added[name] {
			return 0, false
		}
		return st.lookupWindows(name)
	}
	winNew := st.allocWindows(added)
	for _, k := range keys {
		o, _ := b.serviceObjects(old.Services[k], &old.Node, winOld) // a skipped Service had no objects
		n, err := b.serviceObjects(m.Services[k], &m.Node, winNew)
		if err != nil {
			if plan.Skipped == nil {
				plan.Skipped = map[ServiceKey]error{}
			}
			plan.Skipped[k] = err
		}
		if sameObjects(o, n) {
			continue
		}
		plan.Changed = append(plan.Changed, k)
		diffs = append(diffs, objectsDiff{o, n})
	}

	e := emitter{tx: tx}
	shared := b.settleShared(old, m, keys, &plan, winOld, winNew)
	// Hairpin pairs: counted over all Services, added when the first uses an address and
	// deleted when the last stops.
	var hairpinGone, hairpinNew []netip.Addr
	for _, u := range recount(st.hairpin, diffs, func(o *objects) []netip.Addr { return o.hairpin }, netip.Addr.Compare) {
		if u.added {
			hairpinNew = append(hairpinNew, u.key)
		} else {
			hairpinGone = append(hairpinGone, u.key)
		}
	}
	for _, a := range hairpinGone {
		e.deleteElem(hairpinElem(a))
	}
	// Windows that went are handed out again from the next sync on (an interval is not deleted
	// and added again in one transaction).
	defer func() {
		inUse := map[string]bool{}
		for _, d := range diffs {
			for _, w := range d.new.windows {
				inUse[w] = true
			}
		}
		for _, d := range diffs {
			for _, w := range d.old.windows {
				if !inUse[w] {
					st.release(w)
				}
			}
		}
		for w := range added {
			if !inUse[w] {
				st.release(w)
			}
		}
	}()
	// 1. Elements that went or changed (nft cannot overwrite a map element's value), except those
	// of per-Service maps that go as a whole, and those of the fixed sets and maps, settled by key
	// below.
	for _, d := range diffs {
		newElems := elemIndex(d.new)
		for i := range d.old.elems {
			el := &d.old.elems[i]
			if !IsServiceMap(el.container) || !slices.Contains(d.new.maps, el.container) {
				continue
			}
			if n, ok := newElems[el.id()]; !ok || !sameElem(el, n) {
				e.deleteElem(el)
			}
		}
	}
	for _, s := range shared {
		if s.old != nil && (s.new == nil || s.oldOwner != s.newOwner || !sameElem(s.old, s.new)) {
			e.deleteElem(s.old)
		}
	}
	// 2. New and changed chains are added and flushed; chains that went are flushed.
	rewrite := make([][]*chain, len(diffs))
	for i, d := range diffs {
		oldChains := chainIndex(d.old)
		newChains := chainIndex(d.new)
		for j := range d.new.chains {
			c := &d.new.chains[j]
			prev, ok := oldChains[c.name]
			if ok && sameRules(prev.rules, c.rules) {
				continue
			}
			if !ok {
				plan.AddedChains = append(plan.AddedChains, c.name)
			}
			e.addChain(c.name, true)
			rewrite[i] = append(rewrite[i], c)
		}
		for j := range d.old.chains {
			if c := &d.old.chains[j]; newChains[c.name] == nil {
				e.flushChain(c.name)
				plan.StaleChains = append(plan.StaleChains, c.name)
			}
		}
	}
	// 3. Affinity sets and per-Service maps: a set's name covers its definition, and all maps
	// have the same type, so they are only added or deleted (after the flushes above).
	for _, d := range diffs {
		for _, mp := range d.old.maps {
			if !slices.Contains(d.new.maps, mp) {
				e.deleteMap(mp)
			}
		}
		for _, mp := range d.new.maps {
			if !slices.Contains(d.old.maps, mp) {
				e.addMap(mp)
			}
		}
		for j := range d.old.sets {
			if !hasSet(d.new, d.old.sets[j].name) {
				e.deleteSet(d.old.sets[j].name)
			}
		}
		for j := range d.new.sets {
			if !hasSet(d.old, d.new.sets[j].name) {
				b.addSet(&e, &d.new.sets[j])
			}
		}
	}
	// DNAT maps: added when a Service first uses one, deleted (after the flushes above) when the
	// last stops.
	for _, u := range recount(st.dnatMaps, diffs, func(o *objects) []string { return o.dnatMaps }, strings.Compare) {
		if u.added {
			b.addDNATMap(&e, u.key)
		} else {
			e.deleteMap(u.key)
		}
	}
	// 4. Rules of the rewritten chains.
	for _, cs := range rewrite {
		for _, c := range cs {
			e.addRules(c)
		}
	}
	// 5. Elements that are new or changed.
	for _, d := range diffs {
		oldElems := elemIndex(d.old)
		for i := range d.new.elems {
			el := &d.new.elems[i]
			if !IsServiceMap(el.container) {
				continue
			}
			if o, ok := oldElems[el.id()]; !ok || !sameElem(o, el) {
				e.addElem(el)
			}
		}
	}
	for _, s := range shared {
		if s.new != nil && (s.old == nil || s.oldOwner != s.newOwner || !sameElem(s.old, s.new)) {
			e.addElem(s.new)
		}
	}
	for _, a := range hairpinNew {
		e.addElem(hairpinElem(a))
	}
	plan.Ops = e.ops
	return plan
}

// settled is one key of a fixed set or map that a changed Service held before or holds now: the
// element written for it before and now, and the Service whose element it is (the first in key
// order of those holding the key, as in Full).
type settled struct {
	old, new           *elem
	oldOwner, newOwner ServiceKey
}

// settleShared decides, for every fixed-set and fixed-map key that the changed Services (keys)
// hold in old or m, which Service's element the table holds before and after. Two Services can
// claim one key for a while (a load-balancer address moving from one to the other, externalIPs
// written by hand); Full keeps the first in key order and reports a conflict, and so does this,
// so that an incremental sync neither adds a second element for a key (nft: "file exists") nor
// deletes the element another Service still holds. Besides the changed Services, only those
// sharing an external or load-balancer address with them are looked at.
func (b *Builder) settleShared(old, m *Model, keys []ServiceKey, plan *Plan, winOld, winNew windowFunc) []settled {
	type side struct {
		model *Model
		win   windowFunc
		objs  map[ServiceKey]map[string]*elem
		byIP  map[netip.Addr][]ServiceKey
	}
	sides := [2]*side{{model: old, win: winOld}, {model: m, win: winNew}}
	for _, sd := range sides {
		sd.objs = map[ServiceKey]map[string]*elem{}
		sd.byIP = map[netip.Addr][]ServiceKey{}
	}
	elems := func(sd *side, k ServiceKey) map[string]*elem {
		if ix, ok := sd.objs[k]; ok {
			return ix
		}
		o, _ := b.serviceObjects(sd.model.Services[k], &sd.model.Node, sd.win)
		ix := map[string]*elem{}
		for i := range o.elems {
			if el := &o.elems[i]; !IsServiceMap(el.container) {
				ix[el.id()] = el
			}
		}
		sd.objs[k] = ix
		return ix
	}
	// The touched keys, in a stable order.
	var ids []string
	seen := map[string]bool{}
	for _, k := range keys {
		for _, sd := range sides {
			for id := range elems(sd, k) {
				if !seen[id] {
					seen[id] = true
					ids = append(ids, id)
				}
			}
		}
	}
	slices.Sort(ids)
	// Which other Services hold the changed Services' external and load-balancer addresses (the
	// only ones two Services can hold: the apiserver hands out ClusterIPs and node ports once).
	shared := false
	for _, k := range keys {
		for _, sd := range sides {
			if svc := sd.model.Services[k]; svc != nil {
				for _, list := range [2][]netip.Addr{svc.ExternalIPs, svc.LoadBalancerIPs} {
					for _, a := range list {
						for _, sd := range sides {
							sd.byIP[a] = nil
						}
						shared = true
					}
				}
			}
		}
	}
	for _, sd := range sides {
		if !shared {
			break
		}
		for k, svc := range sd.model.Services {
			if svc == nil {
				continue
			}
			for _, list := range [2][]netip.Addr{svc.ExternalIPs, svc.LoadBalancerIPs} {
				for _, a := range list {
					if others, ok := sd.byIP[a]; ok && !slices.Contains(others, k) {
						sd.byIP[a] = append(others, k)
					}
				}
			}
		}
	}
	out := make([]settled, 0, len(ids))
	for _, id := range ids {
		var st settled
		for i, sd := range sides {
			var cands []ServiceKey
			cands = append(cands, keys...)
			if a, ok := elemAddr(id); ok {
				cands = append(cands, sd.byIP[a]...)
			}
			var owner ServiceKey
			var el *elem
			var holders []ServiceKey
			for _, c := range cands {
				x, ok := elems(sd, c)[id]
				if !ok || slices.Contains(holders, c) {
					continue
				}
				holders = append(holders, c)
				if el == nil || compareKeys(c, owner) < 0 {
					owner, el = c, x
				}
			}
			if i == 0 {
				st.old, st.oldOwner = el, owner
			} else {
				st.new, st.newOwner = el, owner
				if len(holders) > 1 {
					slices.SortFunc(holders, compareKeys)
					plan.Conflicts = append(plan.Conflicts, fmt.Sprintf("%s: %s (%s, %s)", el.container,
						strings.Join(el.key, " . "), holders[0], holders[1]))
				}
			}
		}
		out = append(out, st)
	}
	return out
}

// elemAddr returns the address an element id's key starts with, if any.
func elemAddr(id string) (netip.Addr, bool) {
	_, key, ok := strings.Cut(id, " ")
	if !ok {
		return netip.Addr{}, false
	}
	first, _, _ := strings.Cut(key, " . ")
	a, err := netip.ParseAddr(first)
	return a, err == nil
}

// existing lists the per-Service chains and affinity sets that a sync of m with State st wrote.
func (b *Builder) existing(m *Model, st *State) Existing {
	var ex Existing
	for _, s := range m.Services {
		o, _ := b.serviceObjects(s, &m.Node, st.lookupWindows)
		for i := range o.chains {
			ex.Chains = append(ex.Chains, o.chains[i].name)
		}
		for i := range o.sets {
			ex.Sets = append(ex.Sets, o.sets[i].name)
		}
		ex.Maps = append(ex.Maps, o.maps...)
		ex.Maps = append(ex.Maps, o.dnatMaps...)
	}
	return ex
}

// changed reports whether a Service's rules may differ between old o and new s.
func changed(o, s *Service, moved map[string]bool) bool {
	if o == nil || s == nil {
		return o != s
	}
	if len(moved) > 0 && (onNodes(o, moved) || onNodes(s, moved)) {
		return true
	}
	return o != s && !reflect.DeepEqual(o, s)
}

// sameSettings compares the Node fields other than DeadNodes.
func sameSettings(a, b *Node) bool {
	return a.Name == b.Name && a.Zone == b.Zone && slices.Equal(a.NodePortAddresses, b.NodePortAddresses) &&
		slices.Equal(a.IPs, b.IPs) && slices.Equal(a.ClusterCIDRs, b.ClusterCIDRs) &&
		slices.Equal(a.ServiceCIDRs, b.ServiceCIDRs)
}

// deadChanged returns the nodes that are dead in exactly one of a and b.
func deadChanged(a, b map[string]bool) map[string]bool {
	var out map[string]bool
	for n, d := range a {
		if d != b[n] {
			if out == nil {
				out = map[string]bool{}
			}
			out[n] = true
		}
	}
	for n, d := range b {
		if d != a[n] {
			if out == nil {
				out = map[string]bool{}
			}
			out[n] = true
		}
	}
	return out
}

func onNodes(s *Service, nodes map[string]bool) bool {
	for i := range s.Ports {
		for j := range s.Ports[i].Endpoints {
			if nodes[s.Ports[i].Endpoints[j].Node] {
				return true
			}
		}
	}
	return false
}

func sameObjects(a, b *objects) bool {
	if len(a.chains) != len(b.chains) || len(a.sets) != len(b.sets) || len(a.elems) != len(b.elems) {
		return false
	}
	for i := range a.chains {
		if a.chains[i].name != b.chains[i].name || !sameRules(a.chains[i].rules, b.chains[i].rules) {
			return false
		}
	}
	for i := range a.elems {
		if a.elems[i].id() != b.elems[i].id() || !sameElem(&a.elems[i], &b.elems[i]) {
			return false
		}
	}
	return slices.Equal(a.sets, b.sets) && slices.Equal(a.maps, b.maps)
}

func sameElem(a, b *elem) bool { return a.value == b.value && a.comment == b.comment }

func elemIndex(o *objects) map[string]*elem {
	m := make(map[string]*elem, len(o.elems))
	for i := range o.elems {
		m[o.elems[i].id()] = &o.elems[i]
	}
	return m
}

func chainIndex(o *objects) map[string]*chain {
	m := make(map[string]*chain, len(o.chains))
	for i := range o.chains {
		m[o.chains[i].name] = &o.chains[i]
	}
	return m
}

func hasSet(o *objects, name string) bool {
	for i := range o.sets {
		if o.sets[i].name == name {
			return true
		}
	}
	return false
}

// objectsDiff is a changed Service's objects before and after (either nil when it came or went).
type objectsDiff struct{ old, new *objects }

// use is a key whose first user came (added) or whose last user went.
type use[K comparable] struct {
	key   K
	added bool
}

// recount applies changed Services to the use counts of the fixed objects they share (hairpin
// pairs, DNAT maps): each key of a Service's old objects is used once less, each of its new ones once
// more. It returns, in key order, the keys that came into use and those that went out of use, and
// drops the counts of keys no longer used.
func recount[K comparable](counts map[K]int, diffs []objectsDiff, keys func(*objects) []K, compare func(a, b K) int) []use[K] {
	before := map[K]int{}
	for _, d := range diffs {
		for _, side := range [2]struct {
			o     *objects
			delta int
		}{{d.old, -1}, {d.new, 1}} {
			for _, k := range keys(side.o) {
				if _, ok := before[k]; !ok {
					before[k] = counts[k]
				}
				counts[k] += side.delta
			}
		}
	}
	var out []use[K]
	for k, n := range before {
		switch after := counts[k]; {
		case n > 0 && after <= 0:
			out = append(out, use[K]{key: k})
			delete(counts, k)
		case n <= 0 && after > 0:
			out = append(out, use[K]{key: k, added: true})
		case after <= 0:
			delete(counts, k)
		}
	}
	slices.SortFunc(out, func(a, b use[K]) int { return compare(a.key, b.key) })
	return out
}
