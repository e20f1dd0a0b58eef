package nftrules_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"sigs.k8s.io/knftables"
)

// dsrModel is a LoadBalancer Service in DSR mode with endpoints on node-b (2) and node-c (1),
// none on this node, and one on this node for the second Service.
func dsrModel() (*nftrules.Model, nftrules.DSRConfig) {
	v4 := []netip.Addr{a("10.96.0.10")}
	s := svc("ns1", "web", v4, ep("10.244.2.5:8080", "node-b"), ep("10.244.2.6:8080", "node-b"), ep("10.244.3.5:8080", "node-c"))
	s.LoadBalancerIPs = []netip.Addr{a("192.168.1.240"), a("fd00::240")}
	s.ExternalMode = nftrules.ExternalDSR
	u := svc("ns1", "dns", []netip.Addr{a("10.96.0.11")}, ep("10.244.1.5:53", thisNode), ep("10.244.3.6:53", "node-c"))
	u.Ports[0].Protocol, u.Ports[0].Port = nftrules.UDP, 53
	u.ExternalIPs = []netip.Addr{a("192.168.1.241")}
	// u is in the default mode, dsr here.
	snat := svc("ns1", "plain", []netip.Addr{a("10.96.0.12")}, ep("10.244.3.7:80", "node-c"))
	snat.LoadBalancerIPs = []netip.Addr{a("192.168.1.242")}
	snat.ExternalMode = nftrules.ExternalSNAT
	local := svc("ns1", "local", []netip.Addr{a("10.96.0.13")}, ep("10.244.3.8:80", "node-c"))
	local.LoadBalancerIPs = []netip.Addr{a("192.168.1.243")}
	local.ExternalMode = nftrules.ExternalDSR
	local.ExternalTrafficPolicyLocal = true
	m := &nftrules.Model{
		Node: nftrules.Node{Name: thisNode, ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}},
		Services: map[nftrules.ServiceKey]*nftrules.Service{
			s.Key(): s, u.Key(): u, snat.Key(): snat, local.Key(): local,
		},
	}
	cfg := nftrules.DSRConfig{
		Default: nftrules.ExternalDSR,
		NodeIPs: map[string]netip.Addr{thisNode: a("192.168.1.10"), "node-b": a("192.168.1.11"), "node-c": a("192.168.1.12")},
	}
	return m, cfg
}

func TestPlanDSR(t *testing.T) {
	m, cfg := dsrModel()
	plan := nftrules.PlanDSR(m, cfg)
	want := "ns1/dns udp/53 [192.168.1.241] nodes=[node-a node-c] weights=[1 1] keep=[node-a node-c] local=[10.244.1.5:53]\n" +
		"ns1/web tcp/80 [192.168.1.240] nodes=[node-b node-c] weights=[2 1] keep=[node-b node-c] local=[]\n"
	if diff := cmp.Diff(want, plan.String()); diff != "" {
		t.Errorf("ports (-want +got):\n%s", diff)
	}
	wantSlots := map[string]int{thisNode: 1, "node-b": 2, "node-c": 3}
	if diff := cmp.Diff(wantSlots, plan.Slots); diff != "" {
		t.Errorf("slots (-want +got):\n%s", diff)
	}
	wantRoutes := []nftrules.DSRRoute{{Node: "node-b", Slot: 2, IP: a("192.168.1.11")}, {Node: "node-c", Slot: 3, IP: a("192.168.1.12")}}
	if diff := cmp.Diff(wantRoutes, plan.Routes, cmp.Comparer(func(x, y netip.Addr) bool { return x == y })); diff != "" {
		t.Errorf("routes (-want +got):\n%s", diff)
	}
	var refused []string
	for k, notes := range plan.Refused {
		for _, n := range notes {
			refused = append(refused, k.String()+" "+string(n.Reason))
		}
	}
	slices.Sort(refused)
	wantRefused := []string{"ns1/local " + string(nftrules.RefuseLocalPolicy), "ns1/web " + string(nftrules.RefuseIPv6)}
	if diff := cmp.Diff(wantRefused, refused); diff != "" {
		t.Errorf("refused (-want +got):\n%s", diff)
	}
	// Slots are kept from the previous plan.
	cfg.Slots = map[string]int{"node-c": 7}
	plan = nftrules.PlanDSR(m, cfg)
	if diff := cmp.Diff(map[string]int{thisNode: 1, "node-b": 2, "node-c": 7}, plan.Slots); diff != "" {
		t.Errorf("kept slots (-want +got):\n%s", diff)
	}
}

// TestPlanDSRSameOnEveryNode: every node computes the same owner table whatever the order of
// the endpoints, so a flow's owner does not depend on its entry node.
func TestPlanDSRSameOnEveryNode(t *testing.T) {
	m, cfg := dsrModel()
	k := nftrules.ServiceKey{Namespace: "ns1", Name: "web"}
	var ref []int
	for i, node := range []string{thisNode, "node-b", "node-c"} {
		mm := *m
		mm.Node.Name = node
		s := *m.Services[k]
		s.Ports = slices.Clone(s.Ports)
		eps := slices.Clone(s.Ports[0].Endpoints)
		rand.New(rand.NewPCG(uint64(i), 1)).Shuffle(len(eps), func(x, y int) { eps[x], eps[y] = eps[y], eps[x] })
		for j := range eps {
			eps[j].Local = eps[j].Node == node
		}
		s.Ports[0].Endpoints = eps
		mm.Services = map[nftrules.ServiceKey]*nftrules.Service{k: &s}
		plan := nftrules.PlanDSR(&mm, cfg)
		if len(plan.Ports) != 1 {
			t.Fatalf("%s: %d ports", node, len(plan.Ports))
		}
		var owners []int
		for b := range plan.Ports[0].Buckets {
			owners = append(owners, map[string]int{"node-b": 0, "node-c": 1}[plan.Ports[0].Owner(uint32(b))])
		}
		if ref == nil {
			ref = owners
		} else if !slices.Equal(ref, owners) {
			t.Errorf("%s: owner table differs from %s's", node, thisNode)
		}
	}
}

