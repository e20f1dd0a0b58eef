package nftapply

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// TestIntervalElementsProperty: for random sets of prefixes and addresses (overlapping, touching,
// reaching either end of the address space), an address is in the elements' intervals, read as
// the kernel reads them (the last start at or below it, unless an interval end is there), exactly
// when it is in one of the inputs; the starts are increasing, and the zero end is there unless an
// interval starts at 0.
func TestIntervalElementsProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	addr4 := func() netip.Addr {
		// A small universe, so that inputs collide, and the edges.
		switch r.IntN(10) {
		case 0:
			return netip.AddrFrom4([4]byte{})
		case 1:
			return netip.AddrFrom4([4]byte{255, 255, 255, 255})
		}
		return netip.AddrFrom4([4]byte{byte(r.IntN(4) * 64), byte(r.IntN(3)), 0, byte(r.IntN(4))})
	}
	for range 2000 {
		var ivs []interval
		var in []netip.Prefix
		for range 1 + r.IntN(5) {
			p := netip.PrefixFrom(addr4(), []int{0, 1, 2, 8, 9, 16, 23, 24, 31, 32}[r.IntN(10)]).Masked()
			in = append(in, p)
			ivs = append(ivs, prefixInterval(p))
		}
		elems, open := intervalElements(slices.Clone(ivs))
		member := func(a netip.Addr) bool {
			var best *netip.Addr
			isEnd := false
			for _, e := range elems {
				k, _ := netip.AddrFromSlice(e.Key)
				if k.Compare(a) <= 0 && (best == nil || k.Compare(*best) > 0) {
					best, isEnd = &k, e.IntervalEnd
				}
			}
			return best != nil && !isEnd
		}
		for range 50 {
			a := addr4()
			if r.IntN(2) == 0 { // next to a boundary
				a = netip.AddrFrom4([4]byte{byte(r.IntN(4)*64 + r.IntN(2)*63), byte(r.IntN(3)), 255 * byte(r.IntN(2)), byte(r.IntN(256))})
			}
			want := slices.ContainsFunc(in, func(p netip.Prefix) bool { return p.Contains(a) })
			if got := member(a); got != want {
				t.Fatalf("%v: %s in %v: %v, want %v (open %v)", in, a, elems, got, want, open)
			}
		}
		var starts []netip.Addr
		zero := false
		for _, e := range elems {
			k, _ := netip.AddrFromSlice(e.Key)
			if !e.IntervalEnd {
				starts = append(starts, k)
			} else if k.IsUnspecified() {
				zero = true
			}
		}
		if !slices.IsSortedFunc(starts, netip.Addr.Compare) {
			t.Fatalf("%v: starts %v not increasing", in, starts)
		}
		if zero == starts[0].IsUnspecified() {
			t.Fatalf("%v: zero end %v with first start %s", in, zero, starts[0])
		}
		last := starts[len(starts)-1]
		if reaches := slices.ContainsFunc(in, func(p netip.Prefix) bool { return p.Contains(netip.AddrFrom4([4]byte{255, 255, 255, 255})) }); reaches != (open != nil) ||
			open != nil && !slices.Equal(open, last.AsSlice()) {
			t.Fatalf("%v: open %v, last start %s", in, open, last)
		}
	}
}
