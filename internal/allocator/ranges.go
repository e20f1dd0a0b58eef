package allocator

import (
	"cmp"
	"encoding/binary"
	"math"
	"math/bits"
	"net/netip"
	"slices"
	"strings"
)

// Range is an inclusive range of addresses of one family.
type Range struct{ First, Last netip.Addr }

// Family returns the range's family.
func (r Range) Family() Family { return FamilyOf(r.First) }

// Contains reports whether ip lies in r.
func (r Range) Contains(ip netip.Addr) bool {
	return r.First.BitLen() == ip.BitLen() && r.First.Compare(ip) <= 0 && ip.Compare(r.Last) <= 0
}

// valid reports whether r is well formed: both ends valid, unzoned, of one family (no IPv4-mapped IPv6),
// First <= Last.
func (r Range) valid() bool {
	return r.First.IsValid() && r.Last.IsValid() && r.First.Zone() == "" && r.Last.Zone() == "" &&
		r.First.Is4() == r.Last.Is4() && !r.First.Is4In6() && !r.Last.Is4In6() && r.First.Compare(r.Last) <= 0
}

// String prints r as a CIDR when it is exactly one ("10.0.0.0/24", "10.0.0.7/32"), else as
// "first-last". ParseRange parses both forms back to r.
func (r Range) String() string {
	if !r.valid() {
		return r.First.String() + "-" + r.Last.String()
	}
	if p, ok := r.prefix(); ok {
		return p.String()
	}
	return r.First.String() + "-" + r.Last.String()
}

// prefix returns the prefix r covers exactly, if any.
func (r Range) prefix() (netip.Prefix, bool) {
	first, last := toU128(r.First), toU128(r.Last)
	bits := r.First.BitLen()
	for l := 0; l <= bits; l++ {
		host := u128{}.sub1().shr(uint(128 - bits + l)) // bits-l ones
		if first.and(host).isZero() && first.or(host) == last {
			return netip.PrefixFrom(r.First, l), true
		}
	}
	return netip.Prefix{}, false
}

// ParseRange parses one entry of IPAddressPool spec.addresses: a CIDR ("10.0.0.0/24", "fc00::/120") or
// an inclusive range "first-last" (spaces around the dash and the ends are allowed). The result always
// has exactly one element; it is a slice so that callers can append it to Pool.Ranges.
//
// Choices, following MetalLB's config.ParseCIDR unless noted:
//   - A CIDR with host bits set ("10.0.0.1/24") is accepted and masked to its network (10.0.0.0/24), as
//     net.ParseCIDR does. Callers wanting to reject it can compare with the input.
//   - A range may be a single address ("10.0.0.1-10.0.0.1"); a reversed range is an error.
//   - A bare address without "/" or "-" is an error.
//   - Unlike MetalLB, IPv4-mapped IPv6 addresses ("::ffff:10.0.0.1") and zones are rejected instead of
//     being read as IPv4: write the IPv4 form.
//
// Errors wrap ErrInvalidRange.
func ParseRange(s string) ([]Range, error) {
	in := strings.TrimSpace(s)
	if first, last, ok := strings.Cut(in, "-"); ok {
		a, err := parseEnd(s, strings.TrimSpace(first), "start")
		if err != nil {
			return nil, err
		}
		b, err := parseEnd(s, strings.TrimSpace(last), "end")
		if err != nil {
			return nil, err
		}
		if a.Is4() != b.Is4() {
			return nil, newErr(ErrInvalidRange, Key{}, "invalid range %q: %s and %s are of different families", s, a, b)
		}
		if b.Less(a) {
			return nil, newErr(ErrInvalidRange, Key{}, "invalid range %q: start %s is after end %s", s, a, b)
		}
		return []Range{{First: a, Last: b}}, nil
	}
	if !strings.Contains(in, "/") {
		return nil, newErr(ErrInvalidRange, Key{}, "invalid range %q: want a CIDR (10.0.0.0/24) or a range (10.0.0.1-10.0.0.9)", s)
	}
	p, err := netip.ParsePrefix(in)
	if err != nil {
		return nil, newErr(ErrInvalidRange, Key{}, "invalid CIDR %q", s)
	}
	if p.Addr().Is4In6() {
		return nil, newErr(ErrInvalidRange, Key{}, "invalid CIDR %q: IPv4-mapped IPv6 prefix; use the IPv4 form", s)
	}
	p = p.Masked()
	if last := lastOf(p); last.Is4In6() {
		// ::/80 ends in ::ffff:255.255.255.255: an address no host has (found by FuzzParseRange).
		return nil, newErr(ErrInvalidRange, Key{}, "invalid CIDR %q: its last address %s is IPv4-mapped IPv6", s, last)
	}
	return []Range{{First: p.Addr(), Last: lastOf(p)}}, nil
}

