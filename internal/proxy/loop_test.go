package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/knftables"

	"github.com/ironlb/ironlb/internal/liveness"
	"github.com/ironlb/ironlb/internal/proxy/convert"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
)

// staticSource is a source over fixed objects.
type staticSource struct {
	mu     sync.Mutex
	svcs   []*corev1.Service
	slices []*discoveryv1.EndpointSlice
	nodes  []*corev1.Node
	cidrs  []*networkingv1.ServiceCIDR
}

func (s *staticSource) ServiceCIDRs() []*networkingv1.ServiceCIDR {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cidrs
}

func (s *staticSource) Services() []*corev1.Service {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.svcs
}

func (s *staticSource) Service(ns, name string) *corev1.Service {
	for _, svc := range s.Services() {
		if svc.Namespace == ns && svc.Name == name {
			return svc
		}
	}
	return nil
}

func (s *staticSource) SlicesOf(ns, name string) []*discoveryv1.EndpointSlice {
	s.mu.Lock()
	defer s.mu.Unlock()
	return convert.GroupSlices(s.slices)(ns, name)
}

func (s *staticSource) Nodes() []*corev1.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nodes
}

func (s *staticSource) Node(name string) *corev1.Node {
	for _, n := range s.Nodes() {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// recordingSyncer records the syncs asked of it and fails while err is set.
type recordingSyncer struct {
	mu    sync.Mutex
	syncs []syncCall
	err   error
}

type syncCall struct {
	at   time.Time
	full bool
	m    *nftrules.Model
}

func (r *recordingSyncer) Sync(_ context.Context, m *nftrules.Model, full bool) (nftrules.Plan, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.syncs = append(r.syncs, syncCall{time.Now(), full, m})
	return nftrules.Plan{Full: full}, r.err
}

func (r *recordingSyncer) Pending() int { return 0 }

func (r *recordingSyncer) calls() []syncCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]syncCall(nil), r.syncs...)
}

func (r *recordingSyncer) setErr(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = err
}

func testProxier(t *testing.T, src source, s syncer, cfg loopConfig) *proxier {
	t.Helper()
	if cfg.node.Name == "" {
		cfg.node.Name = "node-a"
	}
	if cfg.syncPeriod == 0 {
		cfg.syncPeriod = time.Hour
	}
	if cfg.retryMax == 0 {
		cfg.retryMax = 30 * time.Second
	}
	return newProxier(cfg, slog.New(slog.DiscardHandler), src, []family{{knftables.IPv4Family, s}}, newMetrics(prometheus.NewRegistry()))
}

// TestLoopCoalescesAndRateLimits: after a quiet spell a poke is served at once; a burst of
// pokes right after costs one more sync, a minimum interval later. The first sync is full, later
// ones incremental.
func TestLoopCoalescesAndRateLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rs := &recordingSyncer{}
		p := testProxier(t, &staticSource{}, rs, loopConfig{minSyncPeriod: 100 * time.Millisecond})
		stop := runLoop(t, p)
		defer stop()
		synctest.Wait()
		if c := rs.calls(); len(c) != 1 || !c[0].full {
			t.Fatalf("initial syncs %+v, want one full", c)
		}
		time.Sleep(time.Second)
		start := time.Now()
		for range 50 {
			p.poke()
			time.Sleep(time.Millisecond)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		c := rs.calls()
		if len(c) != 3 {
			t.Fatalf("%d syncs after a burst of 50 pokes, want 3", len(c))
		}
		if c[1].full || c[2].full {
			t.Error("a poke caused a full sync")
		}
		if c[1].at != start {
			t.Errorf("first poke after a quiet spell served %v late", c[1].at.Sub(start))
		}
		if gap := c[2].at.Sub(c[1].at); gap != 100*time.Millisecond {
			t.Errorf("burst served %v after its first poke, want the minimum interval", gap)
		}
	})
}

