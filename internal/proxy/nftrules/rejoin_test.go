package nftrules_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/ironlb/ironlb/internal/proxy/nftrules"
)

// dsrPlanAt is the DSR plan at node of a Service ns1/web (port 80, proto) in DSR mode with eps
// (their Local set for node), with the nodes in dead declared dead.
func dsrPlanAt(node string, proto nftrules.Protocol, ips map[string]netip.Addr, dead []string, eps ...nftrules.Endpoint) nftrules.DSRPlan {
	eps = slices.Clone(eps)
	for i := range eps {
		eps[i].Local = eps[i].Node == node
	}
	s := svc("ns1", "web", []netip.Addr{a("10.96.0.10")}, eps...)
	s.Ports[0].Protocol = proto
	s.LoadBalancerIPs = []netip.Addr{a("192.168.1.240")}
	s.ExternalMode = nftrules.ExternalDSR
	m := model(nftrules.Node{Name: node}, s)
	for _, d := range dead {
		if m.Node.DeadNodes == nil {
			m.Node.DeadNodes = map[string]bool{}
		}
		m.Node.DeadNodes[d] = true
	}
	return nftrules.PlanDSR(m, nftrules.DSRConfig{NodeIPs: ips})
}

// nodeEndpoints returns weights[i] ready endpoints on nodes[i] (port 8080), and the nodes' IPs.
func nodeEndpoints(nodes []string, weights []int) ([]nftrules.Endpoint, map[string]netip.Addr) {
	var eps []nftrules.Endpoint
	ips := map[string]netip.Addr{}
	for i, n := range nodes {
		ips[n] = netip.AddrFrom4([4]byte{192, 168, 1, byte(10 + i)})
		for j := range weights[i] {
			eps = append(eps, ep(fmt.Sprintf("10.244.%d.%d:8080", i+1, j+5), n))
		}
	}
	return eps, ips
}

// checkAltIsTableWithoutSelf checks the rejoin table of node self (plan's one port) against the
// owner table of node other while self is dead to it (and the nodes in dead are dead to both):
// for every bucket self owns, its alternate is other's owner; every other bucket has none.
func checkAltIsTableWithoutSelf(t *testing.T, what, node string, self, other nftrules.DSRPort) {
	t.Helper()
	if len(self.AltBuckets) != len(self.Buckets) {
		t.Fatalf("%s: %d alternates for %d buckets", what, len(self.AltBuckets), len(self.Buckets))
	}
	if len(other.Buckets) != len(self.Buckets) {
		t.Fatalf("%s: %d buckets at the other node, %d here", what, len(other.Buckets), len(self.Buckets))
	}
	for b, alt := range self.AltBuckets {
		owner := self.Owner(uint32(b))
		switch {
		case alt < 0 && owner == node:
			t.Errorf("%s: bucket %d is this node's but has no alternate", what, b)
		case alt >= 0 && owner != node:
			t.Errorf("%s: bucket %d of %s has an alternate (%s)", what, b, owner, self.Nodes[alt])
		case alt >= 0 && self.Nodes[alt] != other.Owner(uint32(b)):
			t.Errorf("%s: bucket %d: alternate %s, but the owner while this node is dead is %s", what, b, self.Nodes[alt], other.Owner(uint32(b)))
		}
	}
}