func TestWeightedNodeTable(t *testing.T) {
	nodes := []string{"n1", "n2", "n3", "n4"}
	weights := []int{1, 2, 3, 4}
	tab := nftrules.WeightedNodeTable(nodes, weights, 251)
	count := make([]int, len(nodes))
	for _, o := range tab {
		count[o]++
	}
	for i, c := range count {
		want := float64(len(tab)) * float64(weights[i]) / 10
		if f := float64(c); f < want*0.9-1 || f > want*1.1+1 {
			t.Errorf("%s (weight %d): %d of %d buckets, want about %.0f", nodes[i], weights[i], c, len(tab), want)
		}
	}
	// Order does not matter.
	rev := nftrules.WeightedNodeTable([]string{"n4", "n3", "n2", "n1"}, []int{4, 3, 2, 1}, 251)
	for b := range tab {
		if nodes[tab[b]] != []string{"n4", "n3", "n2", "n1"}[rev[b]] {
			t.Fatalf("bucket %d: %s, reversed input %s", b, nodes[tab[b]], []string{"n4", "n3", "n2", "n1"}[rev[b]])
		}
	}
}

// TestWeightedNodeTableMinimalMovement: when a node leaves, the buckets of the others mostly
// stay; when one of its endpoints leaves, mostly only its buckets move.
func TestWeightedNodeTableMinimalMovement(t *testing.T) {
	for n := 2; n <= 12; n++ {
		var nodes []string
		var weights []int
		for i := range n {
			nodes = append(nodes, fmt.Sprintf("node-%02d", i))
			weights = append(weights, 1+i%3)
		}
		before := nftrules.WeightedNodeTable(nodes, weights, 251)
		after := nftrules.WeightedNodeTable(nodes[1:], weights[1:], 251)
		moved, kept := 0, 0
		for b := range before {
			if before[b] == 0 {
				continue // the leaving node's buckets must move
			}
			kept++
			if nodes[before[b]] != nodes[1:][after[b]] {
				moved++
			}
		}
		if float64(moved) > 0.2*float64(kept) {
			t.Errorf("%d nodes, one leaves: %d of the other %d buckets moved", n, moved, kept)
		}
	}
}

