package election

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ironlb/ironlb/internal/testbed/fuzzbytes"
)

// gen decodes an election from fuzz input (package fuzzbytes: once the input is exhausted it reads
// zeros). A choice among one reads nothing (fuzzbytes' N).
type gen struct{ *fuzzbytes.Reader }

func (g *gen) bit() bool { return g.N(2) == 1 }

func pick[T any](g *gen, xs ...T) T { return xs[g.N(len(xs))] }

var fuzzNames = []string{"n0", "n1", "n2", "n3", "n4", "n5", ""}

func (g *gen) subset(xs ...string) []string {
	var out []string
	for _, x := range xs {
		if g.bit() {
			out = append(out, x)
		}
	}
	return out
}

func (g *gen) selector() Selector {
	var s Selector
	if g.bit() {
		s.MatchLabels = map[string]string{pick(g, "zone", "role"): pick(g, "a", "b", "edge")}
	}
	for range g.N(3) {
		s.MatchExpressions = append(s.MatchExpressions, Requirement{
			Key:      pick(g, "zone", "role"),
			Operator: pick(g, In, NotIn, Exists, DoesNotExist, Operator("Bogus")),
			Values:   g.subset("a", "b", "edge"),
		})
	}
	return s
}

func (g *gen) input() (Input, []Node) {
	var nodes []Node
	for range pick(g, 0, 1, 2, 3, 3, 4, 5, 7) {
		n := Node{
			Name:               pick(g, fuzzNames...),
			Alive:              g.N(6) > 0,
			Excluded:           g.N(8) == 0,
			NetworkUnavailable: g.N(8) == 0,
			Interfaces:         g.subset("eth0", "eth1"),
			ReadySince:         pick(g, now.Add(-time.Hour), now.Add(-10*time.Second), now.Add(-time.Minute), time.Time{}, now.Add(5*time.Second), now.Add(-3*time.Hour)),
			Labels:             map[string]string{},
		}
		if z := pick(g, "a", "b", ""); z != "" {
			n.Labels["zone"] = z
		}
		if g.bit() {
			n.Labels["role"] = "edge"
		}
		nodes = append(nodes, n)
	}
	var in Input
	for range pick(g, 1, 0, 1, 2, 3) {
		var a Advertisement
		for range pick(g, 0, 0, 1, 2) {
			a.NodeSelectors = append(a.NodeSelectors, g.selector())
		}
		if g.bit() {
			a.Interfaces = g.subset("eth0", "eth1", "eth2")
		}
		in.Advertisements = append(in.Advertisements, a)
	}
	addrs := []netip.Addr{
		netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fc00::1"),
		netip.MustParseAddr("::ffff:10.0.0.2"), netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fc00::2"), {},
	}
	for i := range pick(g, 1, 0, 1, 2, 3, 1, 2) {
		s := Service{Key: string(rune('a' + i)), Local: g.bit()}
		for range pick(g, 1, 0, 1, 2, 1, 2) {
			s.Addrs = append(s.Addrs, pick(g, addrs...))
		}
		for range pick(g, 2, 0, 1, 3, 5) {
			s.Endpoints = append(s.Endpoints, Endpoint{Node: pick(g, append(fuzzNames, "x")...), Ready: g.bit(), Serving: g.bit()})
		}
		in.Services = append(in.Services, s)
	}
	in.Current = pick(g, append(fuzzNames, "gone")...)
	in.HoldDown = pick(g, 0, 30*time.Second, 2*time.Hour)
	in.Sticky, in.Spread = g.bit(), g.bit()
	return in, nodes
}

