package speaker

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ironlb/ironlb/internal/speaker/layer2"
)

// fakeReopener records reopen attempts and fails while err is set.
type fakeReopener struct {
	mu    sync.Mutex
	calls int
	err   error
	ifi   *net.Interface
}

func (f *fakeReopener) Reopen() (*net.Interface, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	return f.ifi, nil
}

func (f *fakeReopener) attempts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.calls
	f.calls = 0
	return n
}

// withReopener gives e's speaker a fake reopener for its ARP responder, on the same interface.
func (e *ownerEnv) withReopener() *fakeReopener {
	r := &fakeReopener{ifi: e.s.ifi}
	e.s.reopen = map[string]reopener{responderARP: r}
	return r
}

func (e *ownerEnv) readyz(t *testing.T) (int, string) {
	t.Helper()
	w := httptest.NewRecorder()
	e.s.readyz(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	return w.Code, w.Body.String()
}

// TestOwnerDataplaneSocketError: the ARP responder's socket fails. The heartbeat says Ready=false
// at once (and is sent at once), the address is withdrawn with its status, a DataplaneDown event and
// the gauge say so, /readyz fails; the reopen is tried after the backoff and again, doubled, after it
// fails; once it succeeds the node is ready again (its ready time starting over), says so, and takes
// its address back after the hold-down.
func TestOwnerDataplaneSocketError(t *testing.T) {
	e := newOwnerEnv(t, true, Config{})
	ro := e.withReopener()
	e.peerUp()
	e.s.eligible[e.peer] = e.clock.Now()
	e.s.reconcile(context.Background())
	if !e.arp.announced[vip] || !e.s.heartbeat().Ready {
		t.Fatal("setup: not announced or not ready")
	}
	if code, _ := e.readyz(t); code != http.StatusOK {
		t.Fatalf("/readyz %d while healthy", code)
	}
	e.events()
	e.arp.take("")

	e.s.onSocketError(responderARP)(errors.New("reading ARP on eth0: boom"))
	if e.s.heartbeat().Ready {
		t.Error("heartbeat still says ready after the socket failed")
	}
	if e.hb.sent != 1 {
		t.Errorf("%d heartbeats sent at once, want 1: peers would learn only at the next interval", e.hb.sent)
	}
	select {
	case <-e.s.kick:
	default:
		t.Error("no poke: the withdrawal would wait for the next reconcile")
	}
	if code, body := e.readyz(t); code != http.StatusServiceUnavailable || !strings.Contains(body, "SocketError") {
		t.Errorf("/readyz %d %q, want 503 naming SocketError", code, body)
	}

	e.s.reconcile(context.Background())
	if e.arp.announced[vip] || len(e.s.announced) != 0 || len(e.status.want) != 0 {
		t.Errorf("still announced (responder %v, owner %v, status %v) with the data plane down", e.arp.announced, e.s.announced, e.status.want)
	}
	if ev := e.events(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning DataplaneDown") || !strings.Contains(ev[0], "boom") {
		t.Errorf("events %q, want one DataplaneDown with the error", ev)
	}
	if v := testutil.ToFloat64(e.m.dataplaneReady); v != 0 {
		t.Errorf("ironlb_speaker_dataplane_ready %v, want 0", v)
	}
	if n := ro.attempts(); n != 0 {
		t.Errorf("%d reopens before the backoff", n)
	}
	if want := e.clock.Now().Add(dataplaneRetryMin); !e.s.wake.Equal(want) {
		t.Errorf("wake %v, want the reopen's time %v", e.s.wake, want)
	}

	// The first reopen fails: tried again after twice the backoff.
	ro.err = errors.New("no such network interface")
	e.clock.Advance(dataplaneRetryMin)
	e.s.reconcile(context.Background())
	if n := ro.attempts(); n != 1 {
		t.Errorf("%d reopens at the backoff's end, want 1", n)
	}
	if e.s.heartbeat().Ready || e.arp.announced[vip] {
		t.Error("ready or announcing after a failed reopen")
	}
	if want := e.clock.Now().Add(2 * dataplaneRetryMin); !e.s.wake.Equal(want) {
		t.Errorf("wake %v, want %v", e.s.wake, want)
	}
	if ev := e.events(); len(ev) != 0 {
		t.Errorf("events %q while still down, want none", ev)
	}

	// The reopen succeeds: ready again, from now.
	ro.err = nil
	e.clock.Advance(2 * dataplaneRetryMin)
	e.s.reconcile(context.Background())
	if n := ro.attempts(); n != 1 {
		t.Errorf("%d reopens, want 1", n)
	}
	hb := e.s.heartbeat()
	if !hb.Ready || hb.ReadyFor != 0 {
		t.Errorf("heartbeat ready %v for %v, want ready from now (a returning node's hold-down)", hb.Ready, hb.ReadyFor)
	}
	if ev := e.events(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Normal DataplaneReady") {
		t.Errorf("events %q, want one DataplaneReady", ev)
	}
	if v := testutil.ToFloat64(e.m.dataplaneReady); v != 1 {
		t.Errorf("ironlb_speaker_dataplane_ready %v, want 1", v)
	}
	if code, _ := e.readyz(t); code != http.StatusOK {
		t.Errorf("/readyz %d after recovery", code)
	}
	if e.arp.announced[vip] {
		t.Error("took the address back from the peer at once: want the hold-down first")
	}
	e.clock.Advance(e.s.cfg.HoldDown)
	e.s.reconcile(context.Background())
	if !e.arp.announced[vip] {
		t.Error("address not announced again after the hold-down")
	}
}

// TestOwnerDataplaneLink: the interface deleted makes the node not ready at once; its return
// (another index) reopens at once, without waiting for the backoff, and the node is ready and, with
// no peer to defer to, announces again.
func TestOwnerDataplaneLink(t *testing.T) {
	e := newOwnerEnv(t, true, Config{})
	ro := e.withReopener()
	e.s.reconcile(context.Background())
	e.events()
	e.s.onLink(layer2.LinkState{Name: "eth0", Reason: layer2.LinkMissing, Detail: "deleted"})
	if e.s.heartbeat().Ready {
		t.Error("ready with the interface deleted")
	}
	e.s.reconcile(context.Background())
	if e.arp.announced[vip] {
		t.Error("announced with the interface deleted")
	}
	if ev := e.events(); len(ev) != 1 || !strings.Contains(ev[0], "LinkMissing") {
		t.Errorf("events %q, want DataplaneDown naming LinkMissing", ev)
	}
	e.s.onLink(layer2.LinkState{Name: "eth0", Index: 9, Up: true})
	e.s.reconcile(context.Background())
	if n := ro.attempts(); n != 1 {
		t.Errorf("%d reopens when the link came back, want 1 at once", n)
	}
	if !e.s.heartbeat().Ready || !e.arp.announced[vip] {
		t.Errorf("ready %v, announced %v after the link came back; want both", e.s.heartbeat().Ready, e.arp.announced[vip])
	}
}

// TestOwnerDataplaneReplacedUnseen: the link was created again between two notifications (a new
// index while up): the responder is reopened at once, and the addresses it answered are announced
// again on the new one.
func TestOwnerDataplaneReplacedUnseen(t *testing.T) {
	e := newOwnerEnv(t, true, Config{})
	ro := e.withReopener()
	ro.ifi = &net.Interface{Index: 9, Name: "eth0", HardwareAddr: net.HardwareAddr{0x02, 0, 0, 0, 0, 0x09}}
	e.s.reconcile(context.Background())
	e.arp.take("")
	e.s.onLink(layer2.LinkState{Name: "eth0", Index: 9, Up: true})
	e.s.reconcile(context.Background())
	if n := ro.attempts(); n != 1 {
		t.Errorf("%d reopens, want 1", n)
	}
	if w := e.arp.take("withdraw"); w != 1 || !e.arp.announced[vip] {
		t.Errorf("withdrawn %d times, announced %v; want forgotten then announced again on the new socket", w, e.arp.announced[vip])
	}
	if mac := e.s.ifi.HardwareAddr.String(); mac != ro.ifi.HardwareAddr.String() {
		t.Errorf("announcing MAC %v, want the new interface's %v", mac, ro.ifi.HardwareAddr)
	}
	if mac, _ := e.s.sp.answer(vip, netip.MustParseAddr("172.18.1.1"), net.HardwareAddr{2, 1, 0, 0, 0, 1}); mac.String() != ro.ifi.HardwareAddr.String() {
		t.Errorf("answers with %v, want the new MAC", mac)
	}
}

// TestOwnerDataplaneListens: back from a fault, the node listens to its peers (Config's detection
// time, twice) before it is ready and elects itself, as at start-up: meanwhile the heartbeat says not
// ready, nothing is announced, and the run loop is woken at the listening's end; its hold-down then
// runs from there.
func TestOwnerDataplaneListens(t *testing.T) {
	e := newOwnerEnv(t, true, Config{Interval: 50 * time.Millisecond, Multiplier: 6})
	ro := e.withReopener()
	e.s.reconcile(context.Background())
	e.s.onSocketError(responderARP)(errors.New("boom"))
	e.clock.Advance(dataplaneRetryMin)
	e.s.reconcile(context.Background())
	if n := ro.attempts(); n != 1 {
		t.Fatalf("%d reopens, want 1", n)
	}
	listen := 600 * time.Millisecond
	if hb := e.s.heartbeat(); hb.Ready || e.arp.announced[vip] {
		t.Errorf("ready %v, announced %v while listening; want neither", hb.Ready, e.arp.announced[vip])
	}
	if code, body := e.readyz(t); code != http.StatusServiceUnavailable || !strings.Contains(body, "Listening") {
		t.Errorf("/readyz %d %q, want 503 Listening", code, body)
	}
	if want := e.clock.Now().Add(listen); !e.s.wake.Equal(want) {
		t.Errorf("wake %v, want the listening's end %v", e.s.wake, want)
	}
	e.clock.Advance(listen)
	e.s.reconcile(context.Background())
	if hb := e.s.heartbeat(); !hb.Ready || hb.ReadyFor != 0 || !e.arp.announced[vip] {
		t.Errorf("after listening: ready %v for %v, announced %v; want ready from now and announcing (no peer)", hb.Ready, hb.ReadyFor, e.arp.announced[vip])
	}
}

// TestReadyzListening: /readyz fails while the speaker listens before its first election.
func TestReadyzListening(t *testing.T) {
	e := newOwnerEnv(t, true, Config{})
	e.s.mu.Lock()
	e.s.ready = false
	e.s.mu.Unlock()
	if code, body := e.readyz(t); code != http.StatusServiceUnavailable || !strings.Contains(body, "listening") {
		t.Errorf("/readyz %d %q, want 503 listening", code, body)
	}
}

// fakeRejoiner counts Rejoin calls and keeps the peers of the last.
type fakeRejoiner struct {
	calls int
	peers []netip.Addr
}

func (f *fakeRejoiner) Rejoin(peers []netip.Addr) error { f.calls++; f.peers = peers; return nil }

// TestOwnerDataplaneRejoin: back from a link down, the node tells the link it is back when it starts
// listening and again when it is ready (rejoiner), and never while the link stays down or up.
func TestOwnerDataplaneRejoin(t *testing.T) {
	e := newOwnerEnv(t, true, Config{Interval: 50 * time.Millisecond, Multiplier: 6})
	e.withReopener()
	rj := &fakeRejoiner{}
	e.s.rejoin = rj
	steps := []struct {
		name string
		do   func()
		want int
	}{
		{"healthy", func() {}, 0},
		{"link down", func() { e.s.onLink(layer2.LinkState{Name: "eth0", Index: 1, Reason: layer2.LinkNoCarrier}) }, 0},
		{"still down", func() { e.clock.Advance(time.Second) }, 0},
		{"link up: listening", func() { e.s.onLink(layer2.LinkState{Name: "eth0", Index: 1, Up: true}) }, 1},
		{"still listening", func() { e.clock.Advance(100 * time.Millisecond) }, 1},
		{"listening ends: ready", func() { e.clock.Advance(time.Second) }, 2},
		{"healthy again", func() { e.clock.Advance(time.Second) }, 2},
	}
	for _, st := range steps {
		st.do()
		e.s.reconcile(context.Background())
		if rj.calls != st.want {
			t.Errorf("%s: %d rejoins, want %d", st.name, rj.calls, st.want)
		}
	}
	if want := []netip.Addr{netip.MustParseAddr("172.18.0.3")}; !slices.Equal(rj.peers, want) {
		t.Errorf("asked for peers %v, want %v (every other node's InternalIP)", rj.peers, want)
	}
}

// TestOwnerDataplaneDownTime: the DataplaneReady log and event after listening say how long the
// fault lasted from when it began, not from the zero time.
func TestOwnerDataplaneDownTime(t *testing.T) {
	e := newOwnerEnv(t, true, Config{Interval: 50 * time.Millisecond, Multiplier: 6})
	e.withReopener()
	e.s.reconcile(context.Background())
	e.s.onLink(layer2.LinkState{Name: "eth0", Index: 1, Reason: layer2.LinkNoCarrier})
	e.s.reconcile(context.Background())
	began := e.s.dpShown.since
	if began.IsZero() {
		t.Fatal("the fault's start is not recorded")
	}
	e.clock.Advance(time.Second)
	e.s.onLink(layer2.LinkState{Name: "eth0", Index: 1, Up: true})
	e.s.reconcile(context.Background())
	if !e.s.dpShown.since.Equal(began) {
		t.Errorf("while listening the fault began at %v, want %v", e.s.dpShown.since, began)
	}
}

// fakeL2 records what linkRejoin sends.
type fakeL2 struct{ sent []string }

func (f *fakeL2) Notify(ip netip.Addr) error {
	f.sent = append(f.sent, "notify "+ip.String())
	return nil
}
func (f *fakeL2) Ask(self, target netip.Addr) error {
	f.sent = append(f.sent, "ask "+target.String()+" for "+self.String())
	return nil
}

// TestLinkRejoin: the node's own address is announced, then each peer of its family asked for.
func TestLinkRejoin(t *testing.T) {
	l2 := &fakeL2{}
	err := linkRejoin{ip: netip.MustParseAddr("172.18.0.2"), l2: l2}.Rejoin([]netip.Addr{
		netip.MustParseAddr("172.18.0.3"), netip.MustParseAddr("fc00::4"), netip.MustParseAddr("172.18.0.5")})
	want := []string{"notify 172.18.0.2", "ask 172.18.0.3 for 172.18.0.2", "ask 172.18.0.5 for 172.18.0.2"}
	if err != nil || !slices.Equal(l2.sent, want) {
		t.Errorf("sent %q (err %v), want %q", l2.sent, err, want)
	}
}