func TestAssignSlots(t *testing.T) {
	got := nftrules.AssignSlots(map[string]int{"b": 1, "gone": 2, "c": 5}, map[string]bool{"a": true, "b": true, "c": true, "d": true})
	want := map[string]int{"a": 2, "b": 1, "c": 5, "d": 3}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestWriteDSRGolden(t *testing.T) {
	m, cfg := dsrModel()
	cfg.NodeMACs = map[string][]nftrules.EtherAddr{"node-b": {{0x02, 0x42, 0xac, 0x12, 0, 3}}, "node-c": {{0x02, 0x42, 0xac, 0x12, 0, 4}}}
	plan := nftrules.PlanDSR(m, cfg)
	plan.TrackSYN = true // the applier's SYN table is there (the kernel has conntrack timeout policies)
	fake := knftables.NewFake(knftables.IPv4Family, nftrules.DSRTableName)
	tx := fake.NewTransaction()
	nftrules.WriteDSR(tx, &plan)
	got := tx.String()
	path := filepath.Join("testdata", "dsr", "table.golden") // not *.golden: nftapply loads those as table ironlb
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if err := fake.Run(t.Context(), tx); err != nil {
		t.Fatalf("fake nft refuses the transaction: %v", err)
	}
}

// TestDSRLoopGuard: a port with endpoints on this node serves packets forwarded by another node
// (source MAC in peer-macs) here, before any hash could send them on; its raw chain tracks them;
// a port without local endpoints has no such rule (it could not serve them).
func TestDSRLoopGuard(t *testing.T) {
	m, cfg := dsrModel()
	plan := nftrules.PlanDSR(m, cfg)
	if diff := cmp.Diff([]netip.Addr{a("192.168.1.11"), a("192.168.1.12")}, plan.Peers, cmp.Comparer(func(x, y netip.Addr) bool { return x == y })); diff != "" {
		t.Errorf("peers (-want +got):\n%s", diff)
	}
	fake := knftables.NewFake(knftables.IPv4Family, nftrules.DSRTableName)
	tx := fake.NewTransaction()
	nftrules.WriteDSR(tx, &plan)
	if err := fake.Run(t.Context(), tx); err != nil {
		t.Fatal(err)
	}
	for _, p := range plan.Ports {
		var mangle *knftables.Chain
		for _, c := range fake.Table.Chains {
			if c.Comment != nil && *c.Comment == fmt.Sprintf("%s:%d/%s", p.Service, p.Port, p.Protocol) && !strings.HasPrefix(c.Name, "dsr-raw-") && !strings.HasPrefix(c.Name, "dsr-local-") {
				mangle = &c.Chain
			}
		}
		if mangle == nil {
			t.Fatalf("%s: no mangle chain", p.Service)
		}
		rules := fake.Table.Chains[mangle.Name].Rules
		guard, hash := -1, -1
		for i, r := range rules {
			if strings.HasPrefix(r.Rule, "ether saddr @peer-macs") {
				guard = i
				if want := fmt.Sprintf("meta mark set 0x%x return", nftrules.DSRMark(plan.Slots[plan.Self])); !strings.HasSuffix(r.Rule, want) {
					t.Errorf("%s: guard %q does not end in %q", p.Service, r.Rule, want)
				}
			}
			if strings.Contains(r.Rule, "jhash") && hash < 0 {
				hash = i
			}
		}
		switch {
		case len(p.Local) > 0 && (guard < 0 || guard > hash):
			t.Errorf("%s has local endpoints: guard at rule %d, first hash at %d", p.Service, guard, hash)
		case len(p.Local) == 0 && guard >= 0:
			t.Errorf("%s has no local endpoints but a guard", p.Service)
		}
	}
}

// TestDSRPeerMACs: the loop guard's peers are the link-layer addresses the other nodes published
// (DSRConfig.NodeMACs), and nothing else: not this node's own, not one this node published too.
func TestDSRPeerMACs(t *testing.T) {
	mac := func(last byte) nftrules.EtherAddr { return nftrules.EtherAddr{0x02, 0x42, 0xac, 0x12, 0, last} }
	for _, tc := range []struct {
		name      string
		published map[string][]nftrules.EtherAddr
		want      []string
	}{
		{"none published", nil, nil},
		{"every other node's, sorted", map[string][]nftrules.EtherAddr{"node-c": {mac(4)}, "node-b": {mac(3)}, thisNode: {mac(2)}},
			[]string{"02:42:ac:12:00:03", "02:42:ac:12:00:04"}},
		{"a node with two interfaces", map[string][]nftrules.EtherAddr{"node-b": {mac(5), mac(3)}},
			[]string{"02:42:ac:12:00:03", "02:42:ac:12:00:05"}},
		{"one MAC claimed by two peers, once", map[string][]nftrules.EtherAddr{"node-b": {mac(3)}, "node-c": {mac(3)}},
			[]string{"02:42:ac:12:00:03"}},
		{"a MAC this node published is never a peer's", map[string][]nftrules.EtherAddr{thisNode: {mac(2)}, "node-b": {mac(2), mac(3)}},
			[]string{"02:42:ac:12:00:03"}},
		{"the zero address is left out", map[string][]nftrules.EtherAddr{"node-b": {{}, mac(3)}},
			[]string{"02:42:ac:12:00:03"}},
		{"a node that is no peer of DSR yet (no IPv4) still counts", map[string][]nftrules.EtherAddr{"node-x": {mac(9)}},
			[]string{"02:42:ac:12:00:09"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, cfg := dsrModel()
			cfg.NodeMACs = tc.published
			plan := nftrules.PlanDSR(m, cfg)
			if diff := cmp.Diff(tc.want, plan.PeerMACs); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestPlanDSRKeep: which nodes keep the flows remembered to them (DSRPort.Keep) beside the
// nodes that get new flows (Nodes). A TCP (or SCTP) connection stays with its owner while the owner
// lists an endpoint of the port, whatever its conditions and whatever the echo detector says
// (moving it could only reset it); a UDP flow stays only with an owner of new flows (moving it to
// a live node keeps it answered).
func TestPlanDSRKeep(t *testing.T) {
	notReady := func(e nftrules.Endpoint) nftrules.Endpoint { e.Ready, e.Serving = false, false; return e }
	b, c := ep("10.244.2.5:8080", "node-b"), ep("10.244.3.5:8080", "node-c")
	noIP := ep("10.244.4.5:8080", "node-x")       // its node has no IPv4 InternalIP
	v6 := ep("[fd00:10:244:5::5]:8080", "node-d") // not an IPv4 endpoint
	for _, tc := range []struct {
		name     string
		eps      []nftrules.Endpoint
		dead     []string
		nodes    string // the same for every protocol
		tcp, udp string // Keep
	}{
		{name: "all ready and alive", eps: []nftrules.Endpoint{b, c},
			nodes: "[node-b node-c]", tcp: "[node-b node-c]", udp: "[node-b node-c]"},
		{name: "owner dead to the echo detector (false or real death)", eps: []nftrules.Endpoint{b, c}, dead: []string{"node-b"},
			nodes: "[node-c]", tcp: "[node-b node-c]", udp: "[node-c]"},
		{name: "every owner dead: the dead node fallback", eps: []nftrules.Endpoint{b, c}, dead: []string{"node-b", "node-c"},
			nodes: "[node-b node-c]", tcp: "[node-b node-c]", udp: "[node-b node-c]"},
		{name: "owner's pod terminating gracefully, serving", eps: []nftrules.Endpoint{terminating(b, true), c},
			nodes: "[node-c]", tcp: "[node-b node-c]", udp: "[node-c]"},
		{name: "owner's pod terminating, no longer serving", eps: []nftrules.Endpoint{terminating(b, false), c},
			nodes: "[node-c]", tcp: "[node-b node-c]", udp: "[node-c]"},
		{name: "owner's pod failing its readiness probe", eps: []nftrules.Endpoint{notReady(b), c},
			nodes: "[node-c]", tcp: "[node-b node-c]", udp: "[node-c]"},
		{name: "owner's endpoint gone from the slices", eps: []nftrules.Endpoint{c},
			nodes: "[node-c]", tcp: "[node-c]", udp: "[node-c]"},
		{name: "a node without IPv4 and an IPv6 endpoint are never kept", eps: []nftrules.Endpoint{c, noIP, v6},
			nodes: "[node-c]", tcp: "[node-c]", udp: "[node-c]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, proto := range []nftrules.Protocol{nftrules.TCP, nftrules.SCTP, nftrules.UDP} {
				ips := map[string]netip.Addr{thisNode: a("192.168.1.10"), "node-b": a("192.168.1.11"),
					"node-c": a("192.168.1.12"), "node-d": a("192.168.1.13")}
				plan := webDSRPlan(proto, ips, tc.dead, tc.eps...)
				if len(plan.Ports) != 1 {
					t.Fatalf("%s: %d ports", proto, len(plan.Ports))
				}
				p := plan.Ports[0]
				want := tc.tcp
				if proto == nftrules.UDP {
					want = tc.udp
				}
				if got := fmt.Sprint(p.Nodes); got != tc.nodes {
					t.Errorf("%s: nodes %s, want %s", proto, got, tc.nodes)
				}
				if got := fmt.Sprint(p.Keep); got != want {
					t.Errorf("%s: keep %s, want %s", proto, got, want)
				}
				// Every kept node is routed to: it has a slot, and a route unless it is this node.
				for _, n := range p.Keep {
					if plan.Slots[n] == 0 {
						t.Errorf("%s: kept node %s has no slot (%v)", proto, n, plan.Slots)
					}
					if !slices.ContainsFunc(plan.Routes, func(r nftrules.DSRRoute) bool { return r.Node == n }) {
						t.Errorf("%s: kept node %s has no route (%v)", proto, n, plan.Routes)
					}
				}
				// The rules: the remembered-owner map holds exactly the kept nodes.
				if got, want := nodesMap(t, &plan), keptIDs(&plan, p.Keep); !slices.Equal(got, want) {
					t.Errorf("%s: map dsr-nodes holds %v, want the kept nodes' %v", proto, got, want)
				}
			}
		})
	}
}

// nodesMap returns the keys of the one port's map dsr-nodes-* in the rules written for plan, sorted.
func nodesMap(t *testing.T, plan *nftrules.DSRPlan) []string {
	t.Helper()
	fake := knftables.NewFake(knftables.IPv4Family, nftrules.DSRTableName)
	tx := fake.NewTransaction()
	nftrules.WriteDSR(tx, plan)
	if err := fake.Run(t.Context(), tx); err != nil {
		t.Fatal(err)
	}
	var keys []string
	found := 0
	for name, mp := range fake.Table.Maps {
		if !strings.HasPrefix(name, "dsr-nodes-") {
			continue
		}
		found++
		for _, e := range mp.Elements {
			keys = append(keys, strings.Join(e.Key, " "))
		}
	}
	if found != 1 {
		t.Fatalf("%d maps dsr-nodes-*, want 1", found)
	}
	slices.Sort(keys)
	return keys
}

// keptIDs are the conntrack marks (NodeID) of nodes, as nft writes them, sorted.
func keptIDs(plan *nftrules.DSRPlan, nodes []string) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, fmt.Sprintf("0x%x", nftrules.NodeID(plan.NodeIPs[n])))
	}
	slices.Sort(out)
	return out
}

