package allocator

import (
	"cmp"
	"net/netip"
	"slices"
	"sort"
	"strings"
)

// Allocator keeps the pools and the addresses each Service holds, and picks addresses for new Services.
// It is deterministic: the same sequence of calls gives the same results.
//
// An Allocator is not safe for concurrent use: one goroutine owns it (the controller's reconcile worker).
// Every method that returns an error leaves the Allocator unchanged.
type Allocator struct {
	pools  map[string]*pool
	owners [2][]owned // per family: every pool range, sorted and disjoint, with its pool
	svcs   map[Key]*svc
	addrs  map[netip.Addr]*addrState // every address in use
	prio   uint64                    // treap priority generator, shared by the free sets
}

// owned is a range and the pool it belongs to.
type owned struct {
	Range
	pool *pool
}

// pool is a configured pool and its bookkeeping, per family (index 0 IPv4, 1 IPv6).
type pool struct {
	name     string
	avoid    bool
	auto     bool
	ranges   [2][]Range // owned by this pool: normalised, minus what earlier pools claimed
	free     [2]*freeSet
	capacity [2]count // addresses that may be handed out
	assigned [2]int64 // addresses in use
	services int64    // Services holding addresses of the pool
	// shared indexes the in-use addresses that carry a sharing key, sorted, so the lowest address a
	// Service may share is found without scanning the pool.
	shared map[shareKey][]netip.Addr
}

type shareKey struct {
	fam              int
	sharing, backend string
}

func (p *pool) has(f Family) bool { return len(p.ranges[f.idx()]) > 0 }

// svc is what a Service holds and the parts of its request that sharing depends on.
type svc struct {
	key              Key
	pool             *pool
	ips              []netip.Addr // one per family, primary first; backed by ipbuf
	ipbuf            [2]netip.Addr
	sharing, backend string
	ports            []Port
}

// addrState is an address in use. All holders have the same sharing and backend keys.
type addrState struct {
	pool             *pool
	sharing, backend string
	holders          []*svc  // sorted by key; a handful
	one              [1]*svc // backing array of holders while there is one
}

// portHolder returns who uses p on the address, if anyone.
func (st *addrState) portHolder(p Port) (Key, bool) {
	for _, h := range st.holders {
		if slices.Contains(h.ports, p) {
			return h.key, true
		}
	}
	return Key{}, false
}

func (st *addrState) find(k Key) (int, bool) {
	return slices.BinarySearchFunc(st.holders, k, func(s *svc, k Key) int { return compareKeys(s.key, k) })
}

// New returns an Allocator with no pools.
func New() *Allocator {
	return &Allocator{
		pools: map[string]*pool{},
		svcs:  map[Key]*svc{},
		addrs: map[netip.Addr]*addrState{},
	}
}

// SetPools replaces the pool set. Every assignment whose addresses are no longer all in the pool it came
// from (the pool was removed or shrunk, or now avoids the buggy address the Service holds) is released;
// the affected Services are returned, sorted, so that the caller can emit an event and allocate again.
// Unlike MetalLB, an address that moved to another pool (a renamed pool) is released too: the new pool
// may not be one the Service may use.
//
// Pools with an empty or repeated name are ignored (the first one counts). Pools should not overlap
// (internal/config rejects it, as MetalLB does); if they do, an address belongs to the first pool listed
// that contains it.
func (a *Allocator) SetPools(pools []Pool) (evicted []Key) {
	byName := map[string]*pool{}
	var owners, taken [2][]Range
	var owner [2][]*pool
	for _, cfg := range pools {
		if cfg.Name == "" || byName[cfg.Name] != nil {
			continue
		}
		p := &pool{name: cfg.Name, avoid: cfg.AvoidBuggyIPs, auto: cfg.AutoAssign, shared: map[shareKey][]netip.Addr{}}
		for fi, f := range [2]Family{IPv4, IPv6} {
			own := subtract(normalize(cfg.Ranges, f), taken[fi])
			taken[fi] = normalize(append(slices.Clone(taken[fi]), own...), f)
			p.ranges[fi] = own
			p.free[fi] = newFreeSet(p.avoid, &a.prio, own)
			for _, r := range own {
				n := r.size()
				if p.avoid && f == IPv4 {
					n.v = n.v.sub(u128{lo: uint64(buggyIn(r))})
				}
				p.capacity[fi] = p.capacity[fi].add(n.v)
				p.capacity[fi].sat = p.capacity[fi].sat || n.sat
				owners[fi] = append(owners[fi], r)
				owner[fi] = append(owner[fi], p)
			}
		}
		byName[cfg.Name] = p
	}
	var idx [2][]owned
	for fi := range idx {
		for i, r := range owners[fi] {
			idx[fi] = append(idx[fi], owned{Range: r, pool: owner[fi][i]})
		}
		slices.SortFunc(idx[fi], func(x, y owned) int { return x.First.Compare(y.First) })
	}

	var keep []*svc
	for _, k := range sortedKeys(a.svcs) {
		s := a.svcs[k]
		p := byName[s.pool.name]
		ok := p != nil
		for _, ip := range s.ips {
			ok = ok && usableIn(idx, ip) == p
		}
		if ok {
			s.pool = p
			keep = append(keep, s)
		} else {
			evicted = append(evicted, k)
		}
	}
	a.pools, a.owners = byName, idx
	a.svcs, a.addrs = map[Key]*svc{}, map[netip.Addr]*addrState{}
	for _, s := range keep {
		a.register(s)
	}
	return evicted
}

