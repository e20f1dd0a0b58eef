//go:build linux

package layer2

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mdlayher/ndp"
	"github.com/mdlayher/packet"

	"github.com/ironlb/ironlb/internal/testbed/netnstest"
)

// The kernel test runs responders on one end of a veth pair between two
// throwaway network namespaces, and real clients (arping, ndisc6, the
// kernel's neighbour tables) on the other. Nothing touches the root
// namespace. Namespaces are named ilbt-l2-<pid>-a/b and deleted in
// t.Cleanup.

var (
	macA = mustMAC("02:11:00:00:00:0a") // the responder's interface, in A
	macB = mustMAC("02:11:00:00:00:0b") // the client's interface, in B
	macC = mustMAC("02:11:00:00:00:0c") // a third node, for spread mode
	macX = mustMAC("02:11:00:00:00:99") // a stale, dead announcer
)

type link struct {
	nsA, nsB string // namespace names
	ifA, ifB string // interface names in them
}

func TestKernel(t *testing.T) {
	if testing.Short() {
		t.Skip("kernel test skipped in -short mode")
	}
	netnstest.Require(t, "ip", "arping", "ndisc6")
	l := newLink(t)

	var conflicts conflictLog
	cfg := Config{OnConflict: conflicts.add}
	var r4, r6 *Responder
	netnstest.Do(t, l.nsA, func() error {
		ifi, err := net.InterfaceByName(l.ifA)
		if err != nil {
			return err
		}
		if r4, err = DialARP(ifi, cfg); err != nil {
			return err
		}
		r6, err = DialNDP(ifi, cfg)
		return err
	})
	run(t, r4)
	run(t, r6)

	t.Run("ARP answer", func(t *testing.T) {
		vip := netip.MustParseAddr("192.0.2.10")
		announce(t, r4, vip)
		out := l.mustExec(t, l.nsB, "arping", "-c", "2", "-w", "3", "-I", l.ifB, vip.String())
		if !strings.Contains(out, macA.String()) {
			t.Errorf("arping did not see %v:\n%s", macA, out)
		}
		// A unicast request to our MAC, as a client's cache revalidation.
		out = l.mustExec(t, l.nsB, "arping", "-c", "1", "-w", "2", "-t", macA.String(), "-I", l.ifB, vip.String())
		if !strings.Contains(out, macA.String()) {
			t.Errorf("unicast arping did not see %v:\n%s", macA, out)
		}
		// A unicast request to another MAC reaches us over veth, but is not ours.
		out, err := l.exec(l.nsB, "arping", "-c", "1", "-w", "2", "-t", macX.String(), "-I", l.ifB, vip.String())
		if err == nil || strings.Contains(out, macA.String()) {
			t.Errorf("request to %v was answered (err %v):\n%s", macX, err, out)
		}
		// Spread mode: this client is sent to another node's MAC.
		r4.SetAnswerFunc(func(ip, clientIP netip.Addr, clientMAC net.HardwareAddr) (net.HardwareAddr, bool) {
			return macC, clientIP == netip.MustParseAddr("192.0.2.2") && macEqual(clientMAC, macB)
		})
		// arping prints the frame's source, which stays ours (switches must
		// keep learning our MAC on our port), so let B's kernel resolve the
		// VIP and look at the MAC it cached: the reply's sender MAC.
		_, _ = l.exec(l.nsB, "ip", "neigh", "del", vip.String(), "dev", l.ifB)
		_, _ = l.exec(l.nsB, "ping", "-c", "1", "-W", "1", vip.String()) // macC does not exist: no echo reply
		l.waitNeigh(t, vip, macC)
		r4.SetAnswerFunc(nil)
	})

	t.Run("ARP withdrawn and unknown", func(t *testing.T) {
		vip := netip.MustParseAddr("192.0.2.10")
		if err := r4.Withdraw(vip); err != nil {
			t.Fatal(err)
		}
		for _, ip := range []string{vip.String(), "192.0.2.11"} {
			out, err := l.exec(l.nsB, "arping", "-c", "1", "-w", "2", "-I", l.ifB, ip)
			if err == nil || strings.Contains(out, macA.String()) {
				t.Errorf("%s was answered (err %v):\n%s", ip, err, out)
			}
		}
	})

	t.Run("Notify resolves a neighbour's entry for the host", func(t *testing.T) {
		// B asked for A's own address while A did not answer (A's link was down, in the
		// speaker's case), and would not ask again for a minute: its entry is incomplete.
		own := netip.MustParseAddr("192.0.2.1")
		l.mustExec(t, l.nsB, "sysctl", "-qw", "net.ipv4.neigh."+l.ifB+".retrans_time_ms=60000")
		defer l.mustExec(t, l.nsB, "sysctl", "-qw", "net.ipv4.neigh."+l.ifB+".retrans_time_ms=1000")
		l.mustExec(t, l.nsA, "sysctl", "-qw", "net.ipv4.conf."+l.ifA+".arp_ignore=8")
		_, _ = l.exec(l.nsB, "ip", "neigh", "flush", "dev", l.ifB)
		_, _ = l.exec(l.nsB, "ping", "-c", "1", "-W", "1", own.String())
		l.mustExec(t, l.nsA, "sysctl", "-qw", "net.ipv4.conf."+l.ifA+".arp_ignore=0")
		if out := l.mustExec(t, l.nsB, "ip", "neigh", "show", own.String(), "dev", l.ifB); !strings.Contains(out, "INCOMPLETE") && !strings.Contains(out, "FAILED") {
			t.Fatalf("B's entry for %v is %q, want it unresolved before Notify", own, strings.TrimSpace(out))
		}
		before := r4.Stats().Gratuitous
		if err := r4.Notify(own); err != nil {
			t.Fatal(err)
		}
		l.waitNeigh(t, own, macA)
		// An IPv6 neighbour holding A's address at a dead MAC: the advertisement overrides it.
		own6 := netip.MustParseAddr("2001:db8::1")
		l.mustExec(t, l.nsB, "ip", "neigh", "replace", own6.String(), "lladdr", macX.String(), "dev", l.ifB, "nud", "stale")
		if err := r6.Notify(own6); err != nil {
			t.Fatal(err)
		}
		l.waitNeigh(t, own6, macA)
		if got := r4.Stats().Gratuitous; got != before {
			t.Errorf("Notify counted %d gratuitous frames, want none (MetalLB's counters are per Service address)", got-before)
		}
		if err := r4.Notify(netip.MustParseAddr("2001:db8::1")); !errors.Is(err, ErrFamily) {
			t.Errorf("Notify of an IPv6 address on the ARP responder: %v, want ErrFamily", err)
		}
	})

	t.Run("Ask resolves the host's entry for a neighbour, and the neighbour's for the host", func(t *testing.T) {
		// A asked for B while B did not answer, and would not ask again for a minute; B has no
		// entry for A.
		own, peer := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
		l.mustExec(t, l.nsA, "sysctl", "-qw", "net.ipv4.neigh."+l.ifA+".retrans_time_ms=60000")
		defer l.mustExec(t, l.nsA, "sysctl", "-qw", "net.ipv4.neigh."+l.ifA+".retrans_time_ms=1000")
		l.mustExec(t, l.nsB, "sysctl", "-qw", "net.ipv4.conf."+l.ifB+".arp_ignore=8")
		_, _ = l.exec(l.nsA, "ip", "neigh", "flush", "dev", l.ifA)
		_, _ = l.exec(l.nsB, "ip", "neigh", "flush", "dev", l.ifB)
		_, _ = l.exec(l.nsA, "ping", "-c", "1", "-W", "1", peer.String())
		l.mustExec(t, l.nsB, "sysctl", "-qw", "net.ipv4.conf."+l.ifB+".arp_ignore=0")
		aEntry := func() string {
			return strings.TrimSpace(l.mustExec(t, l.nsA, "ip", "neigh", "show", peer.String(), "dev", l.ifA))
		}
		if out := aEntry(); !strings.Contains(out, "INCOMPLETE") && !strings.Contains(out, "FAILED") {
			t.Fatalf("A's entry for %v is %q, want it unresolved before Ask", peer, out)
		}
		if err := r4.Ask(own, peer); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(3 * time.Second); !strings.Contains(aEntry(), "lladdr "+macB.String()); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("A's entry for %v is %q after Ask, want lladdr %v", peer, aEntry(), macB)
			}
		}
		l.waitNeigh(t, own, macA)
		if err := r4.Ask(own, netip.MustParseAddr("2001:db8::2")); !errors.Is(err, ErrFamily) {
			t.Errorf("Ask for an IPv6 address on the ARP responder: %v, want ErrFamily", err)
		}
		// IPv6: B learns A from the solicitation.
		_, _ = l.exec(l.nsB, "ip", "-6", "neigh", "flush", "dev", l.ifB)
		if err := r6.Ask(netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")); err != nil {
			t.Fatal(err)
		}
		l.waitNeigh(t, netip.MustParseAddr("2001:db8::1"), macA)
	})

	t.Run("NDP answer", func(t *testing.T) {
		vip := netip.MustParseAddr("2001:db8::10")
		// A stale entry at a dead MAC: only Override=1 replaces it (RFC 4861
		// §7.2.5); with MetalLB's Override=0 it would stay.
		l.mustExec(t, l.nsB, "ip", "neigh", "replace", vip.String(), "lladdr", macX.String(), "dev", l.ifB, "nud", "stale")
		announce(t, r6, vip)
		if out := l.mustExec(t, l.nsA, "ip", "-6", "maddr", "show", "dev", l.ifA); !strings.Contains(out, "ff02::1:ff00:10") {
			t.Errorf("solicited-node group not joined:\n%s", out)
		}
		out := l.mustExec(t, l.nsB, "ndisc6", "-1", "-r", "3", "-w", "1000", vip.String(), l.ifB)
		if !strings.Contains(strings.ToLower(out), macA.String()) {
			t.Errorf("ndisc6 did not see %v:\n%s", macA, out)
		}
		l.waitNeigh(t, vip, macA)
	})

	t.Run("NDP unicast solicitation", func(t *testing.T) {
		// A client revalidating its cache sends the solicitation to the VIP
		// itself, at our MAC. The node does not hold the VIP, so only a packet
		// socket sees this; an ICMPv6 socket would not.
		vip := netip.MustParseAddr("2001:db8::10")
		announce(t, r6, vip)
		client := netip.MustParseAddr("2001:db8::2")
		ns := NDP{EthDst: macA, EthSrc: macB, Src: client, Dst: vip, HopLimit: 255,
			Message: &ndp.NeighborSolicitation{TargetAddress: vip}}
		var got NDP
		netnstest.Do(t, l.nsB, func() error {
			ifi, err := net.InterfaceByName(l.ifB)
			if err != nil {
				return err
			}
			c, err := ListenNDP(ifi)
			if err != nil {
				return err
			}
			defer c.Close()
			b, err := ns.Marshal()
			if err != nil {
				return err
			}
			got, err = readNA(c, vip, b, macA)
			return err
		})
		na := got.Message.(*ndp.NeighborAdvertisement)
		if !na.Solicited || !na.Override || !macEqual(linkLayerOption(na.Options, ndp.Target), macA) ||
			!macEqual(got.EthDst, macB) || got.Dst != client {
			t.Errorf("answer = %+v %+v, want solicited, override, target MAC %v, to %v at %v", got, na, macA, client, macB)
		}
	})

	t.Run("NDP withdrawn and unknown", func(t *testing.T) {
		vip := netip.MustParseAddr("2001:db8::10")
		if err := r6.Withdraw(vip); err != nil {
			t.Fatal(err)
		}
		if out := l.mustExec(t, l.nsA, "ip", "-6", "maddr", "show", "dev", l.ifA); strings.Contains(out, "ff02::1:ff00:10") {
			t.Errorf("solicited-node group still joined:\n%s", out)
		}
		for _, ip := range []string{vip.String(), "2001:db8::11"} {
			out, err := l.exec(l.nsB, "ndisc6", "-1", "-r", "2", "-w", "500", ip, l.ifB)
			if err == nil || strings.Contains(strings.ToLower(out), macA.String()) {
				t.Errorf("%s was answered (err %v):\n%s", ip, err, out)
			}
		}
	})

	t.Run("gratuitous ARP", func(t *testing.T) {
		// B has the VIP cached at a dead node's MAC and never asks again.
		vip := netip.MustParseAddr("192.0.2.20")
		l.mustExec(t, l.nsB, "ip", "neigh", "replace", vip.String(), "lladdr", macX.String(), "dev", l.ifB, "nud", "stale")
		announce(t, r4, vip)
		if err := r4.Gratuitous(vip); err != nil {
			t.Fatal(err)
		}
		l.waitNeigh(t, vip, macA)

		// With arp_accept, a host learns the address without any entry.
		l.mustExec(t, l.nsB, "sysctl", "-qw", "net.ipv4.conf."+l.ifB+".arp_accept=1")
		fresh := netip.MustParseAddr("192.0.2.21")
		announce(t, r4, fresh)
		if err := r4.Gratuitous(fresh); err != nil {
			t.Fatal(err)
		}
		l.waitNeigh(t, fresh, macA)

		// Spread mode re-points one client to another node.
		spread := netip.MustParseAddr("192.0.2.22")
		l.mustExec(t, l.nsB, "ip", "neigh", "replace", spread.String(), "lladdr", macX.String(), "dev", l.ifB, "nud", "stale")
		announce(t, r4, spread)
		if err := r4.GratuitousTo(spread, netip.MustParseAddr("192.0.2.2"), macB, macC); err != nil {
			t.Fatal(err)
		}
		l.waitNeigh(t, spread, macC)
	})

	t.Run("unsolicited NA", func(t *testing.T) {
		vip := netip.MustParseAddr("2001:db8::20")
		l.mustExec(t, l.nsB, "ip", "neigh", "replace", vip.String(), "lladdr", macX.String(), "dev", l.ifB, "nud", "stale")
		announce(t, r6, vip)
		if err := r6.Gratuitous(vip); err != nil {
			t.Fatal(err)
		}
		l.waitNeigh(t, vip, macA)

		spread := netip.MustParseAddr("2001:db8::22")
		l.mustExec(t, l.nsB, "ip", "neigh", "replace", spread.String(), "lladdr", macX.String(), "dev", l.ifB, "nud", "stale")
		announce(t, r6, spread)
		if err := r6.GratuitousTo(spread, netip.MustParseAddr("2001:db8::2"), macB, macC); err != nil {
			t.Fatal(err)
		}
		l.waitNeigh(t, spread, macC)
	})

	t.Run("conflict", func(t *testing.T) {
		// A second responder in B, with B's MAC, announces the same VIPs.
		var b4, b6 *Responder
		netnstest.Do(t, l.nsB, func() error {
			ifi, err := net.InterfaceByName(l.ifB)
			if err != nil {
				return err
			}
			if b4, err = DialARP(ifi, Config{}); err != nil {
				return err
			}
			b6, err = DialNDP(ifi, Config{})
			return err
		})
		run(t, b4)
		run(t, b6)
		vip4, vip6 := netip.MustParseAddr("192.0.2.30"), netip.MustParseAddr("2001:db8::30")
		announce(t, r4, vip4)
		announce(t, r6, vip6)
		announce(t, b4, vip4)
		announce(t, b6, vip6)
		conflicts.take()

		// Its gratuitous announcements...
		if err := errors.Join(b4.Gratuitous(vip4), b6.Gratuitous(vip6)); err != nil {
			t.Fatal(err)
		}
		conflicts.wait(t, conflict{vip4, macB}, conflict{vip6, macB})

		// ...and its answers to A's own questions.
		out, err := l.exec(l.nsA, "arping", "-c", "1", "-w", "2", "-I", l.ifA, vip4.String())
		if err != nil || !strings.Contains(out, macB.String()) {
			t.Errorf("arping from A did not see B's answer (err %v):\n%s", err, out)
		}
		conflicts.wait(t, conflict{vip4, macB})
		out, err = l.exec(l.nsA, "ndisc6", "-1", "-r", "2", "-w", "1000", vip6.String(), l.ifA)
		if err != nil || !strings.Contains(strings.ToLower(out), macB.String()) {
			t.Errorf("ndisc6 from A did not see B's answer (err %v):\n%s", err, out)
		}
		conflicts.wait(t, conflict{vip6, macB})
		if s := r4.Stats(); s.Conflicts < 2 {
			t.Errorf("ARP stats = %+v, want 2 conflicts or more", s)
		}
	})

	t.Run("link flap", func(t *testing.T) {
		// The sockets report ENETDOWN once; Run keeps going and answers again
		// when the link is back, with the multicast groups still joined.
		vip4, vip6 := netip.MustParseAddr("192.0.2.20"), netip.MustParseAddr("2001:db8::20")
		announce(t, r4, vip4)
		announce(t, r6, vip6)
		l.mustExec(t, l.nsA, "ip", "link", "set", l.ifA, "down")
		time.Sleep(200 * time.Millisecond)
		l.mustExec(t, l.nsA, "ip", "link", "set", l.ifA, "up")
		l.waitLinkLocal(t, l.nsA, l.ifA)
		out := l.mustExec(t, l.nsB, "arping", "-c", "1", "-w", "3", "-I", l.ifB, vip4.String())
		if !strings.Contains(out, macA.String()) {
			t.Errorf("arping after the flap did not see %v:\n%s", macA, out)
		}
		out = l.mustExec(t, l.nsB, "ndisc6", "-1", "-r", "3", "-w", "1000", vip6.String(), l.ifB)
		if !strings.Contains(strings.ToLower(out), macA.String()) {
			t.Errorf("ndisc6 after the flap did not see %v:\n%s", macA, out)
		}
	})

	t.Run("stats", func(t *testing.T) {
		for _, r := range []*Responder{r4, r6} {
			s := r.Stats()
			t.Logf("%s stats: %+v", r.fam, s)
			if s.Malformed != 0 || s.SendErrors != 0 || s.Answers == 0 || s.Gratuitous == 0 {
				t.Errorf("%s stats = %+v, want answers and gratuitous frames, nothing malformed or failed", r.fam, s)
			}
		}
	})
}

