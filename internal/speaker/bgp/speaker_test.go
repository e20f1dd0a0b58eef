package bgp

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	gobgp "github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
	"github.com/ironlb/ironlb/internal/bgpconfig"
	"github.com/ironlb/ironlb/internal/election"
	"github.com/ironlb/ironlb/internal/speaker/bfd"
)

// The loopback tests run the Speaker against GoBGP servers playing routers on 127.0.0.0/8, each
// on its own address and a free port, with BFD on an in-memory bfd.FakeNetwork. They need no root.

// testRouter is a GoBGP server acting as a router: it listens, accepts routes, and sends none.
type testRouter struct {
	s    *server.BgpServer
	addr netip.Addr
	port int
}

type routerNeighbor struct {
	addr     string // our side's address
	asn      uint32
	password string
}

func freePort(t *testing.T, addr string) int {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func newTestRouter(t *testing.T, addr string, asn uint32, neighbors ...routerNeighbor) *testRouter {
	t.Helper()
	r := &testRouter{s: server.NewBgpServer(), addr: netip.MustParseAddr(addr), port: freePort(t, addr)}
	served := make(chan struct{})
	go func() {
		defer close(served)
		r.s.Serve()
	}()
	t.Cleanup(func() {
		r.s.Stop()
		<-served
	})
	ctx := context.Background()
	routerID := addr
	if r.addr.Is6() {
		routerID = "10.255.255.1"
	}
	if err := r.s.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{Asn: asn, RouterId: routerID,
		ListenPort: int32(r.port), ListenAddresses: []string{addr}}}); err != nil {
		t.Fatal(err)
	}
	for _, n := range neighbors {
		if err := r.s.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
			Conf:      &api.PeerConf{NeighborAddress: n.addr, PeerAsn: n.asn, AuthPassword: n.password},
			Transport: &api.Transport{PassiveMode: true},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// route is what a router holds for a prefix.
type route struct {
	NextHop     netip.Addr
	ASPath      string
	Communities []string
	Large       []string
	LocalPref   uint32 // 0: absent
}

func (r *testRouter) routes(t *testing.T) map[netip.Prefix]route {
	t.Helper()
	out := map[netip.Prefix]route{}
	for _, fam := range []gobgp.Family{gobgp.RF_IPv4_UC, gobgp.RF_IPv6_UC} {
		err := r.s.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: fam},
			func(n gobgp.NLRI, paths []*apiutil.Path) {
				p, err := netip.ParsePrefix(n.String())
				if err != nil || len(paths) == 0 || !paths[0].PeerAddress.IsValid() {
					return // the router's own routes are not what the speaker sent
				}
				var rt route
				for _, a := range paths[0].Attrs {
					switch a := a.(type) {
					case *gobgp.PathAttributeNextHop:
						rt.NextHop = a.Value
					case *gobgp.PathAttributeMpReachNLRI:
						rt.NextHop = a.Nexthop
					case *gobgp.PathAttributeAsPath:
						var segs []string
						for _, seg := range a.Value {
							segs = append(segs, seg.String())
						}
						rt.ASPath = strings.Join(segs, " ")
					case *gobgp.PathAttributeCommunities:
						for _, c := range a.Value {
							rt.Communities = append(rt.Communities, fmt.Sprintf("%d:%d", c>>16, c&0xffff))
						}
					case *gobgp.PathAttributeLargeCommunities:
						for _, c := range a.Values {
							rt.Large = append(rt.Large, fmt.Sprintf("%d:%d:%d", c.ASN, c.LocalData1, c.LocalData2))
						}
					case *gobgp.PathAttributeLocalPref:
						rt.LocalPref = a.Value
					}
				}
				slices.Sort(rt.Communities)
				out[p] = rt
			})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// waitRoutes waits until the router holds exactly want.
func (r *testRouter) waitRoutes(t *testing.T, what string, want map[netip.Prefix]route, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	opt := cmpopts.EquateComparable(netip.Addr{}, netip.Prefix{})
	for {
		got := r.routes(t)
		diff := cmp.Diff(want, got, opt, cmpopts.EquateEmpty())
		if diff == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: router %v routes after %v (-want +got):\n%s", what, r.addr, timeout, diff)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// states records every SessionStatus reported.
type states struct {
	mu  sync.Mutex
	all []SessionStatus
}

func (s *states) on(st SessionStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.all = append(s.all, st)
}

// waitFor waits until the latest status of the named session satisfies ok.
func waitFor(t *testing.T, sp *Speaker, name string, timeout time.Duration, ok func(SessionStatus) bool) SessionStatus {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, st := range sp.Sessions() {
			if st.Name == name && ok(st) {
				return st
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s: condition not met after %v; sessions: %+v", name, timeout, sp.Sessions())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func established(st SessionStatus) bool { return st.Established() }

// The BFD timing of the loopback test, the same on the speaker's and the router's side: 300 ms ×
// 10, a detection time of 3 s. The fake network delivers every packet at once, so a live session
// goes down only when the process is not scheduled for a whole detection time (the router's loop
// sends nothing, the speaker's then finds the peer silent): at 50 ms × 3 (150 ms) that happened on
// a loaded machine, and session a flapped. What the test checks of BFD (up with the session, a cut
// holds the session down and withdraws the routes, healing brings it back) does not depend on how
// fast detection is; the waits for the cut allow for the detection time and a loaded machine.
const (
	loopbackBFDInterval = 300 // ms, receive and transmit
	loopbackBFDMult     = 10
)

// loopbackInput is the configuration of the loopback tests: an iBGP peer "a" with BFD, an eBGP peer
// "b", and two Services, one with externalTrafficPolicy Local.
func loopbackInput(ra, rb *testRouter) bgpconfig.Input {
	u32 := func(v uint32) *uint32 { return &v }
	return bgpconfig.Input{
		Node:            bgpconfig.Node{Name: "node-a"},
		DefaultRouterID: netip.MustParseAddr("10.0.0.10"),
		Peers: []v1beta2.BGPPeer{
			{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: v1beta2.BGPPeerSpec{MyASN: 64512, ASN: 64512,
				Address: ra.addr.String(), Port: uint16(ra.port), SrcAddress: "127.0.0.11", BFDProfile: "loopback",
				ConnectTime: &metav1.Duration{Duration: 2 * time.Second}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Spec: v1beta2.BGPPeerSpec{MyASN: 64512, ASN: 64600,
				Address: rb.addr.String(), Port: uint16(rb.port), SrcAddress: "127.0.0.12",
				ConnectTime: &metav1.Duration{Duration: 2 * time.Second}}},
		},
		BFDProfiles: []v1beta1.BFDProfile{{ObjectMeta: metav1.ObjectMeta{Name: "loopback"},
			Spec: v1beta1.BFDProfileSpec{ReceiveInterval: u32(loopbackBFDInterval), TransmitInterval: u32(loopbackBFDInterval),
				DetectMultiplier: u32(loopbackBFDMult)}}},
		Communities: []v1beta1.Community{{ObjectMeta: metav1.ObjectMeta{Name: "aliases"},
			Spec: v1beta1.CommunitySpec{Communities: []v1beta1.CommunityAlias{{Name: "no-advertise", Value: "65535:65282"}}}}},
		Advertisements: []v1beta1.BGPAdvertisement{
			{ObjectMeta: metav1.ObjectMeta{Name: "all"}, Spec: v1beta1.BGPAdvertisementSpec{
				LocalPref: 150, Communities: []string{"no-advertise", "large:1:2:3"}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "only-b"}, Spec: v1beta1.BGPAdvertisementSpec{
				Peers: []string{"b"}, Communities: []string{"64600:1"}}},
		},
		Pools: []bgpconfig.Pool{{Name: "default"}},
		Services: []bgpconfig.Service{
			{Key: "ns/one", Pool: "default", Addrs: []netip.Addr{netip.MustParseAddr("198.51.100.1")},
				Endpoints: []election.Endpoint{{Node: "node-b", Ready: true}}},
			{Key: "ns/local", Pool: "default", Addrs: []netip.Addr{netip.MustParseAddr("198.51.100.2")}, Local: true,
				Endpoints: []election.Endpoint{{Node: "node-a", Ready: true}}},
		},
	}
}

func mustBuild(t *testing.T, in bgpconfig.Input) bgpconfig.State {
	t.Helper()
	st, errs := bgpconfig.Build(in)
	if len(errs) != 0 {
		t.Fatalf("config errors: %v", errs)
	}
	return st
}

func TestSpeakerLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("loopback BGP sessions take seconds")
	}
	// Every router starts here, before any session exists: GoBGP's StartBgp writes package
	// variables (table.SelectionOptions, table.UseMultiplePaths) that every BgpServer's FSM
	// goroutines read, so a router started while the others exchange routes is a data race
	// (-race found it with rc and rd started halfway). The product runs one BgpServer at a time.
	ra := newTestRouter(t, "127.0.0.1", 64512, routerNeighbor{addr: "127.0.0.11", asn: 64512})
	rb := newTestRouter(t, "127.0.0.2", 64600, routerNeighbor{addr: "127.0.0.12", asn: 64512})
	rc := newTestRouter(t, "127.0.0.3", 64700, routerNeighbor{addr: "127.0.0.13", asn: 64512})
	rd := newTestRouter(t, "127.0.0.4", 64800, routerNeighbor{addr: "127.0.0.14", asn: 64512, password: "right"})

	// BFD: the router's side runs its own Manager on the fake network.
	bnet := bfd.NewFakeNetwork()
	routerBFD := bfd.New(bnet.Host(ra.addr), bfd.Config{})
	prof := bfd.Profile{ReceiveInterval: loopbackBFDInterval * time.Millisecond, TransmitInterval: loopbackBFDInterval * time.Millisecond,
		DetectMultiplier: loopbackBFDMult}
	if err := routerBFD.AddPeer(ra.addr, netip.MustParseAddr("127.0.0.11"), prof); err != nil {
		t.Fatal(err)
	}
	bctx, stopRouterBFD := context.WithCancel(context.Background())
	routerBFDDone := make(chan error, 1)
	go func() { routerBFDDone <- routerBFD.Run(bctx) }()
	defer func() { stopRouterBFD(); <-routerBFDDone }()

	rec := &states{}
	sp := New(Config{BFD: bnet.Host(netip.MustParseAddr("127.0.0.11"), netip.MustParseAddr("127.0.0.12")), OnState: rec.on})
	in := loopbackInput(ra, rb)
	sp.Set(mustBuild(t, in))
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	// Goroutines inherit profiler labels: every goroutine Run starts, GoBGP's included, carries
	// this one, and none may be left when Run returns.
	pprof.Do(ctx, pprof.Labels("ironlb", "speaker"), func(ctx context.Context) {
		go func() { runDone <- sp.Run(ctx) }()
	})
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-runDone; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	defer stop()

	// 30 s, not the few a quiet machine needs: on a loaded one (CI runs every package at once) GoBGP
	// may wait out its connect-retry timer.
	a := waitFor(t, sp, "a", 30*time.Second, func(st SessionStatus) bool { return st.Established() && st.BFDStatus == "up" })
	waitFor(t, sp, "b", 30*time.Second, established)
	if a.Local != netip.MustParseAddr("127.0.0.11") || a.Reason != "" || a.Paths != 2 {
		t.Errorf("session a: %+v", a)
	}

	// iBGP: LOCAL_PREF, no AS path; eBGP: our AS prepended, no LOCAL_PREF, its own community too.
	// The next hop is the session's local address.
	p1, p2 := netip.MustParsePrefix("198.51.100.1/32"), netip.MustParsePrefix("198.51.100.2/32")
	ibgp := route{NextHop: netip.MustParseAddr("127.0.0.11"), Communities: []string{"65535:65282"}, Large: []string{"1:2:3"}, LocalPref: 150}
	ebgp := route{NextHop: netip.MustParseAddr("127.0.0.12"), ASPath: "64512", Communities: []string{"64600:1", "65535:65282"},
		Large: []string{"1:2:3"}, LocalPref: 0}
	ra.waitRoutes(t, "initial", map[netip.Prefix]route{p1: ibgp, p2: ibgp}, 5*time.Second)
	rb.waitRoutes(t, "initial", map[netip.Prefix]route{p1: ebgp, p2: ebgp}, 5*time.Second)
	checkCounters(t, sp, map[string]uint64{"a": 2, "b": 2})

	// Routes the routers send are not accepted: GoBGP's global RIB holds our paths only.
	if _, err := rb.s.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{routerPath(t, "203.0.113.0/24", rb.addr)}}); err != nil {
		t.Fatal(err)
	}
	offered := netip.MustParsePrefix("203.0.113.0/24")
	deadline := time.Now().Add(3 * time.Second)
	for !slices.Contains(speakerRIB(t, sp, rb.addr.String()), offered) { // received...
		if time.Now().After(deadline) {
			t.Fatal("router B's route never reached the speaker")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := speakerRIB(t, sp, ""); fmt.Sprint(got) != fmt.Sprint([]netip.Prefix{p1, p2}) { // ...and rejected
		t.Errorf("speaker's RIB holds %v", got)
	}
	ra.waitRoutes(t, "nothing reflected", map[netip.Prefix]route{p1: ibgp, p2: ibgp}, time.Second)

	// The local endpoint goes: the Service is withdrawn everywhere.
	in.Services[1].Endpoints[0].Node = "node-b"
	sp.Set(mustBuild(t, in))
	ra.waitRoutes(t, "no local endpoint", map[netip.Prefix]route{p1: ibgp}, 5*time.Second)
	rb.waitRoutes(t, "no local endpoint", map[netip.Prefix]route{p1: ebgp}, 5*time.Second)
	checkCounters(t, sp, map[string]uint64{"a": 1, "b": 1})

	// The per-peer advertisement moves from b to a: both sessions stay up, and each router gets
	// the prefix again with its new attributes (soft reset out).
	in.Advertisements[1].Spec.Peers = []string{"a"}
	sp.Set(mustBuild(t, in))
	ibgp2 := ibgp
	ibgp2.Communities = []string{"64600:1", "65535:65282"}
	ebgp2 := ebgp
	ebgp2.Communities = []string{"65535:65282"}
	ra.waitRoutes(t, "peers changed", map[netip.Prefix]route{p1: ibgp2}, 5*time.Second)
	rb.waitRoutes(t, "peers changed", map[netip.Prefix]route{p1: ebgp2}, 5*time.Second)
	for _, st := range sp.Sessions() {
		if !st.Established() || st.Since.After(a.Since) && st.Name == "a" {
			t.Errorf("a policy change reset session %+v", st)
		}
	}

	// A wrong peer AS and a wrong password: clear reasons, and the other sessions keep working.
	in.Peers = append(in.Peers,
		v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "c-wrong-asn"}, Spec: v1beta2.BGPPeerSpec{MyASN: 64512, ASN: 64701,
			Address: rc.addr.String(), Port: uint16(rc.port), SrcAddress: "127.0.0.13", ConnectTime: &metav1.Duration{Duration: 2 * time.Second}}},
		v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "d-wrong-password"}, Spec: v1beta2.BGPPeerSpec{MyASN: 64512, ASN: 64800,
			Address: rd.addr.String(), Port: uint16(rd.port), SrcAddress: "127.0.0.14", Password: "wrong",
			ConnectTime: &metav1.Duration{Duration: 2 * time.Second}}},
	)
	sp.Set(mustBuild(t, in))
	c := waitFor(t, sp, "c-wrong-asn", 10*time.Second, func(st SessionStatus) bool { return st.Reason == BadPeerAS })
	d := waitFor(t, sp, "d-wrong-password", 15*time.Second, func(st SessionStatus) bool { return st.Reason == ConnectFailed })
	t.Logf("wrong AS: %s %s: %s", c.BGPStatus, c.Reason, c.Message)
	t.Logf("wrong password: %s %s: %s", d.BGPStatus, d.Reason, d.Message)
	if !strings.Contains(d.Message, "timeout") || !strings.Contains(d.Message, "TCP MD5") {
		t.Errorf("wrong password message %q", d.Message)
	}
	for _, st := range sp.Sessions() {
		if (st.Name == "a" || st.Name == "b") && !st.Established() {
			t.Errorf("healthy session %+v went down", st)
		}
	}
	if got := len(rc.routes(t)) + len(rd.routes(t)); got != 0 {
		t.Errorf("misconfigured routers got %d routes", got)
	}

	// BFD fails (the link, not BGP's TCP connection): session a is held down at once, and router A
	// loses the routes; b is untouched. When BFD comes back, so does the session.
	cutAt := time.Now()
	for _, dir := range [][2]string{{"127.0.0.1", "127.0.0.11"}, {"127.0.0.11", "127.0.0.1"}} {
		bnet.Cut(netip.MustParseAddr(dir[0]), netip.MustParseAddr(dir[1]), true)
	}
	down := waitFor(t, sp, "a", 30*time.Second, func(st SessionStatus) bool { return st.Reason == BFDDown && !st.Established() })
	ra.waitRoutes(t, "bfd down", nil, 10*time.Second)
	t.Logf("BFD cut → session a %s (%s: %s) and router A without routes after %v", down.BGPStatus, down.Reason, down.Message,
		time.Since(cutAt).Round(time.Millisecond))
	if down.BFDStatus != "down" {
		t.Errorf("BFD status %q", down.BFDStatus)
	}
	for _, dir := range [][2]string{{"127.0.0.1", "127.0.0.11"}, {"127.0.0.11", "127.0.0.1"}} {
		bnet.Cut(netip.MustParseAddr(dir[0]), netip.MustParseAddr(dir[1]), false)
	}
	healedAt := time.Now()
	waitFor(t, sp, "a", 30*time.Second, func(st SessionStatus) bool { return st.Established() && st.BFDStatus == "up" })
	ra.waitRoutes(t, "bfd up", map[netip.Prefix]route{p1: ibgp2}, 5*time.Second)
	t.Logf("BFD healed → session a established again after %v", time.Since(healedAt).Round(time.Millisecond))
	if b := waitFor(t, sp, "b", time.Second, established); b.Since.After(cutAt) {
		t.Errorf("session b flapped: %+v", b)
	}

	// GoBGP takes one admin state request at a time and drops one made while the last is pending:
	// in TestFRR on a loaded machine BFD went down and up within a millisecond, the speaker held
	// session a down and released it back to back, and GoBGP kept the hold only. Here GoBGP holds
	// the session down behind the speaker's back, as after such a dropped release, and the speaker's
	// next check of what it last asked for (released) brings it back.
	flapAt := time.Now()
	onRun := func(f func() error) {
		t.Helper()
		done := make(chan error)
		sp.events <- func() { done <- f() }
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	onRun(func() error { return sp.srv.disablePeer(ra.addr, "a hold whose release GoBGP dropped") })
	waitFor(t, sp, "a", 10*time.Second, func(st SessionStatus) bool { return !st.Established() })
	onRun(func() error { sp.peers[ra.addr].checkAt = time.Now(); return nil })
	waitFor(t, sp, "a", 30*time.Second, func(st SessionStatus) bool { return st.Established() && st.Since.After(flapAt) })
	ra.waitRoutes(t, "released again", map[netip.Prefix]route{p1: ibgp2}, 10*time.Second)

	// Removing the misconfigured peers reports them removed.
	in.Peers = in.Peers[:2]
	sp.Set(mustBuild(t, in))
	deadline = time.Now().Add(5 * time.Second)
	for len(sp.Sessions()) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("sessions %+v", sp.Sessions())
		}
		time.Sleep(20 * time.Millisecond)
	}

	if st, ok := sp.BFDStats(); !ok || st.Received == 0 || len(sp.BFDPeers()) != 1 {
		t.Errorf("BFD stats %+v (%v), peers %+v", st, ok, sp.BFDPeers())
	}
	if !strings.Contains(labelledGoroutines(t), `"ironlb":"speaker"`) {
		t.Fatal("no goroutine carries the speaker's label while it runs")
	}

	// Stopping closes the sessions with a notification: the routers withdraw at once.
	stopAt := time.Now()
	stop()
	ra.waitRoutes(t, "stopped", nil, time.Second)
	rb.waitRoutes(t, "stopped", nil, time.Second)
	t.Logf("routes withdrawn %v after Run's context ended", time.Since(stopAt).Round(time.Millisecond))

	rec.mu.Lock()
	var removed []string
	for _, st := range rec.all {
		if st.Removed {
			removed = append(removed, st.Name)
		}
	}
	rec.mu.Unlock()
	slices.Sort(removed)
	if diff := cmp.Diff([]string{"c-wrong-asn", "d-wrong-password"}, removed); diff != "" {
		t.Errorf("removed reports (-want +got):\n%s", diff)
	}

	// No goroutine of Run's, GoBGP's or BFD's survives Run.
	deadline = time.Now().Add(5 * time.Second)
	for {
		prof := labelledGoroutines(t)
		if !strings.Contains(prof, `"ironlb":"speaker"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("goroutines left by Run:\n%s", prof)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// routerPath is a route a router originates.
func routerPath(t *testing.T, prefix string, nh netip.Addr) *apiutil.Path {
	t.Helper()
	p, err := globalPath(netip.MustParsePrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := gobgp.NewPathAttributeNextHop(nh)
	p.Attrs[1] = n
	return p
}

// speakerRIB lists the prefixes in the speaker's GoBGP global RIB, or received from a peer
// (Adj-RIB-In, before the import policy), from Run's goroutine.
func speakerRIB(t *testing.T, sp *Speaker, adjInOf string) []netip.Prefix {
	t.Helper()
	var out []netip.Prefix
	done := make(chan error)
	sp.events <- func() {
		if sp.srv == nil {
			done <- fmt.Errorf("gobgp not running")
			return
		}
		req := apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: gobgp.RF_IPv4_UC}
		if adjInOf != "" {
			req.TableType, req.Name = api.TableType_TABLE_TYPE_ADJ_IN, adjInOf
		}
		done <- sp.srv.s.ListPath(req,
			func(n gobgp.NLRI, _ []*apiutil.Path) { out = append(out, netip.MustParsePrefix(n.String())) })
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(out, netip.Prefix.Compare)
	return out
}

func labelledGoroutines(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestSpeakerRunTwice: a second Run while one runs fails.
func TestSpeakerRunTwice(t *testing.T) {
	sp := New(Config{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sp.Run(ctx) }()
	time.Sleep(10 * time.Millisecond)
	if err := sp.Run(ctx); err != ErrRunning {
		t.Errorf("second Run: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
}

// TestSpeakerIPv6AndDynamicASN: an IPv6 session carries the IPv6 prefix with an IPv6 next hop;
// dynamicASN internal and external accept the right routers, and external refuses a router in
// our own AS.
func TestSpeakerIPv6AndDynamicASN(t *testing.T) {
	if testing.Short() {
		t.Skip("loopback BGP sessions take seconds")
	}
	r6 := newTestRouter(t, "::1", 64700, routerNeighbor{addr: "::1", asn: 64512})
	rInt := newTestRouter(t, "127.0.0.5", 64512, routerNeighbor{addr: "127.0.0.15", asn: 64512})
	rExt := newTestRouter(t, "127.0.0.6", 64800, routerNeighbor{addr: "127.0.0.16", asn: 64512})
	rBad := newTestRouter(t, "127.0.0.7", 64512, routerNeighbor{addr: "127.0.0.17", asn: 64512})
	peer := func(name string, r *testRouter, src string, peerASN uint32, dyn v1beta2.DynamicASNMode) v1beta2.BGPPeer {
		return v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1beta2.BGPPeerSpec{MyASN: 64512, ASN: peerASN,
			DynamicASN: dyn, Address: r.addr.String(), Port: uint16(r.port), SrcAddress: src,
			ConnectTime: &metav1.Duration{Duration: 2 * time.Second}}}
	}
	in := bgpconfig.Input{
		Node:            bgpconfig.Node{Name: "node-a"},
		DefaultRouterID: netip.MustParseAddr("10.0.0.10"),
		Peers: []v1beta2.BGPPeer{
			peer("v6", r6, "::1", 64700, ""),
			peer("dyn-internal", rInt, "127.0.0.15", 0, v1beta2.InternalASNMode),
			peer("dyn-external", rExt, "127.0.0.16", 0, v1beta2.ExternalASNMode),
			peer("dyn-external-own-as", rBad, "127.0.0.17", 0, v1beta2.ExternalASNMode),
		},
		Advertisements: []v1beta1.BGPAdvertisement{{ObjectMeta: metav1.ObjectMeta{Name: "all"},
			Spec: v1beta1.BGPAdvertisementSpec{Communities: []string{"64512:1"}}}},
		Pools: []bgpconfig.Pool{{Name: "default"}},
		Services: []bgpconfig.Service{{Key: "ns/dual", Pool: "default",
			Addrs:     []netip.Addr{netip.MustParseAddr("2001:db8:100::1"), netip.MustParseAddr("198.51.100.1")},
			Endpoints: []election.Endpoint{{Node: "node-b", Ready: true}}}},
	}
	sp := New(Config{})
	sp.Set(mustBuild(t, in))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sp.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	for _, name := range []string{"v6", "dyn-internal", "dyn-external"} {
		waitFor(t, sp, name, 10*time.Second, established)
	}
	bad := waitFor(t, sp, "dyn-external-own-as", 10*time.Second, func(st SessionStatus) bool { return st.Reason == BadPeerAS })
	t.Logf("dynamicASN external with a router in our AS: %s, %s: %s", bad.BGPStatus, bad.Reason, bad.Message)

	v4 := netip.MustParsePrefix("198.51.100.1/32")
	r6.waitRoutes(t, "IPv6", map[netip.Prefix]route{netip.MustParsePrefix("2001:db8:100::1/128"): {
		NextHop: netip.MustParseAddr("::1"), ASPath: "64512", Communities: []string{"64512:1"}}}, 5*time.Second)
	rInt.waitRoutes(t, "dynamic internal", map[netip.Prefix]route{v4: {
		NextHop: netip.MustParseAddr("127.0.0.15"), Communities: []string{"64512:1"}, LocalPref: 100}}, 5*time.Second)
	rExt.waitRoutes(t, "dynamic external", map[netip.Prefix]route{v4: {
		NextHop: netip.MustParseAddr("127.0.0.16"), ASPath: "64512", Communities: []string{"64512:1"}}}, 5*time.Second)
	rBad.waitRoutes(t, "dynamic external refused", nil, 5*time.Second)
}

// checkCounters checks Counters: every session has sent UPDATEs and has the wanted number of
// prefixes advertised.
func checkCounters(t *testing.T, sp *Speaker, advertised map[string]uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cs, err := sp.Counters(ctx)
	if err != nil {
		t.Fatalf("Counters: %v", err)
	}
	got := map[string]uint64{}
	for _, c := range cs {
		got[c.Name] = c.Advertised
		if c.UpdatesSent == 0 {
			t.Errorf("%s: no UPDATE sent: %+v", c.Name, c)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(advertised) {
		t.Errorf("advertised prefixes %v, want %v", got, advertised)
	}
}