// runLoop runs p's loop until the returned stop is called.
func runLoop(t *testing.T, p *proxier) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- p.run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// TestLoopRetriesAndResyncs: a failed sync is retried with a growing back-off and a full sync;
// a full resync comes every syncPeriod.
func TestLoopRetriesAndResyncs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rs := &recordingSyncer{err: errors.New("nft: boom")}
		p := testProxier(t, &staticSource{}, rs, loopConfig{syncPeriod: 10 * time.Minute, retryMax: 4 * time.Second})
		stop := runLoop(t, p)
		defer stop()
		time.Sleep(8 * time.Second) // fails at 0, 1, 3, 7 s (back-off 1, 2, 4 s)
		synctest.Wait()
		var at []time.Duration
		c := rs.calls()
		for _, s := range c {
			at = append(at, s.at.Sub(c[0].at))
			if !s.full {
				t.Error("retry was not a full sync")
			}
		}
		if want := []time.Duration{0, time.Second, 3 * time.Second, 7 * time.Second}; !equalDurations(at, want) {
			t.Errorf("attempts at %v, want %v", at, want)
		}
		if p.health.Healthy() != true { // pending for 8 s < the 60 s timeout
			t.Error("unhealthy too early")
		}
		p.poke() // while failing, changes wait for the next retry
		synctest.Wait()
		if n := len(rs.calls()); n != 4 {
			t.Errorf("a poke during back-off caused a sync: %d attempts", n)
		}
		rs.setErr(nil)
		time.Sleep(4 * time.Second) // succeeds at 11 s
		synctest.Wait()
		n := len(rs.calls())
		p.poke()
		synctest.Wait()
		if c := rs.calls(); len(c) != n+1 || c[n].full {
			t.Errorf("poke after recovery: %d syncs, full=%v", len(c)-n, c[len(c)-1].full)
		}
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if c := rs.calls(); !c[len(c)-1].full || len(c) != n+2 {
			t.Errorf("no full resync after the sync period: %d more syncs", len(c)-n)
		}
	})
}

// TestLoopLinkUpSyncsAtOnce: a link the DSR routes go through came up (linkUp): a full sync at
// once, even while a failed sync waits for its retry (a poke would wait), and one when nothing
// failed too.
func TestLoopLinkUpSyncsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rs := &recordingSyncer{err: errors.New("route of node node-b via 192.168.0.11 in table 6914: network is unreachable")}
		p := testProxier(t, &staticSource{}, rs, loopConfig{syncPeriod: 10 * time.Minute, retryMax: 8 * time.Second})
		stop := runLoop(t, p)
		defer stop()
		time.Sleep(1500 * time.Millisecond) // fails at 0 and 1 s; the next retry at 3 s
		synctest.Wait()
		if n := len(rs.calls()); n != 2 {
			t.Fatalf("%d attempts in 1.5 s, want 2", n)
		}
		rs.setErr(nil)
		p.poke()
		synctest.Wait()
		if n := len(rs.calls()); n != 2 {
			t.Fatalf("a poke during back-off caused a sync: %d attempts", n)
		}
		p.linkUp()
		synctest.Wait()
		c := rs.calls()
		if len(c) != 3 || !c[2].full || c[2].at.Sub(c[0].at) != 1500*time.Millisecond {
			t.Fatalf("after linkUp at 1.5 s: %d attempts, the last at %v (full %v); want a full sync at once", len(c), c[len(c)-1].at.Sub(c[0].at), c[len(c)-1].full)
		}
		time.Sleep(time.Minute)
		p.linkUp()
		synctest.Wait()
		if c := rs.calls(); len(c) != 4 || !c[3].full {
			t.Errorf("linkUp with nothing failing: %d syncs, want a 4th, full", len(c))
		}
	})
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// fakeEcho is an echo detector whose answers the test decides.
type fakeEcho struct {
	mu    sync.Mutex
	up    map[string]bool
	peers []liveness.Peer
}

func (f *fakeEcho) Up(n string) (bool, time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.up[n], time.Time{}
}

func (f *fakeEcho) SetPeers(p []liveness.Peer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.peers = p
}

func (f *fakeEcho) set(n string, up bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.up[n] = up
}

