package speaker

import (
	"context"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/internal/config"
	"github.com/ironlb/ironlb/internal/election"
	"github.com/ironlb/ironlb/internal/liveness"
)

// emptyStores are stores with no objects.
func emptyStores() stores {
	return stores{services: cache.NewStore(cache.MetaNamespaceKeyFunc), slices: cache.NewStore(cache.MetaNamespaceKeyFunc),
		nodes: cache.NewStore(cache.MetaNamespaceKeyFunc), pools: cache.NewStore(cache.MetaNamespaceKeyFunc),
		l2ads: cache.NewStore(cache.MetaNamespaceKeyFunc)}
}

// fakeResponder records what the owner asks of a responder. Safe for the retries' timers.
type fakeResponder struct {
	mu        sync.Mutex
	calls     []string // "announce 1.2.3.4", "withdraw ...", "gratuitous ...", "to <ip> <client>"
	announced map[netip.Addr]bool
}

func newFakeResponder() *fakeResponder { return &fakeResponder{announced: map[netip.Addr]bool{}} }

func (r *fakeResponder) record(s string) { r.mu.Lock(); r.calls = append(r.calls, s); r.mu.Unlock() }

func (r *fakeResponder) Announce(ip netip.Addr) error {
	r.record("announce " + ip.String())
	r.mu.Lock()
	r.announced[ip] = true
	r.mu.Unlock()
	return nil
}

func (r *fakeResponder) Withdraw(ip netip.Addr) error {
	r.record("withdraw " + ip.String())
	r.mu.Lock()
	delete(r.announced, ip)
	r.mu.Unlock()
	return nil
}

func (r *fakeResponder) Gratuitous(ip netip.Addr) error {
	r.record("gratuitous " + ip.String())
	return nil
}

func (r *fakeResponder) GratuitousTo(ip, clientIP netip.Addr, _, _ net.HardwareAddr) error {
	r.record("to " + ip.String() + " " + clientIP.String())
	return nil
}

// count returns how many calls start with prefix, and forgets the calls.
func (r *fakeResponder) take(prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	r.calls = nil
	return n
}

// fakeHeartbeats is the heartbeat detector's view: which peers are alive, with their heartbeats.
type fakeHeartbeats struct {
	mu    sync.Mutex
	peers map[string]liveness.Heartbeat // alive peers
	set   []liveness.Peer
	sent  int
}

func (h *fakeHeartbeats) SetPeers(p []liveness.Peer) { h.mu.Lock(); h.set = p; h.mu.Unlock() }
func (h *fakeHeartbeats) Alive(n string) (bool, time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.peers[n]
	return ok, time.Time{}
}
func (h *fakeHeartbeats) Info(n string) (liveness.Heartbeat, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hb, ok := h.peers[n]
	return hb, ok
}
func (h *fakeHeartbeats) SendNow() { h.mu.Lock(); h.sent++; h.mu.Unlock() }

// fakeNeighbours is the kernel's neighbour table.
type fakeNeighbours struct {
	mu    sync.Mutex
	table map[netip.Addr]net.HardwareAddr
}

func (f *fakeNeighbours) Neighbours() (map[netip.Addr]net.HardwareAddr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.table), nil
}

func (f *fakeNeighbours) set(a netip.Addr, mac net.HardwareAddr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if mac == nil {
		delete(f.table, a)
	} else {
		f.table[a] = mac
	}
}

type fakeStatus struct{ want map[string]map[string]any }

func (f *fakeStatus) Set(w map[string]map[string]any) { f.want = w }

// fakeClock is a clock whose time moves only by Advance, which runs the timers due.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c    *fakeClock
	at   time.Time
	f    func()
	done bool
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) AfterFunc(d time.Duration, f func()) timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.done
	t.done = true
	return was
}

