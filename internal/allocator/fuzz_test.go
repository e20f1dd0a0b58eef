package allocator

import (
	"errors"
	"testing"
)

func FuzzParseRange(f *testing.F) {
	for _, s := range []string{
		"10.0.0.0/24", "192.168.1.10-192.168.1.20", "fc00::/120", "10.0.0.1 - 10.0.0.5", "10.0.0.1/24",
		"10.0.0.5-10.0.0.1", "10.0.0.1-fc00::1", "::ffff:1.2.3.4-::ffff:1.2.3.5", "fe80::1%eth0-fe80::2",
		"0.0.0.0/0", "::/0", "10.0.0.1", "-", "/", "1.2.3.4/33", "fc00::1-fc00::1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rs, err := ParseRange(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidRange) || rs != nil {
				t.Fatalf("ParseRange(%q) = %v, %v: want nil and ErrInvalidRange", s, rs, err)
			}
			return
		}
		if len(rs) != 1 {
			t.Fatalf("ParseRange(%q) = %v: want one range", s, rs)
		}
		r := rs[0]
		if !r.valid() {
			t.Fatalf("ParseRange(%q) = %v: invalid range (First<=Last, one family, no zone, no 4in6)", s, r)
		}
		back, err := ParseRange(r.String())
		if err != nil || len(back) != 1 || back[0] != r {
			t.Fatalf("round trip of %q via %q: %v, %v", s, r.String(), back, err)
		}
		// A pool of it has a sane size.
		a := New()
		a.SetPools([]Pool{{Name: "p", Ranges: rs, AvoidBuggyIPs: true, AutoAssign: true}})
		st, _ := a.Stats("p")
		size := r.size()
		switch {
		case r.First.Is4() && (st.AvailableV6 != 0 || st.AvailableV4 < 0 || uint64(st.AvailableV4) > size.v.lo):
			t.Fatalf("stats of %v: %+v", r, st)
		case r.First.Is6() && (st.AvailableV4 != 0 || st.AvailableV6 < 1 || st.AvailableV6 != size.v.int64() && !size.sat):
			t.Fatalf("stats of %v: %+v", r, st)
		}
	})
}

// FuzzAllocate decodes a sequence of operations (pool changes, allocations, assignments, releases) from
// the input and checks every invariant of TestProperties after each.
func FuzzAllocate(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f"))
	f.Add([]byte("ironlb allocator seed: lowest free, shared, dual-stack, evicted"))
	f.Add(make([]byte, 300))
	f.Fuzz(func(t *testing.T, data []byte) {
		src := &byteSource{b: data}
		h := newHarness(t, src)
		h.setPools([]Pool{h.randPool("p0"), h.randPool("p1")})
		h.check()
		for i := 0; i < 200 && !src.done(); i++ {
			h.step()
		}
	})
}
