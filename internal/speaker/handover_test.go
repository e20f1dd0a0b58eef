package speaker

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/record"

	"github.com/ironlb/ironlb/internal/election"
	"github.com/ironlb/ironlb/internal/speaker/layer2"
)

func TestHandovers(t *testing.T) {
	a := netip.MustParseAddr("172.18.212.3")
	b := netip.MustParseAddr("172.18.212.4")
	t0 := time.Date(2026, 11, 23, 7, 23, 3, 885e6, time.UTC)
	h := newHandovers(2 * time.Second)

	if h.keep(a, false, t0) || h.lingering(a) {
		t.Fatal("an address this node may not keep (ineligible, or nobody elected) was kept")
	}
	if !h.keep(a, true, t0) || !h.lingering(a) {
		t.Fatal("lost while still eligible: not kept")
	}
	if got := h.next(); !got.Equal(t0.Add(2 * time.Second)) {
		t.Errorf("next = %v, want the end of the linger %v", got, t0.Add(2*time.Second))
	}
	// Later reconciles keep it until the linger ends, counted from the first: not renewed.
	if !h.keep(a, true, t0.Add(1999*time.Millisecond)) {
		t.Error("withdrawn before the linger ended")
	}
	if h.keep(a, true, t0.Add(2*time.Second)) || h.lingering(a) || !h.next().IsZero() {
		t.Error("kept after the linger ended")
	}
	// A new linger after it ended starts afresh.
	if !h.keep(a, true, t0.Add(3*time.Second)) {
		t.Error("a second handover does not linger")
	}
	// It stops at once when this node becomes ineligible (its local endpoint went away).
	if h.keep(a, false, t0.Add(3100*time.Millisecond)) || h.lingering(a) {
		t.Error("kept after this node became ineligible")
	}
	// The winner's claim ends it; a claim of an address that does not linger reports false.
	h.keep(a, true, t0)
	h.keep(b, true, t0.Add(time.Second))
	if got := h.next(); !got.Equal(t0.Add(2 * time.Second)) {
		t.Errorf("next = %v, want the earliest end", got)
	}
	if !h.claimed(a) || h.lingering(a) || h.claimed(a) {
		t.Error("claimed: want true once, then false")
	}
	if got := h.next(); !got.Equal(t0.Add(3 * time.Second)) {
		t.Errorf("next = %v after a's claim, want b's end", got)
	}
	// Elected again: forgotten.
	h.forget(b)
	if h.lingering(b) || !h.next().IsZero() {
		t.Error("forget left b lingering")
	}
}

// testSpeaker is a speaker built by newSpeaker with an ARP responder over a fake conn, enough for
// resolve and withdraw.
func testSpeaker(t *testing.T, node string, mac net.HardwareAddr) (*speaker, *layer2.FakeConn) {
	t.Helper()
	conn := layer2.NewFakeConn()
	ifi := &net.Interface{Index: 1, Name: "eth0", HardwareAddr: mac}
	var s *speaker
	arp, err := layer2.NewARP(ifi, conn, layer2.Config{OnConflict: func(ip netip.Addr, mac net.HardwareAddr) { s.duplicate(ip, mac, false) }})
	if err != nil {
		t.Fatal(err)
	}
	s = newSpeaker(Config{Node: node}, deps{Log: slog.New(slog.DiscardHandler), Interface: ifi, ARP: arp,
		Recorder: record.NewFakeRecorder(100), Objects: emptyStores(), Metrics: newMetrics(prometheus.NewRegistry())})
	return s, conn
}

func garp(ip netip.Addr, mac net.HardwareAddr) []byte {
	b, err := layer2.ARP{EthDst: net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, EthSrc: mac, Op: arp.OperationRequest,
		SenderMAC: mac, SenderIP: ip, TargetMAC: make(net.HardwareAddr, 6), TargetIP: ip}.Marshal()
	if err != nil {
		panic(err)
	}
	return b
}