// Advance moves the time on by d and runs the timers due, in order, on the calling goroutine.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	for _, t := range c.timers {
		if !t.done && !t.at.After(c.now) {
			t.done = true
			due = append(due, t)
		}
	}
	c.mu.Unlock()
	slices.SortFunc(due, func(a, b *fakeTimer) int { return a.at.Compare(b.at) })
	for _, t := range due {
		t.f()
	}
}

// ownerEnv is a speaker built by newSpeaker over fakes, on node self, with a peer node, a pool, an
// L2Advertisement and one Service "default/web" at vip with an endpoint on each node.
type ownerEnv struct {
	s          *speaker
	arp        *fakeResponder
	hb         *fakeHeartbeats
	neigh      *fakeNeighbours
	status     *fakeStatus
	rec        *record.FakeRecorder
	clock      *fakeClock
	objs       stores
	m          *metrics
	self, peer string
	reg        *prometheus.Registry
	peerMAC    net.HardwareAddr
	peerIP     netip.Addr
	svc        *corev1.Service
}

var vip = netip.MustParseAddr("172.18.255.200")

// newOwnerEnv names the nodes by rank for vip: selfFirst makes this node the rank winner.
func newOwnerEnv(t *testing.T, selfFirst bool, cfg Config) *ownerEnv {
	t.Helper()
	r := election.Rank(vip, []string{"node-a", "node-b"})
	e := &ownerEnv{self: r[1], peer: r[0], arp: newFakeResponder(), hb: &fakeHeartbeats{peers: map[string]liveness.Heartbeat{}},
		status: &fakeStatus{}, rec: record.NewFakeRecorder(100), clock: &fakeClock{now: time.Date(2026, 11, 26, 7, 0, 0, 0, time.UTC)},
		objs: emptyStores(), peerMAC: net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}, peerIP: netip.AddrFrom4([4]byte{172, 18, 0, 3}),
		neigh: &fakeNeighbours{table: map[netip.Addr]net.HardwareAddr{}}}
	if selfFirst {
		e.self, e.peer = r[0], r[1]
	}
	e.reg = prometheus.NewRegistry()
	e.m = newMetrics(e.reg)
	add := func(s cache.Store, o any) {
		if err := s.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range []string{e.self, e.peer} {
		add(e.objs.nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: netip.AddrFrom4([4]byte{172, 18, 0, byte(2 + i)}).String()}}}})
	}
	add(e.objs.pools, toUnstructured(t, "IPAddressPool", &v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: testNS},
		Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"172.18.255.200-172.18.255.250"}}}))
	add(e.objs.l2ads, toUnstructured(t, "L2Advertisement", &v1beta1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "l2", Namespace: testNS}}))
	e.svc = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec:   corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: vip.String()}}}}}
	add(e.objs.services, e.svc)
	add(e.objs.slices, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-1",
		Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		Endpoints: []discoveryv1.Endpoint{{NodeName: &e.self}, {NodeName: &e.peer}}})
	cfg.Node, cfg.HoldDown = e.self, 5*time.Second
	e.s = newSpeaker(cfg, deps{Log: slog.New(slog.DiscardHandler), Interface: &net.Interface{Index: 1, Name: "eth0", HardwareAddr: net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}},
		ARP: e.arp, Heartbeats: e.hb, Status: e.status, Recorder: e.rec, Objects: e.objs, Metrics: e.m, Clock: e.clock, Neighbours: e.neigh})
	e.s.setReady()
	e.clock.Advance(time.Hour) // this node is settled
	return e
}

func toUnstructured(t *testing.T, kind string, o runtime.Object) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion("metallb.io/v1beta1")
	u.SetKind(kind)
	return u
}

// peerUp makes the peer alive and settled, with its MAC in this node's neighbour table (as the
// heartbeats and echo probes sent to its InternalIP leave it).
func (e *ownerEnv) peerUp() {
	e.hb.mu.Lock()
	e.hb.peers[e.peer] = liveness.Heartbeat{Node: e.peer, Ready: true, ReadyFor: time.Hour, Interfaces: []string{"eth0"}}
	e.hb.mu.Unlock()
	e.neigh.set(e.peerIP, e.peerMAC)
}

