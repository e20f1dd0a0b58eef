package speaker

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ironlb/ironlb/internal/config"
	"github.com/ironlb/ironlb/internal/election"
)

// TestPlanRules has one row per rule of plan (see plan.go). Two nodes, named by their rank for the
// address vip: first ranks ahead of second. The peer is settled (ready for an hour) unless the row
// says otherwise; hold-down is 5 s and the handover linger 2 s.
func TestPlanRules(t *testing.T) {
	vip := netip.MustParseAddr("172.18.255.200")
	other := netip.MustParseAddr("172.18.255.201")
	ranked := election.Rank(vip, []string{"node-a", "node-b"})
	first, second := ranked[0], ranked[1]
	t0 := time.Date(2026, 11, 26, 6, 30, 0, 0, time.UTC)
	const holdDown = 5 * time.Second

	svc := func(key string, addr netip.Addr) config.Service {
		return config.Service{Key: key, Pool: "p", Addrs: []netip.Addr{addr}, L2: []election.Advertisement{{Name: "l2"}},
			Endpoints: []election.Endpoint{{Node: first, Ready: true}, {Node: second, Ready: true}}}
	}
	web := svc("default/web", vip)
	local := web
	local.Local, local.Endpoints = true, []election.Endpoint{{Node: first, Ready: true}}
	spread := web
	spread.Spread = true
	settled := peerView{Alive: true, Heard: true, Ready: true, ReadyFor: time.Hour, Interfaces: []string{"eth0"}}
	readyFor := func(d time.Duration) peerView { v := settled; v.ReadyFor = d; return v }
	dead := settled
	dead.Alive = false
	leaving := settled
	leaving.Leaving = true

	type row struct {
		name      string
		self      string
		svcs      []config.Service
		peer      peerView // the other node's view
		announced map[netip.Addr]string
		dataplane dataplaneReason // why this node's data plane is down, if it is
		mem       func(m *memory)
		want      Plan // Nodes and Memory are not compared; Rings by address only
		// wantMem checks the returned memory, if set.
		wantMem func(t *testing.T, m memory)
	}
	rows := []row{{
		name: "1. elected: announce",
		self: first, svcs: []config.Service{web}, peer: settled,
		want: Plan{Announce: []announcement{{vip, "default/web", AnnounceElected}}},
		wantMem: func(t *testing.T, m memory) {
			if m.Current[vip] != first || m.ElKeys[vip] != vip {
				t.Errorf("memory current %v elKeys %v, want %s and key %s", m.Current, m.ElKeys, first, vip)
			}
		},
	}, {
		name: "1. outranked by a settled peer: nothing",
		self: second, svcs: []config.Service{web}, peer: settled,
	}, {
		name: "1. announced and still elected: nothing",
		self: first, svcs: []config.Service{web}, peer: settled, announced: map[netip.Addr]string{vip: "default/web"},
	}, {
		name: "1. a peer in hold-down does not displace the announcer; wake at its end",
		self: second, svcs: []config.Service{web}, peer: readyFor(time.Second), announced: map[netip.Addr]string{vip: "default/web"},
		mem:  func(m *memory) { m.Current[vip] = second },
		want: Plan{Wake: t0.Add(4 * time.Second)},
	}, {
		name: "1. hold-down runs from when this node first saw a peer that does not say how long it has been ready",
		self: second, svcs: []config.Service{web}, peer: readyFor(0), announced: map[netip.Addr]string{vip: "default/web"},
		mem:  func(m *memory) { m.Current[vip] = second; m.Eligible[first] = t0.Add(-time.Second) },
		want: Plan{Wake: t0.Add(4 * time.Second)},
	}, {
		name: "1. a leaving peer is not eligible, and forgotten",
		self: second, svcs: []config.Service{web}, peer: leaving,
		mem:  func(m *memory) { m.Current[vip] = first; m.Eligible[first] = t0.Add(-time.Hour) },
		want: Plan{Announce: []announcement{{vip, "default/web", AnnounceElected}}},
		wantMem: func(t *testing.T, m memory) {
			if _, ok := m.Eligible[first]; ok {
				t.Error("a leaving peer still remembered as eligible")
			}
		},
	}, {
		name: "1. a peer returns: announce again what this node keeps",
		self: first, svcs: []config.Service{web}, peer: settled, announced: map[netip.Addr]string{vip: "default/web"},
		mem:  func(m *memory) { delete(m.Eligible, second) },
		want: Plan{Returned: []string{second}, Regratuitous: []netip.Addr{vip}},
	}, {
		name: "1. this node's data plane is down: it is not alive, withdraws at once (DataplaneDown), no linger",
		self: first, svcs: []config.Service{web}, peer: settled, announced: map[netip.Addr]string{vip: "default/web"},
		dataplane: DataplaneLinkMissing,
		want:      Plan{Withdraw: []withdrawal{{vip, "default/web", WithdrawDataplaneDown}}},
		wantMem: func(t *testing.T, m memory) {
			if m.Current[vip] != second {
				t.Errorf("memory current %v, want the peer %s elected", m.Current, second)
			}
		},
	}, {
		name: "1. this node's data plane is down and its peer too: nobody is elected, nothing announced",
		self: first, svcs: []config.Service{web}, peer: dead, dataplane: DataplaneSocketError,
	}, {
		name: "2. the memory of winners is rebuilt: elections gone are forgotten",
		self: first, svcs: []config.Service{web}, peer: settled, announced: map[netip.Addr]string{vip: "default/web"},
		mem: func(m *memory) { m.Current[other] = second; m.ElKeys[other] = other },
		wantMem: func(t *testing.T, m memory) {
			if diff := cmp.Diff(map[netip.Addr]string{vip: first}, m.Current, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
				t.Errorf("current (-want +got):\n%s", diff)
			}
		},
	}, {
		name: "2. Services sharing an address are one election, announced under the first Service's key",
		self: first, svcs: []config.Service{svc("default/b", vip), svc("default/a", vip)}, peer: settled,
		want: Plan{Announce: []announcement{{vip, "default/a", AnnounceElected}}},
	}, {
		name: "3. spread: every settled eligible node answers, with the address's ring",
		self: second, svcs: []config.Service{spread}, peer: settled,
		want: Plan{Announce: []announcement{{vip, "default/web", AnnounceSpread}}, Rings: map[netip.Addr]election.Ring{vip: {}}},
	}, {
		name: "4. given up to a live duplicate announcer: not announced; wake at the hold's end",
		self: first, svcs: []config.Service{web}, peer: settled,
		mem:  func(m *memory) { m.Yielded.hold(vip, second, t0.Add(yieldHold)) },
		want: Plan{Yielded: []netip.Addr{vip}, Wake: t0.Add(yieldHold)},
	}, {
		name: "4. the claimant died: announced at once",
		self: first, svcs: []config.Service{web}, peer: dead,
		mem:  func(m *memory) { m.Yielded.hold(vip, second, t0.Add(yieldHold)) },
		want: Plan{Announce: []announcement{{vip, "default/web", AnnounceElected}}},
	}, {
		name: "4. elected again while lingering: the handover ends",
		self: first, svcs: []config.Service{web}, peer: settled, announced: map[netip.Addr]string{vip: "default/web"},
		mem: func(m *memory) { m.Handover.keep(vip, true, t0) },
		wantMem: func(t *testing.T, m memory) {
			if m.Handover.lingering(vip) {
				t.Error("still lingering")
			}
		},
	}, {
		name: "5. lost while still eligible: linger (make-before-break)",
		self: second, svcs: []config.Service{web}, peer: settled, announced: map[netip.Addr]string{vip: "default/web"},
		want: Plan{Linger: []linger{{vip, "default/web", LingerHandover, t0.Add(handoverLinger), true}}, Wake: t0.Add(handoverLinger)},
	}, {
		name: "5. lingering: kept until its end, not renewed",
		self: second, svcs: []config.Service{web}, peer: settled, announced: map[netip.Addr]string{vip: "default/web"},
		mem:  func(m *memory) { m.Handover.keep(vip, true, t0.Add(-time.Second)) },
		want: Plan{Linger: []linger{{vip, "default/web", LingerHandover, t0.Add(time.Second), false}}, Wake: t0.Add(time.Second)},
	}, {
		name: "5. the linger ended without a claim: withdraw (LingerEnded)",
		self: second, svcs: []config.Service{web}, peer: settled, announced: map[netip.Addr]string{vip: "default/web"},
		mem:  func(m *memory) { m.Handover.keep(vip, true, t0.Add(-handoverLinger)) },
		want: Plan{Withdraw: []withdrawal{{vip, "default/web", WithdrawLingerEnded}}},
	}, {
		name: "5. lost and no longer eligible (its local endpoint gone): withdraw at once (Ineligible)",
		self: second, svcs: []config.Service{local}, peer: settled, announced: map[netip.Addr]string{vip: "default/web"},
		want: Plan{Withdraw: []withdrawal{{vip, "default/web", WithdrawIneligible}}},
	}, {
		name: "5. no Service holds the address any more: withdraw (Gone)",
		self: first, svcs: []config.Service{web}, peer: settled, announced: map[netip.Addr]string{vip: "default/web", other: "default/gone"},
		want: Plan{Withdraw: []withdrawal{{other, "default/gone", WithdrawGone}}},
	}, {
		name: "6. a peer returns: spread and lingering addresses are not announced again",
		self: second, svcs: []config.Service{web, func() config.Service { s := svc("default/s", other); s.Spread = true; return s }()},
		peer: settled, announced: map[netip.Addr]string{vip: "default/web", other: "default/s"},
		mem: func(m *memory) { delete(m.Eligible, first) },
		want: Plan{Returned: []string{first}, Linger: []linger{{vip, "default/web", LingerHandover, t0.Add(handoverLinger), true}},
			Rings: map[netip.Addr]election.Ring{other: {}}, Wake: t0.Add(handoverLinger)},
	}}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			peer := first
			if r.self == first {
				peer = second
			}
			mem := newMemory(handoverLinger)
			mem.Eligible[peer] = t0.Add(-time.Hour) // seen eligible before, unless the row says it returns
			if r.mem != nil {
				r.mem(&mem)
			}
			before := copyMemory(mem)
			announced := r.announced
			if announced == nil {
				announced = map[netip.Addr]string{}
			}
			in := planInput{Config: planConfig{Self: r.self, Interfaces: []string{"eth0"}, HoldDown: holdDown},
				Model: &config.Model{Services: r.svcs, Nodes: []config.Node{{Name: first}, {Name: second}}},
				Peers: map[string]peerView{peer: r.peer}, ReadySince: t0.Add(-time.Hour), Announced: announced, Dataplane: r.dataplane}
			if in.Model.Nodes[0].Name > in.Model.Nodes[1].Name {
				in.Model.Nodes[0], in.Model.Nodes[1] = in.Model.Nodes[1], in.Model.Nodes[0]
			}
			got := plan(in, mem, t0)
			for a := range got.Rings {
				got.Rings[a] = election.Ring{}
			}
			if len(r.want.Rings) == 0 {
				r.want.Rings = map[netip.Addr]election.Ring{}
			}
			if diff := cmp.Diff(r.want, got, cmpopts.IgnoreFields(Plan{}, "Nodes", "Memory", "On"), cmpopts.EquateComparable(netip.Addr{}),
				cmp.AllowUnexported(election.Ring{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
			if r.wantMem != nil {
				r.wantMem(t, got.Memory)
			}
			if diff := cmp.Diff(before, copyMemory(mem), cmpopts.EquateComparable(netip.Addr{}, yield{})); diff != "" {
				t.Errorf("plan modified its input memory (-before +after):\n%s", diff)
			}
		})
	}
}

