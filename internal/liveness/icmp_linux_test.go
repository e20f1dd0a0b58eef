package liveness

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ironlb/ironlb/internal/testbed/netnstest"
)

// TestEchoerNetns: in two throwaway namespaces joined by a veth (addresses only there), an Echoer
// on each family's address sees its peer answer (the peer's kernel does), and sees it lost when the
// peer's link goes down: ICMP over IPv4, ICMPv6 over IPv6. Root only.
func TestEchoerNetns(t *testing.T) {
	netnstest.Require(t, "ip")
	for _, tc := range []struct {
		name       string
		self, peer string // prefixes on the veth's ends
	}{
		{"IPv4", "192.0.2.1/24", "192.0.2.2/24"},
		{"IPv6", "2001:db8:e::1/64", "2001:db8:e::2/64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := netnsPair(t, tc.self, tc.peer)
			self, peer := netip.MustParsePrefix(tc.self).Addr(), netip.MustParsePrefix(tc.peer).Addr()
			var ups, downs atomic.Int32
			tr := NewEchoTracker(10*time.Millisecond, 5*time.Millisecond, 20*time.Millisecond, 3)
			var e *Echoer
			netnstest.In(t, a, func() {
				var err error
				e, err = ListenEcho(self, tr, func(d []Down) {
					if len(d) == 0 {
						ups.Add(1)
					} else {
						downs.Add(1)
					}
				}, slog.New(slog.DiscardHandler))
				if err != nil {
					t.Fatal(err)
				}
			})
			e.SetPeers([]Peer{{Node: "peer", Addr: netip.AddrPortFrom(peer, 0)}})
			done := make(chan struct{})
			ctx, cancel := context.WithCancel(context.Background())
			go func() { _ = e.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()
			if !eventually(func() bool { up, _ := e.Up("peer"); return up && ups.Load() > 0 }) {
				t.Fatal("the peer never answered")
			}
			run(t, "ip", "-n", b, "link", "set", "vb", "down")
			if !eventually(func() bool { up, _ := e.Up("peer"); return !up && downs.Load() > 0 }) {
				t.Fatal("the peer's loss was not seen")
			}
		})
	}
}

// netnsPair makes two namespaces joined by a veth (va in a, vb in b) with the addresses given,
// removed when the test ends.
func netnsPair(t *testing.T, addrA, addrB string) (a, b string) {
	t.Helper()
	a, b = fmt.Sprintf("ironlbt-ea%d", os.Getpid()), fmt.Sprintf("ironlbt-eb%d", os.Getpid())
	netnstest.Add(t, a, b)
	netnstest.Veth(t, netnstest.End{NS: a, Name: "va", Addrs: []string{addrA}}, netnstest.End{NS: b, Name: "vb", Addrs: []string{addrB}})
	netnstest.Run(t, a, "ip", "link", "set", "lo", "up")
	netnstest.Run(t, b, "ip", "link", "set", "lo", "up")
	return a, b
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
}

// TestMonitorIPv6Netns: heartbeats over UDP/IPv6 between two namespaces (IPv6-only nodes): each side
// hears the other from its InternalIP; a heartbeat signed with the key but sent from another address
// of the same subnet (an attacker on the link) is rejected as WrongSource and never believed.
func TestMonitorIPv6Netns(t *testing.T) {
	netnstest.Require(t, "ip")
	a, b := netnsPair(t, "2001:db8:e::1/64", "2001:db8:e::2/64")
	run(t, "ip", "-n", b, "addr", "add", "2001:db8:e::99/64", "dev", "vb", "nodad") // the attacker's
	listen := func(ns, addr string) net.PacketConn {
		var c net.PacketConn
		netnstest.In(t, ns, func() {
			var err error
			if c, err = net.ListenPacket("udp6", addr); err != nil {
				t.Fatal(err)
			}
		})
		return c
	}
	ca, cb := listen(a, "[2001:db8:e::1]:7947"), listen(b, "[2001:db8:e::2]:7947")
	forger := listen(b, "[2001:db8:e::99]:0")
	defer forger.Close()
	log := slog.New(slog.DiscardHandler)
	ma := NewMonitor(ca, NewDetector(10*time.Millisecond, 5), 0, func() Heartbeat { return Heartbeat{Node: "a", Ready: true} }, func() {}, log)
	mb := NewMonitor(cb, NewDetector(10*time.Millisecond, 5), 0, func() Heartbeat { return Heartbeat{Node: "b", Ready: true} }, func() {}, log)
	var wrongSource atomic.Int32
	ma.OnReject = func(r Reason) {
		if r == WrongSource {
			wrongSource.Add(1)
		}
	}
	ma.SetPeers([]Peer{{Node: "b", Addr: netip.MustParseAddrPort("[2001:db8:e::2]:7947")}})
	mb.SetPeers([]Peer{{Node: "a", Addr: netip.MustParseAddrPort("[2001:db8:e::1]:7947")}})
	ma.SetKeys(testKey, nil)
	mb.SetKeys(testKey, nil)
	runMonitors(t, ma, mb)
	alive := func(m *Monitor, n string) bool { ok, _ := m.Alive(n); return ok }
	if !eventually(func() bool { return alive(ma, "b") && alive(mb, "a") }) {
		t.Fatal("the IPv6 peers never heard each other")
	}
	s := NewSigner(7)
	s.SetKey(testKey)
	for range 3 {
		if _, err := forger.WriteTo(s.Sign(Heartbeat{Node: "b", Leaving: true}, time.Now()), net.UDPAddrFromAddrPort(netip.MustParseAddrPort("[2001:db8:e::1]:7947"))); err != nil {
			t.Fatal(err)
		}
	}
	if !eventually(func() bool { return wrongSource.Load() >= 3 }) {
		t.Fatalf("forged heartbeats from another address: %d rejected as WrongSource, want 3", wrongSource.Load())
	}
	if hb, _ := ma.Info("b"); hb.Leaving {
		t.Error("a forged Leaving was believed")
	}
}
