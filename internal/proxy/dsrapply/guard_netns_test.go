package dsrapply_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

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
	nss := dsrTopology(t, "ilbgarp", "e",
		[]dsrHost{{"c", "192.0.2.100"}, {"e", "192.0.2.11"}, {"b", "192.0.2.20"}, {"x", "192.0.2.30"}},
		[]dsrPod{{"pe", "e", "10.244.1.1", "10.244.1.5"}, {"pb", "b", "10.244.2.1", "10.244.2.5"}})
	c, e, b, x := nss["c"], nss["e"], nss["b"], nss["x"]
	for _, p := range []struct{ ns, addr string }{{nss["pe"], "10.244.1.5"}, {nss["pb"], "10.244.2.5"}} {
		// Each pod answers every line with its own address.
		ln := listenIn(t, p.ns, "tcp", p.addr+":8080")
		t.Cleanup(func() { ln.Close() })
		serveLines(ln, func(conn net.Conn, _ string) { fmt.Fprintf(conn, "%s\n", conn.LocalAddr()) })
	}
	svc := &nftrules.Service{Namespace: "ns1", Name: "web", ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.10")},
		LoadBalancerIPs: []netip.Addr{netip.MustParseAddr(dsrVIP)}, ExternalMode: nftrules.ExternalDSR,
		Ports: []nftrules.Port{{Protocol: nftrules.TCP, Port: 80, Endpoints: []nftrules.Endpoint{
			{Addr: netip.MustParseAddr("10.244.1.5"), Port: 8080, Node: "e", Ready: true},
			{Addr: netip.MustParseAddr("10.244.2.5"), Port: 8080, Node: "b", Ready: true},
		}}}}
	ips := map[string]netip.Addr{"e": netip.MustParseAddr("192.0.2.11"), "b": netip.MustParseAddr("192.0.2.20"), "x": netip.MustParseAddr("192.0.2.30")}
	nodeNS := map[string]string{"e": e, "b": b, "x": x}

	// What each node's proxy publishes on its Node: the MACs of its interfaces with its InternalIP.
	appliers := map[string]*dsrapply.Applier{}
	handles := map[string]*netlink.Handle{}
	published := map[string][]nftrules.EtherAddr{}
	for node, ns := range nodeNS {
		appliers[node], handles[node] = applierIn(t, ns)
		macs, err := dsrapply.LocalMACs(handles[node], []netip.Addr{ips[node]})
		if err != nil || len(macs) != 1 {
			t.Fatalf("%s publishes %v (%v), want its eth0's MAC", node, macs, err)
		}
		published[node] = macs
	}
	cMAC := strings.TrimSpace(netnstest.Run(t, c, "cat", "/sys/class/net/eth0/address"))

	// E's applier, which the test re-applies with one peer source or the other.
	ea, eh := appliers["e"], handles["e"]
	apply := func(node string, a *dsrapply.Applier, macs map[string][]nftrules.EtherAddr) {
		t.Helper()
		m := &nftrules.Model{Node: nftrules.Node{Name: node}, Services: map[nftrules.ServiceKey]*nftrules.Service{svc.Key(): svc}}
		plan := nftrules.PlanDSR(m, nftrules.DSRConfig{NodeIPs: ips, NodeMACs: macs, Slots: a.Slots()})
		if err := a.Apply(context.Background(), &plan); err != nil {
			t.Fatalf("%s: %v", node, err)
		}
	}
	apply("e", ea, published)
	apply("b", appliers["b"], published)

	// served opens n new connections from C and returns how many each pod served.
	served := func(when string, n int) map[string]int {
		t.Helper()
		got := map[string]int{}
		for i := range n {
			conn := dialIn(t, c, dsrVIP+":80")
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
	peerSet := func() string {
		return netnstest.Run(t, e, inspectNFT(t), "list", "set", "ip", nftrules.DSRTableName, "peer-macs")
	}
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
		conn := dialIn(t, c, dsrVIP+":80")
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
	netnstest.Run(t, e, "ping", "-c", "1", "-W", "2", "192.0.2.30")
	netnstest.Run(t, c, "ip", "addr", "add", "192.0.2.30/32", "dev", "eth0")
	// Thomas Habets' arping: -U unsolicited (target = source), -S the claimed source address. It
	// exits 1 when nothing answers, which nothing does to a gratuitous ARP: the neighbour entry
	// below is the check.
	out, err := netnstest.Output(c, "arping", "-U", "-c", "3", "-W", "0.2", "-i", "eth0", "-S", "192.0.2.30", "192.0.2.30")
	t.Logf("arping: %v\n%s", err, out)
	if got := netnstest.Run(t, e, "ip", "neigh", "show", "192.0.2.30", "dev", "eth0"); !strings.Contains(got, cMAC) {
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
	// The connection PB served goes on even so: E's entry of it is an old forwarded one (confirmed,
	// not DNATed at E), and the guard leaves such a packet to E's memory, which sends it to PB's
	// node. Before that rule (2026-11-27) the guard took it for E's own, E could not DNAT it on a
	// confirmed entry, and it broke, as the chaos soak's did; a peer forwarding a flow E once
	// forwarded itself (tables that disagree) met the same.
	held.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(held, "who\n")
	if line, err := heldR.ReadString('\n'); err != nil || !strings.HasPrefix(line, "10.244.2.5:") {
		t.Errorf("control: the connection PB served, with the liar among the peers: %q, %v; want PB's answer (E's old forwarded entry keeps its owner)", line, err)
	}
}