func (e *ownerEnv) peerDown() {
	e.hb.mu.Lock()
	delete(e.hb.peers, e.peer)
	e.hb.mu.Unlock()
}

func (e *ownerEnv) events() []string {
	var out []string
	for len(e.rec.Events) > 0 {
		out = append(out, <-e.rec.Events)
	}
	return out
}

// TestOwnerAnnounce: an address elected here is announced on the responder, with a gratuitous
// announcement at once and three follow-ups on the clock, a nodeAssigned event, a ServiceL2Status
// and the metrics.
func TestOwnerAnnounce(t *testing.T) {
	e := newOwnerEnv(t, true, Config{})
	e.peerUp()
	e.s.eligible[e.peer] = e.clock.Now() // seen before: its return would announce again (TestPlanRules)
	e.s.reconcile(context.Background())
	if !e.arp.announced[vip] {
		t.Fatal("not announced")
	}
	if n := e.arp.take("gratuitous"); n != 1 {
		t.Errorf("%d gratuitous announcements at once, want 1", n)
	}
	if n := e.s.retries.len(); n != len(gratuitousRetries) {
		t.Errorf("%d follow-ups pending, want %d", n, len(gratuitousRetries))
	}
	e.clock.Advance(gratuitousRetries[len(gratuitousRetries)-1])
	if n := e.arp.take("gratuitous"); n != len(gratuitousRetries) {
		t.Errorf("%d follow-ups sent, want %d", n, len(gratuitousRetries))
	}
	if ev := e.events(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Normal nodeAssigned") {
		t.Errorf("events %q, want one nodeAssigned", ev)
	}
	if st := e.status.want["default/web"]; st == nil || st["node"] != e.self {
		t.Errorf("status %v, want default/web on %s", e.status.want, e.self)
	}
	if v := testutil.ToFloat64(e.m.announced); v != 1 {
		t.Errorf("announced addresses %v, want 1", v)
	}
	if v := testutil.ToFloat64(e.m.takeovers.WithLabelValues("elected")); v != 1 {
		t.Errorf("takeovers %v, want 1", v)
	}
	if v := testutil.ToFloat64(e.m.mlbAnnounced.WithLabelValues("default/web", "layer2", e.self, vip.String())); v != 1 {
		t.Errorf("metallb_speaker_announced %v, want 1", v)
	}
	if v := testutil.ToFloat64(e.m.k8s.Updates); v != 0 {
		t.Errorf("metallb_k8s_client_updates_total %v before any informer change", v)
	}
	// A valid configuration: loaded, not stale.
	checkMetrics(t, e.reg, `
# HELP metallb_k8s_client_config_loaded_bool 1 if the MetalLB configuration was successfully loaded at least once.
# TYPE metallb_k8s_client_config_loaded_bool gauge
metallb_k8s_client_config_loaded_bool 1
# HELP metallb_k8s_client_config_stale_bool 1 if running on a stale configuration, because the latest config failed to load.
# TYPE metallb_k8s_client_config_stale_bool gauge
metallb_k8s_client_config_stale_bool 0
`)
	// Nothing changes: nothing is done again.
	e.s.reconcile(context.Background())
	if n := e.arp.take(""); n != 0 {
		t.Errorf("%d responder calls on an unchanged reconcile", n)
	}
	if peers := e.hb.set; len(peers) != 1 || peers[0].Node != e.peer || peers[0].Addr.Port() != uint16(e.s.cfg.HeartbeatPort) {
		t.Errorf("heartbeat peers %v, want %s", peers, e.peer)
	}
}