// usableIn returns the pool that owns ip and may hand it out, or nil.
func usableIn(owners [2][]owned, ip netip.Addr) *pool {
	os := owners[FamilyOf(ip).idx()]
	i := sort.Search(len(os), func(i int) bool { return !os[i].Last.Less(ip) })
	if i == len(os) || ip.Less(os[i].First) {
		return nil
	}
	if p := os[i].pool; !p.avoid || !buggy(ip) {
		return p
	}
	return nil
}

// Assign registers ips for the Service req.Key: a Service that already holds addresses (after a restart)
// or asks for specific ones. Assigning the same addresses to the same Service again is a no-op apart from
// recording req's sharing key, backend key and ports. A previous assignment of the Service is replaced.
//
// ips must be one address per family, of families the Service has (ErrNoFamily; both for
// RequireDualStack), equal to req.Requested when that is set (ErrRequestMismatch), all in one pool
// (ErrNotInPool, ErrPoolMismatch) that req.Pool names if set (ErrUnknownPool, ErrPoolMismatch) and that
// req does not exclude (ErrPoolNotAllowed), and each free or shareable (ErrInUse, ErrSharingConflict).
func (a *Allocator) Assign(req Request, ips []netip.Addr) (Assignment, error) {
	r, err := validate(req)
	if err != nil {
		return Assignment{}, err
	}
	return a.assign(&r, ips)
}

func (a *Allocator) assign(r *request, in []netip.Addr) (Assignment, error) {
	ips, err := r.addrs(in, "address")
	if err != nil {
		return Assignment{}, err
	}
	if len(r.requested) > 0 && !slices.Equal(ips, r.requested) {
		return Assignment{}, newErr(ErrRequestMismatch, r.Key, "addresses %v differ from the requested %v", ips, r.requested)
	}
	if r.Pool != "" && a.pools[r.Pool] == nil {
		return Assignment{}, newErr(ErrUnknownPool, r.Key, "unknown pool %q", r.Pool).withPool(r.Pool)
	}
	var p *pool
	for _, ip := range ips {
		q := usableIn(a.owners, ip)
		switch {
		case q == nil:
			if c := containedIn(a.owners, ip); c != nil {
				return Assignment{}, newErr(ErrNotInPool, r.Key, "address %s is in pool %q, which avoids addresses ending in .0 and .255", ip, c.name).withAddr(ip).withPool(c.name)
			}
			return Assignment{}, newErr(ErrNotInPool, r.Key, "address %s is in no pool", ip).withAddr(ip)
		case p != nil && q != p:
			return Assignment{}, newErr(ErrPoolMismatch, r.Key, "addresses %s (pool %q) and %s (pool %q) are in different pools", ips[0], p.name, ip, q.name).withAddr(ip).withPool(q.name)
		case r.Pool != "" && q.name != r.Pool:
			return Assignment{}, newErr(ErrPoolMismatch, r.Key, "address %s is in pool %q, not in the requested pool %q", ip, q.name, r.Pool).withAddr(ip).withPool(q.name)
		}
		p = q
	}
	if r.excluded(p.name) {
		return Assignment{}, newErr(ErrPoolNotAllowed, r.Key, "pool %q does not serve this service (address %s)", p.name, ips[0]).withAddr(ips[0]).withPool(p.name)
	}
	for _, ip := range ips {
		if err := a.checkShare(r, ip); err != nil {
			return Assignment{}, err
		}
	}
	return a.commit(r, p, ips), nil
}

