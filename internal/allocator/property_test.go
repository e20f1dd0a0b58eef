package allocator

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// This file holds a model-based test harness shared by TestProperties (math/rand/v2, fixed seeds) and
// FuzzAllocate (operations decoded from bytes). Pools live in a small universe (1024 IPv4 and 1024 IPv6
// addresses) so that every check can be done by brute force:
//   - assignments equal the model (last successful request and result per Service); failed calls change
//     nothing;
//   - no address is held by two Services that may not share it;
//   - every held address lies in the pool recorded in its assignment, and that pool is one the request
//     allowed;
//   - a fresh allocation is exactly what a brute-force scan from the first address would choose;
//   - Stats equal a brute-force count, and the free sets equal the addresses not in use;
//   - a restart (New, SetPools, Assign of every assignment in random order) succeeds and reproduces the
//     same state.

type source interface {
	intn(n int) int // in [0, n)
}

type randSource struct{ r *rand.Rand }

func (s randSource) intn(n int) int {
	if n <= 0 {
		return 0
	}
	return s.r.IntN(n)
}

// byteSource reads numbers from fuzz input; once exhausted it returns 0.
type byteSource struct{ b []byte }

func (s *byteSource) intn(n int) int {
	v := 0
	for m := 1; m < n; m <<= 8 {
		v <<= 8
		if len(s.b) > 0 {
			v |= int(s.b[0])
			s.b = s.b[1:]
		}
	}
	if n <= 0 {
		return 0
	}
	return v % n
}

func (s *byteSource) done() bool { return len(s.b) == 0 }

var (
	uniV4 = netip.MustParseAddr("10.0.0.0") // 10.0.0.0 - 10.0.3.255
	uniV6 = netip.MustParseAddr("fc00::")   // fc00:: - fc00::3ff
)

const uniSize = 1024

type modelSvc struct {
	req Request
	asg Assignment
}

type harness struct {
	t        testing.TB
	src      source
	a        *Allocator
	pools    []Pool
	model    map[Key]modelSvc
	universe map[Family][]netip.Addr
	owners   map[Family][]refOwnership // refOwner cache for the universe, reset by setPools
	ops      int
	outcomes map[Reason]int // "" for success
}

func newHarness(t testing.TB, src source) *harness {
	h := &harness{t: t, src: src, a: New(), model: map[Key]modelSvc{}, universe: map[Family][]netip.Addr{}, outcomes: map[Reason]int{}}
	for f, base := range map[Family]netip.Addr{IPv4: uniV4, IPv6: uniV6} {
		for i, a := 0, base; i < uniSize; i, a = i+1, a.Next() {
			h.universe[f] = append(h.universe[f], a)
		}
	}
	return h
}

var poolNames = []string{"p0", "p1", "p2", "p3"}

func (h *harness) pick(n int) int { return h.src.intn(n) }

func (h *harness) chance(pct int) bool { return h.pick(100) < pct }

func (h *harness) randRange(f Family) Range {
	start := h.pick(uniSize)
	n := 1 + h.pick(1+h.pick(40))
	if h.chance(10) {
		n = 1 + h.pick(300)
	}
	end := min(start+n-1, uniSize-1)
	return Range{First: h.universe[f][start], Last: h.universe[f][end]}
}

func (h *harness) randPool(name string) Pool {
	p := Pool{Name: name, AutoAssign: !h.chance(20), AvoidBuggyIPs: h.chance(40)}
	for i := 0; i < 1+h.pick(3); i++ {
		f := IPv4
		if h.chance(40) {
			f = IPv6
		}
		p.Ranges = append(p.Ranges, h.randRange(f))
	}
	return p
}

func (h *harness) randFamilies() []Family {
	switch h.pick(6) {
	case 0:
		return nil
	case 1:
		return []Family{IPv6}
	case 2:
		return []Family{IPv4, IPv6}
	case 3:
		return []Family{IPv6, IPv4}
	}
	return []Family{IPv4}
}

func (h *harness) randKey() Key {
	return Key{Namespace: fmt.Sprint("ns", h.pick(3)), Name: fmt.Sprint("s", h.pick(10))}
}

