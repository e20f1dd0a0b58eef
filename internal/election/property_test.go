package election

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// chi2Crit holds the chi-square critical values at p = 0.001 by degrees of freedom: a fair hash fails
// one such check in a thousand.
var chi2Crit = map[int]float64{2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52, 6: 22.46, 7: 24.32, 8: 26.12, 9: 27.88}

// checkBalance asserts that counts look like a uniform multinomial sample: every node within 5
// standard deviations of the mean, and the chi-square statistic below the p = 0.001 critical value.
func checkBalance(t *testing.T, what string, counts map[string]int, nodes []string, total int) {
	t.Helper()
	p := 1 / float64(len(nodes))
	mean := float64(total) * p
	sd := math.Sqrt(float64(total) * p * (1 - p))
	chi2, worst := 0.0, 0.0
	for _, n := range nodes {
		c := float64(counts[n])
		chi2 += (c - mean) * (c - mean) / mean
		z := math.Abs(c-mean) / sd
		worst = max(worst, z)
		if z > 5 {
			t.Errorf("%s: node %s has %d of %d, mean %.1f (%.1f sd away)", what, n, counts[n], total, mean, z)
		}
	}
	if chi2 > chi2Crit[len(nodes)-1] {
		t.Errorf("%s: chi-square %.1f over %d nodes exceeds %.2f: %v", what, chi2, len(nodes), chi2Crit[len(nodes)-1], counts)
	}
	t.Logf("%s: %d nodes, chi-square %.1f (limit %.1f), worst node %.2f sd from the mean", what, len(nodes), chi2, chi2Crit[len(nodes)-1], worst)
}

func nodeNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("worker-%02d", i)
	}
	return out
}

func mkNodes(names []string) []Node {
	out := make([]Node, len(names))
	for i, n := range names {
		out[i] = mkNode(n)
	}
	return out
}

func addrRange(first string, n int) []netip.Addr {
	a := netip.MustParseAddr(first)
	out := make([]netip.Addr, n)
	for i := range out {
		out[i] = a
		a = a.Next()
	}
	return out
}

// TestAddressesSpread: 1,000 consecutive addresses of each family spread evenly over 3 to 10 nodes.
func TestAddressesSpread(t *testing.T) {
	for _, first := range []string{"192.168.0.1", "fc00:f853:ccd:e793::1"} {
		addrs := addrRange(first, 1000)
		for n := 3; n <= 10; n++ {
			names := nodeNames(n)
			nodes := mkNodes(names)
			counts := map[string]int{}
			for _, a := range addrs {
				d := Elect(Input{Services: []Service{{Addrs: []netip.Addr{a}, Endpoints: []Endpoint{{Ready: true}}}}, Advertisements: []Advertisement{allNodes}}, nodes, now)
				counts[d.Node]++
			}
			checkBalance(t, "addresses from "+first, counts, names, len(addrs))
		}
	}
}

// TestClientsSpread: in spread mode, 10,000 clients of one address spread evenly over 3 to 10 nodes.
func TestClientsSpread(t *testing.T) {
	vip := netip.MustParseAddr("172.18.255.200")
	rng := rand.New(rand.NewPCG(5, 6))
	for _, clients := range [][]netip.Addr{addrRange("172.18.0.2", 10000), randomV6(rng, 10000)} {
		for n := 3; n <= 10; n++ {
			names := nodeNames(n)
			ring := NewRing(vip, names)
			counts := map[string]int{}
			for _, c := range clients {
				counts[ring.Owner(c)]++
			}
			checkBalance(t, "clients from "+clients[0].String(), counts, names, len(clients))
		}
	}
}

func randomV6(rng *rand.Rand, n int) []netip.Addr {
	out := make([]netip.Addr, n)
	for i := range out {
		var b [16]byte
		b[0], b[1] = 0x20, 0x01
		for j := 2; j < 16; j++ {
			b[j] = byte(rng.Uint32())
		}
		out[i] = netip.AddrFrom16(b)
	}
	return out
}

