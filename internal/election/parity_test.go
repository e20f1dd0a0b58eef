package election

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// metallbWinner is MetalLB v0.16's layer2Controller.ShouldAnnounce for ETP Cluster, written from its
// source: the candidates are the live speakers minus NetworkUnavailable and excluded nodes, sorted by
// sha256(node + "#" + lbIPs[0].String()) with bytes.Compare, and the first wins. It uses net.IP, as
// MetalLB does, so the text hashed is net.IP's.
func metallbWinner(lbIPs []net.IP, nodes []Node) string {
	var avail []string
	for _, n := range nodes {
		if n.Alive && !n.NetworkUnavailable && !n.Excluded {
			avail = append(avail, n.Name)
		}
	}
	ipString := lbIPs[0].String()
	sort.Slice(avail, func(i, j int) bool {
		hi := sha256.Sum256([]byte(avail[i] + "#" + ipString))
		hj := sha256.Sum256([]byte(avail[j] + "#" + ipString))
		return bytes.Compare(hi[:], hj[:]) < 0
	})
	if len(avail) == 0 {
		return ""
	}
	return avail[0]
}

// sampleAddrs returns n IPv4 and n IPv6 addresses spread over a few ranges.
func sampleAddrs(n int) []netip.Addr {
	var out []netip.Addr
	v4 := netip.MustParseAddr("172.18.255.200")
	v6 := netip.MustParseAddr("fc00:f853:ccd:e793::100")
	for i := 0; i < n; i++ {
		out = append(out, v4, v6)
		v4, v6 = v4.Next(), v6.Next()
	}
	return out
}

// TestMetalLBParity checks that with the zero failback policy Elect picks MetalLB's winner, and that
// Rank is MetalLB's whole order, for 400 addresses and random clusters of 1 to 12 nodes in which some
// nodes are down, excluded or without network.
func TestMetalLBParity(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, a := range sampleAddrs(200) {
		nodes := make([]Node, 1+rng.IntN(12))
		names := make([]string, len(nodes))
		for j := range nodes {
			nodes[j] = mkNode(fmt.Sprintf("worker-%d", rng.IntN(1000)*100+j))
			nodes[j].Alive = rng.IntN(5) > 0
			nodes[j].Excluded = rng.IntN(8) == 0
			nodes[j].NetworkUnavailable = rng.IntN(8) == 0
			names[j] = nodes[j].Name
		}
		ip := net.ParseIP(a.String())
		want := metallbWinner([]net.IP{ip}, nodes)
		in := Input{Services: []Service{mkSvc("default/svc", a.String())}, Advertisements: []Advertisement{allNodes}}
		if rng.IntN(2) == 0 { // the current announcer does not matter without a failback policy
			in.Current = names[rng.IntN(len(names))]
		}
		got := Elect(in, nodes, now)
		if got.Node != want {
			t.Errorf("%s over %v: Elect chose %q, MetalLB %q", a, names, got.Node, want)
		}
		if want == "" && got.Reason != NoEligibleNode || want != "" && got.Reason != Announced {
			t.Errorf("%s: reason %s with winner %q", a, got.Reason, want)
		}

		// Rank is MetalLB's whole order, over all nodes.
		mlb := append([]string(nil), names...)
		sort.Slice(mlb, func(x, y int) bool {
			hx := sha256.Sum256([]byte(mlb[x] + "#" + ip.String()))
			hy := sha256.Sum256([]byte(mlb[y] + "#" + ip.String()))
			return bytes.Compare(hx[:], hy[:]) < 0
		})
		if diff := cmp.Diff(mlb, Rank(a, names)); diff != "" {
			t.Errorf("Rank(%s) differs from MetalLB's order (-metallb +ours):\n%s", a, diff)
		}
	}
}

// TestMetalLBParityIPv4Mapped: MetalLB hashes net.IP.String(), which writes an IPv4-mapped address as
// IPv4, so a mapped address must rank as its IPv4 form.
func TestMetalLBParityIPv4Mapped(t *testing.T) {
	names := []string{"a", "b", "c", "d", "e"}
	plain := netip.MustParseAddr("10.0.0.7")
	mapped := netip.AddrFrom16(plain.As16())
	if !cmp.Equal(Rank(plain, names), Rank(mapped, names)) {
		t.Errorf("Rank(%s) = %v, Rank(%s) = %v", plain, Rank(plain, names), mapped, Rank(mapped, names))
	}
	d := Elect(Input{Services: []Service{{Addrs: []netip.Addr{mapped}, Endpoints: []Endpoint{{Ready: true}}}}, Advertisements: []Advertisement{allNodes}},
		[]Node{mkNode("a"), mkNode("b"), mkNode("c")}, now)
	if d.Key != plain || !cmp.Equal(d.Addrs, []netip.Addr{plain}, decisionOpts) {
		t.Errorf("mapped address not unmapped: key %s, addrs %v", d.Key, d.Addrs)
	}
}