// TestPlanInterfaces: which interfaces an address is answered on (Plan.On), and which nodes may
// announce when an advertisement names interfaces (MetalLB's ipAdvertisementFor; election rule 6).
func TestPlanInterfaces(t *testing.T) {
	vip := netip.MustParseAddr("172.19.255.200")
	ranked := election.Rank(vip, []string{"node-a", "node-b"})
	first, second := ranked[0], ranked[1]
	t0 := time.Date(2026, 11, 26, 6, 30, 0, 0, time.UTC)
	ad := func(name string, ifs ...string) election.Advertisement {
		return election.Advertisement{Name: name, Interfaces: ifs}
	}
	for _, tc := range []struct {
		name      string
		self      string
		selfIfs   []string
		peerIfs   []string
		ads       []election.Advertisement
		announced bool
		wantOn    []string // nil: not wanted here
		announce  bool
	}{
		{name: "no interfaces named: every interface of the node", self: first, selfIfs: []string{"eth1", "eth0"}, peerIfs: []string{"eth0"},
			ads: []election.Advertisement{ad("all")}, wantOn: []string{"eth0", "eth1"}, announce: true},
		{name: "interfaces [eth1]: eth1 only", self: first, selfIfs: []string{"eth0", "eth1"}, peerIfs: []string{"eth0", "eth1"},
			ads: []election.Advertisement{ad("second", "eth1")}, wantOn: []string{"eth1"}, announce: true},
		{name: "named interfaces this node lacks are left out", self: first, selfIfs: []string{"eth0", "eth1"}, peerIfs: []string{"eth0"},
			ads: []election.Advertisement{ad("x", "eth1", "bond0")}, wantOn: []string{"eth1"}, announce: true},
		{name: "two advertisements: the union of their interfaces", self: first, selfIfs: []string{"eth0", "eth1", "eth2"}, peerIfs: []string{"eth0"},
			ads: []election.Advertisement{ad("a", "eth2"), ad("b", "eth1")}, wantOn: []string{"eth1", "eth2"}, announce: true},
		{name: "one advertisement without interfaces wins over one naming some", self: first, selfIfs: []string{"eth0", "eth1"}, peerIfs: []string{"eth0"},
			ads: []election.Advertisement{ad("a", "eth1"), ad("b")}, wantOn: []string{"eth0", "eth1"}, announce: true},
		{name: "the top-ranked node lacks eth1 (or its eth1 responder failed): the next node announces", self: second,
			selfIfs: []string{"eth0", "eth1"}, peerIfs: []string{"eth0"}, ads: []election.Advertisement{ad("second", "eth1")},
			wantOn: []string{"eth1"}, announce: true},
		{name: "this node lacks eth1: it does not announce", self: first, selfIfs: []string{"eth0"}, peerIfs: []string{"eth0", "eth1"},
			ads: []election.Advertisement{ad("second", "eth1")}},
		{name: "announced already: no announcement, but On says where (the owner moves it)", self: first, selfIfs: []string{"eth0", "eth1"},
			peerIfs: []string{"eth0"}, ads: []election.Advertisement{ad("second", "eth1")}, announced: true, wantOn: []string{"eth1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peer := first
			if tc.self == first {
				peer = second
			}
			svc := config.Service{Key: "default/web", Pool: "p", Addrs: []netip.Addr{vip}, L2: tc.ads,
				Endpoints: []election.Endpoint{{Node: first, Ready: true}, {Node: second, Ready: true}}}
			announced := map[netip.Addr]string{}
			if tc.announced {
				announced[vip] = svc.Key
			}
			mem := newMemory(handoverLinger)
			mem.Eligible[peer] = t0.Add(-time.Hour)
			in := planInput{Config: planConfig{Self: tc.self, Interfaces: tc.selfIfs},
				Model:      &config.Model{Services: []config.Service{svc}, Nodes: []config.Node{{Name: first}, {Name: second}}},
				Peers:      map[string]peerView{peer: {Alive: true, Heard: true, Ready: true, ReadyFor: time.Hour, Interfaces: tc.peerIfs}},
				ReadySince: t0.Add(-time.Hour), Announced: announced}
			got := plan(in, mem, t0)
			if diff := cmp.Diff(tc.wantOn, got.On[vip]); diff != "" {
				t.Errorf("On (-want +got):\n%s", diff)
			}
			if a := len(got.Announce) == 1; a != tc.announce {
				t.Errorf("announce = %v, want %v (%+v)", a, tc.announce, got.Announce)
			}
		})
	}
}