// containedIn returns the pool whose ranges contain ip, usable or not.
func containedIn(owners [2][]owned, ip netip.Addr) *pool {
	for _, o := range owners[FamilyOf(ip).idx()] {
		if o.Contains(ip) {
			return o.pool
		}
	}
	return nil
}

// Allocate gives req.Key addresses and returns them:
//   - req.Requested set: exactly those (see Assign);
//   - else, if the Service already holds an assignment that still fits req (its pool is req.Pool when
//     set and not excluded, its families suit the policy, its addresses are still shareable under req's
//     sharing key, backend key and ports), that assignment, unchanged; a PreferDualStack Service holding
//     one family gets the other one added from the same pool when possible, as in MetalLB;
//   - else req.Pool when set (ErrUnknownPool, ErrPoolNotAllowed, ErrNoFamily, ErrPoolExhausted);
//   - else the first pool in req.Candidates that can serve every needed family (for PreferDualStack,
//     falling back to the first with the primary family, then the first with the secondary one);
//     ErrNoPool, ErrNoFamily or ErrPoolExhausted when none can.
//
// Within a pool the lowest address that is free or shareable is chosen. On error nothing changes: a
// Service whose assignment no longer fits keeps it until Release.
func (a *Allocator) Allocate(req Request) (Assignment, error) {
	rv, err := validate(req)
	if err != nil {
		return Assignment{}, err
	}
	r := &rv
	if len(r.requested) > 0 {
		return a.assign(r, r.requested)
	}
	if r.Pool != "" {
		if a.pools[r.Pool] == nil {
			return Assignment{}, newErr(ErrUnknownPool, r.Key, "unknown pool %q", r.Pool).withPool(r.Pool)
		}
		if r.excluded(r.Pool) {
			return Assignment{}, newErr(ErrPoolNotAllowed, r.Key, "pool %q does not serve this service", r.Pool).withPool(r.Pool)
		}
	}
	old := a.svcs[r.Key]
	if old != nil && a.fits(r, old) {
		ips := slices.Clone(old.ips)
		if r.Policy == PreferDualStack && len(r.need) == 2 && len(ips) == 1 {
			other := r.need[0]
			if other == FamilyOf(ips[0]) {
				other = r.need[1]
			}
			if ip, ok := a.lowest(old.pool, other, r); ok {
				ips = append(ips, ip)
			}
		}
		return a.commit(r, old.pool, r.order(ips)), nil
	}
	if old != nil {
		a.unregister(old) // its addresses may be chosen again
	}
	p, ips, err := a.choose(r)
	if err != nil {
		if old != nil {
			a.register(old)
		}
		return Assignment{}, err
	}
	return a.commit(r, p, ips), nil
}

// fits reports whether the Service's current assignment still suits r.
func (a *Allocator) fits(r *request, s *svc) bool {
	if (r.Pool != "" && s.pool.name != r.Pool) || r.excluded(s.pool.name) {
		return false
	}
	if _, err := r.addrs(s.ips, "address"); err != nil {
		return false
	}
	for _, ip := range s.ips {
		if a.checkShare(r, ip) != nil {
			return false
		}
	}
	return true
}