func TestRank(t *testing.T) {
	a := netip.MustParseAddr("10.0.0.1")
	if Rank(a, nil) != nil {
		t.Error("Rank of no nodes must be nil")
	}
	in := []string{"c", "a", "b", "a"}
	got := Rank(a, in)
	if !cmp.Equal(in, []string{"c", "a", "b", "a"}) {
		t.Error("Rank modified its input")
	}
	if len(got) != 4 {
		t.Fatalf("Rank = %v", got)
	}
	var at []int
	for i, n := range got {
		if n == "a" {
			at = append(at, i)
		}
	}
	if len(at) != 2 || at[1] != at[0]+1 {
		t.Errorf("equal names not adjacent: %v", got)
	}
}

// TestDualStack: both families of a Service go to one node, keyed on the first address as MetalLB's
// lbIPs[0], whichever family is primary.
func TestDualStack(t *testing.T) {
	nodes := []Node{mkNode("n1"), mkNode("n2"), mkNode("n3"), mkNode("n4"), mkNode("n5")}
	names := []string{"n1", "n2", "n3", "n4", "n5"}
	v4s, v6s := sampleAddrs(100), sampleAddrs(100)
	for i := 0; i < len(v4s); i += 2 {
		v4, v6 := v4s[i], v6s[i+1]
		for _, order := range [][]netip.Addr{{v4, v6}, {v6, v4}} {
			svc := Service{Key: "default/ds", Addrs: order, Endpoints: []Endpoint{{Ready: true}}}
			d := Elect(Input{Services: []Service{svc}, Advertisements: []Advertisement{allNodes}}, nodes, now)
			if d.Key != order[0] || d.Node != Rank(order[0], names)[0] {
				t.Fatalf("%v: key %s node %s, want key %s node %s", order, d.Key, d.Node, order[0], Rank(order[0], names)[0])
			}
			if !cmp.Equal(d.Addrs, []netip.Addr{v4, v6}, decisionOpts) {
				t.Fatalf("%v: addrs %v", order, d.Addrs)
			}
			ips := []net.IP{net.ParseIP(order[0].String()), net.ParseIP(order[1].String())}
			if mlb := metallbWinner(ips, nodes); mlb != d.Node {
				t.Fatalf("%v: MetalLB %s, Elect %s", order, mlb, d.Node)
			}
		}
	}
}

func TestGroup(t *testing.T) {
	svc := func(key string, addrs ...string) Service { return mkSvc(key, addrs...) }
	a := svc("ns/a", "10.0.0.1", "fc00::1")
	b := svc("ns/b", "10.0.0.1")
	c := svc("ns/c", "fc00::1", "10.0.0.1") // IPv6-primary, sharing both
	d := svc("ns/d", "10.0.0.2")
	e := svc("ns/e", "fc00::9", "10.0.0.3")
	f := svc("ns/f", "10.0.0.3") // joins e through 10.0.0.3
	g := svc("ns/g", "10.0.0.4")
	h := svc("ns/h", "fc00::9") // joins e
	none := Service{Key: "ns/pending"}
	got := Group([]Service{h, g, f, none, e, d, c, b, a})
	want := [][]Service{{a, b, c}, {d}, {e, f, h}, {g}}
	if diff := cmp.Diff(want, got, decisionOpts); diff != "" {
		t.Fatalf("Group (-want +got):\n%s", diff)
	}
	if Group(nil) != nil {
		t.Error("Group(nil) must be nil")
	}
	// Each group's key and addresses.
	wantKeys := []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"}
	for i, g := range got {
		k, all := addresses(g)
		if k.String() != wantKeys[i] {
			t.Errorf("group %d key %s, want %s", i, k, wantKeys[i])
		}
		if i == 2 && !cmp.Equal(all, ips("10.0.0.3", "fc00::9"), decisionOpts) {
			t.Errorf("group %d addrs %v", i, all)
		}
	}
}

