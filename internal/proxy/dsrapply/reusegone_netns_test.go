package dsrapply_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ironlb/ironlb/internal/proxy/conntrack"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/proxy/trace"
	"github.com/ironlb/ironlb/internal/testbed/netnstest"
)

// TestKernelDSRReusedPortOwnerGone is the chaos soak's failure of 2026-11-27 20:31:15 (a
// partitioned node), replayed: entry node E has a pod PE, backend nodes B1 and B2 have P1 and P2.
// A connection P1 served ends (P1 closes first); E's one-way conntrack entry of it (FIN_WAIT,
// 120 s) remembers B1. Then B1 is really gone (its link cut) and E's echo detector holds it dead:
// the flow's bucket, B1's, goes to E itself (the port is chosen so, with trace.DSRBucket, the
// kernel's hash). C reconnects from the same source port. E cannot serve the new connection on the
// old entry (no DNAT), and the remembered owner is gone: the SYN must go to the bucket's alternate
// owner, B2 (the owner the bucket has in the table without E), and P2 serve it. Before the fix the
// SYN kept the remembered owner and was lost with B1 until B1 came back (the soak's request timed
// out after 1 s; the client's SYNs went to the partitioned node for 3 s).
// Skipped unless root with nft, ip, sysctl, ss and conntrack.
func TestKernelDSRReusedPortOwnerGone(t *testing.T) {
	netnstest.Require(t, "ss", "conntrack")
	const podE, pod1, pod2 = "10.244.0.5", "10.244.1.5", "10.244.2.5"
	ips := map[string]netip.Addr{"e": netip.MustParseAddr("192.0.2.11"), "b1": netip.MustParseAddr("192.0.2.21"), "b2": netip.MustParseAddr("192.0.2.22")}
	nss := dsrTopology(t, "ilbreuseg", "e",
		[]dsrHost{{"c", reuseClient}, {"e", "192.0.2.11"}, {"b1", "192.0.2.21"}, {"b2", "192.0.2.22"}},
		[]dsrPod{{"pe", "e", "10.244.0.1", podE}, {"p1", "b1", "10.244.1.1", pod1}, {"p2", "b2", "10.244.2.1", pod2}})
	c, e := nss["c"], nss["e"]
	reuseServe(t, map[string]string{nss["pe"]: podE, nss["p1"]: pod1, nss["p2"]: pod2})
	nodes := newReuseNodes(t, map[string]string{"e": e, "b1": nss["b1"], "b2": nss["b2"]}, ips, true)
	svc := func() *nftrules.Service {
		return reuseService(nftrules.Endpoint{Addr: netip.MustParseAddr(podE), Node: "e", Ready: true, Serving: true},
			nftrules.Endpoint{Addr: netip.MustParseAddr(pod1), Node: "b1", Ready: true, Serving: true},
			nftrules.Endpoint{Addr: netip.MustParseAddr(pod2), Node: "b2", Ready: true, Serving: true})
	}
	nodes.applyAll(svc)

	// E's plans, live and with B1 dead (pure: the same PlanDSR the applier was given).
	owner := func(dead bool, sport int) string {
		s := svc()
		for i := range s.Ports[0].Endpoints {
			s.Ports[0].Endpoints[i].Local = s.Ports[0].Endpoints[i].Node == "e"
		}
		m := &nftrules.Model{Node: nftrules.Node{Name: "e"}, Services: map[nftrules.ServiceKey]*nftrules.Service{s.Key(): s}}
		if dead {
			m.Node.DeadNodes = map[string]bool{"b1": true}
		}
		plan := nftrules.PlanDSR(m, nftrules.DSRConfig{NodeIPs: ips})
		p := &plan.Ports[0]
		return p.Owner(trace.DSRBucket(netip.MustParseAddr(reuseClient), netip.MustParseAddr(dsrVIP), uint16(sport), 80, 6, uint32(len(p.Buckets)), p.Seed))
	}
	sport := 0
	for sp := 47000; sp < 48000 && sport == 0; sp++ {
		if owner(false, sp) == "b1" && owner(true, sp) == "e" {
			sport = sp
		}
	}
	if sport == 0 {
		t.Fatal("no source port in 47000-47999 whose bucket is B1's, and E's once B1 is dead")
	}
	conn, err := dialFrom(t, c, sport, dsrVIP+":80")
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	if got, err := who(conn, r); err != nil || got != pod1 {
		t.Fatalf("port %d before: answered by %q (%v), want B1's %s (the hash's owner)", sport, got, err, pod1)
	}
	closedByPod(t, c, sport, conn, r)
	conntrackOf(t, e, "E after the old connection", sport)

	// B1 is gone: its link cut (bridge port p2), and E and B2 hold it dead.
	netnstest.Run(t, nss["sw"], "ip", "link", "set", "p2", "down")
	nodes.apply("e", svc(), "b1")
	nodes.apply("b2", svc(), "b1")

	conn, err = dialFrom(t, c, sport, dsrVIP+":80")
	if err != nil {
		conntrackOf(t, e, "E", sport)
		t.Fatalf("reused source port %d after B1's loss: connecting: %v", sport, err)
	}
	defer conn.Close()
	r = bufio.NewReader(conn)
	for i := range 3 {
		if got, err := who(conn, r); err != nil || got != pod2 {
			conntrackOf(t, e, "E", sport)
			t.Fatalf("reused source port %d, request %d: answered by %q (%v), want the alternate owner B2's %s", sport, i, got, err, pod2)
		}
	}
	out := netnstest.Run(t, e, "conntrack", "-L", "-p", "tcp", "--sport", fmt.Sprint(sport))
	t.Logf("conntrack on E with the new connection open:\n%s", out)
	if mark := fmt.Sprintf("mark=%d ", nftrules.NodeID(ips["b2"])); !strings.Contains(out, mark) {
		t.Errorf("E's entry does not remember B2 (%s)", mark)
	}
}

