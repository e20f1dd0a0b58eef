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

	"github.com/ironlb/ironlb/internal/proxy/dsrapply"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/testbed/netnstest"
)

// TestKernelDSRKeepsOwner is the chaos soak's false death in namespaces (issue 19): client C
// reaches a DSR address through entry node E; the Service has a pod on backend node B1 (P1) and
// one on B2 (P2), over TCP and UDP. E's echo detector declares B1 dead for a moment and takes it
// back (E's plan applied without B1, then with it), while B1 never stopped. A TCP connection
// held to P1 goes on throughout: its owner lists an endpoint, and moving it to B2 could only have
// had P2 reset it. A UDP flow moves to P2 (a datagram flow is kept answered by moving it), and
// answers after B1's return. Then P1 terminates gracefully (serving and terminating on every
// node): the held connection still goes on. Last, B1 loses its link (a real power cut) and E's
// plan drops it: a UDP flow P1 served is answered by P2, and a connection held to P2 goes on.
// Skipped unless root with nft, ip and sysctl.
func TestKernelDSRKeepsOwner(t *testing.T) {
	const pod1, pod2 = "10.244.1.5", "10.244.2.5"
	nss := dsrTopology(t, "ilbkeep", "e",
		[]dsrHost{{"c", "192.0.2.100"}, {"e", "192.0.2.11"}, {"b1", "192.0.2.21"}, {"b2", "192.0.2.22"}},
		[]dsrPod{{"p1", "b1", "10.244.1.1", pod1}, {"p2", "b2", "10.244.2.1", pod2}})
	c, e, b1, b2 := nss["c"], nss["e"], nss["b1"], nss["b2"]
	for _, p := range []struct{ ns, addr string }{{nss["p1"], pod1}, {nss["p2"], pod2}} {
		// Each pod answers every line and every datagram with its own address.
		ln := listenIn(t, p.ns, "tcp", p.addr+":8080")
		t.Cleanup(func() { ln.Close() })
		serveLines(ln, func(conn net.Conn, _ string) { fmt.Fprintf(conn, "%s\n", conn.LocalAddr()) })
		serveDatagrams(t, p.ns, p.addr+":5353", func(pc net.PacketConn, _ net.Addr) string { return pc.LocalAddr().String() })
	}
	ips := map[string]netip.Addr{"e": netip.MustParseAddr("192.0.2.11"), "b1": netip.MustParseAddr("192.0.2.21"), "b2": netip.MustParseAddr("192.0.2.22")}
	nodeNS := map[string]string{"e": e, "b1": b1, "b2": b2}
	appliers := map[string]*dsrapply.Applier{}
	published := map[string][]nftrules.EtherAddr{}
	for node, ns := range nodeNS {
		a, h := applierIn(t, ns)
		var err error
		if published[node], err = dsrapply.LocalMACs(h, []netip.Addr{ips[node]}); err != nil {
			t.Fatal(err)
		}
		appliers[node] = a
	}
	// service is the Service as the EndpointSlices list it, P1's endpoint with cond's conditions.
	service := func(cond nftrules.Endpoint) *nftrules.Service {
		e1 := cond
		e1.Addr, e1.Node = netip.MustParseAddr(pod1), "b1"
		e2 := nftrules.Endpoint{Addr: netip.MustParseAddr(pod2), Node: "b2", Ready: true, Serving: true}
		port := func(proto nftrules.Protocol, name string, port, target uint16) nftrules.Port {
			a, b := e1, e2
			a.Port, b.Port = target, target
			return nftrules.Port{Name: name, Protocol: proto, Port: port, Endpoints: []nftrules.Endpoint{a, b}}
		}
		return &nftrules.Service{Namespace: "ns1", Name: "web", ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.10")},
			LoadBalancerIPs: []netip.Addr{netip.MustParseAddr(dsrVIP)}, ExternalMode: nftrules.ExternalDSR,
			Ports: []nftrules.Port{port(nftrules.TCP, "http", 80, 8080), port(nftrules.UDP, "dns", 53, 5353)}}
	}
	ready := nftrules.Endpoint{Ready: true, Serving: true}
	apply := func(node string, svc *nftrules.Service, dead ...string) {
		t.Helper()
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
		a := appliers[node]
		plan := nftrules.PlanDSR(m, nftrules.DSRConfig{NodeIPs: ips, NodeMACs: published, Slots: a.Slots()})
		if err := a.Apply(context.Background(), &plan); err != nil {
			t.Fatalf("%s: %v", node, err)
		}
	}
	applyAll := func(cond nftrules.Endpoint) {
		for node := range nodeNS {
			apply(node, service(cond))
		}
	}
	applyAll(ready)

	// ask sends a line on a held connection and returns the address of the pod that answered.
	type held struct {
		conn net.Conn
		r    *bufio.Reader
	}
	ask := func(h held) (string, error) {
		h.conn.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := fmt.Fprintf(h.conn, "who\n"); err != nil {
			return "", err
		}
		line, err := h.r.ReadString('\n')
		host, _, _ := net.SplitHostPort(strings.TrimSpace(line))
		return host, err
	}
	// holdTo opens connections from C until one is served by pod.
	holdTo := func(pod string) held {
		t.Helper()
		for range 64 {
			conn := dialIn(t, c, dsrVIP+":80")
			h := held{conn, bufio.NewReader(conn)}
			if got, err := ask(h); err == nil && got == pod {
				t.Cleanup(func() { conn.Close() })
				return h
			}
			conn.Close()
		}
		t.Fatalf("no connection of 64 reached %s", pod)
		return held{}
	}
	askUDP := func(uc net.Conn) (string, error) {
		uc.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := uc.Write([]byte("who")); err != nil {
			return "", err
		}
		buf := make([]byte, 64)
		n, err := uc.Read(buf)
		host, _, _ := net.SplitHostPort(string(buf[:n]))
		return host, err
	}
	// udpTo opens UDP flows from C until one is answered by pod.
	udpTo := func(pod string) net.Conn {
		t.Helper()
		for range 64 {
			var uc net.Conn
			inNetns(t, c, func() (err error) { uc, err = net.Dial("udp4", dsrVIP+":53"); return err })
			if got, err := askUDP(uc); err == nil && got == pod {
				t.Cleanup(func() { uc.Close() })
				return uc
			}
			uc.Close()
		}
		t.Fatalf("no UDP flow of 64 reached %s", pod)
		return nil
	}
	toP1, toP2 := holdTo(pod1), holdTo(pod2)
	flow := udpTo(pod1)

	// The phases: what happens, then each probe asked 3 times and answered by the pod it wants.
	type probe struct {
		what string
		ask  func() (string, error)
		want string
	}
	heldP1 := func() (string, error) { return ask(toP1) }
	heldP2 := func() (string, error) { return ask(toP2) }
	udpFlow := func() (string, error) { return askUDP(flow) }
	for _, ph := range []struct {
		when   string
		change func()
		probes []probe
	}{
		// E declares B1 dead (falsely: B1 and P1 go on) and takes it back.
		{"B1 falsely dead to E", func() { apply("e", service(ready), "b1") }, []probe{
			{"the connection held to P1", heldP1, pod1}, {"the connection held to P2", heldP2, pod2}, {"the UDP flow P1 served", udpFlow, pod2}}},
		{"B1 back", func() { apply("e", service(ready)) }, []probe{
			{"the connection held to P1", heldP1, pod1}, {"the UDP flow moved to P2 stays there", udpFlow, pod2}}},
		// P1 terminates gracefully: every node sees it serving and terminating; its connection goes on.
		{"P1 terminating", func() { applyAll(nftrules.Endpoint{Serving: true, Terminating: true}) }, []probe{
			{"the connection held to P1", heldP1, pod1}}},
		// B1's power cut (P1 ready again first): its link goes down and E's detector drops it. A
		// new UDP flow P1 served moves to P2; the connection held to P2 is untouched. (The one
		// held to P1 is lost with B1.)
		{"B1 cut", func() {
			applyAll(ready)
			flow = udpTo(pod1)
			netnstest.Run(t, b1, "ip", "link", "set", "eth0", "down")
			apply("e", service(ready), "b1")
		}, []probe{{"the UDP flow P1 served", udpFlow, pod2}, {"the connection held to P2", heldP2, pod2}}},
	} {
		ph.change()
		for i := range 3 {
			for _, p := range ph.probes {
				got, err := p.ask()
				if err != nil || got != p.want {
					t.Errorf("%s, request %d: %s: answered by %q (%v), want %s", ph.when, i, p.what, got, err, p.want)
				} else {
					t.Logf("%s, request %d: %s: answered by %s", ph.when, i, p.what, got)
				}
			}
		}
	}
}