// flatMemory is a memory's content, for comparisons.
type flatMemory struct {
	Current  map[netip.Addr]string
	ElKeys   map[netip.Addr]netip.Addr
	Handover map[netip.Addr]time.Time
	Yielded  map[netip.Addr]yield
	Eligible map[string]time.Time
}

func copyMemory(m memory) flatMemory {
	return flatMemory{maps.Clone(m.Current), maps.Clone(m.ElKeys), maps.Clone(m.Handover.until), maps.Clone(m.Yielded), maps.Clone(m.Eligible)}
}

// TestPlanIsPure keeps plan.go, the memory's types (handover.go) and the data plane's health
// (dataplane.go) free of I/O: standard library
// (no os, net, sync), the model and the election only, and no go statements.
func TestPlanIsPure(t *testing.T) {
	allowed := map[string]bool{"maps": true, "net/netip": true, "slices": true, "time": true,
		"github.com/ironlb/ironlb/internal/config": true, "github.com/ironlb/ironlb/internal/election": true}
	fset := token.NewFileSet()
	for _, f := range []string{"plan.go", "handover.go", "dataplane.go"} {
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range file.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !allowed[path] {
				t.Errorf("%s imports %q; the plan must stay pure", f, path)
			}
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if g, ok := n.(*ast.GoStmt); ok {
				t.Errorf("%s: go statement; the plan starts nothing", fset.Position(g.Pos()))
			}
			return true
		})
	}
}