func (h *harness) randAddr() netip.Addr {
	switch c := h.pick(100); {
	case c < 3:
		return netip.MustParseAddr("192.168.0.1") // in no pool
	case c < 30 && len(h.model) > 0: // one in use
		ks := sortedModelKeys(h.model)
		ips := h.model[ks[h.pick(len(ks))]].asg.IPs
		return ips[h.pick(len(ips))]
	case c < 70 && len(h.pools) > 0: // one in a pool
		p := h.pools[h.pick(len(h.pools))]
		if len(p.Ranges) > 0 {
			r := p.Ranges[h.pick(len(p.Ranges))]
			a := r.First
			for n := h.pick(8); n > 0 && a.Less(r.Last); n-- {
				a = a.Next()
			}
			return a
		}
	}
	f := IPv4
	if h.chance(40) {
		f = IPv6
	}
	return h.universe[f][h.pick(uniSize)]
}

func (h *harness) randRequest(k Key) Request {
	r := Request{Key: k, Families: h.randFamilies()}
	switch h.pick(10) {
	case 0, 1:
		r.Policy = PreferDualStack
	case 2, 3:
		r.Policy = RequireDualStack
	}
	if r.Policy == RequireDualStack && len(r.Families) < 2 && !h.chance(5) {
		r.Families = []Family{IPv4, IPv6}
	}
	r.SharingKey = []string{"", "", "a", "a", "b"}[h.pick(5)]
	if h.chance(20) {
		r.BackendKey = "app=x"
	}
	for i := 0; i < h.pick(3); i++ {
		r.Ports = append(r.Ports, Port{Protocol: []string{"TCP", "UDP"}[h.pick(2)], Port: []int32{53, 80, 443}[h.pick(3)]})
	}
	if h.chance(15) {
		r.Requested = []netip.Addr{h.randAddr()}
		if h.chance(30) {
			r.Requested = append(r.Requested, h.randAddr())
		}
	}
	if h.chance(15) {
		r.Pool = append(slices.Clone(poolNames), "nope")[h.pick(len(poolNames)+1)]
	}
	for _, i := range h.perm(len(poolNames)) {
		if h.chance(70) {
			r.Candidates = append(r.Candidates, poolNames[i])
		}
	}
	if h.chance(10) {
		r.Excluded = []string{poolNames[h.pick(len(poolNames))]}
	}
	return r
}

func (h *harness) perm(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	for i := n - 1; i > 0; i-- {
		j := h.pick(i + 1)
		p[i], p[j] = p[j], p[i]
	}
	return p
}

// step performs one random operation and checks every invariant.
func (h *harness) step() {
	h.ops++
	switch op := h.pick(100); {
	case op < 8:
		h.setPools(h.mutatePools())
	case op < 20:
		k := h.randKey()
		h.a.Release(k)
		delete(h.model, k)
	case op < 30:
		// Re-assign a Service's own addresses (the controller's restart path), with a changed request.
		k := h.randKey()
		ips := []netip.Addr{h.randAddr()}
		if m, ok := h.model[k]; ok && h.chance(70) {
			ips = m.asg.IPs
		}
		h.assign(h.randRequest(k), ips)
	default:
		k := h.randKey()
		req := h.randRequest(k)
		if m, ok := h.model[k]; ok && h.chance(40) {
			req = m.req // unchanged Service: must be a no-op
		}
		h.allocate(req)
	}
	h.check()
}

func (h *harness) mutatePools() []Pool {
	ps := slices.Clone(h.pools)
	switch h.pick(10) {
	case 9: // a whole new configuration
		ps = nil
		for _, i := range h.perm(len(poolNames)) {
			ps = append(ps, h.randPool(poolNames[i]))
		}
	case 0, 6, 7, 8: // add or replace a pool
		p := h.randPool(poolNames[h.pick(len(poolNames))])
		if i := slices.IndexFunc(ps, func(q Pool) bool { return q.Name == p.Name }); i >= 0 {
			ps[i] = p
		} else {
			ps = append(ps, p)
		}
	case 1: // remove one
		if len(ps) > 0 {
			i := h.pick(len(ps))
			ps = slices.Delete(ps, i, i+1)
		}
	case 2, 3: // shrink one: drop a range or cut one
		if i := h.pick(len(ps)); len(ps) > 0 && len(ps[i].Ranges) > 0 {
			p := ps[i]
			p.Ranges = slices.Clone(p.Ranges)
			j := h.pick(len(p.Ranges))
			r := p.Ranges[j]
			if h.chance(30) || r.First == r.Last {
				p.Ranges = slices.Delete(p.Ranges, j, j+1)
			} else {
				for n := h.pick(40); n > 0 && r.First.Less(r.Last); n-- {
					if h.chance(50) {
						r.Last = r.Last.Prev()
					} else {
						r.First = r.First.Next()
					}
				}
				p.Ranges[j] = r
			}
			ps[i] = p
		}
	case 4: // toggle flags
		if len(ps) > 0 {
			i := h.pick(len(ps))
			ps[i].AvoidBuggyIPs = !ps[i].AvoidBuggyIPs
			if h.chance(50) {
				ps[i].AutoAssign = !ps[i].AutoAssign
			}
		}
	case 5: // reorder (matters only for overlaps)
		for i, j := range h.perm(len(ps)) {
			if i < j {
				ps[i], ps[j] = ps[j], ps[i]
			}
		}
	}
	return ps
}