// TestPlanDSRDeadNodeMovesOnlyItsBuckets: a node declared dead loses its buckets, spread over the
// live nodes, and no live node loses any: an entry node that picks a flow up mid-connection (after
// a failover) while it holds some node dead still hashes every live node's flows to it.
func TestPlanDSRDeadNodeMovesOnlyItsBuckets(t *testing.T) {
	var eps []nftrules.Endpoint
	nodes := []string{"node-b", "node-c", "node-d", "node-e", "node-f"}
	ips := map[string]netip.Addr{thisNode: a("192.168.1.10")}
	for i, n := range nodes {
		ips[n] = netip.AddrFrom4([4]byte{192, 168, 1, byte(11 + i)})
		for j := range 1 + i%2 { // weights 1, 2, 1, 2, 1
			eps = append(eps, ep(fmt.Sprintf("10.244.%d.%d:8080", i+2, j+5), n))
		}
	}
	plan := func(dead ...string) nftrules.DSRPort {
		t.Helper()
		p := webDSRPlan(nftrules.TCP, ips, dead, eps...)
		if len(p.Ports) != 1 {
			t.Fatalf("%d ports", len(p.Ports))
		}
		return p.Ports[0]
	}
	all := plan()
	for _, dead := range [][]string{{"node-b"}, {"node-c"}, {"node-b", "node-e"}} {
		p := plan(dead...)
		if len(p.Buckets) != len(all.Buckets) {
			t.Fatalf("%v dead: %d buckets, all alive %d", dead, len(p.Buckets), len(all.Buckets))
		}
		got := map[string]int{}
		for b := range p.Buckets {
			was, now := all.Owner(uint32(b)), p.Owner(uint32(b))
			got[now]++
			switch {
			case slices.Contains(dead, now):
				t.Fatalf("%v dead: bucket %d owned by dead %s", dead, b, now)
			case !slices.Contains(dead, was) && now != was:
				t.Errorf("%v dead: bucket %d of live %s moved to %s", dead, b, was, now)
			}
		}
		// The dead node's buckets are spread: every live node's share grows.
		for _, n := range nodes {
			if slices.Contains(dead, n) {
				continue
			}
			before := 0
			for b := range all.Buckets {
				if all.Owner(uint32(b)) == n {
					before++
				}
			}
			if got[n] <= before {
				t.Errorf("%v dead: %s has %d buckets, %d with every node alive: took none of the dead's", dead, n, got[n], before)
			}
		}
	}
}