// TestPlanDSRAltBuckets: the rejoin table (DSRPort.AltBuckets) of this node is, for each bucket it
// owns, the owner the other nodes give that bucket while it is dead to them; nothing for other
// buckets, for UDP (no mid-stream segment to tell), for a node without endpoints, for the only
// node, or when the table without this node has another size.
func TestPlanDSRAltBuckets(t *testing.T) {
	for _, tc := range []struct {
		name    string
		nodes   []string
		weights []int
		dead    []string // dead to every node (besides self, dead to other)
		proto   nftrules.Protocol
		self    string
		other   string // "" if no alternates are expected
	}{
		{"three nodes alive", []string{"node-1", "node-2", "node-3"}, []int{1, 1, 1}, nil, nftrules.TCP, "node-1", "node-2"},
		{"weighted", []string{"node-1", "node-2", "node-3"}, []int{2, 1, 3}, nil, nftrules.TCP, "node-2", "node-3"},
		{"two nodes: every alternate is the other", []string{"node-1", "node-2"}, []int{1, 1}, nil, nftrules.TCP, "node-1", "node-2"},
		{"a third node dead to both: self's share of its buckets too", []string{"node-1", "node-2", "node-3", "node-4"}, []int{1, 2, 1, 1}, []string{"node-3"}, nftrules.TCP, "node-1", "node-4"},
		{"SCTP has none", []string{"node-1", "node-2"}, []int{1, 1}, nil, nftrules.SCTP, "node-1", ""},
		{"UDP has none", []string{"node-1", "node-2"}, []int{1, 1}, nil, nftrules.UDP, "node-1", ""},
		{"the only node has none", []string{"node-1"}, []int{2}, nil, nftrules.TCP, "node-1", ""},
		{"a node without endpoints has none", []string{"node-1", "node-2"}, []int{1, 1}, nil, nftrules.TCP, "node-9", ""},
		// 63 endpoints need a table of 509 buckets, 62 fit in 251: no bucket here names one there.
		{"the table without self has another size", []string{"node-1", "node-2"}, []int{1, 62}, nil, nftrules.TCP, "node-1", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eps, ips := nodeEndpoints(tc.nodes, tc.weights)
			ips["node-9"] = a("192.168.1.99")
			here := dsrPlanAt(tc.self, tc.proto, ips, tc.dead, eps...)
			if len(here.Ports) != 1 {
				t.Fatalf("%d ports", len(here.Ports))
			}
			p := here.Ports[0]
			if tc.other == "" {
				if p.AltBuckets != nil {
					t.Errorf("alternates %v, want none", p.AltBuckets)
				}
				return
			}
			there := dsrPlanAt(tc.other, tc.proto, ips, append(slices.Clone(tc.dead), tc.self), eps...)
			checkAltIsTableWithoutSelf(t, tc.name, tc.self, p, there.Ports[0])
			owned := 0
			for _, alt := range p.AltBuckets {
				if alt >= 0 {
					owned++
				}
			}
			t.Logf("%s owns %d of %d buckets, each with an alternate", tc.self, owned, len(p.Buckets))
		})
	}
}

// TestPropertyAltBucketsIsTableWithoutSelf: for random node sets and weights, a random node R and
// sometimes another node D dead to everyone, R's rejoin table equals, on every bucket R owns, the
// table a random other node computes while R is in its DeadNodes: what the cluster used while R
// was away.
func TestPropertyAltBucketsIsTableWithoutSelf(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 19))
		n := 2 + rng.IntN(6)
		nodes := make([]string, n)
		weights := make([]int, n)
		for i := range nodes {
			nodes[i] = fmt.Sprintf("node-%d", i+1)
			weights[i] = 1 + rng.IntN(3)
		}
		eps, ips := nodeEndpoints(nodes, weights)
		perm := rng.Perm(n)
		r, other := nodes[perm[0]], nodes[perm[1]]
		var dead []string
		if n > 2 && rng.IntN(3) == 0 {
			dead = []string{nodes[perm[2]]}
		}
		what := fmt.Sprintf("seed %d: nodes %v weights %v, %s back, %v dead, seen from %s", seed, nodes, weights, r, dead, other)
		here := dsrPlanAt(r, nftrules.TCP, ips, dead, eps...).Ports[0]
		there := dsrPlanAt(other, nftrules.TCP, ips, append(slices.Clone(dead), r), eps...).Ports[0]
		if !slices.Contains(here.Nodes, r) {
			t.Fatalf("%s: %s is not among the owners %v", what, r, here.Nodes)
		}
		if slices.Index(here.Buckets, slices.Index(here.Nodes, r)) < 0 {
			continue // R owns no bucket (possible with tiny weights beside a dead node's share)
		}
		checkAltIsTableWithoutSelf(t, what, r, here, there)
	}
}