// choose picks addresses for r from r.Pool or r.Candidates. r.Key holds nothing.
func (a *Allocator) choose(r *request) (*pool, []netip.Addr, error) {
	if r.Pool != "" {
		p := a.pools[r.Pool]
		ips, ok := a.pick(p, r)
		if ok {
			return p, ips, nil
		}
		var missing []string
		for _, f := range r.need {
			if !p.has(f) {
				missing = append(missing, f.String())
			}
		}
		if len(missing) == len(r.need) || (len(missing) > 0 && r.Policy != PreferDualStack) {
			return nil, nil, newErr(ErrNoFamily, r.Key, "pool %q has no %s addresses", p.name, strings.Join(missing, " or ")).withPool(p.name)
		}
		return nil, nil, newErr(ErrPoolExhausted, r.Key, "no free %s address in pool %q", r.needString(), p.name).withPool(p.name)
	}

	var (
		primary       *pool
		primaryIP     netip.Addr
		secondary     *pool
		secondaryIP   netip.Addr
		exhausted     *pool // first candidate that has the families but no address
		preferTwo     = r.Policy == PreferDualStack && len(r.need) == 2
		candidateSeen bool
		got           = make([]netip.Addr, len(r.need))
	)
	for i, name := range r.Candidates {
		p := a.pools[name]
		if p == nil || !p.auto || r.excluded(name) || slices.Contains(r.Candidates[:i], name) {
			continue
		}
		candidateSeen = true
		all := true
		hasAll, hasAny := true, false
		for i, f := range r.need {
			ip, ok := a.lowest(p, f, r)
			got[i] = ip
			all = all && ok
			hasAll = hasAll && p.has(f)
			hasAny = hasAny || p.has(f)
		}
		if all {
			return p, got, nil
		}
		if exhausted == nil && (hasAll || (preferTwo && hasAny)) {
			exhausted = p
		}
		if preferTwo {
			if primary == nil && got[0].IsValid() {
				primary, primaryIP = p, got[0]
			}
			if secondary == nil && got[1].IsValid() {
				secondary, secondaryIP = p, got[1]
			}
		}
	}
	switch {
	case primary != nil:
		return primary, []netip.Addr{primaryIP}, nil
	case secondary != nil:
		return secondary, []netip.Addr{secondaryIP}, nil
	case !candidateSeen:
		return nil, nil, newErr(ErrNoPool, r.Key, "no pool may auto-assign an address to this service (candidates: %q)", r.Candidates)
	}
	var names []string // the usable candidates
	for i, name := range r.Candidates {
		if p := a.pools[name]; p != nil && p.auto && !r.excluded(name) && !slices.Contains(r.Candidates[:i], name) {
			names = append(names, name)
		}
	}
	if exhausted != nil {
		return nil, nil, newErr(ErrPoolExhausted, r.Key, "no free %s address in pools %q", r.needString(), names).withPool(exhausted.name)
	}
	return nil, nil, newErr(ErrNoFamily, r.Key, "no pool among %q has %s addresses", names, r.needString())
}

// pick returns addresses for r from p alone, following r's policy.
func (a *Allocator) pick(p *pool, r *request) ([]netip.Addr, bool) {
	var got []netip.Addr
	for _, f := range r.need {
		if ip, ok := a.lowest(p, f, r); ok {
			got = append(got, ip)
		} else if r.Policy != PreferDualStack {
			return nil, false
		}
	}
	return got, len(got) > 0
}

// lowest returns the lowest address of family f in p that r may take: the lower of the lowest free
// address and the lowest in-use address r may share.
func (a *Allocator) lowest(p *pool, f Family, r *request) (netip.Addr, bool) {
	fi := f.idx()
	free, ok := p.free[fi].lowest()
	if r.SharingKey == "" {
		return free, ok
	}
	for _, ip := range p.shared[shareKey{fi, r.SharingKey, r.BackendKey}] {
		if ok && free.Less(ip) {
			break
		}
		if portsFree(a.addrs[ip], r) {
			return ip, true
		}
	}
	return free, ok
}

func portsFree(st *addrState, r *request) bool {
	for _, p := range r.Ports {
		if h, ok := st.portHolder(p); ok && h != r.Key {
			return false
		}
	}
	return true
}

// checkShare returns nil when ip is free or r may share it with its holders.
func (a *Allocator) checkShare(r *request, ip netip.Addr) error {
	st := a.addrs[ip]
	if st == nil {
		return nil
	}
	if len(st.holders) == 0 || (len(st.holders) == 1 && st.holders[0].key == r.Key) {
		return nil // a sole holder may change its own keys and ports
	}
	if st.sharing != "" && st.sharing == r.SharingKey && st.backend == r.BackendKey && portsFree(st, r) {
		return nil
	}
	var others []Key
	for _, h := range st.holders {
		if h.key != r.Key {
			others = append(others, h.key)
		}
	}
	inUse := func(why string, args ...any) error {
		return newErr(ErrInUse, r.Key, "address %s is in use by %s, "+why, append([]any{ip, joinKeys(others)}, args...)...).
			withAddr(ip).withPool(st.pool.name).withHolders(others)
	}
	switch {
	case st.sharing == "":
		return inUse("which does not allow sharing")
	case r.SharingKey == "":
		return inUse("and this service has no sharing key")
	case st.sharing != r.SharingKey:
		return inUse("with sharing key %q, not %q", st.sharing, r.SharingKey)
	case st.backend != r.BackendKey:
		return newErr(ErrSharingConflict, r.Key, "address %s is shared by %s with backend key %q, not %q (services sharing an address with externalTrafficPolicy Local must select the same pods)",
			ip, joinKeys(others), st.backend, r.BackendKey).withAddr(ip).withPool(st.pool.name).withHolders(others)
	}
	for _, p := range r.Ports {
		if h, ok := st.portHolder(p); ok && h != r.Key {
			return newErr(ErrSharingConflict, r.Key, "port %s on address %s is already used by %s", p, ip, h).
				withAddr(ip).withPool(st.pool.name).withHolders(others)
		}
	}
	return nil
}