// TestPlanDSREndpointEdges pins which endpoints count for DSR, in each of the three places
// PlanDSR asks "an IPv4 endpoint on a node with an IPv4 InternalIP": the owners of new flows
// (Nodes, Weights, and a RefuseNoNodeIP note for a selected endpoint whose node has none), the
// nodes whose remembered flows stay (Keep, over every listed endpoint), and the table over every
// node with endpoints that keeps a live owner's buckets when another is dead (Buckets). Each case
// adds one endpoint to ready ones on node-b, node-c and node-e; its plan must equal, in all of
// those, the plan of the plain endpoints in same (what the added one amounts to), with node-b
// alive and with node-b dead (two live nodes left, so that the kept buckets show).
func TestPlanDSREndpointEdges(t *testing.T) {
	b, c, e := ep("10.244.2.5:8080", "node-b"), ep("10.244.3.5:8080", "node-c"), ep("10.244.5.5:8080", "node-e")
	d := ep("10.244.4.5:8080", "node-d") // a plain endpoint on node-d, which has an IPv4 InternalIP
	with := func(x nftrules.Endpoint, addr string, port uint16, node string) nftrules.Endpoint {
		x.Addr, x.Port, x.Node = netip.MustParseAddr(addr), port, node
		return x
	}
	ips := map[string]netip.Addr{thisNode: a("192.168.1.10"), "node-b": a("192.168.1.11"), "node-c": a("192.168.1.12"),
		"node-d": a("192.168.1.13"), "node-e": a("192.168.1.16"), "node-v6": a("fd00::14"), "node-mapped": a("::ffff:192.168.1.15"),
		"": a("192.168.1.17")} // no Node is nameless: an endpoint without a node name has none, whatever the map says
	const noIP = string(nftrules.RefuseNoNodeIP)
	for _, tc := range []struct {
		name    string
		added   nftrules.Endpoint
		same    []nftrules.Endpoint // what the added endpoint amounts to
		nodes   string              // Nodes with every node alive
		tcp     string              // Keep of TCP with every node alive (UDP's is nodes)
		refused []string
	}{
		{name: "IPv6 endpoint", added: with(d, "fd00:10:244:4::5", 8080, "node-d"),
			nodes: "[node-b node-c node-e]", tcp: "[node-b node-c node-e]"},
		{name: "IPv6 endpoint with a zone", added: with(d, "fe80::5%eth0", 8080, "node-d"),
			nodes: "[node-b node-c node-e]", tcp: "[node-b node-c node-e]"},
		{name: "IPv4-mapped IPv6 endpoint: IPv4", added: with(d, "::ffff:10.244.4.5", 8080, "node-d"), same: []nftrules.Endpoint{d},
			nodes: "[node-b node-c node-d node-e]", tcp: "[node-b node-c node-d node-e]"},
		{name: "IPv4-mapped endpoint with a zone: IPv4, the zone dropped", added: with(d, "::ffff:10.244.4.5%eth0", 8080, "node-d"), same: []nftrules.Endpoint{d},
			nodes: "[node-b node-c node-d node-e]", tcp: "[node-b node-c node-d node-e]"},
		{name: "IPv4-mapped listing of node-b's endpoint: merged", added: with(b, "::ffff:10.244.2.5", 8080, "node-b"),
			nodes: "[node-b node-c node-e]", tcp: "[node-b node-c node-e]"},
		{name: "no port", added: with(d, "10.244.4.5", 0, "node-d"),
			nodes: "[node-b node-c node-e]", tcp: "[node-b node-c node-e]"},
		{name: "no address", added: nftrules.Endpoint{Port: 8080, Node: "node-d", Ready: true, Serving: true},
			nodes: "[node-b node-c node-e]", tcp: "[node-b node-c node-e]"},
		{name: "node without an InternalIP", added: with(d, "10.244.4.5", 8080, "node-x"),
			nodes: "[node-b node-c node-e]", tcp: "[node-b node-c node-e]", refused: []string{noIP}},
		{name: "node with an IPv6 InternalIP only", added: with(d, "10.244.4.5", 8080, "node-v6"),
			nodes: "[node-b node-c node-e]", tcp: "[node-b node-c node-e]", refused: []string{noIP}},
		{name: "node whose InternalIP is IPv4-mapped IPv6: not IPv4", added: with(d, "10.244.4.5", 8080, "node-mapped"),
			nodes: "[node-b node-c node-e]", tcp: "[node-b node-c node-e]", refused: []string{noIP}},
		{name: "no node name", added: with(d, "10.244.4.5", 8080, ""),
			nodes: "[node-b node-c node-e]", tcp: "[node-b node-c node-e]", refused: []string{noIP}},
		{name: "not ready: kept for TCP only", added: notReady(d), same: []nftrules.Endpoint{notReady(d)},
			nodes: "[node-b node-c node-e]", tcp: "[node-b node-c node-d node-e]"},
		{name: "not ready, IPv4-mapped: kept for TCP only", added: with(notReady(d), "::ffff:10.244.4.5", 8080, "node-d"), same: []nftrules.Endpoint{notReady(d)},
			nodes: "[node-b node-c node-e]", tcp: "[node-b node-c node-d node-e]"},
		{name: "not ready, IPv6: never kept", added: with(notReady(d), "fd00:10:244:4::5", 8080, "node-d"),
			nodes: "[node-b node-c node-e]", tcp: "[node-b node-c node-e]"},
		{name: "not ready, no port: never kept", added: with(notReady(d), "10.244.4.5", 0, "node-d"),
			nodes: "[node-b node-c node-e]", tcp: "[node-b node-c node-e]"},
		{name: "not ready on a node without an InternalIP: never kept, not refused", added: with(notReady(d), "10.244.4.5", 8080, "node-x"),
			nodes: "[node-b node-c node-e]", tcp: "[node-b node-c node-e]"},
		{name: "not ready without a node name: never kept, not refused", added: with(notReady(d), "10.244.4.5", 8080, ""),
			nodes: "[node-b node-c node-e]", tcp: "[node-b node-c node-e]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, proto := range []nftrules.Protocol{nftrules.TCP, nftrules.UDP} {
				for _, dead := range [][]string{nil, {"node-b"}} {
					got, want := webDSRPlan(proto, ips, dead, b, c, e, tc.added), webDSRPlan(proto, ips, dead, append([]nftrules.Endpoint{b, c, e}, tc.same...)...)
					if len(got.Ports) != 1 || len(want.Ports) != 1 {
						t.Fatalf("%s, dead %v: %d ports, the plain endpoints' %d", proto, dead, len(got.Ports), len(want.Ports))
					}
					g, w := got.Ports[0], want.Ports[0]
					if diff := cmp.Diff(fmt.Sprint(w.Nodes, w.Weights, w.Keep, w.Buckets), fmt.Sprint(g.Nodes, g.Weights, g.Keep, g.Buckets)); diff != "" {
						t.Errorf("%s, dead %v: nodes, weights, keep, buckets differ from the plain endpoints' (-plain +got):\n%s", proto, dead, diff)
					}
					if dead != nil {
						continue
					}
					keep := tc.tcp
					if proto == nftrules.UDP {
						keep = tc.nodes
					}
					if got, want := fmt.Sprintf("nodes %v keep %v", g.Nodes, g.Keep), "nodes "+tc.nodes+" keep "+keep; got != want {
						t.Errorf("%s: %s, want %s", proto, got, want)
					}
					var refused []string
					for _, n := range got.Refused[nftrules.ServiceKey{Namespace: "ns1", Name: "web"}] {
						refused = append(refused, string(n.Reason))
					}
					if diff := cmp.Diff(tc.refused, refused); diff != "" {
						t.Errorf("%s: refused (-want +got):\n%s", proto, diff)
					}
				}
			}
		})
	}
}

