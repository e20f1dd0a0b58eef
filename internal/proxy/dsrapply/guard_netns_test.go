package dsrapply_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"sigs.k8s.io/knftables"

	"github.com/ironlb/ironlb/internal/proxy/dsrapply"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/testbed/netnstest"
)

// TestKernelLoopGuardIgnoresGARP is the chaos soak's lying host in namespaces: client C reaches a
// DSR address through entry node E; the Service has a pod on E (PE) and one on backend node B (PB),
// so C's flows spread over both. X is a third node without endpoints. C then claims X's address
// with gratuitous ARP (arping -U), as a host that took over a cut node's address does, and E's
// neighbour entry for X now holds C's MAC.
//
// The guard built from E's neighbour table (the old peer source, reproduced here as the control)
// takes C for a peer that forwards: E serves every new flow of C itself and PB gets none. The guard
// built from the MACs the nodes published themselves (dsrapply.LocalMACs, what the proxy puts in
// its Node's annotation) is the same after the ARP as before it: C's MAC is not a peer, and C's
// flows still spread over PE and PB. Skipped unless root with nft, ip, sysctl and arping.
func TestKernelLoopGuardIgnoresGARP(t *testing.T) {
	netnstest.Require(t, "arping", "ping")
	nss, in := segment(t, "ilbgarp", "sw", "c", "e", "b", "x", "pe", "pb")
	sw, c, e, b, x, pe, pb := nss[0], nss[1], nss[2], nss[3], nss[4], nss[5], nss[6]
	in(sw, "ip", "link", "add", "br0", "type", "bridge")
	in(sw, "ip", "link", "set", "br0", "up")
	hosts := []struct{ ns, addr string }{{c, "192.0.2.100"}, {e, "192.0.2.11"}, {b, "192.0.2.20"}, {x, "192.0.2.30"}}
	for i, h := range hosts {
		port := fmt.Sprintf("p%d", i)
		in(sw, "ip", "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", h.ns)
		in(sw, "ip", "link", "set", port, "master", "br0", "up")
		in(h.ns, "ip", "addr", "add", h.addr+"/24", "dev", "eth0")
		in(h.ns, "ip", "link", "set", "eth0", "up")
		in(h.ns, "ip", "link", "set", "lo", "up")
	}
	pods := []struct{ node, pod, gw, addr string }{{e, pe, "10.244.1.1", "10.244.1.5"}, {b, pb, "10.244.2.1", "10.244.2.5"}}
	for _, p := range pods {
		in(p.node, "ip", "link", "add", "vp", "type", "veth", "peer", "name", "eth0", "netns", p.pod)
		in(p.node, "ip", "addr", "add", p.gw+"/24", "dev", "vp")
		in(p.node, "ip", "link", "set", "vp", "up")
		in(p.pod, "ip", "addr", "add", p.addr+"/24", "dev", "eth0")
		in(p.pod, "ip", "link", "set", "eth0", "up")
		in(p.pod, "ip", "link", "set", "lo", "up")
		in(p.pod, "ip", "route", "add", "default", "via", p.gw)
		// Each pod answers every line with its own address.
		ln := listenIn(t, p.pod, "tcp", p.addr+":8080")
		t.Cleanup(func() { ln.Close() })
		serveLines(ln, func(conn net.Conn, _ string) { fmt.Fprintf(conn, "%s\n", conn.LocalAddr()) })
	}
	const vip = "198.51.100.10"
	in(c, "ip", "route", "add", vip+"/32", "via", "192.0.2.11")
	svc := &nftrules.Service{Namespace: "ns1", Name: "web", ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.10")},
		LoadBalancerIPs: []netip.Addr{netip.MustParseAddr(vip)}, ExternalMode: nftrules.ExternalDSR,
		Ports: []nftrules.Port{{Protocol: nftrules.TCP, Port: 80, Endpoints: []nftrules.Endpoint{
			{Addr: netip.MustParseAddr("10.244.1.5"), Port: 8080, Node: "e", Ready: true},
			{Addr: netip.MustParseAddr("10.244.2.5"), Port: 8080, Node: "b", Ready: true},
		}}}}
	ips := map[string]netip.Addr{"e": netip.MustParseAddr("192.0.2.11"), "b": netip.MustParseAddr("192.0.2.20"), "x": netip.MustParseAddr("192.0.2.30")}
	nodeNS := map[string]string{"e": e, "b": b, "x": x}

	// What each node's proxy publishes on its Node: the MACs of its interfaces with its InternalIP.
	handle := func(ns string) *netlink.Handle {
		nsh, err := netns.GetFromName(ns)
		if err != nil {
			t.Fatal(err)
		}
		defer nsh.Close()
		h, err := netlink.NewHandleAt(nsh)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Close)
		return h
	}
	published := map[string][]nftrules.EtherAddr{}
	for node, ns := range nodeNS {
		macs, err := dsrapply.LocalMACs(handle(ns), []netip.Addr{ips[node]})
		if err != nil || len(macs) != 1 {
			t.Fatalf("%s publishes %v (%v), want its eth0's MAC", node, macs, err)
		}
		published[node] = macs
	}
	cMAC := strings.TrimSpace(in2(t, c, "cat", "/sys/class/net/eth0/address"))

	// E's applier, which the test re-applies with one peer source or the other.
	eh := handle(e)
	ea := dsrapply.New(nsNFT{knftables.NewFake(knftables.IPv4Family, nftrules.DSRTableName), e}, eh, netnstest.Sysctl(e))
	apply := func(node string, a *dsrapply.Applier, macs map[string][]nftrules.EtherAddr) {
		t.Helper()
		m := &nftrules.Model{Node: nftrules.Node{Name: node}, Services: map[nftrules.ServiceKey]*nftrules.Service{svc.Key(): svc}}
		plan := nftrules.PlanDSR(m, nftrules.DSRConfig{NodeIPs: ips, NodeMACs: macs, Slots: a.Slots()})
		if err := a.Apply(context.Background(), &plan); err != nil {
			t.Fatalf("%s: %v", node, err)
		}
	}
	apply("e", ea, published)
	apply("b", dsrapply.New(nsNFT{knftables.NewFake(knftables.IPv4Family, nftrules.DSRTableName), b}, handle(b), netnstest.Sysctl(b)), published)

	// served opens n new connections from C and returns how many each pod served.
	served := func(when string, n int) map[string]int {
		t.Helper()
		got := map[string]int{}
		for i := range n {
			conn := dialIn(t, c, vip+":80")
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprintf(conn, "who\n")
			line, err := bufio.NewReader(conn).ReadString('\n')
			conn.Close()
			if err != nil {
				t.Fatalf("%s: connection %d: %v", when, i, err)
			}
			host, _, _ := net.SplitHostPort(strings.TrimSpace(line))
			got[host]++
		}
		t.Logf("%s: %d connections served by %v", when, n, got)
		return got
	}
	peerSet := func() string { return in2(t, e, "nft", "list", "set", "ip", nftrules.DSRTableName, "peer-macs") }
	const flows = 24 // both pods get some unless the hash put 24 flows in a row on one (2^-23)
	if got := served("before the ARP", flows); got["10.244.1.5"] == 0 || got["10.244.2.5"] == 0 {
		t.Fatalf("before the ARP the flows do not spread over both pods: %v", got)
	}

	// A connection that PB serves, held across the ARP.
	var held net.Conn
	var heldR *bufio.Reader
	for i := 0; held == nil; i++ {
		if i == 64 {
			t.Fatal("no connection of 64 reached PB")
		}
		conn := dialIn(t, c, vip+":80")
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "who\n")
		r := bufio.NewReader(conn)
		if line, err := r.ReadString('\n'); err == nil && strings.HasPrefix(line, "10.244.2.5:") {
			held, heldR = conn, r
			t.Cleanup(func() { conn.Close() })
		} else {
			conn.Close()
		}
	}

	// C claims X's address. E has a neighbour entry for X (a gratuitous ARP updates an entry, it
	// does not create one), as every node has for every other (the echo detector probes them).
	in(e, "ping", "-c", "1", "-W", "2", "192.0.2.30")
	in(c, "ip", "addr", "add", "192.0.2.30/32", "dev", "eth0")
	// Thomas Habets' arping: -U unsolicited (target = source), -S the claimed source address. It
	// exits 1 when nothing answers, which nothing does to a gratuitous ARP: the neighbour entry
	// below is the check.
	out, err := exec.Command("ip", "netns", "exec", c, "arping", "-U", "-c", "3", "-W", "0.2", "-i", "eth0", "-S", "192.0.2.30", "192.0.2.30").CombinedOutput()
	t.Logf("arping: %v\n%s", err, out)
	if got := in2(t, e, "ip", "neigh", "show", "192.0.2.30", "dev", "eth0"); !strings.Contains(got, cMAC) {
		t.Fatalf("the gratuitous ARP did not reach E's neighbour table (want %s for 192.0.2.30): %q", cMAC, got)
	}

	// The guard from the published MACs: unchanged by the ARP.
	apply("e", ea, published)
	set := peerSet()
	if strings.Contains(set, cMAC) {
		t.Errorf("peer-macs holds the liar's MAC %s:\n%s", cMAC, set)
	}
	for _, node := range []string{"b", "x"} {
		if !strings.Contains(set, published[node][0].String()) {
			t.Errorf("peer-macs lacks %s's published MAC %s:\n%s", node, published[node][0], set)
		}
	}
	if got := served("guard from the published MACs, after the ARP", flows); got["10.244.1.5"] == 0 || got["10.244.2.5"] == 0 {
		t.Errorf("after the ARP the flows do not spread over both pods: %v", got)
	}
	// A connection PB served before the ARP goes on (the chaos soak's broken ones did not).
	held.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(held, "who\n")
	if line, err := heldR.ReadString('\n'); err != nil || !strings.HasPrefix(line, "10.244.2.5:") {
		t.Errorf("the connection PB served before the ARP: %q, %v", line, err)
	}

	// Control (the test's own check that it can fail): the guard built from E's neighbour table, as
	// before issue 19's fix, takes C for a forwarding peer, and E serves all of C's flows itself.
	fromNeigh := map[string][]nftrules.EtherAddr{}
	var neighs []netlink.Neigh
	neighs, err = eh.NeighList(0, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range neighs {
		ip, _ := netip.AddrFromSlice(n.IP)
		for node, nip := range ips {
			if node != "e" && nip == ip.Unmap() && len(n.HardwareAddr) == 6 {
				fromNeigh[node] = append(fromNeigh[node], nftrules.EtherAddr(n.HardwareAddr))
			}
		}
	}
	apply("e", ea, fromNeigh)
	if set := peerSet(); !strings.Contains(set, cMAC) {
		t.Fatalf("control: the neighbour table's peers lack the liar's MAC %s:\n%s", cMAC, set)
	}
	if got := served("guard from the neighbour table, after the ARP", flows); got["10.244.2.5"] != 0 {
		t.Fatalf("control: with the liar's MAC among the peers E still sent flows to PB: %v", got)
	}
	// And the connection PB served breaks, as the chaos soak's did: E takes its packets for its own.
	held.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(held, "who\n")
	if line, err := heldR.ReadString('\n'); err == nil {
		t.Errorf("control: the connection PB served still answers (%q) with the liar among the peers", line)
	} else {
		t.Logf("control: the connection PB served: %v", err)
	}

}

// in2 runs a command in ns and returns its output, failing the test if it fails.
func in2(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v in %s: %v\n%s", args, ns, err, out)
	}
	return string(out)
}
