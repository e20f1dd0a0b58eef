package dsrapply_test

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/ironlb/ironlb/internal/proxy/conntrack"
	"github.com/ironlb/ironlb/internal/proxy/dsrapply"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/testbed/netnstest"
)

// TestKernelDSRUDPMovesToEntry is the UDP half of docs/dsr.md's "A false death's hold": client C
// reaches a DSR address through entry node E, which has a pod of the Service itself (PE), as has
// backend node B (PB). Two UDP flows are owned by B: E forwards them without DNAT and remembers B
// in their conntrack entries' marks. Then E's echo detector declares B dead (falsely: B goes on),
// so E owns every bucket. Flow 1 sends a datagram at once (the new rules rewrite its mark to E
// itself; its entry cannot be DNATed any more, so no pod answers it), flow 2 stays quiet. Then the
// proxy's cleanup after the plan (conntrack.DSRMoved, over netlink, as the sync loop does): both
// flows are answered by PE from then on, and still by PE after B comes back (E is the owner they
// remember, and E's entries of them are DNATed to PE: a moved UDP flow stays with its new owner).
//
// The control runs the same without the cleanup (the code before it): flow 1's datagrams are
// never answered, before or after B's return (its mark names E), and flow 2's neither once it
// sends (its first datagram rewrites the mark as flow 1's did).
// Skipped unless root with nft, ip, sysctl and conntrack.
func TestKernelDSRUDPMovesToEntry(t *testing.T) {
	netnstest.Require(t, "conntrack")
	t.Run("with the cleanup", func(t *testing.T) { udpMovesToEntry(t, true) })
	t.Run("control, without it", func(t *testing.T) { udpMovesToEntry(t, false) })
}