// webDSRPlan is the DSR plan on thisNode of ns1/web, a DSR Service at 192.168.1.240 with one port
// of proto to eps, with the nodes in dead declared dead and ips the nodes' InternalIPs.
func webDSRPlan(proto nftrules.Protocol, ips map[string]netip.Addr, dead []string, eps ...nftrules.Endpoint) nftrules.DSRPlan {
	s := svc("ns1", "web", []netip.Addr{a("10.96.0.10")}, eps...)
	s.Ports[0].Protocol = proto
	s.LoadBalancerIPs = []netip.Addr{a("192.168.1.240")}
	s.ExternalMode = nftrules.ExternalDSR
	m := model(nftrules.Node{Name: thisNode}, s)
	for _, d := range dead {
		if m.Node.DeadNodes == nil {
			m.Node.DeadNodes = map[string]bool{}
		}
		m.Node.DeadNodes[d] = true
	}
	return nftrules.PlanDSR(m, nftrules.DSRConfig{NodeIPs: ips})
}

// TestWriteDSRTCPRules lists the rules of a TCP port's chains, one row per rule in chain order,
// with the SYN table (TrackSYN: forwarded SYNs are tracked, the production case) and without it
// (the fallback: they are not). The port has an endpoint on this node, so its loop guard is there.
// A chain with more rules than rows fails: a new rule needs its row and its reason.
func TestWriteDSRTCPRules(t *testing.T) {
	rows := []struct {
		track bool
		chain string // "mangle", "raw" (the port's), "base-raw" (raw-prerouting)
		rule  []string
		why   string
	}{
		{true, "mangle", []string{"ip saddr @pod-cidrs return"}, "pods take the snat path (hairpin)"},
		{true, "mangle", []string{"tcp flags & (syn | ack) == ack ct state new jhash ", " vmap @dsr-rejoin-"}, "rejoin: mid-stream, no state here, in this node's bucket: to the alternate owner"},
		{true, "mangle", []string{"ether saddr @peer-macs ct status & (confirmed | dnat) != confirmed ct mark set 0xc0a8010a meta mark set 0x10000 return"}, "loop guard: forwarded by a peer, not on an old forwarded entry: served here"},
		{true, "mangle", []string{`iifname "ironlb-dsr0" ct status & (confirmed | dnat) != confirmed ct mark set 0xc0a8010a meta mark set 0x10000 return`}, "loop guard: encapsulated by a peer"},
		{true, "mangle", []string{"tcp flags & (syn | ack) == syn ct status & (confirmed | dnat) == confirmed meta mark set jhash", "meta mark != 3232235786 ct mark set meta mark"},
			"a SYN on an old forwarded entry of its 5-tuple (reused source port) takes the hash's owner, unless that is this node (no DNAT on that entry)"},
		{true, "mangle", []string{"tcp flags & (syn | ack) == syn ct status & (confirmed | dnat) == confirmed meta mark 3232235786 ct mark set jhash", " map @dsr-alt-"},
			"and when it is this node: the bucket's alternate owner (live), not the remembered one (maybe dead)"},
		{true, "mangle", []string{"ct state new ct mark 0 ct mark set jhash"}, "a new flow remembers its owner"},
		{true, "mangle", []string{"meta mark set ct mark map @dsr-nodes-", " return"}, "the remembered owner, while in the keep set"},
		{true, "mangle", []string{"meta mark set jhash"}, "untracked, invalid, or owner gone: by hash"},
		{true, "mangle", []string{"ct mark set meta mark"}, "and remembered"},
		{true, "mangle", []string{"meta mark set meta mark map @dsr-nodes-"}, "owner's address to its slot mark"},
		{false, "base-raw", []string{"tcp flags & (syn | ack) == syn ip daddr . meta l4proto . th dport vmap @raw-services"}, "without the SYN table: SYNs to DSR ports go to their raw chain"},
		{false, "raw", []string{"ip saddr @pod-cidrs return"}, "pods' SYNs tracked (snat path)"},
		{false, "raw", []string{"ether saddr @peer-macs return"}, "a peer's forwarded SYN is tracked here"},
		{false, "raw", []string{`iifname "ironlb-dsr0" return`}, "an encapsulated SYN is tracked here"},
		{false, "raw", []string{"jhash ", " vmap @dsr-raw-"}, "a SYN another node owns: notrack"},
		// Without the SYN table the mangle chain is the same (its SYN rule then sees only SYNs of
		// this node's buckets: the others are untracked).
		{false, "mangle", []string{"ip saddr @pod-cidrs return"}, ""},
		{false, "mangle", []string{"tcp flags & (syn | ack) == ack ct state new"}, ""},
		{false, "mangle", []string{"ether saddr @peer-macs"}, ""},
		{false, "mangle", []string{`iifname "ironlb-dsr0"`}, ""},
		{false, "mangle", []string{"tcp flags & (syn | ack) == syn ct status & (confirmed | dnat) == confirmed"}, ""},
		{false, "mangle", []string{"meta mark 3232235786 ct mark set jhash", " map @dsr-alt-"}, ""},
		{false, "mangle", []string{"ct state new ct mark 0"}, ""},
		{false, "mangle", []string{"meta mark set ct mark map"}, ""},
		{false, "mangle", []string{"meta mark set jhash"}, ""},
		{false, "mangle", []string{"ct mark set meta mark"}, ""},
		{false, "mangle", []string{"meta mark set meta mark map"}, ""},
	}
	for _, track := range []bool{true, false} {
		m, cfg := dsrModel()
		web := m.Services[nftrules.ServiceKey{Namespace: "ns1", Name: "web"}]
		local := ep("10.244.1.7:8080", thisNode)
		local.Local = true
		web.Ports[0].Endpoints = append(web.Ports[0].Endpoints, local)
		plan := nftrules.PlanDSR(m, cfg)
		plan.TrackSYN = track
		fake := knftables.NewFake(knftables.IPv4Family, nftrules.DSRTableName)
		tx := fake.NewTransaction()
		nftrules.WriteDSR(tx, &plan)
		if err := fake.Run(t.Context(), tx); err != nil {
			t.Fatal(err)
		}
		chains := map[string][]string{}
		for name, c := range fake.Table.Chains {
			kind := ""
			switch {
			case name == "raw-prerouting":
				kind = "base-raw"
			case c.Comment == nil || *c.Comment != "ns1/web:80/tcp" || strings.HasPrefix(name, "dsr-local-"):
				continue
			case strings.HasPrefix(name, "dsr-raw-"):
				kind = "raw"
			default:
				kind = "mangle"
			}
			for _, r := range c.Rules {
				chains[kind] = append(chains[kind], r.Rule)
			}
		}
		if _, ok := fake.Table.Chains["untrack-syn"]; ok == track {
			t.Errorf("TrackSYN %v: chain untrack-syn present: %v", track, ok)
		}
		n := map[string]int{}
		for _, row := range rows {
			if row.track != track {
				continue
			}
			i := n[row.chain]
			n[row.chain]++
			if i >= len(chains[row.chain]) {
				t.Errorf("TrackSYN %v, %s rule %d (%s): missing", track, row.chain, i, row.why)
				continue
			}
			got := chains[row.chain][i]
			for _, want := range row.rule {
				if !strings.Contains(got, want) {
					t.Errorf("TrackSYN %v, %s rule %d (%s): %q lacks %q", track, row.chain, i, row.why, got, want)
				}
			}
		}
		for kind, rules := range chains {
			if len(rules) != n[kind] {
				t.Errorf("TrackSYN %v: chain %s has %d rules, the table lists %d:\n%s", track, kind, len(rules), n[kind], strings.Join(rules, "\n"))
			}
		}
	}
}