// TestOwnerWithdraw: the Service's deletion, seen by the informer handler, withdraws its address and
// its status.
func TestOwnerWithdraw(t *testing.T) {
	e := newOwnerEnv(t, true, Config{})
	e.s.reconcile(context.Background())
	if err := e.objs.services.Delete(e.svc); err != nil {
		t.Fatal(err)
	}
	e.s.reconcile(context.Background())
	if !e.arp.announced[vip] {
		t.Fatal("withdrawn before the informer reported the change: the model is rebuilt only on changes")
	}
	e.s.dirty.Store(true) // what objectsChanged does, without its timer
	e.s.reconcile(context.Background())
	if e.arp.announced[vip] || len(e.s.announced) != 0 {
		t.Error("still announced after its Service was deleted")
	}
	if len(e.status.want) != 0 {
		t.Errorf("status %v, want none", e.status.want)
	}
	if v := testutil.ToFloat64(e.m.announced); v != 0 {
		t.Errorf("announced addresses %v, want 0", v)
	}
	if n := testutil.CollectAndCount(e.m.mlbAnnounced); n != 0 {
		t.Errorf("%d metallb_speaker_announced series after the withdrawal, want 0", n)
	}
}

// TestOwnerConfigGauges: MetalLB's config gauges follow the configuration objects. An invalid pool
// from the start: never loaded (MetalLBConfigNotLoaded); fixed: loaded; invalid again: stale
// (MetalLBStaleConfig), still loaded; fixed: not stale. Each informer change counts as an update.
func TestOwnerConfigGauges(t *testing.T) {
	e := newOwnerEnv(t, true, Config{})
	setPool := func(addr string) {
		t.Helper()
		if err := e.objs.pools.Update(toUnstructured(t, "IPAddressPool", &v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: testNS},
			Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{addr}}})); err != nil {
			t.Fatal(err)
		}
		e.s.objectsChanged()
		e.s.reconcile(context.Background())
	}
	check := func(what string, loaded, stale float64) {
		t.Helper()
		if v := gaugeValue(t, e.reg, "metallb_k8s_client_config_loaded_bool"); v != loaded {
			t.Errorf("%s: config_loaded_bool %v, want %v", what, v, loaded)
		}
		if v := gaugeValue(t, e.reg, "metallb_k8s_client_config_stale_bool"); v != stale {
			t.Errorf("%s: config_stale_bool %v, want %v", what, v, stale)
		}
	}
	setPool("not-an-address")
	check("invalid from the start", 0, 1)
	setPool("172.18.255.200-172.18.255.250")
	check("fixed", 1, 0)
	setPool("172.18.255.250-172.18.255.200")
	check("invalid again", 1, 1)
	setPool("172.18.255.200-172.18.255.250")
	check("fixed again", 1, 0)
	if v := testutil.ToFloat64(e.m.k8s.Updates); v != 4 {
		t.Errorf("metallb_k8s_client_updates_total %v, want 4", v)
	}
}

// TestOwnerLingerUntilClaimed: losing the address to a better-ranked node that comes back keeps it
// answered until that node's claim reaches the responder; then it is withdrawn.
func TestOwnerLingerUntilClaimed(t *testing.T) {
	e := newOwnerEnv(t, false, Config{})
	e.s.reconcile(context.Background()) // the peer is down: this node announces
	if !e.arp.announced[vip] {
		t.Fatal("not announced while the rank winner is down")
	}
	e.peerUp()
	e.s.reconcile(context.Background())
	if !e.arp.announced[vip] || !e.s.handover.lingering(vip) {
		t.Fatal("withdrawn at once: want make-before-break")
	}
	if !e.s.wake.Equal(e.clock.Now().Add(handoverLinger)) {
		t.Errorf("wake %v, want the linger's end", e.s.wake)
	}
	e.s.resolve(conflict{vip, e.peerMAC, false})
	if e.arp.announced[vip] || e.s.handover.lingering(vip) {
		t.Error("still answering after the winner claimed the address")
	}
}