func udpMovesToEntry(t *testing.T, fixed bool) {
	const podE, podB = "10.244.1.5", "10.244.2.5"
	nss := dsrTopology(t, "ilbudpmv", "e",
		[]dsrHost{{"c", "192.0.2.100"}, {"e", "192.0.2.11"}, {"b", "192.0.2.20"}},
		[]dsrPod{{"pe", "e", "10.244.1.1", podE}, {"pb", "b", "10.244.2.1", podB}})
	c, e, b := nss["c"], nss["e"], nss["b"]
	for ns, addr := range map[string]string{nss["pe"]: podE, nss["pb"]: podB} {
		// Each pod answers every datagram with its own address.
		serveDatagrams(t, ns, addr+":5353", func(pc net.PacketConn, _ net.Addr) string { return pc.LocalAddr().String() })
	}
	ips := map[string]netip.Addr{"e": netip.MustParseAddr("192.0.2.11"), "b": netip.MustParseAddr("192.0.2.20")}
	appliers := map[string]*dsrapply.Applier{}
	published := map[string][]nftrules.EtherAddr{}
	for node, ns := range map[string]string{"e": e, "b": b} {
		a, h := applierIn(t, ns)
		var err error
		if published[node], err = dsrapply.LocalMACs(h, []netip.Addr{ips[node]}); err != nil {
			t.Fatal(err)
		}
		appliers[node] = a
	}
	ct := conntrackIn(t, e)

	service := func() *nftrules.Service {
		ep := func(addr, node string) nftrules.Endpoint {
			return nftrules.Endpoint{Addr: netip.MustParseAddr(addr), Port: 5353, Node: node, Ready: true, Serving: true}
		}
		return &nftrules.Service{Namespace: "ns1", Name: "dns", ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.10")},
			LoadBalancerIPs: []netip.Addr{netip.MustParseAddr(dsrVIP)}, ExternalMode: nftrules.ExternalDSR,
			Ports: []nftrules.Port{{Name: "dns", Protocol: nftrules.UDP, Port: 53, Endpoints: []nftrules.Endpoint{ep(podE, "e"), ep(podB, "b")}}}}
	}
	// apply writes node's plan (dead: the nodes its echo detector holds dead) and returns it.
	apply := func(node string, dead ...string) *nftrules.DSRPlan {
		t.Helper()
		svc := service()
		m := &nftrules.Model{Node: nftrules.Node{Name: node}, Services: map[nftrules.ServiceKey]*nftrules.Service{svc.Key(): svc}}
		for _, d := range dead {
			if m.Node.DeadNodes == nil {
				m.Node.DeadNodes = map[string]bool{}
			}
			m.Node.DeadNodes[d] = true
		}
		for j := range svc.Ports[0].Endpoints {
			svc.Ports[0].Endpoints[j].Local = svc.Ports[0].Endpoints[j].Node == node
		}
		a := appliers[node]
		plan := nftrules.PlanDSR(m, nftrules.DSRConfig{NodeIPs: ips, NodeMACs: published, Slots: a.Slots()})
		if err := a.Apply(context.Background(), &plan); err != nil {
			t.Fatalf("%s: %v", node, err)
		}
		return &plan
	}
	// cleanup is what the proxy's sync does on E after a DSR apply (with fixed): delete what
	// conntrack.DSRMoved selects between E's previous plan and plan.
	var ePlan *nftrules.DSRPlan
	cleanup := func(plan *nftrules.DSRPlan) {
		t.Helper()
		if fixed {
			fs := conntrack.DSRMoved(ePlan, plan)
			n, err := ct.DeleteAll(context.Background(), fs)
			if err != nil {
				t.Fatalf("deleting %v: %v", fs, err)
			}
			t.Logf("E's cleanup: %d entries deleted by %v", n, fs)
		}
		ePlan = plan
	}
	apply("b")
	cleanup(apply("e"))

	askUDP := func(uc net.Conn) (string, error) {
		uc.SetDeadline(time.Now().Add(2 * time.Second))
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
	entries := func(when string) string {
		t.Helper()
		out, _ := netnstest.Output(e, "conntrack", "-L", "-p", "udp", "--orig-dst", dsrVIP)
		t.Logf("conntrack on E %s:\n%s", when, out)
		return out
	}
	flow1, flow2 := udpTo(podB), udpTo(podB)
	entries("with both flows on B")

	// want asks flow 3 times; with fixed every answer must come from pod, without it none may
	// come (the stuck state; asked once, as each costs the deadline).
	want := func(when, what string, flow net.Conn, pod string) {
		t.Helper()
		for i := range 3 {
			got, err := askUDP(flow)
			switch {
			case fixed && (err != nil || got != pod):
				t.Errorf("%s, request %d: %s: answered by %q (%v), want %s", when, i, what, got, err, pod)
			case !fixed && err == nil:
				t.Errorf("control: %s, request %d: %s: answered by %s without the cleanup, want no answer", when, i, what, got)
			default:
				t.Logf("%s, request %d: %s: answered by %q (%v)", when, i, what, got, err)
			}
			if !fixed {
				return
			}
		}
	}

	// B falsely dead to E (every bucket is E's): flow 1 sends between the new table and the
	// cleanup (the new rules rewrite its mark to E: the harder case), flow 2 only after it.
	plan := apply("e", "b")
	if got, err := askUDP(flow1); err == nil {
		t.Errorf("flow 1 under the new table, before the cleanup: answered by %s, want none (the state the cleanup is for)", got)
	}
	entries("after flow 1's datagram under the table without B")
	cleanup(plan)
	entries("after the cleanup")
	want("B falsely dead to E", "flow 1", flow1, podE)
	want("B falsely dead to E", "flow 2", flow2, podE)
	entries("with both flows asked again")

	// B back: the flows stay with E, the owner they now remember.
	cleanup(apply("e"))
	want("B back", "flow 1", flow1, podE)
	want("B back", "flow 2", flow2, podE)
	out := entries("after B's return")
	if fixed && strings.Contains(out, "src="+dsrVIP+" dst=192.0.2.100") {
		t.Errorf("E still holds an entry of the flows that was not DNATed")
	}
}

// conntrackIn is the proxy's conntrack deleter (over netlink) in namespace ns, closed when the test
// ends.
func conntrackIn(t *testing.T, ns string) *conntrack.Netlink {
	t.Helper()
	nsh, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	ct, err := conntrack.NewNetlinkAt(nsh)
	nsh.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ct.Close)
	return ct
}
