package nftrules_test

import (
	"math"
	"net/netip"
	"testing"

	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/proxy/trace"
	"sigs.k8s.io/knftables"
)

// clientTargets traces n clients to the Service's ClusterIP through the built rules and returns
// each client's endpoint.
func clientTargets(t *testing.T, b *nftrules.Builder, m *nftrules.Model, n int) []netip.AddrPort {
	t.Helper()
	fake, _ := fullFake(t, b, m)
	rs, err := trace.FromFake(knftables.IPv4Family, fake)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]netip.AddrPort, n)
	for i := range n {
		src := netip.AddrFrom4([4]byte{172, 16, byte(i >> 8), byte(i)})
		res, err := rs.Trace(trace.Packet{Src: src, Dst: a("10.96.0.10"), Protocol: "tcp", DPort: 80}, trace.Host{LocalAddrs: hostAddrs})
		if err != nil {
			t.Fatal(err)
		}
		targets := res.Targets()
		if len(targets) != 1 {
			t.Fatalf("client %s: %d possible endpoints, want 1 (hashing)", src, len(targets))
		}
		out[i] = targets[0]
	}
	return out
}

// TestMaglevClients is the acceptance for consistent source hashing, checked on the built
// rules with the kernel's jhash: 1,000 clients keep their endpoint across rebuilds, the three
// endpoints share them evenly, and when one of the three goes at most 1/3 + epsilon of the
// clients move.
func TestMaglevClients(t *testing.T) {
	const clients = 1000
	b := builder(t, nftrules.Config{Family: knftables.IPv4Family})
	eps := []nftrules.Endpoint{ep("10.244.1.5:8080", thisNode), ep("10.244.2.5:8080", "node-b"), ep("10.244.3.5:8080", "node-c")}
	mk := func(eps ...nftrules.Endpoint) *nftrules.Model {
		s := svc("ns1", "hash", []netip.Addr{a("10.96.0.10")}, eps...)
		s.Algorithm = nftrules.Maglev
		return model(testNode(), s)
	}
	first := clientTargets(t, b, mk(eps...), clients)
	again := clientTargets(t, b, mk(eps[2], eps[0], eps[1]), clients) // another node, another order
	share := map[netip.AddrPort]int{}
	for i := range first {
		if first[i] != again[i] {
			t.Fatalf("client %d moved from %s to %s on a rebuild", i, first[i], again[i])
		}
		share[first[i]]++
	}
	for ap, n := range share {
		if math.Abs(float64(n)-clients/3.0) > 0.15*clients/3.0 {
			t.Errorf("%s serves %d of %d clients, want %d +- 15%%", ap, n, clients, clients/3)
		}
	}

	after := clientTargets(t, b, mk(eps[0], eps[2]), clients)
	moved := 0
	for i := range first {
		if first[i] != after[i] {
			moved++
		}
	}
	// 1/n, the table's extra disruption (epsilon 0.5*sqrt(n/size)) and sampling slack.
	limit := 1/3.0 + 0.5*math.Sqrt(3.0/nftrules.DefaultMaglevTableSize) + 0.04
	if f := float64(moved) / clients; f > limit {
		t.Errorf("removing 1 of 3 endpoints moved %.3f of clients, want <= %.3f", f, limit)
	} else {
		t.Logf("removing 1 of 3 endpoints moved %.3f of clients (limit %.3f); shares %v", f, limit, share)
	}
}

// TestRandomAndRoundRobinSpread: both give every endpoint exactly one path (equal probability for
// random, one turn each for round-robin).
func TestRandomAndRoundRobinSpread(t *testing.T) {
	for _, alg := range []nftrules.Algorithm{nftrules.Random, nftrules.RoundRobin} {
		b := builder(t, nftrules.Config{Family: knftables.IPv4Family})
		var eps []nftrules.Endpoint
		for i := range 7 {
			eps = append(eps, nftrules.Endpoint{Addr: netip.AddrFrom4([4]byte{10, 244, byte(i), 5}), Port: 80, Ready: true, Serving: true})
		}
		s := svc("ns1", "spread", []netip.Addr{a("10.96.0.10")}, eps...)
		s.Algorithm = alg
		fake, _ := fullFake(t, b, model(testNode(), s))
		rs, err := trace.FromFake(knftables.IPv4Family, fake)
		if err != nil {
			t.Fatal(err)
		}
		res, err := rs.Trace(tcp("10.244.9.9", "10.96.0.10", 80), trace.Host{})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Paths) != 7 || len(res.Targets()) != 7 {
			t.Errorf("%v: %d paths to %d endpoints, want 7 and 7", alg, len(res.Paths), len(res.Targets()))
		}
	}
}
