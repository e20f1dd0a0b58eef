package allocator

import "net/netip"

// freeSet holds the free addresses of one pool and one family as sorted, disjoint intervals, stored in a
// treap keyed by interval start. Every operation costs O(log n) expected, n being the number of
// intervals (at most one more than the number of addresses in use), whatever the size of the pool.
//
// With avoid set (AvoidBuggyIPs), the IPv4 addresses ending in .0 and .255 are never handed out, so they
// are never in use either. They may sit inside intervals, but no interval consists only of them: such an
// interval is dropped when it would appear, and intervals separated only by them are joined. Hence the
// lowest usable address is at most two steps from the start of the first interval.
type freeSet struct {
	root  *fnode
	n     int
	avoid bool
	prio  *uint64 // shared priority generator state (deterministic)
}

type fnode struct {
	lo, hi netip.Addr
	prio   uint64
	l, r   *fnode
}

func newFreeSet(avoid bool, prio *uint64, rs []Range) *freeSet {
	s := &freeSet{avoid: avoid, prio: prio}
	for _, r := range rs {
		s.insert(r.First, r.Last)
	}
	return s
}

// nextPrio is splitmix64: well-spread, deterministic treap priorities.
func (s *freeSet) nextPrio() uint64 {
	*s.prio += 0x9e3779b97f4a7c15
	z := *s.prio
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// merge joins two treaps, every key of a below every key of b.
func merge(a, b *fnode) *fnode {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case a.prio > b.prio:
		a.r = merge(a.r, b)
		return a
	}
	b.l = merge(a, b.l)
	return b
}

// split cuts t into the nodes with lo < k and those with lo >= k.
func split(t *fnode, k netip.Addr) (*fnode, *fnode) {
	if t == nil {
		return nil, nil
	}
	if t.lo.Less(k) {
		l, r := split(t.r, k)
		t.r = l
		return t, r
	}
	l, r := split(t.l, k)
	t.l = r
	return l, t
}

func removeMin(t *fnode) *fnode {
	if t.l == nil {
		return t.r
	}
	t.l = removeMin(t.l)
	return t
}

// insert adds [lo, hi], which must not overlap the set, unless it holds no usable address.
func (s *freeSet) insert(lo, hi netip.Addr) {
	if s.unusable(lo, hi) {
		return
	}
	n := &fnode{lo: lo, hi: hi, prio: s.nextPrio()}
	l, r := split(s.root, lo)
	s.root = merge(merge(l, n), r)
	s.n++
}

// remove deletes node n from the set.
func (s *freeSet) remove(n *fnode) {
	l, r := split(s.root, n.lo) // n is the minimum of r
	s.root = merge(l, removeMin(r))
	s.n--
}

// floor returns the interval with the greatest start <= x.
func (s *freeSet) floor(x netip.Addr) *fnode {
	var best *fnode
	for t := s.root; t != nil; {
		if x.Less(t.lo) {
			t = t.l
		} else {
			best, t = t, t.r
		}
	}
	return best
}

// above returns the interval with the least start > x.
func (s *freeSet) above(x netip.Addr) *fnode {
	var best *fnode
	for t := s.root; t != nil; {
		if x.Less(t.lo) {
			best, t = t, t.l
		} else {
			t = t.r
		}
	}
	return best
}

func (s *freeSet) min() *fnode {
	t := s.root
	if t == nil {
		return nil
	}
	for t.l != nil {
		t = t.l
	}
	return t
}

// contains reports whether x is free (usable or not).
func (s *freeSet) contains(x netip.Addr) bool {
	n := s.floor(x)
	return n != nil && !n.hi.Less(x)
}

// lowest returns the lowest free usable address.
func (s *freeSet) lowest() (netip.Addr, bool) {
	n := s.min()
	if n == nil {
		return netip.Addr{}, false
	}
	for c, i := n.lo, 0; i < 3 && c.IsValid() && !n.hi.Less(c); c, i = c.Next(), i+1 {
		if !s.avoid || !buggy(c) {
			return c, true
		}
	}
	panic("allocator: free interval " + n.lo.String() + "-" + n.hi.String() + " holds no usable address")
}

// take marks x, which must be free, as used. It reports whether x was free.
func (s *freeSet) take(x netip.Addr) bool {
	n := s.floor(x)
	if n == nil || n.hi.Less(x) {
		return false
	}
	switch {
	case n.lo == x && n.hi == x:
		s.remove(n)
	case n.lo == x:
		n.lo = x.Next()
		if s.unusable(n.lo, n.hi) {
			s.remove(n)
		}
	case n.hi == x:
		n.hi = x.Prev()
		if s.unusable(n.lo, n.hi) {
			s.remove(n)
		}
	default:
		hi := n.hi
		n.hi = x.Prev()
		if s.unusable(n.lo, n.hi) {
			s.remove(n)
		}
		s.insert(x.Next(), hi)
	}
	return true
}

// put marks x, which must be used (not in the set), as free again.
func (s *freeSet) put(x netip.Addr) {
	p, q := s.floor(x), s.above(x)
	joinL := p != nil && s.adjacent(p.hi, x)
	joinR := q != nil && s.adjacent(x, q.lo)
	switch {
	case joinL && joinR:
		hi := q.hi
		s.remove(q)
		p.hi = hi
	case joinL:
		p.hi = x
	case joinR:
		q.lo = x // still above p.hi: the order of starts is unchanged
	default:
		s.insert(x, x)
	}
}

// adjacent reports whether a < b can be joined: nothing or only never-used buggy addresses lie between.
func (s *freeSet) adjacent(a, b netip.Addr) bool {
	c := a.Next()
	for i := 0; i < 3 && c.IsValid(); i, c = i+1, c.Next() {
		if c == b {
			return true
		}
		if !s.avoid || !buggy(c) {
			return false
		}
	}
	return false
}

// unusable reports whether [lo, hi] holds no address that may be handed out.
func (s *freeSet) unusable(lo, hi netip.Addr) bool {
	if !s.avoid || !lo.Is4() {
		return false
	}
	for c, i := lo, 0; i < 3; c, i = c.Next(), i+1 {
		if !buggy(c) {
			return false
		}
		if c == hi {
			return true
		}
	}
	return false
}

// each calls f for every interval in order.
func (s *freeSet) each(f func(lo, hi netip.Addr)) {
	var walk func(*fnode)
	walk = func(t *fnode) {
		if t == nil {
			return
		}
		walk(t.l)
		f(t.lo, t.hi)
		walk(t.r)
	}
	walk(s.root)
}