func parseEnd(s, end, which string) (netip.Addr, error) {
	a, err := netip.ParseAddr(end)
	switch {
	case err != nil:
		return netip.Addr{}, newErr(ErrInvalidRange, Key{}, "invalid range %q: invalid %s address %q", s, which, end)
	case a.Zone() != "":
		return netip.Addr{}, newErr(ErrInvalidRange, Key{}, "invalid range %q: %s address %s has a zone", s, which, a)
	case a.Is4In6():
		return netip.Addr{}, newErr(ErrInvalidRange, Key{}, "invalid range %q: %s address %s is IPv4-mapped IPv6; use the IPv4 form", s, which, a)
	}
	return a, nil
}

// lastOf returns the last address of a masked prefix.
func lastOf(p netip.Prefix) netip.Addr {
	a := p.Addr()
	host := u128{}.sub1().shr(uint(128 - a.BitLen() + p.Bits()))
	return fromU128(toU128(a).or(host), a.Is4())
}

// buggy reports whether ip is an IPv4 address ending in .0 or .255 (MetalLB's ipConfusesBuggyFirmwares:
// such addresses trip the smurf protection of some CPE firmware).
func buggy(ip netip.Addr) bool {
	if !ip.Is4() {
		return false
	}
	b := ip.As4()
	return b[3] == 0 || b[3] == 255
}

// normalize returns rs cleaned up for one family: invalid ranges dropped, IPv4-mapped ends unmapped and
// zones stripped first, sorted, overlapping and adjacent ranges merged.
func normalize(rs []Range, f Family) []Range {
	var out []Range
	for _, r := range rs {
		r = Range{First: r.First.Unmap().WithZone(""), Last: r.Last.Unmap().WithZone("")}
		if r.valid() && r.Family() == f {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b Range) int { return cmp.Or(a.First.Compare(b.First), a.Last.Compare(b.Last)) })
	merged := out[:0]
	for _, r := range out {
		if n := len(merged); n > 0 {
			prev := &merged[n-1]
			if next := prev.Last.Next(); !next.IsValid() || r.First.Compare(next) <= 0 {
				if prev.Last.Less(r.Last) {
					prev.Last = r.Last
				}
				continue
			}
		}
		merged = append(merged, r)
	}
	return merged
}

// subtract returns the parts of rs (sorted, disjoint) not covered by taken (sorted, disjoint).
func subtract(rs, taken []Range) []Range {
	var out []Range
	j := 0
	for _, r := range rs {
		cur := r
		ok := true
		for j < len(taken) && taken[j].Last.Less(cur.First) {
			j++
		}
		for k := j; k < len(taken) && taken[k].First.Compare(cur.Last) <= 0; k++ {
			t := taken[k]
			if cur.First.Less(t.First) {
				out = append(out, Range{First: cur.First, Last: t.First.Prev()})
			}
			if !t.Last.Less(cur.Last) {
				ok = false
				break
			}
			cur.First = t.Last.Next()
		}
		if ok {
			out = append(out, cur)
		}
	}
	return out
}

// u128 is an unsigned 128-bit integer, used to count addresses.
type u128 struct{ hi, lo uint64 }