// TestDeadNodes: a node that stops answering is dead in the next model (never this node, never a
// node that never answered), and alive again once it answers; nodes leaving the cluster are
// forgotten.
func TestDeadNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &staticSource{nodes: []*corev1.Node{testNode("node-a", "192.168.0.10"), testNode("node-b", "192.168.0.11"), testNode("node-c", "192.168.0.12")}}
		rs := &recordingSyncer{}
		p := testProxier(t, src, rs, loopConfig{})
		fe := &fakeEcho{up: map[string]bool{"node-b": true, "node-c": true}}
		p.setEcho(fe)
		stop := runLoop(t, p)
		defer stop()
		synctest.Wait()
		last := func() map[string]bool { c := rs.calls(); return c[len(c)-1].m.Node.DeadNodes }
		if d := last(); len(d) != 0 {
			t.Errorf("dead at start: %v", d)
		}
		if got := len(fe.peers); got != 2 {
			t.Errorf("%d echo peers, want 2 (not this node)", got)
		}

		fe.set("node-b", false)
		p.onEcho([]liveness.Down{{Peer: "node-b"}, {Peer: "node-a"}})
		synctest.Wait()
		if d := last(); !d["node-b"] || len(d) != 1 {
			t.Errorf("after node-b went down: dead %v", d)
		}
		n := len(rs.calls())
		p.onEcho([]liveness.Down{{Peer: "node-b"}}) // again: no change, no sync
		synctest.Wait()
		if len(rs.calls()) != n {
			t.Error("a repeated death caused a sync")
		}

		fe.set("node-b", true)
		p.onEcho(nil)
		synctest.Wait()
		if d := last(); len(d) != 0 {
			t.Errorf("after node-b answered again: dead %v", d)
		}

		fe.set("node-c", false)
		p.onEcho([]liveness.Down{{Peer: "node-c"}})
		synctest.Wait()
		src.mu.Lock()
		src.nodes = src.nodes[:2]
		src.mu.Unlock()
		p.poke()
		synctest.Wait()
		if d := last(); len(d) != 0 {
			t.Errorf("a deleted node stays dead: %v", d)
		}
	})
}

func testNode(name, ip string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}
}

// TestNodePortAddressRefresh: with CIDR node-port addresses, the local addresses are read at the
// first sync and re-read periodically; a change triggers a sync.
func TestNodePortAddressRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rs := &recordingSyncer{}
		np, _ := convert.ParseNodePorts([]string{"192.168.0.0/16"})
		p := testProxier(t, &staticSource{}, rs, loopConfig{node: convert.NodeConfig{NodePorts: np}, addrRefresh: 30 * time.Second})
		var mu sync.Mutex
		addrs := []netip.Addr{netip.MustParseAddr("192.168.0.10"), netip.MustParseAddr("10.0.0.1")}
		p.localAddrs = func() ([]netip.Addr, error) {
			mu.Lock()
			defer mu.Unlock()
			return append([]netip.Addr(nil), addrs...), nil
		}
		stop := runLoop(t, p)
		defer stop()
		synctest.Wait()
		c := rs.calls()
		if got := c[0].m.Node.NodePortAddresses; len(got) != 1 || got[0] != netip.MustParseAddr("192.168.0.10") {
			t.Errorf("node-port addresses %v", got)
		}
		time.Sleep(31 * time.Second)
		synctest.Wait()
		if n := len(rs.calls()); n != 1 {
			t.Errorf("%d syncs with unchanged addresses, want 1", n)
		}
		mu.Lock()
		addrs = append(addrs, netip.MustParseAddr("192.168.0.20"))
		mu.Unlock()
		time.Sleep(30 * time.Second)
		synctest.Wait()
		c = rs.calls()
		if len(c) != 2 || len(c[1].m.Node.NodePortAddresses) != 2 {
			t.Errorf("after an address was added: %d syncs, last %v", len(c), c[len(c)-1].m.Node.NodePortAddresses)
		}
	})
}

