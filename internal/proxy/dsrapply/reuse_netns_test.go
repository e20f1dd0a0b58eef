package dsrapply_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ironlb/ironlb/internal/proxy/dsrapply"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/testbed/netnstest"
)

// The source-port reuse tests (issue 19, the chaos soak's last failure): client C opens a
// connection to a DSR address from a fixed source port, the pod closes it first (as an HTTP server
// does: the pod keeps the TIME_WAIT, C's port is free at once), the owner of its bucket changes,
// and C opens a new connection from the same port, within the entry node's conntrack timeouts of
// the old one. The new connection must be served, by the pod of the bucket's new owner.

// reuseClient is client C's address in the reuse tests' segment.
const reuseClient = "192.0.2.100"

// reuseSetup starts a line server on each pod (podNS -> address): it answers "who" with its own
// address and closes the connection on "bye" (the server's close comes first).
func reuseServe(t *testing.T, pods map[string]string) {
	t.Helper()
	for ns, addr := range pods {
		ln := listenIn(t, ns, "tcp", addr+":8080")
		t.Cleanup(func() { ln.Close() })
		serveLines(ln, func(conn net.Conn, line string) {
			if line == "bye\n" {
				conn.Close()
				return
			}
			fmt.Fprintf(conn, "%s\n", conn.LocalAddr())
		})
	}
}

// dialFrom connects from C's namespace, from source port sport (SO_REUSEADDR: the port's last
// socket may still be closing), to addr.
func dialFrom(t *testing.T, ns string, sport int, addr string) (net.Conn, error) {
	t.Helper()
	var conn net.Conn
	var err error
	netnstest.In(t, ns, func() {
		d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(reuseClient), Port: sport},
			Control: func(_, _ string, c syscall.RawConn) error {
				var serr error
				if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1) }); err != nil {
					return err
				}
				return serr
			}}
		conn, err = d.Dial("tcp4", addr)
	})
	return conn, err
}

// who asks once on conn and returns the address of the pod that answered.
func who(conn net.Conn, r *bufio.Reader) (string, error) {
	conn.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := fmt.Fprintf(conn, "who\n"); err != nil {
		return "", err
	}
	line, err := r.ReadString('\n')
	host, _, _ := net.SplitHostPort(strings.TrimSpace(line))
	return host, err
}

