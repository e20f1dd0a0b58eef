package allocator

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"
)

// carveFront marks the first n addresses of the (untouched) free set as used, without Services: a
// stand-in for the millions of Services a 90% full /8 or /64 would need. Only the benchmarks use it.
func (s *freeSet) carveFront(n uint64) {
	m := s.min()
	if n == 0 || m == nil {
		return
	}
	v := toU128(m.lo)
	lo, _ := v.add(u128{lo: n})
	m.lo = fromU128(lo, m.lo.Is4())
	if m.hi.Less(m.lo) {
		panic("carveFront past the interval")
	}
}

// BenchmarkAllocate measures one release plus one allocation in a pool kept 90% full. The cost depends
// on the number of free intervals and Services, not on the size of the pool: up to 60,000 addresses
// below the free frontier are held by real Services; the rest of the 90% is carved out of the free set
// directly.
func BenchmarkAllocate(b *testing.B) {
	for _, tc := range []struct {
		name   string
		cidr   string
		size   uint64
		family Family
	}{
		{"v4-24", "10.0.0.0/24", 1 << 8, IPv4},
		{"v4-16", "10.0.0.0/16", 1 << 16, IPv4},
		{"v4-8", "10.0.0.0/8", 1 << 24, IPv4},
		{"v6-64", "fc00::/64", 1 << 63, IPv6}, // 2^64 does not fit: 90% of 2^63 below, then the same
	} {
		b.Run(tc.name, func(b *testing.B) {
			used := tc.size / 10 * 9
			if tc.family == IPv6 {
				used *= 2 // 90% of 2^64, computed without overflow
			}
			real := min(used, 60000)
			a := New()
			a.SetPools([]Pool{mkPool(b, "p", true, false, tc.cidr)})
			a.pools["p"].free[tc.family.idx()].carveFront(used - real)
			keys := make([]Key, real)
			for i := range keys {
				keys[i] = Key{Namespace: "bench", Name: fmt.Sprint("svc-", i)}
			}
			req := Request{Families: []Family{tc.family}, Candidates: []string{"p"}, Ports: tcp(80)}
			for _, k := range keys {
				req.Key = k
				if _, err := a.Allocate(req); err != nil {
					b.Fatal(err)
				}
			}
			var last netip.Addr
			churn := func(i int) {
				req.Key = keys[uint64(i)*7919%real]
				a.Release(req.Key)
				got, err := a.Allocate(req)
				if err != nil {
					b.Fatal(err)
				}
				last = got.IPs[0]
			}
			// Short runs (-benchtime 2000x) must not pay for the setup's garbage or cold caches.
			for i := 0; i < 1000; i++ {
				churn(i)
			}
			runtime.GC()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				churn(i)
			}
			b.StopTimer()
			b.ReportMetric(float64(a.pools["p"].free[tc.family.idx()].n), "free-intervals")
			if !last.IsValid() {
				b.Fatal("no allocation")
			}
		})
	}
}

// BenchmarkAllocateFragmented is the bad case for the free set: a /16 where every other address is
// free (about 32,000 free intervals), with a release and an allocation per iteration.
func BenchmarkAllocateFragmented(b *testing.B) {
	a := New()
	a.SetPools([]Pool{mkPool(b, "p", true, false, "10.0.0.0/16")})
	const n = 1 << 16
	keys := make([]Key, n)
	req := Request{Candidates: []string{"p"}, Ports: tcp(80)}
	for i := range keys {
		keys[i] = Key{Namespace: "bench", Name: fmt.Sprint("svc-", i)}
		req.Key = keys[i]
		if _, err := a.Allocate(req); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < n; i += 2 {
		a.Release(keys[i])
	}
	// Odd keys hold addresses; even keys are free to use.
	runtime.GC()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		held := keys[(uint64(i)*7919%(n/2))*2+1]
		a.Release(held)
		req.Key = held
		if _, err := a.Allocate(req); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(a.pools["p"].free[0].n), "free-intervals")
}

// BenchmarkAllocate10k allocates 10,000 Services into an empty /16, one allocator per iteration.
func BenchmarkAllocate10k(b *testing.B) {
	const n = 10000
	pools := []Pool{mkPool(b, "p", true, true, "10.0.0.0/16")}
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = Request{Key: Key{Namespace: "bench", Name: fmt.Sprint("svc-", i)}, Candidates: []string{"p"}, Ports: tcp(80)}
	}
	runtime.GC()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		a := New()
		a.SetPools(pools)
		for _, r := range reqs {
			if _, err := a.Allocate(r); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/service")
}
