package election

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// BenchmarkElect measures one full election round: Elect for 10,000 addresses over 100 nodes, as a
// speaker does after a node event. ns/op is the whole round; ns/addr is per address.
func BenchmarkElect(b *testing.B) {
	const nAddrs, nNodes = 10000, 100
	names := make([]string, nNodes)
	nodes := make([]Node, nNodes)
	for i := range nodes {
		names[i] = fmt.Sprintf("worker-%03d.example.internal", i)
		nodes[i] = mkNode(names[i])
		nodes[i].Labels["zone"] = string(rune('a' + i%3))
		nodes[i].Interfaces = []string{"eth0", "eth1"}
		if i%10 == 0 {
			nodes[i].ReadySince = now.Add(-5 * time.Second) // in hold-down
		}
	}
	addrs := append(addrRange("10.128.0.1", nAddrs/2), addrRange("fc00:f853:ccd:e793::1", nAddrs/2)...)
	selective := []Advertisement{{
		NodeSelectors: []Selector{{MatchExpressions: []Requirement{{Key: "zone", Operator: In, Values: []string{"a", "b"}}}}},
		Interfaces:    []string{"eth1"},
	}}

	for _, tc := range []struct {
		name string
		mk   func(i int, a netip.Addr) Input
	}{
		{"cluster", func(_ int, a netip.Addr) Input { return input(a, "", 0, false) }},
		{"cluster-holddown-sticky", func(i int, a netip.Addr) Input {
			in := input(a, names[i%nNodes], 30*time.Second, true)
			return in
		}},
		{"selectors-interfaces", func(_ int, a netip.Addr) Input {
			in := input(a, "", 0, false)
			in.Advertisements = selective
			return in
		}},
		{"local-3-endpoints", func(i int, a netip.Addr) Input {
			in := input(a, "", 30*time.Second, false)
			in.Services[0].Local = true
			in.Services[0].Endpoints = []Endpoint{
				{Node: names[i%nNodes], Ready: true}, {Node: names[(i+7)%nNodes], Ready: true}, {Node: names[(i+31)%nNodes], Serving: true},
			}
			return in
		}},
		{"spread", func(_ int, a netip.Addr) Input {
			in := input(a, "", 30*time.Second, false)
			in.Spread = true
			return in
		}},
	} {
		ins := make([]Input, nAddrs)
		for i, a := range addrs {
			ins[i] = tc.mk(i, a)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			announced := 0
			for b.Loop() {
				announced = 0
				for i := range ins {
					if Elect(ins[i], nodes, now).Node != "" {
						announced++
					}
				}
			}
			if announced != nAddrs {
				b.Fatalf("%d of %d addresses announced", announced, nAddrs)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/nAddrs, "ns/addr")
		})
	}
}

// BenchmarkRingOwner measures answering one client in spread mode over 100 nodes, the per-ARP-request
// cost, with the Ring built once per address.
func BenchmarkRingOwner(b *testing.B) {
	names := make([]string, 100)
	for i := range names {
		names[i] = fmt.Sprintf("worker-%03d", i)
	}
	ring := NewRing(netip.MustParseAddr("172.18.255.200"), names)
	clients := addrRange("172.18.0.2", 1024)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_ = ring.Owner(clients[i&1023])
		i++
	}
}