// newLink creates namespaces A and B joined by a veth pair with test-net
// and documentation addresses. Cleanup deletes both namespaces.
func newLink(t *testing.T) *link {
	t.Helper()
	l := &link{
		nsA: fmt.Sprintf("ilbt-l2-%d-a", os.Getpid()),
		nsB: fmt.Sprintf("ilbt-l2-%d-b", os.Getpid()),
		ifA: "l2a",
		ifB: "l2b",
	}
	netnstest.Add(t, l.nsA, l.nsB)
	for _, ns := range []string{l.nsA, l.nsB} {
		l.mustExec(t, ns, "ip", "link", "set", "lo", "up")
		// Addresses are usable at once: no duplicate address detection wait.
		l.mustExec(t, ns, "sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0")
	}
	netnstest.Veth(t, netnstest.End{NS: l.nsA, Name: l.ifA, MAC: macA.String(), Addrs: []string{"192.0.2.1/24", "2001:db8::1/64"}},
		netnstest.End{NS: l.nsB, Name: l.ifB, MAC: macB.String(), Addrs: []string{"192.0.2.2/24", "2001:db8::2/64"}})
	l.waitLinkLocal(t, l.nsA, l.ifA)
	l.waitLinkLocal(t, l.nsB, l.ifB)
	return l
}