// TestGroupAdvertisements: Services sharing an address are announced through the advertisements
// that cover all of them (serviceSelectors may leave some out).
func TestGroupAdvertisements(t *testing.T) {
	ad := func(names ...string) []election.Advertisement {
		var out []election.Advertisement
		for _, n := range names {
			out = append(out, election.Advertisement{Name: n})
		}
		return out
	}
	for _, tt := range []struct {
		name string
		l2   [][]election.Advertisement // per Service of the group
		want []election.Advertisement
	}{
		{"one Service: its own", [][]election.Advertisement{ad("a", "b")}, ad("a", "b")},
		{"two Services, same advertisements", [][]election.Advertisement{ad("a", "b"), ad("a", "b")}, ad("a", "b")},
		{"a serviceSelector leaves the second out of b", [][]election.Advertisement{ad("a", "b"), ad("a")}, ad("a")},
		{"no advertisement covers both: not announced", [][]election.Advertisement{ad("a"), ad("b")}, []election.Advertisement{}},
		{"three Services", [][]election.Advertisement{ad("a", "b", "c"), ad("c", "b"), ad("b", "c")}, ad("b", "c")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			byKey := map[string]*config.Service{}
			var group []election.Service
			for i, l2 := range tt.l2 {
				k := "default/s" + strconv.Itoa(i)
				byKey[k] = &config.Service{Key: k, L2: l2}
				group = append(group, election.Service{Key: k})
			}
			if diff := cmp.Diff(tt.want, groupAdvertisements(group, byKey), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