// TestReturningNode: a node that answers again after a power cut keeps its endpoints out until every
// endpoint it had ready at its return has been reported again (seen not ready, or gone: its kubelet
// restarted the pod), or until returnHold has passed (a partition, whose pods never stopped); dying
// again while returning makes it dead again. Nodes declared dead together (this node's detector
// stalled) that answer again within a second are used again at once (no node reboots that fast),
// and so are peers that all fell silent in one batch, however long (this node was cut off); a node
// that died alone is held however soon it answers (an impostor answering for a cut node).
func TestReturningNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// node-b runs two pods of svc (one slice holds both) and one of them is also in svc2.
		es := slice("svc", "svc-x", corev1.ProtocolTCP, 8080, [][2]string{{"10.244.1.5", "node-b"}, {"10.244.1.6", "node-b"}, {"10.244.2.5", "node-c"}})
		es.ResourceVersion = "1"
		other := slice("svc2", "svc2-x", corev1.ProtocolTCP, 8080, [][2]string{{"10.244.1.5", "node-b"}, {"10.244.2.5", "node-c"}})
		other.ResourceVersion = "1"
		svc := func(name, ip string) *corev1.Service {
			return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: name},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIPs: []string{ip},
					Ports: []corev1.ServicePort{{Name: "p", Protocol: corev1.ProtocolTCP, Port: 80}}}}
		}
		src := &staticSource{
			nodes:  []*corev1.Node{testNode("node-a", "192.168.0.10"), testNode("node-b", "192.168.0.11"), testNode("node-c", "192.168.0.12")},
			svcs:   []*corev1.Service{svc("svc", "10.96.0.10"), svc("svc2", "10.96.0.11")},
			slices: []*discoveryv1.EndpointSlice{es, other},
		}
		rs := &recordingSyncer{}
		p := testProxier(t, src, rs, loopConfig{returnHold: 20 * time.Second})
		fe := &fakeEcho{up: map[string]bool{"node-b": true, "node-c": true}}
		p.setEcho(fe)
		stop := runLoop(t, p)
		defer stop()
		synctest.Wait()
		last := func() map[string]bool { c := rs.calls(); return c[len(c)-1].m.Node.DeadNodes }
		down := func(n string) {
			fe.set(n, false)
			p.onEcho([]liveness.Down{{Peer: n}})
			synctest.Wait()
		}
		up := func(n string) {
			fe.set(n, true)
			p.onEcho(nil)
			synctest.Wait()
		}
		// away: dead, then answering again after d (a power cut and the node's boot take seconds).
		away := func(n string, d time.Duration) {
			down(n)
			time.Sleep(d)
			up(n)
		}
		// with returns a copy of es, rewritten by the kubelet: the endpoint at addr ready or not.
		with := func(es *discoveryv1.EndpointSlice, rv, addr string, ready bool) *discoveryv1.EndpointSlice {
			c := es.DeepCopy()
			c.ResourceVersion = rv
			for i := range c.Endpoints {
				if c.Endpoints[i].Addresses[0] == addr {
					c.Endpoints[i].Conditions.Ready = ptr.To(ready)
				}
			}
			return c
		}
		setSlices := func(ss ...*discoveryv1.EndpointSlice) {
			src.mu.Lock()
			src.slices = ss
			src.mu.Unlock()
			for _, s := range ss {
				p.sliceSeen(s)
			}
			p.poke()
			synctest.Wait()
		}

		// Back from a power cut: out until its pods are reported again.
		away("node-b", 3*time.Second)
		time.Sleep(5 * time.Second)
		p.poke()
		synctest.Wait()
		if d := last(); !d["node-b"] {
			t.Fatalf("node-b answered again 5 s ago, slices unchanged: dead %v, want node-b still left out", d)
		}
		// The pod at .5 restarts: not ready in both slices, then ready. Both slices have changed, but
		// the pod at .6 has not been reported again.
		setSlices(with(es, "2", "10.244.1.5", false), with(other, "2", "10.244.1.5", false))
		setSlices(with(es, "3", "10.244.1.5", true), with(other, "3", "10.244.1.5", true))
		if d := last(); !d["node-b"] {
			t.Fatalf("after one of node-b's two pods was reported again: dead %v, want node-b still left out", d)
		}
		// The pod at .6 goes not ready and ready again between two syncs: the informer saw it.
		p.sliceSeen(with(es, "4", "10.244.1.6", false))
		setSlices(with(es, "5", "10.244.1.5", true), with(other, "3", "10.244.1.5", true))
		if d := last(); len(d) != 0 {
			t.Fatalf("after both of node-b's pods were reported again: dead %v, want none", d)
		}

		// Back again; this time its pods are deleted (gone from the slices): in again at once.
		away("node-b", 3*time.Second)
		if d := last(); !d["node-b"] {
			t.Fatalf("node-b just answered again: dead %v, want node-b left out", d)
		}
		gone := func(es *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
			c := es.DeepCopy()
			c.ResourceVersion = "9"
			c.Endpoints = slices.DeleteFunc(c.Endpoints, func(e discoveryv1.Endpoint) bool { return *e.NodeName == "node-b" })
			return c
		}
		setSlices(gone(es), gone(other))
		if d := last(); len(d) != 0 {
			t.Fatalf("after node-b's pods were deleted: dead %v, want none", d)
		}
		setSlices(es, other)

		// Back from a partition: nothing changes; in again after the hold.
		away("node-c", 3*time.Second)
		if d := last(); !d["node-c"] {
			t.Fatalf("node-c just answered again: dead %v, want node-c left out", d)
		}
		time.Sleep(21 * time.Second)
		synctest.Wait()
		if d := last(); len(d) != 0 {
			t.Fatalf("20 s after node-c answered again: dead %v, want none", d)
		}

		// Dying again while returning: dead.
		away("node-c", 3*time.Second)
		down("node-c")
		if d := last(); !d["node-c"] {
			t.Fatalf("node-c died again: dead %v", d)
		}

		// A false death: this node's detector stalled and declared both peers dead in one batch;
		// they answer again 200 ms later. In again at once, and a node that died again after such a
		// silence is dead again.
		time.Sleep(3 * time.Second)
		up("node-c")
		time.Sleep(25 * time.Second)
		p.poke()
		synctest.Wait()
		if d := last(); len(d) != 0 {
			t.Fatalf("node-c back for 25 s: dead %v, want none", d)
		}
		fe.set("node-b", false)
		fe.set("node-c", false)
		p.onEcho([]liveness.Down{{Peer: "node-b"}, {Peer: "node-c"}})
		synctest.Wait()
		time.Sleep(200 * time.Millisecond)
		up("node-b")
		up("node-c")
		if d := last(); len(d) != 0 {
			t.Fatalf("node-b and node-c, dead together, answered again 200 ms later: dead %v, want none (used at once)", d)
		}
		down("node-b")
		if d := last(); !d["node-b"] {
			t.Fatalf("node-b died again after a short silence: dead %v", d)
		}

		// A single death answered 200 ms later (a host that took over the cut node's address
		// answers its echoes): held like any return, until its pods are reported again.
		time.Sleep(200 * time.Millisecond)
		up("node-b")
		if d := last(); !d["node-b"] {
			t.Fatalf("node-b died alone and answered again 200 ms later: dead %v, want it held out", d)
		}

		// This node cut off (its link down for 5 s): every peer falls silent in one batch and
		// answers again 5 s later. They never stopped: used again at once, however long the
		// silence (the chaos soak of 2026-11-27 22:53).
		time.Sleep(25 * time.Second)
		p.poke()
		synctest.Wait()
		if d := last(); len(d) != 0 {
			t.Fatalf("node-b's hold passed: dead %v, want none", d)
		}
		fe.set("node-b", false)
		fe.set("node-c", false)
		p.onEcho([]liveness.Down{{Peer: "node-b"}, {Peer: "node-c"}})
		synctest.Wait()
		if d := last(); !d["node-b"] || !d["node-c"] {
			t.Fatalf("every peer silent: dead %v, want both", d)
		}
		time.Sleep(5 * time.Second)
		up("node-b")
		up("node-c")
		if d := last(); len(d) != 0 {
			t.Fatalf("every peer silent at once for 5 s (this node cut off), then answering: dead %v, want none (used at once)", d)
		}
		// Not when they fell silent one after the other (two deaths, each alone): both held.
		down("node-b")
		down("node-c")
		time.Sleep(5 * time.Second)
		up("node-b")
		up("node-c")
		if d := last(); !d["node-b"] || !d["node-c"] {
			t.Fatalf("node-b and node-c died one after the other and answered 5 s later: dead %v, want both held out", d)
		}
	})
}