func (h *harness) setPools(ps []Pool) {
	h.pools = ps
	h.owners = nil
	var want []Key
	for _, k := range sortedModelKeys(h.model) {
		m := h.model[k]
		for _, ip := range m.asg.IPs {
			if owner, usable := h.refOwner(ip); owner != m.asg.Pool || !usable {
				want = append(want, k)
				break
			}
		}
	}
	got := h.a.SetPools(ps)
	if diff := cmp.Diff(want, got); diff != "" {
		h.t.Fatalf("op %d: SetPools evicted (-want +got):\n%s", h.ops, diff)
	}
	for _, k := range got {
		delete(h.model, k)
	}
}

func (h *harness) assign(req Request, ips []netip.Addr) {
	before := snapshot(h.a)
	got, err := h.a.Assign(req, ips)
	if err != nil {
		h.unchanged(before, "Assign", err)
		return
	}
	h.record(req, got, "Assign")
}

func (h *harness) allocate(req Request) {
	old, hadOld := h.model[req.Key]
	want, wantOK := h.refFresh(req)
	before := snapshot(h.a)
	got, err := h.a.Allocate(req)
	if err != nil {
		h.unchanged(before, "Allocate", err)
		if wantOK && len(req.Requested) == 0 {
			h.t.Fatalf("op %d: Allocate(%+v) failed (%v) but %v was available", h.ops, req, err, want)
		}
		return
	}
	h.record(req, got, "Allocate")
	if len(req.Requested) > 0 {
		return
	}
	kept := hadOld && got.Pool == old.asg.Pool
	for _, ip := range old.asg.IPs {
		kept = kept && slices.Contains(got.IPs, ip)
	}
	switch {
	case kept && len(got.IPs) > len(old.asg.IPs):
		// PreferDualStack gained its second family: the lowest of that family in the same pool.
		for _, ip := range got.IPs {
			if !slices.Contains(old.asg.IPs, ip) {
				if low, _ := h.refLowest(got.Pool, FamilyOf(ip), req); low != ip {
					h.t.Fatalf("op %d: added %v to %v, lowest was %v", h.ops, ip, req.Key, low)
				}
			}
		}
	case kept:
	case !wantOK:
		h.t.Fatalf("op %d: Allocate(%+v) = %v, but brute force finds nothing", h.ops, req, got)
	case !asgEqual(want, got):
		h.t.Fatalf("op %d: Allocate(%+v) = %v, brute force chooses %v", h.ops, req, got, want)
	}
	if !kept && req.Pool == "" && !slices.Contains(req.Candidates, got.Pool) {
		h.t.Fatalf("op %d: %v got pool %q, not a candidate", h.ops, req.Key, got.Pool)
	}
}

func (h *harness) unchanged(before state, what string, err error) {
	h.outcomes[ReasonOf(err)]++
	var e *Error
	if !errors.As(err, &e) || ReasonOf(err) == "" {
		h.t.Fatalf("op %d: %s returned %T %v, not an *Error with a Reason", h.ops, what, err, err)
	}
	if after := snapshot(h.a); !before.equal(after) {
		diff := cmp.Diff(before, after, addrCmp)
		h.t.Fatalf("op %d: failed %s (%v) changed state (-before +after):\n%s", h.ops, what, err, diff)
	}
}