// TestKernelDSRReusedPortAfterClose is the chaos soak's failure of 2026-11-27 20:51:21, replayed:
// entry node E has a pod PE, backend node B has PB. A connection PB served ends (PB closes first,
// C answers with its FIN); E's one-way entry of it goes to a closing state, and with the
// forwarded flow's timeout policy (dsrapply's flowPolicy) it expires within seconds, not the
// kernel's 120 s. Then B is gone (its link cut, E holds it dead): every bucket is E's, and there is
// no alternate owner. C reconnects from the same source port after the entry expired: E serves it
// with PE, as any new connection. Before the policy the SYN met the old entry (no DNAT: E cannot
// serve it), kept the remembered owner B and was lost with it until the entry expired.
// Skipped unless root with nft, ip, sysctl, ss and conntrack.
func TestKernelDSRReusedPortAfterClose(t *testing.T) {
	netnstest.Require(t, "ss", "conntrack")
	const podE, podB = "10.244.1.5", "10.244.2.5"
	ips := map[string]netip.Addr{"e": netip.MustParseAddr("192.0.2.11"), "b": netip.MustParseAddr("192.0.2.20")}
	nss := dsrTopology(t, "ilbreusec", "e",
		[]dsrHost{{"c", reuseClient}, {"e", "192.0.2.11"}, {"b", "192.0.2.20"}},
		[]dsrPod{{"pe", "e", "10.244.1.1", podE}, {"pb", "b", "10.244.2.1", podB}})
	c, e := nss["c"], nss["e"]
	reuseServe(t, map[string]string{nss["pe"]: podE, nss["pb"]: podB})
	nodes := newReuseNodes(t, map[string]string{"e": e, "b": nss["b"]}, ips, true)
	svc := func() *nftrules.Service {
		return reuseService(nftrules.Endpoint{Addr: netip.MustParseAddr(podE), Node: "e", Ready: true, Serving: true},
			nftrules.Endpoint{Addr: netip.MustParseAddr(podB), Node: "b", Ready: true, Serving: true})
	}
	nodes.applyAll(svc)

	sport, conn, r := portServedBy(t, c, 48000, podB)
	closedByPod(t, c, sport, conn, r)
	// E's one-way entry of the closed connection: a closing state, expiring within seconds.
	out := netnstest.Run(t, e, "conntrack", "-L", "-p", "tcp", "--sport", fmt.Sprint(sport))
	t.Logf("conntrack on E after the old connection:\n%s", out)
	var f []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, fmt.Sprintf("sport=%d ", sport)) {
			f = strings.Fields(l)
		}
	}
	if len(f) < 4 {
		t.Fatalf("E has no entry of port %d after its connection", sport)
	}
	if secs, err := strconv.Atoi(f[2]); err != nil || secs > 5 || f[3] == "ESTABLISHED" {
		t.Errorf("E's entry of the closed connection: %s, %s s left; want a closing state expiring within 5 s", f[3], f[2])
	}

	// B is gone: its link cut (bridge port p2), and E holds it dead.
	netnstest.Run(t, nss["sw"], "ip", "link", "set", "p2", "down")
	nodes.apply("e", svc(), "b")
	for range 80 {
		if out := netnstest.Run(t, e, "conntrack", "-L", "-p", "tcp", "--sport", fmt.Sprint(sport)); !strings.Contains(out, "dport=80") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	conn, err := dialFrom(t, c, sport, dsrVIP+":80")
	if err != nil {
		conntrackOf(t, e, "E", sport)
		t.Fatalf("reused source port %d after B's loss: connecting: %v", sport, err)
	}
	defer conn.Close()
	r = bufio.NewReader(conn)
	if got, err := who(conn, r); err != nil || got != podE {
		conntrackOf(t, e, "E", sport)
		t.Fatalf("reused source port %d: answered by %q (%v), want E's own %s", sport, got, err, podE)
	}
}