// TestOwnerResolve: a duplicate announcer is settled by rank: the better-ranked node reasserts, the
// other withdraws and leaves the address to it; both raise a DuplicateAnnouncer event.
func TestOwnerResolve(t *testing.T) {
	for _, selfFirst := range []bool{true, false} {
		e := newOwnerEnv(t, selfFirst, Config{})
		e.s.reconcile(context.Background())
		e.peerUp()
		e.s.learnMACs(e.s.cur) // learn the peer's MAC, as a reconcile does
		e.arp.take("")
		e.events()
		e.s.duplicate(vip, e.peerMAC, false)
		e.s.resolve(<-e.s.conflicts)
		if ev := e.events(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning DuplicateAnnouncer") {
			t.Errorf("selfFirst %v: events %q, want one DuplicateAnnouncer", selfFirst, ev)
		}
		if v := testutil.ToFloat64(e.m.conflicts); v != 1 {
			t.Errorf("selfFirst %v: duplicate announcer metric %v, want 1", selfFirst, v)
		}
		switch {
		case selfFirst && (!e.arp.announced[vip] || e.arp.take("gratuitous") != 1):
			t.Error("the better-ranked node does not keep the address and reassert it")
		case !selfFirst && (e.arp.announced[vip] || !e.s.yielded.holds(vip, e.clock.Now(), func(string) bool { return true })):
			t.Error("the worse-ranked node does not withdraw and leave the address to the other")
		}
	}
}

// TestOwnerMACNotFromHeartbeats: which node a MAC is comes from this node's neighbour table for the
// peer's InternalIP, never from what a heartbeat says: a heartbeat has no MAC to offer, so a host
// that forges the peer's heartbeats (or the peer itself) cannot make its MAC pass for a speaker's
// and win an address in resolve. A claim by a MAC the table does not give to a peer is an unknown
// host's: this node keeps the address and raises the event.
func TestOwnerMACNotFromHeartbeats(t *testing.T) {
	evil := net.HardwareAddr{0x02, 0xee, 0, 0, 0, 0x66}
	for _, tc := range []struct {
		name      string
		table     net.HardwareAddr // the neighbour entry of the peer's InternalIP
		claim     net.HardwareAddr // the MAC claiming vip
		wantKnown bool
	}{
		{"the peer's own MAC, from the table", nil, nil, true}, // filled below with peerMAC
		{"a MAC the heartbeats never had a say in", nil, evil, false},
		{"no entry for the peer", net.HardwareAddr{}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newOwnerEnv(t, false, Config{}) // the peer is ranked first: a known claim wins
			e.s.reconcile(context.Background())
			e.peerDown() // this node announces while the peer is away
			e.peerUp()   // alive, heard, ready; heartbeats say nothing about MACs
			e.s.handover.forget(vip)
			if tc.table != nil {
				e.neigh.set(e.peerIP, nil)
			}
			e.s.learnMACs(e.s.cur)
			claim := tc.claim
			if claim == nil {
				claim = e.peerMAC
			}
			e.events()
			e.s.resolve(conflict{vip, claim, false})
			ev := e.events()
			if len(ev) != 1 || strings.Contains(ev[0], e.peer) != tc.wantKnown {
				t.Errorf("events %q: want one naming %s = %v", ev, e.peer, tc.wantKnown)
			}
			if withdrawn := !e.arp.announced[vip]; withdrawn != tc.wantKnown {
				t.Errorf("withdrawn = %v, want %v (only the peer's real MAC makes it yield)", withdrawn, tc.wantKnown)
			}
		})
	}
}