// commit replaces r.Key's assignment with ips from p. The caller has checked everything.
func (a *Allocator) commit(r *request, p *pool, ips []netip.Addr) Assignment {
	if old := a.svcs[r.Key]; old != nil {
		a.unregister(old)
	}
	s := &svc{key: r.Key, pool: p, sharing: r.SharingKey, backend: r.BackendKey, ports: slices.Clone(r.Ports)}
	s.ips = append(s.ipbuf[:0], ips...)
	a.register(s)
	return s.assignment()
}

func (s *svc) assignment() Assignment {
	return Assignment{IPs: slices.Clone(s.ips), Pool: s.pool.name}
}

// register records s. Its addresses must be free or shareable with it.
func (a *Allocator) register(s *svc) {
	a.svcs[s.key] = s
	s.pool.services++
	for _, ip := range s.ips {
		st := a.addrs[ip]
		if st == nil {
			fi := FamilyOf(ip).idx()
			if !s.pool.free[fi].take(ip) {
				panic("allocator: registering " + ip.String() + " for " + s.key.String() + ", which is not free in pool " + s.pool.name)
			}
			st = &addrState{pool: s.pool, sharing: s.sharing, backend: s.backend}
			a.addrs[ip] = st
			s.pool.assigned[fi]++
			if s.sharing != "" {
				k := shareKey{fi, s.sharing, s.backend}
				s.pool.shared[k] = insertAddr(s.pool.shared[k], ip)
			}
		}
		if st.holders == nil {
			st.holders = st.one[:0]
		}
		i, _ := st.find(s.key)
		st.holders = slices.Insert(st.holders, i, s)
	}
}

// unregister forgets s and frees the addresses no one else holds.
func (a *Allocator) unregister(s *svc) {
	delete(a.svcs, s.key)
	s.pool.services--
	for _, ip := range s.ips {
		st := a.addrs[ip]
		if i, ok := st.find(s.key); ok {
			st.holders = slices.Delete(st.holders, i, i+1)
		}
		if len(st.holders) > 0 {
			continue
		}
		fi := FamilyOf(ip).idx()
		delete(a.addrs, ip)
		st.pool.free[fi].put(ip)
		st.pool.assigned[fi]--
		if st.sharing != "" {
			k := shareKey{fi, st.sharing, st.backend}
			if l := removeAddr(st.pool.shared[k], ip); len(l) > 0 {
				st.pool.shared[k] = l
			} else {
				delete(st.pool.shared, k)
			}
		}
	}
}

// Release frees whatever k holds. Releasing a Service that holds nothing is a no-op.
func (a *Allocator) Release(k Key) {
	if s := a.svcs[k]; s != nil {
		a.unregister(s)
	}
}

// Get returns what k holds.
func (a *Allocator) Get(k Key) (Assignment, bool) {
	s := a.svcs[k]
	if s == nil {
		return Assignment{}, false
	}
	return s.assignment(), true
}

// Stats returns the counters of the named pool, or false if there is no such pool.
func (a *Allocator) Stats(name string) (PoolStats, bool) {
	p := a.pools[name]
	if p == nil {
		return PoolStats{}, false
	}
	avail := func(fi int) int64 {
		c := p.capacity[fi]
		if c.sat {
			return maxInt64
		}
		return c.v.sub(u128{lo: uint64(p.assigned[fi])}).int64()
	}
	return PoolStats{
		AssignedV4:  p.assigned[0],
		AssignedV6:  p.assigned[1],
		AvailableV4: avail(0),
		AvailableV6: avail(1),
		Services:    p.services,
	}, true
}

const maxInt64 = 1<<63 - 1

func compareKeys(x, y Key) int {
	return cmp.Or(strings.Compare(x.Namespace, y.Namespace), strings.Compare(x.Name, y.Name))
}

