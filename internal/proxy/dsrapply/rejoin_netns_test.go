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

	"github.com/ironlb/ironlb/internal/proxy/dsrapply"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/proxy/trace"
	"github.com/ironlb/ironlb/internal/testbed/netnstest"
)

// TestKernelDSRRejoin is a node's return in BGP mode in namespaces (issue 19; the lab's
// power-cut-and-return trials reset 7 and 16 of 200 connections in 2 of 20 trials, when the
// router took the returned node back as an ECMP next hop). Client C; entry nodes E and F without
// pods; nodes R and S with a pod each (PR, PS). While R is away (E, F and S hold it dead, R has no
// rules), C opens connections through E: those in R's buckets are served by the substitute S.
// Then R comes back (every node's plan over R and S again: R owns its buckets) and the router
// moves C's flows to R as their entry: R has no conntrack entry of them, hashes them to itself,
// and without the rejoin rule its pod resets them. With it, R forwards a mid-stream segment it
// holds no state of to the owner of its bucket in the table without R (S), where it is served.
// Then C's flows move to F, which has no memory of them either and forwards R's buckets to R (the
// loop-guard path): a connection R never saw goes to S through R too. A connection opened to PR
// after R's return is served by PR throughout (R's conntrack entry of it is established), and a
// connection in S's buckets is untouched, and so are connections opened to PR through R and
// through F (their SYNs are never taken). Skipped unless root with nft, ip and sysctl.
func TestKernelDSRRejoin(t *testing.T) {
	const podR, podS = "10.244.1.5", "10.244.2.5"
	nss := dsrTopology(t, "ilbrejoin", "e",
		[]dsrHost{{"c", "192.0.2.100"}, {"e", "192.0.2.11"}, {"f", "192.0.2.12"}, {"r", "192.0.2.21"}, {"s", "192.0.2.22"}},
		[]dsrPod{{"pr", "r", "10.244.1.1", podR}, {"ps", "s", "10.244.2.1", podS}})
	c := nss["c"]
	for _, p := range []struct{ ns, addr string }{{nss["pr"], podR}, {nss["ps"], podS}} {
		// Each pod answers every line with its own address.
		ln := listenIn(t, p.ns, "tcp", p.addr+":8080")
		t.Cleanup(func() { ln.Close() })
		serveLines(ln, func(conn net.Conn, _ string) { fmt.Fprintf(conn, "%s\n", conn.LocalAddr()) })
	}
	ips := map[string]netip.Addr{"e": netip.MustParseAddr("192.0.2.11"), "f": netip.MustParseAddr("192.0.2.12"),
		"r": netip.MustParseAddr("192.0.2.21"), "s": netip.MustParseAddr("192.0.2.22")}
	appliers := map[string]*dsrapply.Applier{}
	published := map[string][]nftrules.EtherAddr{}
	for _, node := range []string{"e", "f", "r", "s"} {
		a, h := applierIn(t, nss[node])
		var err error
		if published[node], err = dsrapply.LocalMACs(h, []netip.Addr{ips[node]}); err != nil {
			t.Fatal(err)
		}
		appliers[node] = a
	}
	vip := netip.MustParseAddr(dsrVIP)
	svc := &nftrules.Service{Namespace: "ns1", Name: "web", ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.10")},
		LoadBalancerIPs: []netip.Addr{vip}, ExternalMode: nftrules.ExternalDSR,
		Ports: []nftrules.Port{{Name: "http", Protocol: nftrules.TCP, Port: 80, Endpoints: []nftrules.Endpoint{
			{Addr: netip.MustParseAddr(podR), Port: 8080, Node: "r", Ready: true, Serving: true},
			{Addr: netip.MustParseAddr(podS), Port: 8080, Node: "s", Ready: true, Serving: true},
		}}}}
	plan := func(node string, dead ...string) nftrules.DSRPlan {
		m := &nftrules.Model{Node: nftrules.Node{Name: node}, Services: map[nftrules.ServiceKey]*nftrules.Service{svc.Key(): svc}}
		for _, d := range dead {
			if m.Node.DeadNodes == nil {
				m.Node.DeadNodes = map[string]bool{}
			}
			m.Node.DeadNodes[d] = true
		}
		for i := range svc.Ports[0].Endpoints {
			svc.Ports[0].Endpoints[i].Local = svc.Ports[0].Endpoints[i].Node == node
		}
		return nftrules.PlanDSR(m, nftrules.DSRConfig{NodeIPs: ips, NodeMACs: published, Slots: appliers[node].Slots()})
	}
	apply := func(node string, dead ...string) {
		t.Helper()
		p := plan(node, dead...)
		if err := appliers[node].Apply(context.Background(), &p); err != nil {
			t.Fatalf("%s: %v", node, err)
		}
	}
	// owner is the node whose bucket a connection from C is in, every node alive (the table after
	// R's return).
	full := plan("e").Ports[0]
	owner := func(conn net.Conn) string {
		la := conn.LocalAddr().(*net.TCPAddr).AddrPort()
		return full.Owner(trace.DSRBucket(la.Addr().Unmap(), vip, la.Port(), 80, 6, uint32(len(full.Buckets)), full.Seed))
	}
	nft := inspectNFT(t) // by path: PATH's nft must not run (forbidNFT)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, node := range []string{"r", "s", "f"} {
			for _, cmd := range [][]string{{"conntrack", "-L"}, {nft, "list", "table", "ip", nftrules.DSRTableName}} {
				out, _ := exec.Command("ip", append([]string{"netns", "exec", nss[node]}, cmd...)...).CombinedOutput()
				if cmd[0] == nft && len(out) > 6000 {
					out = out[len(out)-6000:] // the chains, after the maps
				}
				t.Logf("%s: %v:\n%s", node, cmd, out)
			}
		}
	})

	type held struct {
		what string
		conn net.Conn
		r    *bufio.Reader
	}
	// ask sends a line on a held connection and returns the address of the pod that answered.
	ask := func(h held) (string, error) {
		h.conn.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := fmt.Fprintf(h.conn, "who\n"); err != nil {
			return "", err
		}
		line, err := h.r.ReadString('\n')
		host, _, _ := net.SplitHostPort(strings.TrimSpace(line))
		return host, err
	}
	// open opens connections from C until one is in a bucket of node in the full table, and
	// checks that pod serves it.
	open := func(what, node, pod string) held {
		t.Helper()
		for range 64 {
			conn := dialIn(t, c, dsrVIP+":80")
			if owner(conn) != node {
				conn.Close()
				continue
			}
			h := held{what, conn, bufio.NewReader(conn)}
			if got, err := ask(h); err != nil || got != pod {
				t.Fatalf("%s: answered by %q (%v), want %s", what, got, err, pod)
			}
			t.Cleanup(func() { conn.Close() })
			return h
		}
		t.Fatalf("%s: no connection of 64 in a bucket of %s", what, node)
		return held{}
	}
	check := func(when string, h held, want string) {
		t.Helper()
		for i := range 3 {
			got, err := ask(h)
			if err != nil || got != want {
				t.Errorf("%s, request %d: %s: answered by %q (%v), want %s", when, i, h.what, got, err, want)
				return
			}
		}
		t.Logf("%s: %s: 3 requests answered by %s", when, h.what, want)
	}

	// R is away: E, F and S hold it dead; it has no rules. C opens connections through E.
	for _, node := range []string{"e", "f", "s"} {
		apply(node, "r")
	}
	moved := open("a connection opened in R's buckets during R's absence", "r", podS)
	idle := open("an idle one in R's buckets, opened during R's absence", "r", podS)
	steady := open("a connection in S's buckets", "s", podS)

	// R is back: every node's plan over R and S.
	for _, node := range []string{"r", "e", "f", "s"} {
		apply(node)
	}
	check("R back, through E", moved, podS)
	fresh := open("a connection opened in R's buckets after R's return", "r", podR)

	// The router moves C's flows to R as their entry.
	netnstest.Run(t, c, "ip", "route", "replace", dsrVIP+"/32", "via", "192.0.2.21")
	check("through R", moved, podS)
	check("through R", fresh, podR)
	check("through R", steady, podS)
	viaR := open("a connection opened in R's buckets through R", "r", podR)
	check("through R", viaR, podR)

	// Then to F, which forwards R's buckets to R (a peer: the loop guard's path).
	netnstest.Run(t, c, "ip", "route", "replace", dsrVIP+"/32", "via", "192.0.2.12")
	check("through F", idle, podS)
	check("through F", moved, podS)
	check("through F", fresh, podR)
	check("through F", steady, podS)
	check("through F", viaR, podR)
	check("through F", open("a connection opened in R's buckets through F", "r", podR), podR)
}