// TestLingerUntilClaimed plays issue 9's first timeline on the old announcer: it loses the election for
// an externalTrafficPolicy Local address while still eligible, keeps answering, and withdraws when the
// new winner's gratuitous ARP reaches its responder, not before.
func TestLingerUntilClaimed(t *testing.T) {
	vip := netip.MustParseAddr("172.18.212.3")
	const key = "default/chaos-p3"
	w3mac := net.HardwareAddr{0x02, 0x42, 0xac, 0x12, 0x00, 0x05}
	w2mac := net.HardwareAddr{0x02, 0x42, 0xac, 0x12, 0x00, 0x04}
	s, conn := testSpeaker(t, "myk8s-worker3", w3mac)
	s.macs[w2mac.String()] = "myk8s-worker2"
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.arp.(*layer2.Responder).Run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	s.announce(vip, key, false, []string{s.ifi.Name})
	if !answers(s, vip) {
		t.Fatal("not announced")
	}
	// worker2's hold-down ends: every view elects it; worker3 is outranked but still eligible.
	d := election.Decision{Key: vip, Addrs: []netip.Addr{vip}, Node: "myk8s-worker2", Reason: election.Announced,
		PerNode: map[string]election.Reason{"myk8s-worker3": election.Outranked}}
	now := time.Now()
	if !s.handover.keep(vip, d.Lingers(s.cfg.Node), now) {
		t.Fatal("the old announcer does not linger")
	}
	next := func() conflict {
		t.Helper()
		select {
		case c := <-s.conflicts:
			return c
		case <-time.After(5 * time.Second):
			t.Fatal("the responder did not report the claim")
			return conflict{}
		}
	}
	// An ARP packet from a host that is not a speaker claiming the address does not end the handover.
	conn.Inject(garp(vip, net.HardwareAddr{0x02, 0, 0, 0, 0, 0x99}))
	s.resolve(next())
	if !answers(s, vip) || !s.handover.lingering(vip) {
		t.Fatal("an unknown MAC ended the handover")
	}
	// worker2's gratuitous announcement: the handover is complete.
	conn.Inject(garp(vip, w2mac))
	s.resolve(next())
	if answers(s, vip) || s.handover.lingering(vip) {
		t.Error("still answering after the new announcer claimed the address")
	}
}

// TestResolveOnlyDisputedKey: a duplicate announcer resolved against this node changes the memory of
// that address's election only.
func TestResolveOnlyDisputedKey(t *testing.T) {
	a := netip.MustParseAddr("172.18.212.3")
	b := netip.MustParseAddr("172.18.212.1")
	mac := net.HardwareAddr{0x02, 0x42, 0xac, 0x12, 0x00, 0x03}
	other := net.HardwareAddr{0x02, 0x42, 0xac, 0x12, 0x00, 0x04}
	// Name the nodes so that peer ranks first for a.
	r := election.Rank(a, []string{"node-x", "node-y"})
	peer, self := r[0], r[1]
	s, _ := testSpeaker(t, self, mac)
	s.macs[other.String()] = peer
	s.announce(a, "default/a", false, []string{s.ifi.Name})
	s.announce(b, "default/b", false, []string{s.ifi.Name})
	s.elKeys[a], s.elKeys[b] = a, b
	s.current[a], s.current[b] = self, self
	s.resolve(conflict{a, other, false})
	if answers(s, a) {
		t.Error("still answering for a: the better-ranked peer claims it")
	}
	if s.current[a] != peer || s.current[b] != self {
		t.Errorf("current = %v; want a: %s, b unchanged (%s)", s.current, peer, self)
	}
	if !answers(s, b) {
		t.Error("b withdrawn")
	}
	// a is left to the peer for a moment even if this node's view still elects it.
	if !s.yielded.holds(a, time.Now(), func(n string) bool { return n == peer }) {
		t.Error("a not left to the peer that claimed it")
	}
}

func answers(s *speaker, a netip.Addr) bool {
	for _, x := range s.arp.(*layer2.Responder).Announced() {
		if x == a {
			if _, ok := s.announced[a]; ok {
				return true
			}
		}
	}
	return false
}

func TestYields(t *testing.T) {
	a := netip.MustParseAddr("172.18.212.3")
	b := netip.MustParseAddr("172.18.212.1")
	t0 := time.Date(2026, 11, 23, 7, 24, 45, 0, time.UTC)
	alive := map[string]bool{"w2": true}
	isAlive := func(n string) bool { return alive[n] }
	y := yields{}
	if y.holds(a, t0, isAlive) || !y.next(t0).IsZero() {
		t.Fatal("holds an address never given up")
	}
	y.hold(a, "w2", t0.Add(yieldHold))
	y.hold(b, "w2", t0.Add(yieldHold/2))
	if !y.holds(a, t0.Add(yieldHold-time.Millisecond), isAlive) {
		t.Error("re-announced while the claimant is alive and the hold runs")
	}
	if got := y.next(t0); !got.Equal(t0.Add(yieldHold / 2)) {
		t.Errorf("next = %v, want b's end", got)
	}
	// next forgets ended holds, so that the run loop's wake-up does not fire for them forever.
	if got := y.next(t0.Add(yieldHold / 2)); !got.Equal(t0.Add(yieldHold)) {
		t.Errorf("next = %v after b's end, want a's", got)
	}
	if _, ok := y[b]; ok {
		t.Error("b's ended hold kept")
	}
	if y.holds(a, t0.Add(yieldHold), isAlive) {
		t.Error("held after the hold ended")
	}
	// The claimant's failure ends the hold at once: failover is not delayed.
	y.hold(a, "w2", t0.Add(yieldHold))
	alive["w2"] = false
	if y.holds(a, t0, isAlive) {
		t.Error("held for a dead node")
	}
	if _, ok := y[a]; ok {
		t.Error("hold for a dead node kept")
	}
}