// closedByPod has the pod close conn first ("bye"), reads to the end, closes C's side, and waits
// until C's socket of the port is gone (C is the passive closer: no TIME_WAIT).
func closedByPod(t *testing.T, c string, sport int, conn net.Conn, r *bufio.Reader) {
	t.Helper()
	conn.SetDeadline(time.Now().Add(3 * time.Second))
	fmt.Fprintf(conn, "bye\n")
	if _, err := io.Copy(io.Discard, r); err != nil {
		t.Fatalf("reading to the pod's close: %v", err)
	}
	conn.Close()
	for range 50 {
		if out := netnstest.Run(t, c, "ss", "-Htan", fmt.Sprintf("sport = :%d", sport)); strings.TrimSpace(out) == "" {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("C's socket of port %d did not close:\n%s", sport, netnstest.Run(t, c, "ss", "-tan"))
}

// portServedBy finds a source port of C whose connection pod serves, and returns it with the
// connection open. It tries ports from first on.
func portServedBy(t *testing.T, c string, first int, pod string) (int, net.Conn, *bufio.Reader) {
	t.Helper()
	for sport := first; sport < first+64; sport++ {
		conn, err := dialFrom(t, c, sport, dsrVIP+":80")
		if err != nil {
			t.Fatalf("port %d: %v", sport, err)
		}
		r := bufio.NewReader(conn)
		if got, err := who(conn, r); err == nil && got == pod {
			return sport, conn, r
		}
		conn.Close()
	}
	t.Fatalf("no connection from ports %d-%d reached %s", first, first+63, pod)
	return 0, nil, nil
}

// conntrackOf logs the conntrack entries of C's port sport in namespace ns (for a failure's story).
func conntrackOf(t *testing.T, ns, name string, sport int) {
	t.Helper()
	out, _ := exec.Command("ip", "netns", "exec", ns, "conntrack", "-L", "-p", "tcp", "--sport", fmt.Sprint(sport)).CombinedOutput()
	t.Logf("conntrack on %s, source port %d:\n%s", name, sport, out)
}

// reuseNodes is the reuse tests' cluster: each node's namespace, applier, address and published
// MACs, and apply, which writes one node's plan of svc (dead: the nodes its echo detector holds
// dead).
type reuseNodes struct {
	t         *testing.T
	ns        map[string]string
	appliers  map[string]*dsrapply.Applier
	ips       map[string]netip.Addr
	published map[string][]nftrules.EtherAddr
}

// newReuseNodes makes the nodes' appliers, with the SYN table (nftrules.DSRSYNTableName) if syn,
// else without it: the rules before issue 19's reuse fix (forwarded SYNs not tracked), which is
// also what a kernel without conntrack timeout policies gets.
func newReuseNodes(t *testing.T, ns map[string]string, ips map[string]netip.Addr, syn bool) *reuseNodes {
	t.Helper()
	n := &reuseNodes{t: t, ns: ns, ips: ips, appliers: map[string]*dsrapply.Applier{}, published: map[string][]nftrules.EtherAddr{}}
	for node, nsName := range ns {
		a, h := applierIn(t, nsName)
		if !syn {
			a = dsrapply.New(tableIn(t, nsName), h, netnstest.Sysctl(nsName))
		}
		macs, err := dsrapply.LocalMACs(h, []netip.Addr{ips[node]})
		if err != nil {
			t.Fatal(err)
		}
		n.appliers[node], n.published[node] = a, macs
	}
	return n
}

func (n *reuseNodes) apply(node string, svc *nftrules.Service, dead ...string) *nftrules.DSRPlan {
	n.t.Helper()
	m := &nftrules.Model{Node: nftrules.Node{Name: node}, Services: map[nftrules.ServiceKey]*nftrules.Service{svc.Key(): svc}}
	for _, d := range dead {
		if m.Node.DeadNodes == nil {
			m.Node.DeadNodes = map[string]bool{}
		}
		m.Node.DeadNodes[d] = true
	}
	for i := range svc.Ports {
		for j := range svc.Ports[i].Endpoints {
			svc.Ports[i].Endpoints[j].Local = svc.Ports[i].Endpoints[j].Node == node
		}
	}
	a := n.appliers[node]
	plan := nftrules.PlanDSR(m, nftrules.DSRConfig{NodeIPs: n.ips, NodeMACs: n.published, Slots: a.Slots()})
	if err := a.Apply(context.Background(), &plan); err != nil {
		n.t.Fatalf("%s: %v", node, err)
	}
	return &plan
}

func (n *reuseNodes) applyAll(svc func() *nftrules.Service) {
	n.t.Helper()
	for node := range n.ns {
		n.apply(node, svc())
	}
}

// reuseService is the Service of the reuse tests: TCP 80 to 8080 on the pods given as
// (address, node, conditions).
func reuseService(eps ...nftrules.Endpoint) *nftrules.Service {
	for i := range eps {
		eps[i].Port = 8080
	}
	return &nftrules.Service{Namespace: "ns1", Name: "web", ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.10")},
		LoadBalancerIPs: []netip.Addr{netip.MustParseAddr(dsrVIP)}, ExternalMode: nftrules.ExternalDSR,
		Ports: []nftrules.Port{{Name: "http", Protocol: nftrules.TCP, Port: 80, Endpoints: eps}}}
}

// reuseCheck opens a new connection from sport (reused) and one from a port never used (control),
// asks each 3 times, and wants every answer from pod. While the reused port's connection is open,
// E's conntrack entry of it must remember owner (its mark: the owner's address) and must not
// translate to oldPod.
//
// With fixed false (the control: the rules before the fix), the reused port's connection must
// fail instead (the test's own proof that it can), and the fresh port's still work.
func reuseCheck(t *testing.T, c, e string, sport, fresh int, pod string, owner netip.Addr, oldPod string, fixed bool) {
	t.Helper()
	if !fixed {
		conn, err := dialFrom(t, c, sport, dsrVIP+":80")
		if err == nil {
			got, err2 := who(conn, bufio.NewReader(conn))
			conn.Close()
			if err2 == nil && got == pod {
				t.Errorf("control: the reused port %d's new connection was answered by %s without the fix", sport, got)
			}
			err = err2
		}
		t.Logf("control: the reused port %d's new connection, without the fix: %v", sport, err)
		conntrackOf(t, e, "E", sport)
		sport = 0 // only the fresh port below
	}
	for _, p := range []struct {
		what  string
		sport int
	}{{"reused source port", sport}, {"fresh source port (control)", fresh}} {
		if p.sport == 0 {
			continue
		}
		conn, err := dialFrom(t, c, p.sport, dsrVIP+":80")
		if err != nil {
			t.Errorf("%s %d: connecting: %v", p.what, p.sport, err)
			continue
		}
		r := bufio.NewReader(conn)
		for i := range 3 {
			got, err := who(conn, r)
			if err != nil || got != pod {
				t.Errorf("%s %d, request %d: answered by %q (%v), want %s", p.what, p.sport, i, got, err, pod)
				break
			}
			t.Logf("%s %d, request %d: answered by %s", p.what, p.sport, i, got)
		}
		if p.sport == sport {
			out, _ := exec.Command("ip", "netns", "exec", e, "conntrack", "-L", "-p", "tcp", "--sport", fmt.Sprint(sport)).CombinedOutput()
			t.Logf("conntrack on E with the new connection from port %d open:\n%s", sport, out)
			if mark := fmt.Sprintf("mark=%d ", nftrules.NodeID(owner)); !strings.Contains(string(out), mark) {
				t.Errorf("E's entry of port %d does not remember the new owner %s (%s)", sport, owner, mark)
			}
			if strings.Contains(string(out), "src="+oldPod+" ") {
				t.Errorf("E's entry of port %d still translates to the old pod %s", sport, oldPod)
			}
		}
		conn.Close()
	}
}

// TestKernelDSRReusedPortOwnerChanged is case (a) of the reuse row in docs/dsr.md: C reaches the
// DSR address through entry node E, which forwards to backend nodes B1 (pod P1) and B2 (pod P2).
// A connection P1 served ends (P1 closes it first); E's one-way conntrack entry of it (FIN_WAIT,
// 120 s) still remembers B1. Then E's echo detector declares B1 dead (falsely: B1 still lists its
// endpoint, so it stays in the keep set), which moves B1's buckets to B2. C reconnects from the
// same source port: the SYN goes by the hash to B2, and its next segments must go there too, not
// to B1 by the old connection's memory (where P1's TIME_WAIT socket or a reset answers them).
// Skipped unless root with nft, ip, sysctl, ss and conntrack.
func TestKernelDSRReusedPortOwnerChanged(t *testing.T) {
	netnstest.Require(t, "ss", "conntrack")
	t.Run("fixed", func(t *testing.T) { reuseOwnerChanged(t, true) })
	t.Run("control without the SYN table", func(t *testing.T) { reuseOwnerChanged(t, false) })
}

func reuseOwnerChanged(t *testing.T, fixed bool) {
	const pod1, pod2 = "10.244.1.5", "10.244.2.5"
	nss := dsrTopology(t, "ilbreuse", "e",
		[]dsrHost{{"c", reuseClient}, {"e", "192.0.2.11"}, {"b1", "192.0.2.21"}, {"b2", "192.0.2.22"}},
		[]dsrPod{{"p1", "b1", "10.244.1.1", pod1}, {"p2", "b2", "10.244.2.1", pod2}})
	c, e := nss["c"], nss["e"]
	reuseServe(t, map[string]string{nss["p1"]: pod1, nss["p2"]: pod2})
	nodes := newReuseNodes(t, map[string]string{"e": e, "b1": nss["b1"], "b2": nss["b2"]},
		map[string]netip.Addr{"e": netip.MustParseAddr("192.0.2.11"), "b1": netip.MustParseAddr("192.0.2.21"), "b2": netip.MustParseAddr("192.0.2.22")}, fixed)
	svc := func() *nftrules.Service {
		return reuseService(nftrules.Endpoint{Addr: netip.MustParseAddr(pod1), Node: "b1", Ready: true, Serving: true},
			nftrules.Endpoint{Addr: netip.MustParseAddr(pod2), Node: "b2", Ready: true, Serving: true})
	}
	nodes.applyAll(svc)

	sport, conn, r := portServedBy(t, c, 41000, pod1)
	closedByPod(t, c, sport, conn, r)
	conntrackOf(t, e, "E after the old connection", sport)

	// E's detector holds B1 dead: its buckets (this flow's among them) go to B2.
	nodes.apply("e", svc(), "b1")
	reuseCheck(t, c, e, sport, 42000, pod2, netip.MustParseAddr("192.0.2.22"), pod1, fixed)
}

// TestKernelDSRReusedPortServedLocally is case (b) of the reuse row in docs/dsr.md: entry node E
// has a pod PE itself, backend node B has PB. A connection PE served (E owned its bucket, tracked
// its SYN and DNATed it) ends, PE closing first; E's conntrack entry of it, with its DNAT to PE,
// is in TIME_WAIT (120 s). Then PE terminates gracefully (every node sees it serving and
// terminating): new flows go to B only. C reconnects from the same source port: the SYN goes to B,
// and its next segments must go there too, not to PE by the old entry's DNAT. Skipped unless root
// with nft, ip, sysctl, ss and conntrack.
func TestKernelDSRReusedPortServedLocally(t *testing.T) {
	netnstest.Require(t, "ss", "conntrack")
	t.Run("fixed", func(t *testing.T) { reuseServedLocally(t, true) })
	t.Run("control without the SYN table", func(t *testing.T) { reuseServedLocally(t, false) })
}

func reuseServedLocally(t *testing.T, fixed bool) {
	const podE, podB = "10.244.1.5", "10.244.2.5"
	nss := dsrTopology(t, "ilbreusel", "e",
		[]dsrHost{{"c", reuseClient}, {"e", "192.0.2.11"}, {"b", "192.0.2.20"}},
		[]dsrPod{{"pe", "e", "10.244.1.1", podE}, {"pb", "b", "10.244.2.1", podB}})
	c, e := nss["c"], nss["e"]
	reuseServe(t, map[string]string{nss["pe"]: podE, nss["pb"]: podB})
	nodes := newReuseNodes(t, map[string]string{"e": e, "b": nss["b"]},
		map[string]netip.Addr{"e": netip.MustParseAddr("192.0.2.11"), "b": netip.MustParseAddr("192.0.2.20")}, fixed)
	svc := func(pe nftrules.Endpoint) func() *nftrules.Service {
		return func() *nftrules.Service {
			pe.Addr, pe.Node = netip.MustParseAddr(podE), "e"
			return reuseService(pe, nftrules.Endpoint{Addr: netip.MustParseAddr(podB), Node: "b", Ready: true, Serving: true})
		}
	}
	nodes.applyAll(svc(nftrules.Endpoint{Ready: true, Serving: true}))

	sport, conn, r := portServedBy(t, c, 43000, podE)
	closedByPod(t, c, sport, conn, r)
	conntrackOf(t, e, "E after the old connection", sport)

	// PE terminates gracefully: new flows go to B only.
	nodes.applyAll(svc(nftrules.Endpoint{Serving: true, Terminating: true}))
	reuseCheck(t, c, e, sport, 44000, podB, netip.MustParseAddr("192.0.2.20"), podE, fixed)
}

// TestKernelDSRReusedPortNowLocal is the third reuse case: the old connection was forwarded (PB
// served it, E kept a one-way entry in FIN_WAIT remembering B), and then the bucket's new owner is
// E itself. C reconnects from the same source port. E tracks this SYN (its own bucket), but
// conntrack ignores a SYN on the old one-way entry and keeps it, without DNAT: E cannot serve the
// new connection itself. So the SYN keeps the remembered owner, as the following segments do, and
// PB serves it; rewriting the owner to E would send it nowhere (E routes the service address by
// its main table: "network is unreachable"). Two ways the owner changes:
//
//   - E's echo detector holds B dead, falsely (B and PB go on; B still lists its endpoint): B
//     serves forwarded flows as before;
//   - PB terminates gracefully (still serving): B has no endpoint for new flows, and must still
//     serve a flow an entry forwards to it, rather than send it back to E by the hash, where it
//     meets the same entry.
//
// Skipped unless root with nft, ip, sysctl, ss and conntrack.
func TestKernelDSRReusedPortNowLocal(t *testing.T) {
	netnstest.Require(t, "ss", "conntrack")
	t.Run("E holds B dead", func(t *testing.T) { reuseNowLocal(t, false) })
	t.Run("PB terminating", func(t *testing.T) { reuseNowLocal(t, true) })
}

func reuseNowLocal(t *testing.T, terminating bool) {
	const podE, podB = "10.244.1.5", "10.244.2.5"
	nss := dsrTopology(t, "ilbreusen", "e",
		[]dsrHost{{"c", reuseClient}, {"e", "192.0.2.11"}, {"b", "192.0.2.20"}},
		[]dsrPod{{"pe", "e", "10.244.1.1", podE}, {"pb", "b", "10.244.2.1", podB}})
	c, e := nss["c"], nss["e"]
	reuseServe(t, map[string]string{nss["pe"]: podE, nss["pb"]: podB})
	nodes := newReuseNodes(t, map[string]string{"e": e, "b": nss["b"]},
		map[string]netip.Addr{"e": netip.MustParseAddr("192.0.2.11"), "b": netip.MustParseAddr("192.0.2.20")}, true)
	svc := func(pb nftrules.Endpoint) func() *nftrules.Service {
		return func() *nftrules.Service {
			pb.Addr, pb.Node = netip.MustParseAddr(podB), "b"
			return reuseService(nftrules.Endpoint{Addr: netip.MustParseAddr(podE), Node: "e", Ready: true, Serving: true}, pb)
		}
	}
	ready := nftrules.Endpoint{Ready: true, Serving: true}
	nodes.applyAll(svc(ready))

	sport, conn, r := portServedBy(t, c, 45000, podB)
	closedByPod(t, c, sport, conn, r)
	conntrackOf(t, e, "E after the old connection", sport)

	// Every bucket is E's now; B still lists its endpoint (keep).
	if terminating {
		nodes.applyAll(svc(nftrules.Endpoint{Serving: true, Terminating: true}))
	} else {
		nodes.apply("e", svc(ready)(), "b")
	}
	conn, err := dialFrom(t, c, sport, dsrVIP+":80")
	if err != nil {
		conntrackOf(t, e, "E", sport)
		t.Fatalf("reused source port %d: connecting: %v", sport, err)
	}
	defer conn.Close()
	r = bufio.NewReader(conn)
	for i := range 3 {
		if got, err := who(conn, r); err != nil || got != podB {
			conntrackOf(t, e, "E", sport)
			t.Fatalf("reused source port %d, request %d: answered by %q (%v), want the remembered owner's %s", sport, i, got, err, podB)
		}
	}
	out := netnstest.Run(t, e, "conntrack", "-L", "-p", "tcp", "--sport", fmt.Sprint(sport))
	t.Logf("conntrack on E with the new connection open:\n%s", out)
	if mark := fmt.Sprintf("mark=%d ", nftrules.NodeID(netip.MustParseAddr("192.0.2.20"))); !strings.Contains(out, mark) {
		t.Errorf("E's entry does not remember B (%s)", mark)
	}
	// A fresh port goes to E's own pod: the owner of every bucket now.
	fresh, err := dialFrom(t, c, 46000, dsrVIP+":80")
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if got, err := who(fresh, bufio.NewReader(fresh)); err != nil || got != podE {
		t.Errorf("fresh source port (control): answered by %q (%v), want %s", got, err, podE)
	}
}