// TestWriteDSRSelfWithoutAddress: this node has a slot without an IPv4 address (PlanDSR gives it
// one), but the hash never names it: the SYN re-hash rule writes the hash's owner into the ct mark
// and compares with no NodeID of this node (it has none: NodeID of the zero address panicked).
func TestWriteDSRSelfWithoutAddress(t *testing.T) {
	plan := webDSRPlan(nftrules.TCP, map[string]netip.Addr{"node-c": a("192.168.1.12")}, nil, ep("10.244.3.5:8080", "node-c"))
	if len(plan.Ports) != 1 || plan.Slots[thisNode] == 0 || plan.NodeIPs[thisNode].IsValid() {
		t.Fatalf("plan: ports %d, slots %v, this node's address %v; want one port, a slot and no address", len(plan.Ports), plan.Slots, plan.NodeIPs[thisNode])
	}
	for _, track := range []bool{false, true} {
		plan.TrackSYN = track
		fake := knftables.NewFake(knftables.IPv4Family, nftrules.DSRTableName)
		tx := fake.NewTransaction()
		nftrules.WriteDSR(tx, &plan)
		if err := fake.Run(t.Context(), tx); err != nil {
			t.Fatal(err)
		}
		var rehash []string
		for _, ch := range fake.Table.Chains {
			for _, r := range ch.Rules {
				if strings.Contains(r.Rule, "ct status & (confirmed | dnat) == confirmed") {
					rehash = append(rehash, r.Rule)
				}
			}
		}
		if len(rehash) != 1 || !strings.HasPrefix(rehash[0], "tcp flags & (syn | ack) == syn ct status & (confirmed | dnat) == confirmed ct mark set jhash ") ||
			strings.Contains(rehash[0], "meta mark") {
			t.Errorf("TrackSYN %v: the SYN re-hash rules %q, want one setting the ct mark by the hash alone", track, rehash)
		}
	}
}