// oracle computes, without the package's code paths (except Selector.Matches, tested on its own),
// which nodes may announce: eligible nodes, and among them those whose local endpoints are all ready.
func oracle(in Input, nodes []Node) (eligible, readyTier map[string]bool) {
	eligible, readyTier = map[string]bool{}, map[string]bool{}
	count := map[string]int{}
	for _, n := range nodes {
		count[n.Name]++
	}
	valid := false
	for _, s := range in.Services {
		valid = valid || slices.ContainsFunc(s.Addrs, netip.Addr.IsValid)
	}
	activeSvc := func(s Service) bool {
		return slices.ContainsFunc(s.Endpoints, func(e Endpoint) bool { return e.Ready || e.Serving })
	}
	if !valid || len(in.Advertisements) == 0 || !slices.ContainsFunc(in.Services, activeSvc) {
		return
	}
	for _, n := range nodes {
		if n.Name == "" || count[n.Name] != 1 || !n.Alive || n.ReadySince.IsZero() || n.Excluded || n.NetworkUnavailable {
			continue
		}
		ok := false
		for _, a := range in.Advertisements {
			sel := len(a.NodeSelectors) == 0
			for _, s := range a.NodeSelectors {
				sel = sel || s.Matches(n.Labels)
			}
			if sel && (len(a.Interfaces) == 0 || slices.ContainsFunc(a.Interfaces, func(i string) bool { return slices.Contains(n.Interfaces, i) })) {
				ok = true
			}
		}
		ready := true
		for _, s := range in.Services {
			if !s.Local || !activeSvc(s) {
				continue
			}
			ok = ok && slices.ContainsFunc(s.Endpoints, func(e Endpoint) bool { return e.Node == n.Name && (e.Ready || e.Serving) })
			ready = ready && slices.ContainsFunc(s.Endpoints, func(e Endpoint) bool { return e.Node == n.Name && e.Ready })
		}
		eligible[n.Name] = ok
		readyTier[n.Name] = ok && ready
	}
	return
}

func checkElect(t *testing.T, in Input, nodes []Node) {
	before := cloneNodes(nodes)
	d := Elect(in, nodes, now)
	if diff := cmp.Diff(before, nodes); diff != "" {
		t.Fatalf("Elect modified its nodes:\n%s", diff)
	}
	eligible, readyTier := oracle(in, nodes)
	anyEligible, anyReady := false, false
	var best []string // eligible nodes of the preferred tier
	for n, ok := range eligible {
		anyEligible = anyEligible || ok
		anyReady = anyReady || readyTier[n]
	}
	for n, ok := range eligible {
		if ok && (readyTier[n] || !anyReady) {
			best = append(best, n)
		}
	}

	if (d.Node != "") != (d.Reason == Announced) {
		t.Fatalf("node %q with reason %s", d.Node, d.Reason)
	}
	if d.Node != "" && !slices.Contains(best, d.Node) {
		t.Fatalf("announcer %q is not among the preferred eligible nodes %v: %+v", d.Node, best, d)
	}
	if anyEligible && d.Node == "" {
		t.Fatalf("no announcer, but eligible nodes %v: %+v", eligible, d)
	}

	// PerNode covers every other name, and says "eligible" exactly for eligible nodes.
	names := map[string]bool{}
	for _, n := range nodes {
		if n.Name != "" && n.Name != d.Node {
			names[n.Name] = true
		}
	}
	if len(d.PerNode) != len(names) {
		t.Fatalf("PerNode %v for nodes %v", d.PerNode, names)
	}
	for n, r := range d.PerNode {
		if !names[n] || r == "" || r.Eligible() != eligible[n] {
			t.Fatalf("PerNode[%q] = %q, eligible %v", n, r, eligible[n])
		}
	}

	// Failback policy.
	if d.Node != "" {
		curOK := slices.Contains(best, in.Current)
		settled := func(name string) bool {
			i := slices.IndexFunc(nodes, func(n Node) bool { return n.Name == name })
			return in.HoldDown <= 0 || now.Sub(nodes[i].ReadySince) >= in.HoldDown
		}
		switch {
		case in.Sticky && curOK && d.Node != in.Current:
			t.Fatalf("sticky: %q took the address from eligible %q", d.Node, in.Current)
		case !in.Sticky && in.HoldDown == 0 && d.Node != Rank(d.Key, best)[0]:
			t.Fatalf("MetalLB policy: %q announces, rank %v", d.Node, Rank(d.Key, best))
		case curOK && d.Node != in.Current && !settled(d.Node):
			t.Fatalf("%q in hold-down took the address from eligible %q", d.Node, in.Current)
		}
		if _, ok := AnnounceInterfaces(in.Advertisements, nodes[slices.IndexFunc(nodes, func(n Node) bool { return n.Name == d.Node })]); !ok {
			t.Fatalf("announcer %q has no interface to announce on", d.Node)
		}
	}
	switch {
	case in.Spread && d.Node != "":
		if !slices.IsSorted(d.Spread) || !slices.Contains(d.Spread, d.Node) {
			t.Fatalf("spread %v, announcer %q", d.Spread, d.Node)
		}
		for _, n := range d.Spread {
			if !slices.Contains(best, n) {
				t.Fatalf("spread member %q not among %v", n, best)
			}
		}
	case d.Spread != nil:
		t.Fatalf("spread %v without spread mode or announcer", d.Spread)
	}

	// Determinism: the same election with every list reversed or rotated gives the same decision.
	for _, perm := range []func(Input, []Node) (Input, []Node){reverseAll, rotateAll} {
		in2, nodes2 := perm(in, nodes)
		if diff := cmp.Diff(d, Elect(in2, nodes2, now), decisionOpts); diff != "" {
			t.Fatalf("order changed the decision (-first +permuted):\n%s", diff)
		}
	}
}