func sortedKeys(m map[Key]*svc) []Key {
	ks := make([]Key, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, compareKeys)
	return ks
}

func insertAddr(l []netip.Addr, ip netip.Addr) []netip.Addr {
	i, found := slices.BinarySearchFunc(l, ip, netip.Addr.Compare)
	if found {
		return l
	}
	return slices.Insert(l, i, ip)
}

func removeAddr(l []netip.Addr, ip netip.Addr) []netip.Addr {
	if i, found := slices.BinarySearchFunc(l, ip, netip.Addr.Compare); found {
		return slices.Delete(l, i, i+1)
	}
	return l
}

var defaultFamilies = []Family{IPv4} // never modified

// request is a validated Request.
type request struct {
	Request
	need      []Family     // families to allocate, primary first
	requested []netip.Addr // Requested, unmapped, in need order
}

func validate(req Request) (request, error) {
	r := request{Request: req}
	fams := req.Families
	if len(fams) == 0 {
		fams = defaultFamilies
	}
	if len(fams) > 2 {
		return request{}, newErr(ErrInvalidRequest, req.Key, "more than two ip families %v", fams)
	}
	for _, f := range fams {
		if f != IPv4 && f != IPv6 {
			return request{}, newErr(ErrInvalidRequest, req.Key, "invalid ip family %v", f)
		}
	}
	if len(fams) == 2 && fams[0] == fams[1] {
		return request{}, newErr(ErrInvalidRequest, req.Key, "ip family %v listed twice", fams[0])
	}
	switch req.Policy {
	case SingleStack:
		r.need = fams[:1]
	case PreferDualStack:
		r.need = fams
	case RequireDualStack:
		if len(fams) < 2 {
			return request{}, newErr(ErrInvalidRequest, req.Key, "RequireDualStack with the single ip family %v", fams[0])
		}
		r.need = fams
	default:
		return request{}, newErr(ErrInvalidRequest, req.Key, "invalid ip family policy %v", req.Policy)
	}
	if len(req.Requested) > 0 {
		ips, err := r.addrs(req.Requested, "requested address")
		if err != nil {
			return request{}, err
		}
		r.requested = ips
	}
	return r, nil
}

// addrs checks that ips suit r (one per family, families r needs, both for RequireDualStack) and
// returns them unmapped, primary family first.
func (r *request) addrs(ips []netip.Addr, what string) ([]netip.Addr, error) {
	switch {
	case len(ips) == 0:
		return nil, newErr(ErrInvalidRequest, r.Key, "no address given")
	case len(ips) > 2:
		return nil, newErr(ErrInvalidRequest, r.Key, "more than two addresses %v", ips)
	}
	out := make([]netip.Addr, 0, len(ips))
	for _, ip := range ips {
		if !ip.IsValid() || ip.Zone() != "" {
			return nil, newErr(ErrInvalidRequest, r.Key, "invalid %s %q", what, ip)
		}
		ip = ip.Unmap()
		if !slices.Contains(r.need, FamilyOf(ip)) {
			return nil, newErr(ErrNoFamily, r.Key, "%s %s is %v, but the service is %v %v", what, ip, FamilyOf(ip), r.Policy, r.need).withAddr(ip)
		}
		if len(out) == 1 && FamilyOf(out[0]) == FamilyOf(ip) {
			return nil, newErr(ErrInvalidRequest, r.Key, "two %v addresses %s and %s", FamilyOf(ip), out[0], ip)
		}
		out = append(out, ip)
	}
	if r.Policy == RequireDualStack && len(out) < 2 {
		return nil, newErr(ErrNoFamily, r.Key, "service requires dual-stack, got only %v %s %s", FamilyOf(out[0]), what, out[0]).withAddr(out[0])
	}
	return r.order(out), nil
}

// order sorts ips (one per family) primary family first.
func (r *request) order(ips []netip.Addr) []netip.Addr {
	if len(ips) == 2 && FamilyOf(ips[0]) != r.need[0] {
		ips[0], ips[1] = ips[1], ips[0]
	}
	return ips
}

func (r *request) excluded(pool string) bool { return slices.Contains(r.Excluded, pool) }

func (r *request) needString() string {
	s := make([]string, len(r.need))
	for i, f := range r.need {
		s[i] = f.String()
	}
	if r.Policy == PreferDualStack {
		return strings.Join(s, " or ")
	}
	return strings.Join(s, " and ")
}