// TestRemoveNodeMovesOnlyItsAddresses: when a node goes, exactly the addresses it announced move, each
// to its second node in rank; when it returns (after its hold-down, without Sticky) exactly those move
// back. Checked for every node of clusters of 3 to 10 and 1,000 addresses, for the MetalLB-like policy
// and for hold-down.
func TestRemoveNodeMovesOnlyItsAddresses(t *testing.T) {
	addrs := addrRange("10.20.0.1", 1000)
	for n := 3; n <= 10; n++ {
		names := nodeNames(n)
		nodes := mkNodes(names)
		for _, hold := range []time.Duration{0, time.Minute} {
			before := make([]string, len(addrs))
			for i, a := range addrs {
				before[i] = Elect(input(a, "", hold, false), nodes, now).Node
			}
			for k := range nodes {
				gone := names[k]
				rest := slices.Delete(slices.Clone(nodes), k, k+1)
				moved := 0
				for i, a := range addrs {
					d := Elect(input(a, before[i], hold, false), rest, now)
					switch {
					case before[i] != gone && d.Node != before[i]:
						t.Fatalf("n=%d hold=%v: %s moved from %s to %s when %s left", n, hold, a, before[i], d.Node, gone)
					case before[i] == gone && d.Node != Rank(a, names)[1]:
						t.Fatalf("n=%d: %s went to %s, not its second in rank %s", n, a, d.Node, Rank(a, names)[1])
					case before[i] == gone:
						moved++
					}
					// The node returns, ready for longer than the hold-down.
					back := Elect(input(a, d.Node, hold, false), nodes, now)
					if back.Node != before[i] {
						t.Fatalf("n=%d hold=%v: after %s returned, %s is on %s, was on %s", n, hold, gone, a, back.Node, before[i])
					}
				}
				if limit := float64(len(addrs))/float64(n) + 0.05*float64(len(addrs)); float64(moved) > limit {
					t.Errorf("n=%d: %d of %d addresses moved when %s left, more than 1/N + 5%%", n, moved, len(addrs), gone)
				}
			}
		}
	}
}

// TestStickyMovesOnlyFailedAddresses: with Sticky, addresses move only when their node fails, and a
// returning node gets none back.
func TestStickyMovesOnlyFailedAddresses(t *testing.T) {
	addrs := addrRange("10.30.0.1", 1000)
	names := nodeNames(5)
	nodes := mkNodes(names)
	cur := make([]string, len(addrs))
	for i, a := range addrs {
		cur[i] = Elect(input(a, "", time.Minute, true), nodes, now).Node
	}
	down := slices.Clone(nodes)
	down[2].Alive = false
	for i, a := range addrs {
		d := Elect(input(a, cur[i], time.Minute, true), down, now)
		if cur[i] != names[2] && d.Node != cur[i] {
			t.Fatalf("%s moved from %s to %s", a, cur[i], d.Node)
		}
		if d.Node == names[2] {
			t.Fatalf("%s on the failed node", a)
		}
		cur[i] = d.Node
	}
	// The node returns and stays ready for an hour: nothing moves back.
	for i, a := range addrs {
		if d := Elect(input(a, cur[i], time.Minute, true), nodes, now.Add(time.Hour)); d.Node != cur[i] {
			t.Fatalf("sticky %s moved from %s to %s", a, cur[i], d.Node)
		}
	}
}

func input(a netip.Addr, current string, hold time.Duration, sticky bool) Input {
	return Input{
		Services:       []Service{{Addrs: []netip.Addr{a}, Endpoints: []Endpoint{{Ready: true}}}},
		Advertisements: []Advertisement{allNodes},
		Current:        current, HoldDown: hold, Sticky: sticky,
	}
}