func cloneNodes(ns []Node) []Node {
	out := slices.Clone(ns)
	for i := range out {
		out[i].Interfaces = slices.Clone(ns[i].Interfaces)
		out[i].Labels = map[string]string{}
		for k, v := range ns[i].Labels {
			out[i].Labels[k] = v
		}
	}
	return out
}

func permuteAll(in Input, nodes []Node, p func([]int)) (Input, []Node) {
	permute := func(n int) []int {
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i
		}
		p(idx)
		return idx
	}
	var out []Node
	for _, i := range permute(len(nodes)) {
		n := nodes[i]
		n.Interfaces = slices.Clone(n.Interfaces)
		p2 := permute(len(n.Interfaces))
		for j, k := range p2 {
			n.Interfaces[j] = nodes[i].Interfaces[k]
		}
		out = append(out, n)
	}
	in2 := in
	in2.Advertisements = nil
	for _, i := range permute(len(in.Advertisements)) {
		in2.Advertisements = append(in2.Advertisements, in.Advertisements[i])
	}
	in2.Services = nil
	for _, i := range permute(len(in.Services)) {
		s := in.Services[i]
		s.Endpoints = nil
		for _, j := range permute(len(in.Services[i].Endpoints)) {
			s.Endpoints = append(s.Endpoints, in.Services[i].Endpoints[j])
		}
		in2.Services = append(in2.Services, s)
	}
	return in2, out
}

func reverseAll(in Input, nodes []Node) (Input, []Node) { return permuteAll(in, nodes, slices.Reverse) }

func rotateAll(in Input, nodes []Node) (Input, []Node) {
	return permuteAll(in, nodes, func(idx []int) {
		if len(idx) > 1 {
			first := idx[0]
			copy(idx, idx[1:])
			idx[len(idx)-1] = first
		}
	})
}

// FuzzElect checks on random elections: the announcer is always eligible and of the preferred tier,
// there is one whenever a node is eligible, PerNode is complete and consistent, the failback policy
// holds, and the decision does not depend on the order of nodes, interfaces, advertisements,
// Services or endpoints.
func FuzzElect(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x03\x00\x03\x00\x01\x01\x00\x01\x00\x01\x01\x01\x02\x05\x01\x00\x03\x00\x02\x03\x01\x00\x01\x02"))
	f.Add([]byte("ironlb election seed: three nodes, two ads, local services, sticky hold-down spread"))
	f.Add(make([]byte, 200))
	f.Add([]byte("\x07\x01\x03\x05\x00\x00\x01\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11"))
	f.Fuzz(func(t *testing.T, data []byte) {
		g := &gen{fuzzbytes.New(data)}
		in, nodes := g.input()
		checkElect(t, in, nodes)
	})
}

// TestElectRandom runs FuzzElect's checks on pseudo-random inputs, so plain `go test` covers them too.
func TestElectRandom(t *testing.T) {
	b := make([]byte, 400)
	state := uint64(1)
	reasons := map[Reason]int{}
	for i := 0; i < 3000; i++ {
		for j := range b {
			state = state*6364136223846793005 + 1442695040888963407
			b[j] = byte(state >> 56)
		}
		g := &gen{fuzzbytes.New(b)}
		in, nodes := g.input()
		checkElect(t, in, nodes)
		reasons[Elect(in, nodes, now).Reason]++
	}
	t.Logf("decisions: %v", reasons)
	if reasons[Announced] < 300 {
		t.Errorf("only %d of 3000 random elections announce: the generator is too restrictive", reasons[Announced])
	}
}