// TestKernelDSRReusedPortOwnerLeft: entry node E has a pod PE, backend node B has PB. A connection PB
// serves ends without E seeing its end (the client aborts it and its reset goes elsewhere, as when
// the layer-2 address moved to another entry, the chaos soak's broken held connections), so E's
// one-way entry of it stays ESTABLISHED, remembering B, for days. Then PB is gone from the
// EndpointSlices: every bucket is E's and B leaves the port's Keep. C reconnects from the same
// source port. The SYN meets the old entry, which E cannot serve (no DNAT on a confirmed entry),
// with no other node to go to: the control (before the proxy's cleanup) gets no answer. The
// proxy's cleanup after the plan (conntrack.DSRMoved, over netlink, as the sync loop does) deletes
// the entries naming an owner that left Keep, and this node's stuck ones: the next connection from
// the port is served by PE. Skipped unless root with nft, ip, sysctl, ss and conntrack.
func TestKernelDSRReusedPortOwnerLeft(t *testing.T) {
	netnstest.Require(t, "ss", "conntrack")
	const podE, podB = "10.244.1.5", "10.244.2.5"
	ips := map[string]netip.Addr{"e": netip.MustParseAddr("192.0.2.11"), "b": netip.MustParseAddr("192.0.2.20")}
	nss := dsrTopology(t, "ilbreusel", "e",
		[]dsrHost{{"c", reuseClient}, {"e", "192.0.2.11"}, {"b", "192.0.2.20"}},
		[]dsrPod{{"pe", "e", "10.244.1.1", podE}, {"pb", "b", "10.244.2.1", podB}})
	c, e := nss["c"], nss["e"]
	reuseServe(t, map[string]string{nss["pe"]: podE, nss["pb"]: podB})
	nodes := newReuseNodes(t, map[string]string{"e": e, "b": nss["b"]}, ips, true)
	epE := nftrules.Endpoint{Addr: netip.MustParseAddr(podE), Node: "e", Ready: true, Serving: true}
	epB := nftrules.Endpoint{Addr: netip.MustParseAddr(podB), Node: "b", Ready: true, Serving: true}
	nodes.apply("b", reuseService(epE, epB))
	before := nodes.apply("e", reuseService(epE, epB))
	ct := conntrackIn(t, e)

	sport, conn, _ := portServedBy(t, c, 49000, podB)
	// C aborts the connection (a reset) that E never sees: C's own output drops it (C's firewall,
	// with the test's nft).
	nft := inspectNFT(t)
	netnstest.Run(t, c, nft, "add table ip ilbdrop; add chain ip ilbdrop out { type filter hook output priority 0; }; add rule ip ilbdrop out tcp sport "+fmt.Sprint(sport)+" drop")
	conn.(*net.TCPConn).SetLinger(0)
	conn.Close()
	netnstest.Run(t, c, nft, "delete table ip ilbdrop")
	out := netnstest.Run(t, e, "conntrack", "-L", "-p", "tcp", "--sport", fmt.Sprint(sport))
	if !strings.Contains(out, "ESTABLISHED") || !strings.Contains(out, fmt.Sprintf("mark=%d ", nftrules.NodeID(ips["b"]))) {
		t.Fatalf("E's entry of the aborted connection: want ESTABLISHED, remembering B:\n%s", out)
	}

	// PB is gone from the slices.
	nodes.apply("b", reuseService(epE))
	after := nodes.apply("e", reuseService(epE))

	// Control: before the cleanup, the reused port's SYN is lost on E's old entry.
	if conn, err := dialFrom(t, c, sport, dsrVIP+":80"); err == nil {
		conn.Close()
		conntrackOf(t, e, "E", sport)
		t.Fatalf("control: port %d connected before the cleanup; the test would prove nothing", sport)
	} else {
		t.Logf("control: port %d before the cleanup: %v", sport, err)
	}

	fs := conntrack.DSRMoved(before, after)
	n, err := ct.DeleteAll(context.Background(), fs)
	if err != nil {
		t.Fatalf("deleting %v: %v", fs, err)
	}
	t.Logf("E's cleanup: %d entries deleted by %v", n, fs)
	if n == 0 {
		t.Errorf("the cleanup deleted nothing")
	}
	conn, err = dialFrom(t, c, sport, dsrVIP+":80")
	if err != nil {
		conntrackOf(t, e, "E", sport)
		t.Fatalf("reused source port %d after the cleanup: connecting: %v", sport, err)
	}
	defer conn.Close()
	if got, err := who(conn, bufio.NewReader(conn)); err != nil || got != podE {
		conntrackOf(t, e, "E", sport)
		t.Fatalf("reused source port %d after the cleanup: answered by %q (%v), want E's own %s", sport, got, err, podE)
	}
}