// TestBuildIncrementalMatchesFull: a build that converts only the Services the handlers named
// gives the same model as one that converts them all, through random changes of Services and
// EndpointSlices (new, changed, deleted, moved to another Service), resourceVersions bumped as
// the apiserver would.
func TestBuildIncrementalMatchesFull(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const universe = 12
	rv := 0
	next := func() string { rv++; return fmt.Sprint(rv) }
	mkSvc := func(i int) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: fmt.Sprintf("s%d", i), ResourceVersion: next(), UID: types.UID(fmt.Sprint("u", i))},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIPs: []string{fmt.Sprintf("10.96.0.%d", i+1)},
				Ports: []corev1.ServicePort{{Name: "p", Protocol: corev1.ProtocolTCP, Port: int32(80 + r.IntN(2))}}},
		}
	}
	mkSlice := func(svc string, j int) *discoveryv1.EndpointSlice {
		es := slice(svc, fmt.Sprintf("es%d", j), corev1.ProtocolTCP, 8080,
			[][2]string{{fmt.Sprintf("10.244.%d.%d", r.IntN(3), r.IntN(5)+1), "node-a"}})
		es.ResourceVersion, es.UID = next(), types.UID(fmt.Sprint("e", j))
		return es
	}
	src := &staticSource{nodes: []*corev1.Node{testNode("node-a", "192.168.0.10")}}
	for i := range universe / 2 {
		src.svcs = append(src.svcs, mkSvc(i))
		src.slices = append(src.slices, mkSlice(fmt.Sprintf("s%d", i), i))
	}
	newP := func() *proxier {
		return newProxier(loopConfig{node: convert.NodeConfig{Name: "node-a"}, syncPeriod: time.Hour},
			slog.New(slog.DiscardHandler), src, nil, newMetrics(prometheus.NewRegistry()))
	}
	p := newP()
	p.build(true)
	for step := range 200 {
		touched := map[nftrules.ServiceKey]bool{}
		for range 1 + r.IntN(3) {
			i := r.IntN(universe)
			name := fmt.Sprintf("s%d", i)
			touched[nftrules.ServiceKey{Namespace: "ns1", Name: name}] = true
			src.mu.Lock()
			switch r.IntN(4) {
			case 0: // the Service comes, changes or goes
				src.svcs = slices.DeleteFunc(slices.Clone(src.svcs), func(s *corev1.Service) bool { return s.Name == name })
				if r.IntN(3) > 0 {
					src.svcs = append(src.svcs, mkSvc(i))
				}
			case 1, 2: // a slice of it comes or changes
				j := r.IntN(universe)
				src.slices = slices.DeleteFunc(slices.Clone(src.slices), func(es *discoveryv1.EndpointSlice) bool {
					if es.Name == fmt.Sprintf("es%d", j) {
						touched[nftrules.ServiceKey{Namespace: "ns1", Name: es.Labels[discoveryv1.LabelServiceName]}] = true
						return true
					}
					return false
				})
				src.slices = append(src.slices, mkSlice(name, j))
			case 3: // its slices go
				src.slices = slices.DeleteFunc(slices.Clone(src.slices), func(es *discoveryv1.EndpointSlice) bool {
					return es.Labels[discoveryv1.LabelServiceName] == name
				})
			}
			src.mu.Unlock()
		}
		for k := range touched {
			p.pokeService(k)
		}
		got := p.build(false)
		want := newP().build(true)
		if diff := cmp.Diff(want.Services, got.Services, cmpopts.EquateComparable(netip.Addr{}, netip.Prefix{})); diff != "" {
			t.Fatalf("step %d: incremental build differs (-full +incremental):\n%s", step, diff)
		}
	}
}
