package election

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var (
	now  = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	long = now.Add(-time.Hour) // ReadySince of a settled node
)

// mkNode returns a node that is eligible everywhere: alive, ready for an hour, zone=a, interface eth0.
func mkNode(name string) Node {
	return Node{
		Name:       name,
		Labels:     map[string]string{"zone": "a", "kubernetes.io/hostname": name},
		Alive:      true,
		Interfaces: []string{"eth0"},
		ReadySince: long,
	}
}

// mkSvc returns an ETP Cluster Service with one ready endpoint on "elsewhere".
func mkSvc(key string, addrs ...string) Service {
	s := Service{Key: key, Endpoints: []Endpoint{{Node: "elsewhere", Ready: true}}}
	for _, a := range addrs {
		s.Addrs = append(s.Addrs, netip.MustParseAddr(a))
	}
	return s
}

func ips(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

var allNodes = Advertisement{Name: "all"}

var decisionOpts = cmp.Options{cmpopts.EquateEmpty(), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })}

// TestElectRules has one case per eligibility rule, address-level reason and failback rule. Nodes are
// named by their rank for the address (r0 ranks first), computed with Rank, so each case reads as
// "the first in rank fails rule X, so the second announces".
func TestElectRules(t *testing.T) {
	const vip = "192.168.10.1"
	addr := netip.MustParseAddr(vip)
	r := Rank(addr, []string{"node-a", "node-b", "node-c"})
	r0, r1, r2 := r[0], r[1], r[2]
	t.Logf("rank for %s: %v", vip, r)

	local := func(eps ...Endpoint) func(*Input, map[string]*Node) {
		return func(in *Input, _ map[string]*Node) {
			in.Services[0].Local = true
			in.Services[0].Endpoints = eps
		}
	}
	ready := func(n string) Endpoint { return Endpoint{Node: n, Ready: true} }
	serving := func(n string) Endpoint { return Endpoint{Node: n, Serving: true} }

	tests := []struct {
		name  string
		edit  func(in *Input, ns map[string]*Node)
		nodes []string // default r0, r1, r2
		want  Decision // Key and Addrs default to vip
	}{
		{
			name: "all eligible: first in rank",
			want: Decision{Node: r0, Reason: Announced, PerNode: map[string]Reason{r1: Outranked, r2: Outranked}},
		},
		{
			name: "speaker down",
			edit: func(_ *Input, ns map[string]*Node) { ns[r0].Alive = false },
			want: Decision{Node: r1, Reason: Announced, PerNode: map[string]Reason{r0: SpeakerDown, r2: Outranked}},
		},
		{
			name: "speaker alive but not ready",
			edit: func(_ *Input, ns map[string]*Node) { ns[r0].ReadySince = time.Time{} },
			want: Decision{Node: r1, Reason: Announced, PerNode: map[string]Reason{r0: NotReady, r2: Outranked}},
		},
		{
			name: "excluded from external load balancers",
			edit: func(_ *Input, ns map[string]*Node) { ns[r0].Excluded = true },
			want: Decision{Node: r1, Reason: Announced, PerNode: map[string]Reason{r0: Excluded, r2: Outranked}},
		},
		{
			name: "network unavailable",
			edit: func(_ *Input, ns map[string]*Node) { ns[r0].NetworkUnavailable = true },
			want: Decision{Node: r1, Reason: Announced, PerNode: map[string]Reason{r0: NetworkUnavailable, r2: Outranked}},
		},
		{
			name: "first failing rule is the reason",
			edit: func(_ *Input, ns map[string]*Node) {
				ns[r0].Excluded, ns[r0].NetworkUnavailable, ns[r0].Alive = true, true, false
			},
			want: Decision{Node: r1, Reason: Announced, PerNode: map[string]Reason{r0: SpeakerDown, r2: Outranked}},
		},
		{
			name: "not selected by matchLabels",
			edit: func(in *Input, ns map[string]*Node) {
				ns[r0].Labels["zone"] = "b"
				in.Advertisements = []Advertisement{{NodeSelectors: []Selector{{MatchLabels: map[string]string{"zone": "a"}}}}}
			},
			want: Decision{Node: r1, Reason: Announced, PerNode: map[string]Reason{r0: NotSelected, r2: Outranked}},
		},
		{
			name: "not selected by matchExpressions; selectors are ORed",
			edit: func(in *Input, ns map[string]*Node) {
				ns[r1].Labels["zone"] = "c"
				in.Advertisements = []Advertisement{{NodeSelectors: []Selector{
					{MatchExpressions: []Requirement{{Key: "kubernetes.io/hostname", Operator: In, Values: []string{r1, r2}}}},
					{MatchExpressions: []Requirement{{Key: "zone", Operator: In, Values: []string{"c"}}}},
				}}}
			},
			want: Decision{Node: r1, Reason: Announced, PerNode: map[string]Reason{r0: NotSelected, r2: Outranked}},
		},
		{
			name: "selected by one of several advertisements",
			edit: func(in *Input, ns map[string]*Node) {
				ns[r2].Labels["role"] = "edge"
				in.Advertisements = []Advertisement{
					{Name: "nobody", NodeSelectors: []Selector{{MatchLabels: map[string]string{"zone": "z"}}}},
					{Name: "edge", NodeSelectors: []Selector{{MatchExpressions: []Requirement{{Key: "role", Operator: Exists}}}}},
				}
			},
			want: Decision{Node: r2, Reason: Announced, PerNode: map[string]Reason{r0: NotSelected, r1: NotSelected}},
		},
		{
			name: "winner lacks the interface: next in rank announces",
			edit: func(in *Input, ns map[string]*Node) {
				ns[r1].Interfaces = []string{"eth0", "eth1"}
				ns[r2].Interfaces = []string{"eth1"}
				in.Advertisements = []Advertisement{{Interfaces: []string{"eth1", "eth2"}}}
			},
			want: Decision{Node: r1, Reason: Announced, Interfaces: []string{"eth1"}, PerNode: map[string]Reason{r0: NoInterface, r2: Outranked}},
		},
		{
			name: "interfaces of all advertisements selecting the node",
			edit: func(in *Input, ns map[string]*Node) {
				ns[r0].Interfaces = []string{"eth2", "eth1", "eth0"}
				in.Advertisements = []Advertisement{{Interfaces: []string{"eth2"}}, {Interfaces: []string{"eth1", "eth2", "eth9"}}}
			},
			want: Decision{Node: r0, Reason: Announced, Interfaces: []string{"eth1", "eth2"}, PerNode: map[string]Reason{r1: NoInterface, r2: NoInterface}},
		},
		{
			name: "an advertisement without interfaces means all interfaces",
			edit: func(in *Input, ns map[string]*Node) {
				in.Advertisements = []Advertisement{{Interfaces: []string{"eth9"}}, {}}
			},
			want: Decision{Node: r0, Reason: Announced, PerNode: map[string]Reason{r1: Outranked, r2: Outranked}},
		},
		{
			name: "interfaces of an advertisement not selecting the node do not count",
			edit: func(in *Input, ns map[string]*Node) {
				ns[r0].Labels["zone"] = "b"
				in.Advertisements = []Advertisement{
					{NodeSelectors: []Selector{{MatchLabels: map[string]string{"zone": "a"}}}},
					{NodeSelectors: []Selector{{MatchLabels: map[string]string{"zone": "b"}}}, Interfaces: []string{"eth9"}},
				}
			},
			want: Decision{Node: r1, Reason: Announced, PerNode: map[string]Reason{r0: NoInterface, r2: Outranked}},
		},
		{
			name: "ETP Local: only nodes with a local endpoint",
			edit: local(ready(r1), ready(r2), ready(""), ready("elsewhere")),
			want: Decision{Node: r1, Reason: Announced, PerNode: map[string]Reason{r0: NoLocalEndpoint, r2: Outranked}},
		},
		{
			name: "ETP Local: ready endpoints preferred over serving (terminating) ones",
			edit: local(serving(r0), ready(r1)),
			want: Decision{Node: r1, Reason: Announced, PerNode: map[string]Reason{r0: ServingOnly, r2: NoLocalEndpoint}},
		},
		{
			name: "ETP Local: serving endpoints are enough when no node has ready ones",
			edit: local(serving(r1), serving(r0), Endpoint{Node: r2}),
			want: Decision{Node: r0, Reason: Announced, PerNode: map[string]Reason{r1: Outranked, r2: NoLocalEndpoint}},
		},
		{
			name: "ETP Local: a ready and a terminating endpoint on one node count as ready",
			edit: local(serving(r0), ready(r0), ready(r1)),
			want: Decision{Node: r0, Reason: Announced, PerNode: map[string]Reason{r1: Outranked, r2: NoLocalEndpoint}},
		},
		{
			name: "ETP Local: endpoints only on ineligible nodes",
			edit: func(in *Input, ns map[string]*Node) {
				local(ready(r0), ready("elsewhere"))(in, ns)
				ns[r0].Alive = false
			},
			want: Decision{Reason: NoLocalEndpoint, PerNode: map[string]Reason{r0: SpeakerDown, r1: NoLocalEndpoint, r2: NoLocalEndpoint}},
		},
		{
			name: "no endpoint that can serve",
			edit: func(in *Input, _ map[string]*Node) {
				in.Services[0].Endpoints = []Endpoint{{Node: r0}, {Node: r1}}
			},
			want: Decision{Reason: NoEndpoints, PerNode: map[string]Reason{r0: NoEndpoints, r1: NoEndpoints, r2: NoEndpoints}},
		},
		{
			name: "no endpoints: node-level reasons still reported",
			edit: func(in *Input, ns map[string]*Node) {
				in.Services[0].Endpoints = nil
				ns[r2].Excluded = true
			},
			want: Decision{Reason: NoEndpoints, PerNode: map[string]Reason{r0: NoEndpoints, r1: NoEndpoints, r2: Excluded}},
		},
		{
			name: "no advertisement",
			edit: func(in *Input, _ map[string]*Node) { in.Advertisements = nil },
			want: Decision{Reason: NoAdvertisement, PerNode: map[string]Reason{r0: NotSelected, r1: NotSelected, r2: NotSelected}},
		},
		{
			name: "no address",
			edit: func(in *Input, _ map[string]*Node) { in.Services = []Service{{Key: "default/pending"}} },
			want: Decision{Key: netip.Addr{}, Addrs: []netip.Addr{}, Reason: NoAddress, PerNode: map[string]Reason{r0: NoAddress, r1: NoAddress, r2: NoAddress}},
		},
		{
			name: "no eligible node",
			edit: func(_ *Input, ns map[string]*Node) {
				ns[r0].Alive, ns[r1].ReadySince, ns[r2].Excluded = false, time.Time{}, true
			},
			want: Decision{Reason: NoEligibleNode, PerNode: map[string]Reason{r0: SpeakerDown, r1: NotReady, r2: Excluded}},
		},
		{
			name:  "no nodes",
			nodes: []string{},
			want:  Decision{Reason: NoEligibleNode},
		},
		{
			name:  "duplicate names are all ineligible",
			nodes: []string{r0, r1, r2, r0},
			want:  Decision{Node: r1, Reason: Announced, PerNode: map[string]Reason{r0: DuplicateNode, r2: Outranked}},
		},
		{
			name:  "nodes without a name are ignored",
			nodes: []string{"", r1, r2},
			want:  Decision{Node: r1, Reason: Announced, PerNode: map[string]Reason{r2: Outranked}},
		},
		{
			name: "a Local Service without endpoints does not block the others sharing the address",
			edit: func(in *Input, _ map[string]*Node) {
				in.Services = append(in.Services, Service{Key: "default/idle", Addrs: ips(vip), Local: true})
			},
			want: Decision{Node: r0, Reason: Announced, PerNode: map[string]Reason{r1: Outranked, r2: Outranked}},
		},
		{
			name: "shared address, two Local Services: a node needs endpoints of both",
			edit: func(in *Input, _ map[string]*Node) {
				in.Services = []Service{
					{Key: "default/a", Addrs: ips(vip), Local: true, Endpoints: []Endpoint{ready(r0), ready(r1)}},
					{Key: "default/b", Addrs: ips(vip), Local: true, Endpoints: []Endpoint{ready(r1), ready(r2)}},
				}
			},
			want: Decision{Node: r1, Reason: Announced, PerNode: map[string]Reason{r0: NoLocalEndpoint, r2: NoLocalEndpoint}},
		},
		{
			name: "hold-down: a returning node does not take the address back yet",
			edit: func(in *Input, ns map[string]*Node) {
				in.Current, in.HoldDown = r1, 30*time.Second
				ns[r0].ReadySince = now.Add(-29 * time.Second)
			},
			want: Decision{Node: r1, Reason: Announced, PerNode: map[string]Reason{r0: HoldDown, r2: Outranked}},
		},
		{
			name: "hold-down over: preemptive failback",
			edit: func(in *Input, ns map[string]*Node) {
				in.Current, in.HoldDown = r1, 30*time.Second
				ns[r0].ReadySince = now.Add(-30 * time.Second)
			},
			want: Decision{Node: r0, Reason: Announced, PerNode: map[string]Reason{r1: Outranked, r2: Outranked}},
		},
		{
			name: "sticky: the current announcer keeps the address after hold-down",
			edit: func(in *Input, ns map[string]*Node) {
				in.Current, in.HoldDown, in.Sticky = r2, 30*time.Second, true
				ns[r0].ReadySince = now.Add(-time.Minute)
			},
			want: Decision{Node: r2, Reason: Announced, PerNode: map[string]Reason{r0: StickyCurrent, r1: StickyCurrent}},
		},
		{
			name: "sticky without hold-down",
			edit: func(in *Input, _ map[string]*Node) { in.Current, in.Sticky = r1, true },
			want: Decision{Node: r1, Reason: Announced, PerNode: map[string]Reason{r0: StickyCurrent, r2: Outranked}},
		},
		{
			name: "sticky: an ineligible current announcer loses the address",
			edit: func(in *Input, ns map[string]*Node) {
				in.Current, in.Sticky = r1, true
				ns[r1].Alive = false
			},
			want: Decision{Node: r0, Reason: Announced, PerNode: map[string]Reason{r1: SpeakerDown, r2: Outranked}},
		},
		{
			name: "sticky: a current announcer with only terminating endpoints hands over",
			edit: func(in *Input, ns map[string]*Node) {
				local(serving(r1), ready(r2))(in, ns)
				in.Current, in.Sticky = r1, true
			},
			want: Decision{Node: r2, Reason: Announced, PerNode: map[string]Reason{r0: NoLocalEndpoint, r1: ServingOnly}},
		},
		{
			name: "failover prefers a settled node to one in hold-down",
			edit: func(in *Input, ns map[string]*Node) {
				in.Current, in.HoldDown = r2, 30*time.Second
				ns[r2].Alive = false
				ns[r0].ReadySince = now.Add(-time.Second)
			},
			want: Decision{Node: r1, Reason: Announced, PerNode: map[string]Reason{r0: HoldDown, r2: SpeakerDown}},
		},
		{
			name: "failover with every node in hold-down: first in rank",
			edit: func(in *Input, ns map[string]*Node) {
				in.Current, in.HoldDown = r2, 30*time.Second
				ns[r2].Alive = false
				ns[r0].ReadySince, ns[r1].ReadySince = now.Add(-time.Second), now.Add(-2*time.Second)
			},
			want: Decision{Node: r0, Reason: Announced, PerNode: map[string]Reason{r1: Outranked, r2: SpeakerDown}},
		},
		{
			name: "a current announcer in hold-down keeps the address against nodes in hold-down",
			edit: func(in *Input, ns map[string]*Node) {
				in.Current, in.HoldDown = r2, 30*time.Second
				for _, n := range ns {
					n.ReadySince = now.Add(-time.Second)
				}
			},
			want: Decision{Node: r2, Reason: Announced, PerNode: map[string]Reason{r0: HoldDown, r1: HoldDown}},
		},
		{
			name: "a settled node ranked first displaces a current announcer in hold-down",
			edit: func(in *Input, ns map[string]*Node) {
				in.Current, in.HoldDown = r1, 30*time.Second
				ns[r1].ReadySince = now.Add(-time.Second)
			},
			want: Decision{Node: r0, Reason: Announced, PerNode: map[string]Reason{r1: Outranked, r2: Outranked}},
		},
		{
			name: "ReadySince in the future counts as in hold-down",
			edit: func(in *Input, ns map[string]*Node) {
				in.Current, in.HoldDown = r1, time.Second
				ns[r0].ReadySince = now.Add(time.Hour)
			},
			want: Decision{Node: r1, Reason: Announced, PerNode: map[string]Reason{r0: HoldDown, r2: Outranked}},
		},
		{
			name: "an unknown current announcer is ignored",
			edit: func(in *Input, _ map[string]*Node) { in.Current, in.Sticky = "gone", true },
			want: Decision{Node: r0, Reason: Announced, PerNode: map[string]Reason{r1: Outranked, r2: Outranked}},
		},
		{
			name: "spread: all eligible nodes",
			edit: func(in *Input, ns map[string]*Node) {
				in.Spread = true
				ns[r1].Excluded = true
			},
			want: Decision{Node: r0, Reason: Announced, Spread: sorted(r0, r2), PerNode: map[string]Reason{r1: Excluded, r2: Outranked}},
		},
		{
			name: "spread: nodes in hold-down join later; the announcer is always a member",
			edit: func(in *Input, ns map[string]*Node) {
				in.Spread, in.Current, in.HoldDown = true, r2, time.Minute
				ns[r0].ReadySince = now.Add(-time.Second)
				ns[r2].ReadySince = now.Add(-time.Second)
			},
			want: Decision{Node: r1, Reason: Announced, Spread: []string{r1}, PerNode: map[string]Reason{r0: HoldDown, r2: Outranked}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{Services: []Service{mkSvc("default/web", vip)}, Advertisements: []Advertisement{allNodes}}
			names := tc.nodes
			if names == nil {
				names = []string{r0, r1, r2}
			}
			nodes := make([]Node, len(names))
			byName := map[string]*Node{}
			for i, n := range names {
				nodes[i] = mkNode(n)
				byName[n] = &nodes[i]
			}
			if tc.edit != nil {
				tc.edit(&in, byName)
			}
			want := tc.want
			if want.Addrs == nil {
				want.Key, want.Addrs = addr, []netip.Addr{addr}
			}
			got := Elect(in, nodes, now)
			if diff := cmp.Diff(want, got, decisionOpts); diff != "" {
				t.Errorf("Elect (-want +got):\n%s", diff)
			}
		})
	}
}