// waitLinkLocal waits for interface ifName in ns to have its link-local
// address: IPv6 comes up asynchronously once the carrier is up, and the
// address comes with the interface's multicast routes.
func (l *link) waitLinkLocal(t *testing.T, ns, ifName string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out := l.mustExec(t, ns, "ip", "-6", "addr", "show", "dev", ifName, "scope", "link")
		if strings.Contains(out, "fe80::") && !strings.Contains(out, "tentative") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s in %s has no link-local address:\n%s", ifName, ns, out)
		}
	}
}

// exec runs a command in namespace ns and returns its combined output.
func (l *link) exec(ns, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	args = append([]string{"netns", "exec", ns, name}, args...)
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	return string(out), err
}

func (l *link) mustExec(t *testing.T, ns, name string, args ...string) string {
	t.Helper()
	out, err := l.exec(ns, name, args...)
	if err != nil {
		t.Fatalf("in %s: %s %s: %v\n%s", ns, name, strings.Join(args, " "), err, out)
	}
	return out
}

// waitNeigh waits until B's neighbour table has ip at mac.
func (l *link) waitNeigh(t *testing.T, ip netip.Addr, mac net.HardwareAddr) {
	t.Helper()
	var out string
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		out = l.mustExec(t, l.nsB, "ip", "neigh", "show", ip.String(), "dev", l.ifB)
		if strings.Contains(out, "lladdr "+mac.String()) {
			return
		}
	}
	t.Errorf("B's neighbour entry for %v is %q, want lladdr %v", ip, strings.TrimSpace(out), mac)
}