// TestOwnerRepointSpread: in spread mode no broadcast is sent; when the peer leaves the ring, the
// clients it answered are re-pointed here one by one.
func TestOwnerRepointSpread(t *testing.T) {
	e := newOwnerEnv(t, true, Config{})
	e.svc.Annotations = map[string]string{AnnotationSpread: "true"}
	e.peerUp()
	e.s.reconcile(context.Background())
	if !e.arp.announced[vip] || e.arp.take("gratuitous") != 0 || e.s.retries.len() != 0 {
		t.Fatal("spread address: want announced without gratuitous announcements")
	}
	ring := election.NewRing(vip, []string{e.self, e.peer})
	moved := 0
	for i := range 20 {
		c := netip.AddrFrom4([4]byte{172, 18, 1, byte(10 + i)})
		e.s.sp.answer(vip, c, net.HardwareAddr{0x02, 1, 0, 0, 0, byte(i)})
		if ring.Owner(c) == e.peer {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("test setup: no client on the peer")
	}
	e.peerDown()
	e.s.reconcile(context.Background())
	if n := e.arp.take("to "); n != moved {
		t.Errorf("%d clients re-pointed, want the %d the peer answered", n, moved)
	}
}

// TestOwnerLeave: on stop, the node says it leaves, keeps answering for the grace while heartbeating,
// cancels the pending gratuitous follow-ups and withdraws everything.
func TestOwnerLeave(t *testing.T) {
	e := newOwnerEnv(t, true, Config{HandoverGrace: 5 * time.Millisecond, Interval: time.Millisecond})
	e.s.reconcile(context.Background())
	e.arp.take("")
	e.s.leave()
	if !e.s.heartbeat().Leaving || e.hb.sent == 0 {
		t.Errorf("leaving %v, heartbeats sent %d: peers not told", e.s.heartbeat().Leaving, e.hb.sent)
	}
	if e.arp.announced[vip] || len(e.s.announced) != 0 {
		t.Error("still announced after leave")
	}
	if e.s.retries.len() != 0 {
		t.Error("follow-ups still pending after leave")
	}
	e.clock.Advance(time.Hour)
	if n := e.arp.take("gratuitous"); n != 0 {
		t.Errorf("%d gratuitous announcements after leave", n)
	}
}

// TestOwnerRunStops: run reconciles at once, and on ctx's end leaves and returns.
func TestOwnerRunStops(t *testing.T) {
	e := newOwnerEnv(t, true, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.s.run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for e.s.retries.len() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if e.arp.announced[vip] || e.s.retries.len() != 0 {
		t.Error("run returned with the address announced or follow-ups pending")
	}
}

// TestOwnerEchoDowns: a peer lost by the echo detector is counted and pokes the run loop at once.
func TestOwnerEchoDowns(t *testing.T) {
	e := newOwnerEnv(t, true, Config{})
	e.s.onEchoDowns([]liveness.Down{{Peer: e.peer, Silence: 25 * time.Millisecond}})
	if v := testutil.ToFloat64(e.m.peersDead.WithLabelValues("echo")); v != 1 {
		t.Errorf("peer deaths (echo) %v, want 1", v)
	}
	select {
	case <-e.s.kick:
	default:
		t.Error("no poke: failover would wait for the next reconcile")
	}
}

// TestDropReporter: each distinct drop is logged and raises one Warning event on its object; a
// steady one is not reported again; a fixed then broken object is.
func TestDropReporter(t *testing.T) {
	e := newOwnerEnv(t, true, Config{})
	forged := config.Dropped{Kind: "Service", Namespace: "default", Name: "web", Reason: config.AddressInNoPool, Detail: "8.8.8.8"}
	quiet := config.Dropped{Kind: "Service", Namespace: "default", Name: "web", Reason: config.NoAddress}
	r := e.s.drops
	for i, step := range []struct {
		drops []config.Dropped
		want  int
	}{{[]config.Dropped{forged, quiet}, 1}, {[]config.Dropped{forged}, 0}, {nil, 0}, {[]config.Dropped{forged}, 1}, {[]config.Dropped{quiet}, 0}} {
		r.report(step.drops)
		if ev := e.events(); len(ev) != step.want || step.want > 0 && !strings.HasPrefix(ev[0], "Warning AddressInNoPool") {
			t.Errorf("step %d: events %q, want %d AddressInNoPool", i, ev, step.want)
		}
	}
}

// gaugeValue returns the value of the one series of name in reg.
func gaugeValue(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no single series of %s", name)
	return 0
}
