package liveness

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
)

// A peer that says it leaves (SIGTERM) or turns ready wakes the speaker's loop at once, as one that
// comes alive does: the elections depend on it. Two monitors on loopback UDP.
func TestMonitorReportsStateChanges(t *testing.T) {
	var leaving, ready atomic.Bool
	var changes atomic.Int32
	a, b := monitorPair(t, func() Heartbeat { return Heartbeat{Node: "a"} }, func() Heartbeat {
		return Heartbeat{Node: "b", Ready: ready.Load(), Leaving: leaving.Load()}
	}, func() { changes.Add(1) })
	a.SetKeys(testKey, nil)
	b.SetKeys(testKey, nil)
	runMonitors(t, a, b)

	wait := func(what string, want int32, check func() bool) {
		t.Helper()
		if !eventually(func() bool { return changes.Load() >= want && check() }) {
			t.Fatalf("%s: %d changes reported, want %d", what, changes.Load(), want)
		}
	}
	wait("b comes alive", 1, func() bool { alive, _ := a.Alive("b"); return alive })
	time.Sleep(50 * time.Millisecond)
	if n := changes.Load(); n != 1 {
		t.Fatalf("heartbeats saying nothing new reported %d changes, want 1", n)
	}
	ready.Store(true)
	wait("b turns ready", 2, func() bool { hb, _ := a.Info("b"); return hb.Ready })
	leaving.Store(true)
	wait("b leaves", 3, func() bool { hb, _ := a.Info("b"); return hb.Leaving })
	time.Sleep(50 * time.Millisecond)
	if n := changes.Load(); n != 3 {
		t.Fatalf("%d changes reported after b left, want 3", n)
	}
}

func TestChanged(t *testing.T) {
	base := Heartbeat{Node: "b", Seq: 1, Ready: true, ReadyFor: time.Second}
	later := base
	later.Seq, later.ReadyFor = 2, 2*time.Second
	if Changed(base, later) {
		t.Error("a later heartbeat with the same flags is a change")
	}
	for _, next := range []Heartbeat{{Node: "b", Ready: false}, {Node: "b", Ready: true, Leaving: true}} {
		if !Changed(base, next) {
			t.Errorf("%+v after %+v is not a change", next, base)
		}
	}
}

// TestMonitorAuth: over loopback, a monitor without the key is not heard and hears nothing; with a
// rotated key (the new primary, the old one as secondary) both sides hear each other; a forged
// packet from a stranger is counted by reason and never creates a peer.
func TestMonitorAuth(t *testing.T) {
	var rejected [numReasons]atomic.Int32
	a, b := monitorPair(t, func() Heartbeat { return Heartbeat{Node: "a"} }, func() Heartbeat { return Heartbeat{Node: "b"} }, func() {})
	a.OnReject = func(r Reason) { rejected[r].Add(1) }
	b.OnReject = a.OnReject
	runMonitors(t, a, b)
	wait := func(what string, cond func() bool) {
		t.Helper()
		if !eventually(cond) {
			t.Fatalf("%s: timed out", what)
		}
	}
	alive := func(m *Monitor, n string) bool { ok, _ := m.Alive(n); return ok }

	// Only a has a key: a sends, b (no key) rejects; b sends nothing.
	a.SetKeys(testKey, nil)
	wait("b rejects a's heartbeats without a key", func() bool { return rejected[NoKey].Load() > 0 })
	if b.HasKey() || alive(a, "b") || alive(b, "a") {
		t.Fatal("a peer came alive without a shared key")
	}
	// Rotation: b gets the new primary with the old as secondary; a still signs with the old one.
	newKey := []byte("0123456789abcdef0123456789abcdeX")
	b.SetKeys(newKey, testKey)
	wait("b hears a (old key, b's secondary)", func() bool { return alive(b, "a") })
	a.SetKeys(testKey, nil) // a has not seen the new Secret yet: b's heartbeats fail there
	wait("a rejects b's new-key heartbeats", func() bool { return rejected[BadMAC].Load() > 0 })
	a.SetKeys(newKey, testKey)
	wait("a hears b (new key)", func() bool { return alive(a, "b") })

	// A stranger forges a heartbeat of b, and another of an unknown node, from its own address.
	cx, err := net.ListenPacket("udp4", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	defer cx.Close()
	for _, hb := range []Heartbeat{{Node: "b", Leaving: true}, {Node: "evil"}} {
		s := NewSigner(1)
		s.SetKey(newKey) // even with the key: the source address is wrong
		if _, err := cx.WriteTo(s.Sign(hb, time.Now()), a.conn.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	wait("forgeries rejected", func() bool { return rejected[WrongSource].Load() > 0 && rejected[UnknownNode].Load() > 0 })
	if hb, _ := a.Info("b"); hb.Leaving {
		t.Error("a forged Leaving was believed")
	}
	if _, ok := a.Info("evil"); ok {
		t.Error("an unknown node entered the table")
	}
}

// monitorPair builds two monitors, a and b, on loopback UDP, each the other's one peer, with a 10 ms
// interval (5 misses make a death); hbA and hbB say what each sends, changedA is a's change callback.
// Keys and callbacks are the caller's to set before runMonitors.
func monitorPair(t *testing.T, hbA, hbB func() Heartbeat, changedA func()) (a, b *Monitor) {
	t.Helper()
	listen := func() net.PacketConn {
		c, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ca, cb := listen(), listen()
	a = NewMonitor(ca, NewDetector(10*time.Millisecond, 5), 0, hbA, changedA, slog.New(slog.DiscardHandler))
	b = NewMonitor(cb, NewDetector(10*time.Millisecond, 5), 0, hbB, func() {}, slog.New(slog.DiscardHandler))
	a.SetPeers([]Peer{{Node: "b", Addr: netip.MustParseAddrPort(cb.LocalAddr().String())}})
	b.SetPeers([]Peer{{Node: "a", Addr: netip.MustParseAddrPort(ca.LocalAddr().String())}})
	return a, b
}

// runMonitors runs ms until the test ends (Run closes their sockets then).
func runMonitors(t *testing.T, ms ...*Monitor) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for _, m := range ms {
		go func() { _ = m.Run(ctx) }()
	}
}

// eventually polls cond every 5 ms for up to 2 s and reports whether it held.
func eventually(cond func() bool) bool {
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return false
}
