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
	listen := func() net.PacketConn {
		c, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ca, cb := listen(), listen()
	var leaving, ready atomic.Bool
	var changes atomic.Int32
	a := NewMonitor(ca, NewDetector(10*time.Millisecond, 5), func() Heartbeat { return Heartbeat{Node: "a"} },
		func() { changes.Add(1) }, slog.New(slog.DiscardHandler))
	b := NewMonitor(cb, NewDetector(10*time.Millisecond, 5), func() Heartbeat {
		return Heartbeat{Node: "b", Ready: ready.Load(), Leaving: leaving.Load()}
	}, func() {}, slog.New(slog.DiscardHandler))
	a.SetPeers([]Peer{{Node: "b", Addr: netip.MustParseAddrPort(cb.LocalAddr().String())}})
	b.SetPeers([]Peer{{Node: "a", Addr: netip.MustParseAddrPort(ca.LocalAddr().String())}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = a.Run(ctx) }()
	go func() { _ = b.Run(ctx) }()

	wait := func(what string, want int32, check func() bool) {
		t.Helper()
		for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			if changes.Load() >= want && check() {
				return
			}
		}
		t.Fatalf("%s: %d changes reported, want %d", what, changes.Load(), want)
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