// TestWriteDSRRejoin: the rules of the rejoin table. For a TCP port this node owns buckets of, the
// mangle chain sends a segment with ACK and without SYN that has no conntrack state here, in one of its
// buckets, to the rejoin chain before the loop guard (so forwarded packets are taken too); the
// maps hold exactly this node's buckets, with the alternate owners' marks. A SYN, a tracked flow
// and every other bucket go on as before; UDP ports get no such rule.
func TestWriteDSRRejoin(t *testing.T) {
	eps, ips := nodeEndpoints([]string{"node-1", "node-2", "node-3"}, []int{1, 2, 1})
	for _, proto := range []nftrules.Protocol{nftrules.TCP, nftrules.UDP} {
		plan := dsrPlanAt("node-1", proto, ips, nil, eps...)
		fake := knftables.NewFake(knftables.IPv4Family, nftrules.DSRTableName)
		tx := fake.NewTransaction()
		nftrules.WriteDSR(tx, &plan)
		if err := fake.Run(t.Context(), tx); err != nil {
			t.Fatalf("%s: fake nft refuses the transaction: %v", proto, err)
		}
		p := plan.Ports[0]
		var mangle, rejoinChain string
		for name, c := range fake.Table.Chains {
			switch {
			case strings.HasPrefix(name, "dsr-rejoin-"):
				rejoinChain = name
			case c.Comment != nil && strings.HasPrefix(name, "dsr-") && !strings.HasPrefix(name, "dsr-raw-") && !strings.HasPrefix(name, "dsr-local-"):
				mangle = name
			}
		}
		if proto == nftrules.UDP {
			if rejoinChain != "" || strings.Contains(tx.String(), "rejoin") || strings.Contains(tx.String(), "dsr-alt-") {
				t.Errorf("UDP: rejoin rules written:\n%s", tx)
			}
			continue
		}
		if rejoinChain == "" || mangle == "" {
			t.Fatalf("no rejoin chain (%q) or no mangle chain (%q)", rejoinChain, mangle)
		}
		rules := fake.Table.Chains[mangle].Rules
		jump, guard := -1, -1
		for i, r := range rules {
			if strings.Contains(r.Rule, "vmap @"+rejoinChain) {
				jump = i
				if !strings.HasPrefix(r.Rule, "tcp flags & (syn | ack) == ack ct state new jhash ") {
					t.Errorf("the rejoin rule %q does not take only segments without SYN of flows new here", r.Rule)
				}
			}
			if strings.HasPrefix(r.Rule, "ether saddr @peer-macs") && guard < 0 {
				guard = i
			}
		}
		if jump < 0 || guard < 0 || jump > guard {
			t.Errorf("rejoin rule at %d, loop guard at %d: the rejoin rule must come first", jump, guard)
		}
		// The maps: this node's buckets, each to its alternate owner's NodeID (the ct mark).
		wantAlt := map[string]string{}
		for b, o := range p.AltBuckets {
			if o >= 0 {
				wantAlt[fmt.Sprint(b)] = fmt.Sprintf("0x%x", nftrules.NodeID(plan.NodeIPs[p.Nodes[o]]))
			}
		}
		gotAlt, gotJump := map[string]string{}, map[string]string{}
		altMap := ""
		for name, mp := range fake.Table.Maps {
			for _, e := range mp.Elements {
				switch {
				case strings.HasPrefix(name, "dsr-alt-"):
					altMap = name
					gotAlt[e.Key[0]] = e.Value[0]
				case name == rejoinChain:
					gotJump[e.Key[0]] = e.Value[0]
				}
			}
		}
		if len(wantAlt) == 0 {
			t.Fatal("node-1 owns no bucket")
		}
		if fmt.Sprint(gotAlt) != fmt.Sprint(wantAlt) {
			t.Errorf("map dsr-alt: %v\nwant %v", gotAlt, wantAlt)
		}
		for b := range wantAlt {
			if gotJump[b] != "goto "+rejoinChain {
				t.Errorf("vmap %s: bucket %s -> %q", rejoinChain, b, gotJump[b])
			}
			if p.Owner(uint32(mustAtoi(t, b))) != "node-1" {
				t.Errorf("bucket %s of %s in the rejoin maps", b, p.Owner(uint32(mustAtoi(t, b))))
			}
		}
		if len(gotJump) != len(wantAlt) {
			t.Errorf("vmap %s has %d buckets, want node-1's %d", rejoinChain, len(gotJump), len(wantAlt))
		}
		var chain []string
		for _, r := range fake.Table.Chains[rejoinChain].Rules {
			chain = append(chain, r.Rule)
		}
		if len(chain) != 5 || !strings.HasPrefix(chain[0], "ct mark 0") || !strings.Contains(chain[0], " ct mark set jhash ") || !strings.HasSuffix(chain[0], " map @"+altMap) ||
			!strings.HasPrefix(chain[1], "meta mark set ct mark map @dsr-nodes-") || !strings.HasSuffix(chain[1], " return") ||
			!strings.HasSuffix(chain[2], " map @"+altMap) || chain[3] != "ct mark set meta mark" || !strings.HasPrefix(chain[4], "meta mark set meta mark map @dsr-nodes-") {
			t.Errorf("rejoin chain:\n%s", strings.Join(chain, "\n"))
		}
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPlanDSRAltBucketsJoin: a node that joins (its first endpoints) has as alternates, on every
// bucket it takes, the owners of the table before it joined: a flow the router moves to it
// mid-stream goes on to the node that served it.
func TestPlanDSRAltBucketsJoin(t *testing.T) {
	nodes := []string{"node-1", "node-2", "node-3", "node-4"}
	eps, ips := nodeEndpoints(nodes, []int{1, 2, 1, 1})
	var before []nftrules.Endpoint
	for _, e := range eps {
		if e.Node != "node-4" {
			before = append(before, e)
		}
	}
	joined := dsrPlanAt("node-4", nftrules.TCP, ips, nil, eps...).Ports[0]
	old := dsrPlanAt("node-1", nftrules.TCP, ips, nil, before...).Ports[0]
	checkAltIsTableWithoutSelf(t, "node-4 joined", "node-4", joined, old)
}