func (h *harness) record(req Request, got Assignment, what string) {
	h.outcomes[""]++
	// Checks that depend on the request.
	need := refNeed(req)
	if need == nil {
		h.t.Fatalf("op %d: %s accepted invalid request %+v", h.ops, what, req)
	}
	if len(got.IPs) == 0 || len(got.IPs) > len(need) {
		h.t.Fatalf("op %d: %s(%+v) = %v: wrong number of addresses", h.ops, what, req, got)
	}
	for i, ip := range got.IPs {
		if !slices.Contains(need, FamilyOf(ip)) || (i == 1 && FamilyOf(got.IPs[0]) != need[0]) {
			h.t.Fatalf("op %d: %s(%+v) = %v: wrong families or order", h.ops, what, req, got)
		}
	}
	if req.Policy == RequireDualStack && len(got.IPs) != 2 {
		h.t.Fatalf("op %d: RequireDualStack got %v", h.ops, got)
	}
	if req.Pool != "" && got.Pool != req.Pool {
		h.t.Fatalf("op %d: pool annotation %q, got %q", h.ops, req.Pool, got.Pool)
	}
	if slices.Contains(req.Excluded, got.Pool) {
		h.t.Fatalf("op %d: excluded pool %q used", h.ops, got.Pool)
	}
	if len(req.Requested) > 0 {
		var r []netip.Addr
		for _, ip := range req.Requested {
			r = append(r, ip.Unmap())
		}
		if len(r) != len(got.IPs) || !slices.ContainsFunc(r, func(ip netip.Addr) bool { return ip == got.IPs[0] }) ||
			(len(r) == 2 && !slices.Contains(r, got.IPs[1])) {
			h.t.Fatalf("op %d: requested %v, got %v", h.ops, req.Requested, got)
		}
	}
	h.model[req.Key] = modelSvc{req: req, asg: got}
}

// refNeed returns the families req needs, or nil if req is invalid.
func refNeed(req Request) []Family {
	fams := req.Families
	if len(fams) == 0 {
		fams = []Family{IPv4}
	}
	if len(fams) > 2 || (len(fams) == 2 && fams[0] == fams[1]) {
		return nil
	}
	for _, f := range fams {
		if f != IPv4 && f != IPv6 {
			return nil
		}
	}
	switch req.Policy {
	case SingleStack:
		return fams[:1]
	case PreferDualStack:
		return fams
	case RequireDualStack:
		if len(fams) == 2 {
			return fams
		}
	}
	return nil
}

type refOwnership struct {
	pool   string
	usable bool
}

// refOwner returns the pool that owns ip in the current configuration and whether it may hand it out.
func (h *harness) refOwner(ip netip.Addr) (string, bool) {
	if h.owners == nil {
		h.owners = map[Family][]refOwnership{}
		for _, f := range []Family{IPv4, IPv6} {
			for _, a := range h.universe[f] {
				p, u := h.refOwnerSlow(a)
				h.owners[f] = append(h.owners[f], refOwnership{p, u})
			}
		}
	}
	base := uniV4
	if ip.Is6() {
		base = uniV6
	}
	if d := toU128(ip).sub(toU128(base)); ip.BitLen() == base.BitLen() && d.hi == 0 && d.lo < uniSize {
		o := h.owners[FamilyOf(ip)][d.lo]
		return o.pool, o.usable
	}
	return h.refOwnerSlow(ip)
}

func (h *harness) refOwnerSlow(ip netip.Addr) (string, bool) {
	seen := map[string]bool{}
	for _, p := range h.pools {
		if p.Name == "" || seen[p.Name] {
			continue
		}
		seen[p.Name] = true
		for _, r := range p.Ranges {
			if r.Contains(ip) {
				return p.Name, !p.AvoidBuggyIPs || !buggy(ip)
			}
		}
	}
	return "", false
}

func (h *harness) refPool(name string) (Pool, bool) {
	for _, p := range h.pools {
		if p.Name == name {
			return p, true
		}
	}
	return Pool{}, false
}

func (h *harness) holders() map[netip.Addr][]Key {
	out := map[netip.Addr][]Key{}
	for _, k := range sortedModelKeys(h.model) {
		for _, ip := range h.model[k].asg.IPs {
			out[ip] = append(out[ip], k)
		}
	}
	return out
}