func sorted(s ...string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// TestFailoverTimeline walks one address through a failure and a return under the three failback
// policies.
func TestFailoverTimeline(t *testing.T) {
	addr := "10.1.2.3"
	r := Rank(netip.MustParseAddr(addr), []string{"n1", "n2", "n3"})
	owner := r[0]
	hold := 30 * time.Second
	type step struct {
		at    time.Duration
		alive bool // owner's state
		want  map[string]string
	}
	// The owner dies at 10s and its speaker is back and ready at 20s.
	steps := []step{
		{0, true, map[string]string{"metallb": owner, "holddown": owner, "sticky": owner}},
		{10 * time.Second, false, map[string]string{"metallb": r[1], "holddown": r[1], "sticky": r[1]}},
		{20 * time.Second, true, map[string]string{"metallb": owner, "holddown": r[1], "sticky": r[1]}},
		{49 * time.Second, true, map[string]string{"metallb": owner, "holddown": r[1], "sticky": r[1]}},
		{50 * time.Second, true, map[string]string{"metallb": owner, "holddown": owner, "sticky": r[1]}},
	}
	for _, policy := range []string{"metallb", "holddown", "sticky"} {
		t.Run(policy, func(t *testing.T) {
			start := now
			cur := ""
			for _, s := range steps {
				nodes := []Node{mkNode("n1"), mkNode("n2"), mkNode("n3")}
				for i := range nodes {
					nodes[i].ReadySince = start.Add(-time.Hour)
					if nodes[i].Name == owner && s.at >= 20*time.Second {
						nodes[i].ReadySince = start.Add(20 * time.Second)
					}
					if nodes[i].Name == owner && !s.alive {
						nodes[i].Alive, nodes[i].ReadySince = false, time.Time{}
					}
				}
				in := Input{Services: []Service{mkSvc("default/web", addr)}, Advertisements: []Advertisement{allNodes}, Current: cur}
				switch policy {
				case "holddown":
					in.HoldDown = hold
				case "sticky":
					in.HoldDown, in.Sticky = hold, true
				}
				d := Elect(in, nodes, start.Add(s.at))
				if d.Node != s.want[policy] {
					t.Errorf("at %v: announcer %q, want %q (%v)", s.at, d.Node, s.want[policy], d.PerNode)
				}
				cur = d.Node
			}
		})
	}
}

func TestAnnounceInterfaces(t *testing.T) {
	n := mkNode("n")
	n.Interfaces = []string{"eth0", "eth1", "bond0"}
	zoneB := []Selector{{MatchLabels: map[string]string{"zone": "b"}}}
	for _, tc := range []struct {
		name   string
		ads    []Advertisement
		want   []string
		wantOK bool
	}{
		{"none", nil, nil, false},
		{"not selected", []Advertisement{{NodeSelectors: zoneB}}, nil, false},
		{"all", []Advertisement{{}}, nil, true},
		{"all wins over named", []Advertisement{{Interfaces: []string{"eth1"}}, {}}, nil, true},
		{"named, sorted, deduplicated", []Advertisement{{Interfaces: []string{"eth1", "bond0"}}, {Interfaces: []string{"eth1", "eth7"}}}, []string{"bond0", "eth1"}, true},
		{"named but missing", []Advertisement{{Interfaces: []string{"eth7"}}}, nil, false},
		{"unselecting ad ignored", []Advertisement{{NodeSelectors: zoneB}, {Interfaces: []string{"eth0"}}}, []string{"eth0"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := AnnounceInterfaces(tc.ads, n)
			if ok != tc.wantOK || !cmp.Equal(got, tc.want) {
				t.Errorf("AnnounceInterfaces = %v, %v; want %v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestExcludedByLabel(t *testing.T) {
	if !ExcludedByLabel(map[string]string{ExcludeLabel: ""}) {
		t.Error("label with empty value must exclude")
	}
	if ExcludedByLabel(map[string]string{"zone": "a"}) || ExcludedByLabel(nil) {
		t.Error("no label must not exclude")
	}
}

func TestReasonEligible(t *testing.T) {
	eligible := map[Reason]bool{ServingOnly: true, HoldDown: true, StickyCurrent: true, Outranked: true}
	for _, r := range []Reason{Announced, NoAddress, NoAdvertisement, NoEndpoints, NoEligibleNode, DuplicateNode,
		SpeakerDown, NotReady, Excluded, NetworkUnavailable, NotSelected, NoInterface, NoLocalEndpoint,
		ServingOnly, HoldDown, StickyCurrent, Outranked} {
		if r.Eligible() != eligible[r] {
			t.Errorf("%s.Eligible() = %v", r, r.Eligible())
		}
	}
}