// TestPlanDSRLocalServing: this node's endpoints that get no new flows still serve what entries
// forward here by memory (TCP and SCTP, whose flows stay with a kept node), if they are serving:
// Local, the loop guard and the DNAT table, while Nodes (the hash) leave this node out. UDP flows
// move instead, and an endpoint that no longer serves serves nothing.
func TestPlanDSRLocalServing(t *testing.T) {
	mine, c := ep("10.244.1.5:8080", thisNode), ep("10.244.3.5:8080", "node-c")
	mine.Local = true
	other := ep("10.244.1.6:8080", thisNode)
	other.Local = true
	for _, tc := range []struct {
		name      string
		eps       []nftrules.Endpoint
		proto     nftrules.Protocol
		local     string // Local
		nodes     string
		wantGuard bool
	}{
		{"ready here: in use", []nftrules.Endpoint{mine, c}, nftrules.TCP, "[10.244.1.5:8080]", "[node-a node-c]", true},
		{"terminating and serving here, TCP", []nftrules.Endpoint{terminating(mine, true), c}, nftrules.TCP, "[10.244.1.5:8080]", "[node-c]", true},
		{"terminating and serving here, SCTP", []nftrules.Endpoint{terminating(mine, true), c}, nftrules.SCTP, "[10.244.1.5:8080]", "[node-c]", true},
		{"terminating and serving here, UDP: moved, not served", []nftrules.Endpoint{terminating(mine, true), c}, nftrules.UDP, "[]", "[node-c]", false},
		{"terminating, no longer serving", []nftrules.Endpoint{terminating(mine, false), c}, nftrules.TCP, "[]", "[node-c]", false},
		{"one ready, one terminating here: only the ready one", []nftrules.Endpoint{terminating(mine, true), other, c}, nftrules.TCP, "[10.244.1.6:8080]", "[node-a node-c]", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ips := map[string]netip.Addr{thisNode: a("192.168.1.10"), "node-c": a("192.168.1.12")}
			plan := webDSRPlan(tc.proto, ips, nil, tc.eps...)
			if len(plan.Ports) != 1 {
				t.Fatalf("%d ports", len(plan.Ports))
			}
			p := plan.Ports[0]
			if got := fmt.Sprint(p.Local); got != tc.local {
				t.Errorf("local %s, want %s", got, tc.local)
			}
			if got := fmt.Sprint(p.Nodes); got != tc.nodes {
				t.Errorf("nodes %s, want %s", got, tc.nodes)
			}
			fake := knftables.NewFake(knftables.IPv4Family, nftrules.DSRTableName)
			tx := fake.NewTransaction()
			nftrules.WriteDSR(tx, &plan)
			if err := fake.Run(t.Context(), tx); err != nil {
				t.Fatal(err)
			}
			guard := false
			for _, ch := range fake.Table.Chains {
				for _, r := range ch.Rules {
					guard = guard || strings.HasPrefix(r.Rule, "ether saddr @peer-macs ct status & (confirmed | dnat) != confirmed ct mark set")
				}
			}
			if guard != tc.wantGuard {
				t.Errorf("loop guard %v, want %v", guard, tc.wantGuard)
			}
		})
	}
}
