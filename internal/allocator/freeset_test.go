package allocator

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// check verifies the treap and interval invariants of s.
func (s *freeSet) check() error {
	var prev *fnode
	n := 0
	var err error
	var walk func(t *fnode, parentPrio uint64, root bool)
	walk = func(t *fnode, parentPrio uint64, root bool) {
		if t == nil || err != nil {
			return
		}
		if !root && t.prio > parentPrio {
			err = fmt.Errorf("heap order broken at %v", t.lo)
		}
		walk(t.l, t.prio, false)
		n++
		switch {
		case t.hi.Less(t.lo):
			err = fmt.Errorf("reversed interval %v-%v", t.lo, t.hi)
		case prev != nil && !prev.hi.Less(t.lo):
			err = fmt.Errorf("intervals %v-%v and %v-%v overlap or are unsorted", prev.lo, prev.hi, t.lo, t.hi)
		case s.unusable(t.lo, t.hi):
			err = fmt.Errorf("interval %v-%v holds no usable address", t.lo, t.hi)
		}
		prev = t
		walk(t.r, t.prio, false)
	}
	walk(s.root, 0, true)
	if err == nil && n != s.n {
		err = fmt.Errorf("count %d, %d nodes", s.n, n)
	}
	return err
}

// TestFreeSetModel drives a freeSet over a few /24s with random takes and puts and compares it with a
// plain set of used addresses after every step.
func TestFreeSetModel(t *testing.T) {
	for _, avoid := range []bool{false, true} {
		for seed := uint64(1); seed <= 6; seed++ {
			t.Run(fmt.Sprintf("avoid=%v/seed=%d", avoid, seed), func(t *testing.T) {
				rnd := rand.New(rand.NewPCG(seed, 7))
				first := netip.MustParseAddr("10.0.0.250")
				last := netip.MustParseAddr("10.0.3.5")
				var all []netip.Addr
				for a := first; a.Compare(last) <= 0; a = a.Next() {
					all = append(all, a)
				}
				var prio uint64
				s := newFreeSet(avoid, &prio, []Range{{first, last}})
				used := map[netip.Addr]bool{}
				for step := 0; step < 2000; step++ {
					ip := all[rnd.IntN(len(all))]
					if avoid && buggy(ip) {
						continue
					}
					if used[ip] {
						s.put(ip)
						delete(used, ip)
					} else {
						if !s.take(ip) {
							t.Fatalf("step %d: take(%v) reported not free", step, ip)
						}
						used[ip] = true
					}
					if err := s.check(); err != nil {
						t.Fatalf("step %d: %v", step, err)
					}
					var wantLow netip.Addr
					for _, a := range all {
						if avoid && buggy(a) {
							continue
						}
						if s.contains(a) == used[a] {
							t.Fatalf("step %d: contains(%v) = %v, used %v", step, a, s.contains(a), used[a])
						}
						if !used[a] && !wantLow.IsValid() {
							wantLow = a
						}
					}
					got, ok := s.lowest()
					if ok != wantLow.IsValid() || got != wantLow {
						t.Fatalf("step %d: lowest() = %v, %v; want %v", step, got, ok, wantLow)
					}
				}
			})
		}
	}
}

func TestFreeSetEdges(t *testing.T) {
	var prio uint64
	// A whole IPv6 /64 and the top of the IPv4 space are single intervals.
	s := newFreeSet(false, &prio, []Range{rng("fc00::", "fc00::ffff:ffff:ffff:ffff")})
	for i := 0; i < 3; i++ {
		ip, _ := s.lowest()
		s.take(ip)
	}
	s.take(netip.MustParseAddr("fc00::ffff:ffff:ffff:ffff"))
	if got, _ := s.lowest(); got != netip.MustParseAddr("fc00::3") || s.n != 1 {
		t.Errorf("lowest = %v with %d intervals, want fc00::3 in 1", got, s.n)
	}
	s.put(netip.MustParseAddr("fc00::1"))
	if got, _ := s.lowest(); got != netip.MustParseAddr("fc00::1") || s.n != 2 {
		t.Errorf("lowest = %v with %d intervals, want fc00::1 in 2", got, s.n)
	}

	a := newFreeSet(true, &prio, []Range{rng("255.255.255.254", "255.255.255.255")})
	if ip, ok := a.lowest(); !ok || ip != netip.MustParseAddr("255.255.255.254") {
		t.Fatalf("lowest = %v %v", ip, ok)
	}
	a.take(netip.MustParseAddr("255.255.255.254"))
	if ip, ok := a.lowest(); ok {
		t.Errorf("lowest after exhausting = %v", ip)
	}
	a.put(netip.MustParseAddr("255.255.255.254"))
	if err := a.check(); err != nil || a.n != 1 {
		t.Errorf("check: %v, n=%d", err, a.n)
	}
	// A range of buggy addresses only holds nothing.
	if b := newFreeSet(true, &prio, []Range{rng("10.0.0.255", "10.0.1.0")}); b.n != 0 {
		t.Errorf("buggy-only range kept: %d intervals", b.n)
	}
}