func toU128(a netip.Addr) u128 {
	if a.Is4() {
		b := a.As4()
		return u128{lo: uint64(binary.BigEndian.Uint32(b[:]))}
	}
	b := a.As16()
	return u128{hi: binary.BigEndian.Uint64(b[:8]), lo: binary.BigEndian.Uint64(b[8:])}
}

func fromU128(v u128, is4 bool) netip.Addr {
	if is4 {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(v.lo))
		return netip.AddrFrom4(b)
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], v.hi)
	binary.BigEndian.PutUint64(b[8:], v.lo)
	return netip.AddrFrom16(b)
}

func (v u128) isZero() bool     { return v.hi == 0 && v.lo == 0 }
func (v u128) and(w u128) u128  { return u128{v.hi & w.hi, v.lo & w.lo} }
func (v u128) or(w u128) u128   { return u128{v.hi | w.hi, v.lo | w.lo} }
func (v u128) less(w u128) bool { return v.hi < w.hi || (v.hi == w.hi && v.lo < w.lo) }
func (v u128) sub1() u128       { return v.sub(u128{lo: 1}) }
func (v u128) add(w u128) (u128, bool) {
	lo, c := bits.Add64(v.lo, w.lo, 0)
	hi, c := bits.Add64(v.hi, w.hi, c)
	return u128{hi, lo}, c != 0
}

func (v u128) sub(w u128) u128 {
	lo, b := bits.Sub64(v.lo, w.lo, 0)
	hi, _ := bits.Sub64(v.hi, w.hi, b)
	return u128{hi, lo}
}

func (v u128) shr(n uint) u128 {
	switch {
	case n >= 128:
		return u128{}
	case n >= 64:
		return u128{lo: v.hi >> (n - 64)}
	case n == 0:
		return v
	}
	return u128{hi: v.hi >> n, lo: v.lo>>n | v.hi<<(64-n)}
}

// int64 returns v, saturated at math.MaxInt64.
func (v u128) int64() int64 {
	if v.hi != 0 || v.lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v.lo)
}

// count is a saturating address count.
type count struct {
	v   u128
	sat bool // the true value is >= 2^128
}

func (c count) add(n u128) count {
	s, of := c.v.add(n)
	return count{v: s, sat: c.sat || of}
}

// size returns the number of addresses in r as a count (2^128 for the whole IPv6 space).
func (r Range) size() count {
	d := toU128(r.Last).sub(toU128(r.First))
	if d == (u128{hi: math.MaxUint64, lo: math.MaxUint64}) {
		return count{v: d, sat: true}
	}
	return count{v: d.add1()}
}

func (v u128) add1() u128 { s, _ := v.add(u128{lo: 1}); return s }

// buggyIn returns how many addresses of an IPv4 range end in .0 or .255.
func buggyIn(r Range) int64 {
	if !r.First.Is4() {
		return 0
	}
	a, b := int64(toU128(r.First).lo), int64(toU128(r.Last).lo)
	// upTo(n, m) counts x in [0, n] with x%256 == m.
	upTo := func(n, m int64) int64 {
		if n < m {
			return 0
		}
		return (n-m)/256 + 1
	}
	var c int64
	for _, m := range []int64{0, 255} {
		c += upTo(b, m) - upTo(a-1, m)
	}
	return c
}

// Prefixes returns the fewest CIDRs that cover r exactly, in address order ("10.0.0.1-10.0.0.6"
// gives 10.0.0.1/32, 10.0.0.2/31, 10.0.0.4/31, 10.0.0.6/32); nil when r is malformed.
func (r Range) Prefixes() []netip.Prefix {
	if !r.valid() {
		return nil
	}
	var out []netip.Prefix
	bits := r.First.BitLen()
	for a := r.First; ; {
		// The shortest prefix starting at a that ends within r.
		p := netip.PrefixFrom(a, bits)
		for l := 0; l < bits; l++ {
			q := netip.PrefixFrom(a, l)
			if q.Masked().Addr() == a && lastOf(q).Compare(r.Last) <= 0 {
				p = q
				break
			}
		}
		out = append(out, p)
		end := lastOf(p)
		if end.Compare(r.Last) >= 0 {
			return out
		}
		a = end.Next()
	}
}
