package bfd

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ironlb/ironlb/internal/testbed/netnstest"
)

// TestUDPConn checks the sockets of RFC 5881 on loopback in a throwaway namespace: ports, TTL 255,
// traffic class, and the TTL and addresses Recv reports.
func TestUDPConn(t *testing.T) {
	needRoot(t)
	n := newTestNet(t, "udp")
	netnstest.Do(t, n.nsA, func() error {
		c, err := Listen(ListenConfig{})
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := Listen(ListenConfig{}); !errors.Is(err, unix.EADDRINUSE) {
			t.Errorf("second Listen = %v, want EADDRINUSE", err)
		}
		buf := make([]byte, 100)
		for _, lo := range []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()} {
			tx, err := c.Dial(lo, lo)
			if err != nil {
				return err
			}
			defer tx.Close()
			port := localPort(tx)
			if port < SourcePortMin || port > SourcePortMax {
				t.Errorf("%v: source port %d", lo, port)
			}
			fd := tx.(*udpSender).fd
			ttlOpt, tosOpt := [2]int{unix.IPPROTO_IP, unix.IP_TTL}, [2]int{unix.IPPROTO_IP, unix.IP_TOS}
			if lo.Is6() {
				ttlOpt, tosOpt = [2]int{unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS}, [2]int{unix.IPPROTO_IPV6, unix.IPV6_TCLASS}
			}
			ttl, _ := unix.GetsockoptInt(fd, ttlOpt[0], ttlOpt[1])
			tos, _ := unix.GetsockoptInt(fd, tosOpt[0], tosOpt[1])
			if ttl != 255 || tos != 0xc0 {
				t.Errorf("%v: TTL %d, TOS %#x; want 255, 0xc0", lo, ttl, tos)
			}
			if err := tx.Send([]byte("hello")); err != nil {
				return err
			}
			d, ok, err := c.Recv(buf, time.Now().Add(time.Second))
			if err != nil || !ok {
				t.Fatalf("%v: Recv = %v, %v", lo, ok, err)
			}
			want := Datagram{N: 5, Src: lo, Dst: lo, SrcPort: uint16(port), TTL: 255}
			if d != want || string(buf[:d.N]) != "hello" {
				t.Errorf("%v: got %+v %q, want %+v", lo, d, buf[:d.N], want)
			}

			// A packet from more than one hop away (TTL < 255) is reported as such.
			raw, err := unix.Socket(map[bool]int{true: unix.AF_INET, false: unix.AF_INET6}[lo.Is4()], unix.SOCK_DGRAM, 0)
			if err != nil {
				return err
			}
			defer unix.Close(raw)
			if err := unix.SetsockoptInt(raw, ttlOpt[0], ttlOpt[1], 64); err != nil {
				return err
			}
			if err := unix.Sendto(raw, []byte("far"), 0, sockaddr(lo, ControlPort)); err != nil {
				return err
			}
			if d, ok, _ := c.Recv(buf, time.Now().Add(time.Second)); !ok || d.TTL != 64 {
				t.Errorf("%v: packet with TTL 64 read as %+v (ok %v)", lo, d, ok)
			}
		}
		// Nothing queued: a past deadline returns at once, Wake ends a wait.
		if _, ok, err := c.Recv(buf, time.Time{}); ok || err != nil {
			t.Errorf("Recv on an empty socket = %v, %v", ok, err)
		}
		c.Wake()
		start := time.Now()
		if _, ok, err := c.Recv(buf, start.Add(10*time.Second)); ok || err != nil || time.Since(start) > time.Second {
			t.Errorf("woken Recv = %v, %v after %v", ok, err, time.Since(start))
		}
		start = time.Now()
		if _, ok, _ := c.Recv(buf, start.Add(20*time.Millisecond)); ok || time.Since(start) < 20*time.Millisecond {
			t.Errorf("Recv returned after %v, before its deadline", time.Since(start))
		}
		if _, err := c.Dial(netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("127.0.0.1")); !errors.Is(err, unix.EADDRNOTAVAIL) {
			t.Errorf("Dial from an address not ours = %v, want EADDRNOTAVAIL", err)
		}
		return nil
	})
}

// TestKernelPair runs two Managers against each other over a veth pair: they come up over IPv4
// and IPv6, ignore packets sent from beyond one hop (GTSM), and detect a crash.
func TestKernelPair(t *testing.T) {
	needRoot(t)
	n := newTestNet(t, "pair")
	a := startChild(t, n.nsA, helperConfig{Peers: [][2]netip.Addr{{netA4, netB4}, {netA6, netB6}}, Profile: fast50, Realtime: true})
	b := startChild(t, n.nsB, helperConfig{Peers: [][2]netip.Addr{{netB4, netA4}, {netB6, netA6}}, Profile: fast50, Realtime: true})
	b.waitStates(t, 5*time.Second, map[netip.Addr]string{netA4: "Up", netA6: "Up"})
	a.waitStates(t, 5*time.Second, map[netip.Addr]string{netB4: "Up", netB6: "Up"})

	// Packets that look right but come with TTL 64 are dropped and change nothing.
	netnstest.Do(t, n.nsA, func() error {
		for _, dst := range []netip.Addr{netB4, netB6} {
			family, level, opt := unix.AF_INET, unix.IPPROTO_IP, unix.IP_TTL
			if dst.Is6() {
				family, level, opt = unix.AF_INET6, unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS
			}
			fd, err := unix.Socket(family, unix.SOCK_DGRAM, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			if err := unix.SetsockoptInt(fd, level, opt, 64); err != nil {
				return err
			}
			p := &Packet{State: StateAdminDown, Diag: DiagAdministrativelyDown, DetectMult: 3, MyDiscriminator: 7}
			if err := unix.Sendto(fd, mustMarshal(t, p), 0, sockaddr(dst, ControlPort)); err != nil {
				return err
			}
		}
		return nil
	})
	b.expectNoChange(t, 300*time.Millisecond)

	crashed := a.kill(t)
	for range 2 {
		select {
		case ch := <-b.changes:
			took := time.Unix(0, ch.At).Sub(crashed)
			t.Logf("detected the crash after %v (session to %v)", took.Round(time.Millisecond), ch.Peer)
			if ch.New != "Down" || ch.Diag != DiagControlDetectionTimeExpired.String() || took > 250*time.Millisecond {
				t.Errorf("%+v after %v, want Down (detection time expired) within ≈ 150 ms", ch, took)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("crash not detected")
		}
	}
	final := b.stop(t)
	st := final.Stats
	if st.Dropped[DropTTL] != 2 {
		t.Errorf("dropped %v, want 2 for TTL", st.Dropped)
	}
	if !st.Realtime {
		t.Logf("no realtime priority: %s", final.RealtimeErr)
	}
	t.Logf("stats: %+v", st)
}