func mayShare(a, b Request) bool {
	if a.SharingKey == "" || a.SharingKey != b.SharingKey || a.BackendKey != b.BackendKey {
		return false
	}
	for _, p := range a.Ports {
		if slices.Contains(b.Ports, p) {
			return false
		}
	}
	return true
}

// refLowest scans pool from its first address for one req may take, ignoring req.Key's own holdings.
func (h *harness) refLowest(pool string, f Family, req Request) (netip.Addr, bool) {
	hs := h.holders()
	h.refOwner(uniV4) // fill the cache
	for i, ip := range h.universe[f] {
		if o := h.owners[f][i]; o.pool != pool || !o.usable {
			continue
		}
		ok := true
		for _, k := range hs[ip] {
			ok = ok && (k == req.Key || mayShare(h.model[k].req, req))
		}
		if ok {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// refFresh is what a fresh allocation for req must return (MetalLB's rules, by brute force).
func (h *harness) refFresh(req Request) (Assignment, bool) {
	need := refNeed(req)
	if need == nil {
		return Assignment{}, false
	}
	prefer := req.Policy == PreferDualStack && len(need) == 2
	lowest := func(pool string) []netip.Addr {
		got := make([]netip.Addr, len(need))
		for i, f := range need {
			got[i], _ = h.refLowest(pool, f, req)
		}
		return got
	}
	if req.Pool != "" {
		if _, ok := h.refPool(req.Pool); !ok || slices.Contains(req.Excluded, req.Pool) {
			return Assignment{}, false
		}
		var ips []netip.Addr
		for _, ip := range lowest(req.Pool) {
			if ip.IsValid() {
				ips = append(ips, ip)
			} else if !prefer {
				return Assignment{}, false
			}
		}
		return Assignment{IPs: ips, Pool: req.Pool}, len(ips) > 0
	}
	var primary, secondary *Assignment
	seen := map[string]bool{}
	for _, name := range req.Candidates {
		p, ok := h.refPool(name)
		if !ok || !p.AutoAssign || slices.Contains(req.Excluded, name) || seen[name] {
			continue
		}
		seen[name] = true
		got := lowest(name)
		if !slices.Contains(got, netip.Addr{}) {
			return Assignment{IPs: got, Pool: name}, true
		}
		if prefer && primary == nil && got[0].IsValid() {
			primary = &Assignment{IPs: got[:1], Pool: name}
		}
		if prefer && secondary == nil && got[1].IsValid() {
			secondary = &Assignment{IPs: got[1:], Pool: name}
		}
	}
	switch {
	case primary != nil:
		return *primary, true
	case secondary != nil:
		return *secondary, true
	}
	return Assignment{}, false
}

func sortedModelKeys(m map[Key]modelSvc) []Key {
	var ks []Key
	for k := range m {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, compareKeys)
	return ks
}

// check verifies every invariant against the model and by brute force.
func (h *harness) check() {
	t := h.t
	// Assignments equal the model.
	if len(h.a.svcs) != len(h.model) {
		t.Fatalf("op %d: allocator has %d Services, model %d", h.ops, len(h.a.svcs), len(h.model))
	}
	for k, m := range h.model {
		got, ok := h.a.Get(k)
		if !ok || !asgEqual(m.asg, got) {
			t.Fatalf("op %d: Get(%v) = %v, %v; model %v", h.ops, k, got, ok, m.asg)
		}
	}
	// Sharing and pool membership.
	hs := h.holders()
	for ip, ks := range hs {
		for i := range ks {
			for j := i + 1; j < len(ks); j++ {
				if !mayShare(h.model[ks[i]].req, h.model[ks[j]].req) {
					t.Fatalf("op %d: %v held by %v and %v, which may not share", h.ops, ip, ks[i], ks[j])
				}
			}
			owner, usable := h.refOwner(ip)
			if pool := h.model[ks[i]].asg.Pool; owner != pool || !usable {
				t.Fatalf("op %d: %v holds %v from pool %q, but it belongs to %q (usable %v)", h.ops, ks[i], ip, pool, owner, usable)
			}
		}
	}
	// Stats and free sets by brute force.
	for _, name := range poolNames {
		cfg, ok := h.refPool(name)
		st, sok := h.a.Stats(name)
		if ok != sok {
			t.Fatalf("op %d: Stats(%q) ok=%v, pool configured %v", h.ops, name, sok, ok)
		}
		if !ok {
			continue
		}
		var want PoolStats
		for _, m := range h.model {
			if m.asg.Pool == name {
				want.Services++
			}
		}
		for _, f := range []Family{IPv4, IPv6} {
			p := h.a.pools[name]
			if err := p.free[f.idx()].check(); err != nil {
				t.Fatalf("op %d: pool %s %v free set: %v", h.ops, name, f, err)
			}
			var assigned, avail int64
			h.refOwner(uniV4) // fill the cache
			for i, ip := range h.universe[f] {
				owner, usable := h.owners[f][i].pool, h.owners[f][i].usable
				if owner != name {
					continue
				}
				used := len(hs[ip]) > 0
				if usable && used {
					assigned++
				} else if usable {
					avail++
				}
				if usable && p.free[f.idx()].contains(ip) == used {
					t.Fatalf("op %d: pool %s: free set contains %v = %v, in use %v", h.ops, name, ip, !used, used)
				}
			}
			if f == IPv4 {
				want.AssignedV4, want.AvailableV4 = assigned, avail
			} else {
				want.AssignedV6, want.AvailableV6 = assigned, avail
			}
		}
		if want != st {
			t.Fatalf("op %d: Stats(%q) (-brute force +got):\n%s", h.ops, cfg.Name, cmp.Diff(want, st))
		}
	}
	h.checkShareIndex()
	h.checkRestart()
}

func (h *harness) checkShareIndex() {
	n := 0
	for _, p := range h.a.pools {
		for k, l := range p.shared {
			if len(l) == 0 || !slices.IsSortedFunc(l, netip.Addr.Compare) {
				h.t.Fatalf("op %d: share index %v in %s: %v", h.ops, k, p.name, l)
			}
			for _, ip := range l {
				st := h.a.addrs[ip]
				if st == nil || st.pool != p || st.sharing != k.sharing || st.backend != k.backend || FamilyOf(ip).idx() != k.fam {
					h.t.Fatalf("op %d: share index %v in %s lists %v, state %+v", h.ops, k, p.name, ip, st)
				}
				n++
			}
		}
	}
	m := 0
	for _, st := range h.a.addrs {
		if st.sharing != "" {
			m++
		}
	}
	if n != m {
		h.t.Fatalf("op %d: share index lists %d addresses, %d in use with a key", h.ops, n, m)
	}
}

func (h *harness) checkRestart() {
	b := New()
	if ev := b.SetPools(h.pools); len(ev) != 0 {
		h.t.Fatalf("op %d: restart evicted %v from an empty allocator", h.ops, ev)
	}
	keys := sortedModelKeys(h.model)
	for _, i := range h.perm(len(keys)) {
		m := h.model[keys[i]]
		got, err := b.Assign(m.req, m.asg.IPs)
		if err != nil {
			h.t.Fatalf("op %d: restart: Assign(%+v, %v): %v", h.ops, m.req, m.asg.IPs, err)
		}
		if !asgEqual(m.asg, got) {
			h.t.Fatalf("op %d: restart: Assign gave %v, want %v", h.ops, got, m.asg)
		}
	}
	if live, restarted := snapshot(h.a), snapshot(b); !live.equal(restarted) {
		diff := cmp.Diff(live, restarted, addrCmp)
		h.t.Fatalf("op %d: restart differs (-live +restarted):\n%s", h.ops, diff)
	}
}

func TestProperties(t *testing.T) {
	ops := 3000
	if testing.Short() {
		ops = 500
	}
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			h := newHarness(t, randSource{rand.New(rand.NewPCG(seed, 0x1b))})
			h.setPools([]Pool{h.randPool("p0"), h.randPool("p1"), h.randPool("p2")})
			var okAlloc int
			for i := 0; i < ops; i++ {
				h.step()
				okAlloc = max(okAlloc, len(h.model))
			}
			t.Logf("outcomes (\"\" = success): %v; most Services at once: %d", h.outcomes, okAlloc)
			if okAlloc < 5 || h.outcomes[""] < ops/4 {
				t.Errorf("at most %d Services held addresses at once: the test exercises too little", okAlloc)
			}
		})
	}
}