// readNA sends frame b to dst on c and returns the first advertisement for
// target it reads within 2 seconds.
func readNA(c net.PacketConn, target netip.Addr, b []byte, dst net.HardwareAddr) (NDP, error) {
	if err := c.SetReadDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return NDP{}, err
	}
	if _, err := c.WriteTo(b, &packet.Addr{HardwareAddr: dst}); err != nil {
		return NDP{}, err
	}
	buf := make([]byte, 1500)
	for {
		n, _, err := c.ReadFrom(buf)
		if err != nil {
			return NDP{}, fmt.Errorf("waiting for an advertisement of %v: %w", target, err)
		}
		p, err := ParseNDP(buf[:n])
		if err != nil {
			continue
		}
		if na, ok := p.Message.(*ndp.NeighborAdvertisement); ok && na.TargetAddress == target {
			return p, nil
		}
	}
}

// run runs r until the test ends, then closes it.
func run(t *testing.T, r *Responder) {
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
}

func announce(t *testing.T, r *Responder, ip netip.Addr) {
	t.Helper()
	if err := r.Announce(ip); err != nil {
		t.Fatal(err)
	}
}

// conflictLog collects OnConflict calls.
type conflictLog struct {
	mu   sync.Mutex
	seen []conflict
}

func (c *conflictLog) add(ip netip.Addr, mac net.HardwareAddr) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = append(c.seen, conflict{ip, mac})
}

func (c *conflictLog) take() []conflict {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.seen
	c.seen = nil
	return s
}

// wait waits until every conflict in want was reported, then forgets all
// reported so far.
func (c *conflictLog) wait(t *testing.T, want ...conflict) {
	t.Helper()
	var got []conflict
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		c.mu.Lock()
		got = append([]conflict(nil), c.seen...)
		c.mu.Unlock()
		if containsAll(got, want) {
			c.take()
			return
		}
	}
	t.Errorf("conflicts reported: %v, want at least %v", got, want)
}

func containsAll(got, want []conflict) bool {
	for _, w := range want {
		found := false
		for _, g := range got {
			if g.IP == w.IP && macEqual(g.MAC, w.MAC) {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}