// TestRingFailover: when one of N nodes goes, only the clients it answered move (about 1/N, asserted
// ≤ 1/N + 5%); when it returns, only the clients it wins move, all to it.
func TestRingFailover(t *testing.T) {
	vip := netip.MustParseAddr("fc00::200")
	rng := rand.New(rand.NewPCG(7, 8))
	clients := append(addrRange("172.18.0.2", 5000), randomV6(rng, 5000)...)
	for n := 3; n <= 10; n++ {
		names := nodeNames(n)
		full := NewRing(vip, names)
		owner := make([]string, len(clients))
		for i, c := range clients {
			owner[i] = full.Owner(c)
		}
		for k, gone := range names {
			rest := NewRing(vip, slices.Delete(slices.Clone(names), k, k+1))
			moved, had := 0, 0
			for i, c := range clients {
				o := rest.Owner(c)
				if owner[i] == gone {
					had++
				}
				if o == owner[i] {
					continue
				}
				moved++
				if owner[i] != gone {
					t.Fatalf("n=%d: client %s moved from %s to %s when %s left", n, c, owner[i], o, gone)
				}
			}
			frac := float64(moved) / float64(len(clients))
			if moved != had || frac > 1/float64(n)+0.05 {
				t.Errorf("n=%d, %s left: %d clients moved (%.3f), it had %d; limit 1/N+5%% = %.3f", n, gone, moved, frac, had, 1/float64(n)+0.05)
			}
			if k == 0 {
				t.Logf("n=%d: %.2f%% of clients moved when one node left (1/N = %.2f%%)", n, 100*frac, 100/float64(n))
			}
			// Returning: every client that moves goes to the returning node.
			for _, c := range clients {
				if o := full.Owner(c); o != rest.Owner(c) && o != gone {
					t.Fatalf("n=%d: client %s moved to %s when %s returned", n, c, o, gone)
				}
			}
		}
	}
}

func TestRing(t *testing.T) {
	vip := netip.MustParseAddr("10.0.0.1")
	client := netip.MustParseAddr("10.0.0.77")
	if (Ring{}).Owner(client) != "" || NewRing(vip, nil).Owner(client) != "" || NewRing(vip, []string{""}).Owner(client) != "" {
		t.Error("an empty ring must have no owner")
	}
	r := NewRing(vip, []string{"c", "a", "", "b", "a"})
	if !slices.Equal(r.Nodes(), []string{"a", "b", "c"}) || r.Len() != 3 {
		t.Errorf("Nodes = %v", r.Nodes())
	}
	for _, perm := range [][]string{{"a", "b", "c"}, {"c", "b", "a"}, {"b", "a", "c", "c"}} {
		if got := NewRing(vip, perm).Owner(client); got != r.Owner(client) {
			t.Errorf("owner depends on order: %v gives %s, want %s", perm, got, r.Owner(client))
		}
	}
	mapped := netip.AddrFrom16(client.As16())
	if r.Owner(mapped) != r.Owner(client) || NewRing(netip.AddrFrom16(vip.As16()), r.Nodes()).Owner(client) != r.Owner(client) {
		t.Error("IPv4-mapped addresses must count as IPv4")
	}
	// Different addresses spread the same client differently: over 200 addresses the client must not
	// always get the same node.
	seen := map[string]bool{}
	for _, a := range addrRange("10.0.1.0", 200) {
		seen[NewRing(a, r.Nodes()).Owner(client)] = true
	}
	if len(seen) != 3 {
		t.Errorf("one client over 200 addresses reached only %v", seen)
	}
}

// TestRingStable pins a few owners, so that a change of hash (which would make speakers of different
// versions disagree during an upgrade) is noticed.
func TestRingStable(t *testing.T) {
	names := nodeNames(5)
	vip := netip.MustParseAddr("172.18.255.200")
	var got []string
	for _, c := range addrRange("172.18.0.100", 8) {
		got = append(got, NewRing(vip, names).Owner(c))
	}
	want := []string{"worker-02", "worker-02", "worker-01", "worker-00", "worker-03", "worker-04", "worker-04", "worker-04"}
	if !slices.Equal(got, want) {
		t.Errorf("owners of 172.18.0.100-107 = %q, want %q", got, want)
	}
}