// TestSharedIPSameNode: Services sharing an address land on the same node, whatever their address
// order and whichever Services the group holds; one Elect per group gives one node for all.
func TestSharedIPSameNode(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var nodes []Node
	for i := 0; i < 7; i++ {
		nodes = append(nodes, mkNode(fmt.Sprintf("n%d", i)))
	}
	split := 0 // cases where MetalLB's per-Service election splits the address
	for i := 0; i < 300; i++ {
		v4 := netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)})
		v6 := netip.AddrFrom16([16]byte{0xfc, 0, 15: byte(i)})
		svcs := []Service{
			{Key: "ns/v4-first", Addrs: []netip.Addr{v4, v6}, Endpoints: []Endpoint{{Ready: true}}},
			{Key: "ns/v6-first", Addrs: []netip.Addr{v6, v4}, Endpoints: []Endpoint{{Ready: true}}},
			{Key: "ns/v4-only", Addrs: []netip.Addr{v4}, Endpoints: []Endpoint{{Ready: true}}},
		}
		rng.Shuffle(len(svcs), func(x, y int) { svcs[x], svcs[y] = svcs[y], svcs[x] })
		groups := Group(svcs)
		if len(groups) != 1 {
			t.Fatalf("%d groups for Services sharing %s", len(groups), v4)
		}
		d := Elect(Input{Services: groups[0], Advertisements: []Advertisement{allNodes}}, nodes, now)
		if d.Key != v4 || d.Node == "" || !cmp.Equal(d.Addrs, []netip.Addr{v4, v6}, decisionOpts) {
			t.Fatalf("%s: %+v", v4, d)
		}
		if metallbWinner([]net.IP{net.ParseIP(v6.String())}, nodes) != metallbWinner([]net.IP{net.ParseIP(v4.String())}, nodes) {
			split++
		}
	}
	t.Logf("MetalLB's per-Service election (keyed on each Service's first address) would split the IPv4-primary and IPv6-primary Services over two nodes in %d of 300 cases", split)
}

func TestSelector(t *testing.T) {
	labels := map[string]string{"zone": "a", "role": "edge", "empty": ""}
	for _, tc := range []struct {
		name string
		sel  Selector
		want bool
	}{
		{"zero matches all", Selector{}, true},
		{"matchLabels", Selector{MatchLabels: map[string]string{"zone": "a", "role": "edge"}}, true},
		{"matchLabels wrong value", Selector{MatchLabels: map[string]string{"zone": "b"}}, false},
		{"matchLabels missing key", Selector{MatchLabels: map[string]string{"rack": ""}}, false},
		{"matchLabels empty value", Selector{MatchLabels: map[string]string{"empty": ""}}, true},
		{"In", Selector{MatchExpressions: []Requirement{{"zone", In, []string{"b", "a"}}}}, true},
		{"In miss", Selector{MatchExpressions: []Requirement{{"zone", In, []string{"b"}}}}, false},
		{"In missing key", Selector{MatchExpressions: []Requirement{{"rack", In, []string{"1"}}}}, false},
		{"In no values", Selector{MatchExpressions: []Requirement{{"zone", In, nil}}}, false},
		{"NotIn", Selector{MatchExpressions: []Requirement{{"zone", NotIn, []string{"b"}}}}, true},
		{"NotIn hit", Selector{MatchExpressions: []Requirement{{"zone", NotIn, []string{"a"}}}}, false},
		{"NotIn missing key", Selector{MatchExpressions: []Requirement{{"rack", NotIn, []string{"1"}}}}, true},
		{"NotIn no values", Selector{MatchExpressions: []Requirement{{"zone", NotIn, nil}}}, true},
		{"Exists", Selector{MatchExpressions: []Requirement{{"role", Exists, nil}}}, true},
		{"Exists miss", Selector{MatchExpressions: []Requirement{{"rack", Exists, nil}}}, false},
		{"DoesNotExist", Selector{MatchExpressions: []Requirement{{"rack", DoesNotExist, nil}}}, true},
		{"DoesNotExist miss", Selector{MatchExpressions: []Requirement{{"zone", DoesNotExist, nil}}}, false},
		{"unknown operator", Selector{MatchExpressions: []Requirement{{"zone", "Gt", []string{"1"}}}}, false},
		{"labels and expressions ANDed", Selector{MatchLabels: map[string]string{"zone": "a"}, MatchExpressions: []Requirement{{"role", DoesNotExist, nil}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.sel.Matches(labels); got != tc.want {
				t.Errorf("Matches = %v, want %v", got, tc.want)
			}
		})
	}
	ad := Advertisement{NodeSelectors: []Selector{{MatchLabels: map[string]string{"zone": "b"}}, {MatchLabels: map[string]string{"role": "edge"}}}}
	if !ad.Selects(labels) {
		t.Error("node selectors must be ORed")
	}
	if !(Advertisement{}).Selects(nil) {
		t.Error("no node selectors must select every node")
	}
}
