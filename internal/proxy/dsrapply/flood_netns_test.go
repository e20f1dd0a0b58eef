package dsrapply_test

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"

	"github.com/ironlb/ironlb/internal/proxy/dsrapply"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/testbed/netnstest"
)

// TestKernelDSRFloodTakenByOwner is flood.go's case: client C reaches a DSR address through entry
// node E (which has no pod), whose owners are B1 and B2 (a pod each), all on one bridge. C holds
// TCP connections and UDP flows, some owned by each backend. Then E's bridge port goes down (its
// power cut, as the lab's: the bridge forgets E's MAC and floods the frames C still sends to it),
// and nothing moves C: no failover, no gratuitous ARP, C's neighbour entry stays E's MAC.
//
// With the flood table every held connection is answered again by the pod it had, every UDP
// datagram by its owner's pod exactly once (one node takes each flooded frame: no duplicate
// answer), and a new connection opened after the cut is answered too. The control deletes the
// flood table on every node after the apply (the code before it): the first request after the cut
// gets no answer.
// Skipped unless root with ip and sysctl.
func TestKernelDSRFloodTakenByOwner(t *testing.T) {
	t.Run("with the flood table", func(t *testing.T) { floodTakenByOwner(t, true) })
	t.Run("control, without it", func(t *testing.T) { floodTakenByOwner(t, false) })
}

func floodTakenByOwner(t *testing.T, flood bool) {
	const podB1, podB2 = "10.244.1.5", "10.244.2.5"
	nss := dsrTopology(t, "ilbflood", "e",
		[]dsrHost{{"c", "192.0.2.100"}, {"e", "192.0.2.11"}, {"b1", "192.0.2.21"}, {"b2", "192.0.2.22"}},
		[]dsrPod{{"pb1", "b1", "10.244.1.1", podB1}, {"pb2", "b2", "10.244.2.1", podB2}})
	c := nss["c"]
	pods := map[string]string{podB1: "pb1", podB2: "pb2"}
	for addr, name := range pods {
		ln := listenIn(t, nss[name], "tcp", addr+":8080")
		t.Cleanup(func() { ln.Close() })
		serveLines(ln, func(conn net.Conn, line string) { fmt.Fprintf(conn, "%s\n", name) })
		serveDatagrams(t, nss[name], addr+":5353", func(net.PacketConn, net.Addr) string { return name })
	}
	ep := func(addr, node string, port uint16) nftrules.Endpoint {
		return nftrules.Endpoint{Addr: netip.MustParseAddr(addr), Port: port, Node: node, Ready: true, Serving: true}
	}
	svc := &nftrules.Service{Namespace: "ns1", Name: "web", ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.10")},
		LoadBalancerIPs: []netip.Addr{netip.MustParseAddr(dsrVIP)}, ExternalMode: nftrules.ExternalDSR,
		Ports: []nftrules.Port{
			{Name: "http", Protocol: nftrules.TCP, Port: 80, Endpoints: []nftrules.Endpoint{ep(podB1, "b1", 8080), ep(podB2, "b2", 8080)}},
			{Name: "dns", Protocol: nftrules.UDP, Port: 53, Endpoints: []nftrules.Endpoint{ep(podB1, "b1", 5353), ep(podB2, "b2", 5353)}},
		}}
	ips := map[string]netip.Addr{"e": netip.MustParseAddr("192.0.2.11"), "b1": netip.MustParseAddr("192.0.2.21"), "b2": netip.MustParseAddr("192.0.2.22")}
	nodes := map[string]string{"e": nss["e"], "b1": nss["b1"], "b2": nss["b2"]}
	for node, ns := range nodes {
		// Each node's view: its own endpoints local.
		s := *svc
		s.Ports = nil
		for _, p := range svc.Ports {
			p.Endpoints = append([]nftrules.Endpoint(nil), p.Endpoints...)
			for j := range p.Endpoints {
				p.Endpoints[j].Local = p.Endpoints[j].Node == node
			}
			s.Ports = append(s.Ports, p)
		}
		applyDSR(t, &s, ips, map[string]string{node: ns})
	}
	for node, ns := range nodes {
		out := floodTableIn(t, ns)
		switch {
		case !flood:
			deleteFloodTable(t, ns)
		case node == "e" && out != "":
			t.Fatalf("the entry node, which owns no bucket, has a flood table: %s", out)
		case node != "e" && out == "":
			t.Fatalf("node %s owns buckets and has no flood table", node)
		}
	}

	// Held flows: TCP connections and UDP sockets, until both pods have some of each.
	type tcpFlow struct {
		conn net.Conn
		r    *bufio.Reader
		pod  string
	}
	ask := func(f *tcpFlow, wait time.Duration) (string, error) {
		f.conn.SetDeadline(time.Now().Add(wait))
		if _, err := fmt.Fprintf(f.conn, "hello\n"); err != nil {
			return "", err
		}
		line, err := f.r.ReadString('\n')
		return strings.TrimSpace(line), err
	}
	type udpFlow struct {
		conn net.Conn
		pod  string
	}
	askUDP := func(f *udpFlow, wait time.Duration) (answers []string) {
		f.conn.SetDeadline(time.Now().Add(wait))
		if _, err := f.conn.Write([]byte("q")); err != nil {
			t.Fatal(err)
		}
		// Read until the deadline: a second answer is a duplicate.
		for {
			buf := make([]byte, 64)
			n, err := f.conn.Read(buf)
			if err != nil {
				return answers
			}
			answers = append(answers, string(buf[:n]))
			f.conn.SetDeadline(time.Now().Add(300 * time.Millisecond))
		}
	}
	var tcps []*tcpFlow
	var udps []*udpFlow
	seen := map[string]int{}
	for i := 0; i < 40 && (seen["tcp pb1"] < 2 || seen["tcp pb2"] < 2 || seen["udp pb1"] < 2 || seen["udp pb2"] < 2); i++ {
		conn := dialIn(t, c, dsrVIP+":80")
		t.Cleanup(func() { conn.Close() })
		f := &tcpFlow{conn: conn, r: bufio.NewReader(conn)}
		pod, err := ask(f, 5*time.Second)
		if err != nil {
			t.Fatalf("connection %d before the cut: %v", i, err)
		}
		f.pod = pod
		tcps = append(tcps, f)
		seen["tcp "+pod]++
		var uc net.Conn
		inNetns(t, c, func() (err error) { uc, err = net.Dial("udp4", dsrVIP+":53"); return err })
		t.Cleanup(func() { uc.Close() })
		u := &udpFlow{conn: uc}
		got := askUDP(u, 5*time.Second)
		if len(got) != 1 {
			t.Fatalf("UDP flow %d before the cut: answers %q, want one", i, got)
		}
		u.pod = got[0]
		udps = append(udps, u)
		seen["udp "+u.pod]++
	}
	t.Logf("flows before the cut: %v", seen)

	// E's power cut, as the lab's: its bridge port goes down.
	netnstest.Run(t, nss["sw"], "ip", "link", "set", "p1", "down")

	if !flood {
		if _, err := ask(tcps[0], 2*time.Second); err == nil {
			t.Fatalf("without the flood table a request after the entry's cut was answered")
		}
		if got := askUDP(udps[0], time.Second); len(got) != 0 {
			t.Fatalf("without the flood table a datagram after the entry's cut was answered: %q", got)
		}
		return
	}
	for i, f := range tcps {
		pod, err := ask(f, 5*time.Second)
		if err != nil {
			t.Errorf("connection %d (pod %s) after the cut: %v", i, f.pod, err)
		} else if pod != f.pod {
			t.Errorf("connection %d after the cut: answered by %s, want %s", i, pod, f.pod)
		}
	}
	for i, u := range udps {
		if got := askUDP(u, 5*time.Second); len(got) != 1 || got[0] != u.pod {
			t.Errorf("UDP flow %d (pod %s) after the cut: answers %q, want one from %s", i, u.pod, got, u.pod)
		}
	}
	conn := dialIn(t, c, dsrVIP+":80")
	defer conn.Close()
	if pod, err := ask(&tcpFlow{conn: conn, r: bufio.NewReader(conn)}, 5*time.Second); err != nil {
		t.Errorf("a new connection after the cut: %v", err)
	} else {
		t.Logf("a new connection after the cut: answered by %s", pod)
	}
}

// floodConnIn returns a google/nftables connection in namespace ns.
func floodConnIn(t *testing.T, ns string) *nftables.Conn {
	t.Helper()
	nsh, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer nsh.Close()
	return synConnIn(t, nsh)
}

// floodTableIn describes namespace ns's flood table ("" when it has none): its chains and sets.
func floodTableIn(t *testing.T, ns string) string {
	t.Helper()
	c := floodConnIn(t, ns)
	tab := &nftables.Table{Family: nftables.TableFamilyNetdev, Name: dsrapply.FloodTableName}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyNetdev)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ch := range chains {
		if ch.Table.Name == tab.Name {
			out = append(out, "chain "+ch.Name)
		}
	}
	if len(out) == 0 {
		return ""
	}
	sets, err := c.GetSets(tab)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sets {
		out = append(out, "set "+s.Name)
	}
	return strings.Join(out, ", ")
}

// deleteFloodTable deletes namespace ns's flood table.
func deleteFloodTable(t *testing.T, ns string) {
	t.Helper()
	c := floodConnIn(t, ns)
	tab := c.AddTable(&nftables.Table{Family: nftables.TableFamilyNetdev, Name: dsrapply.FloodTableName})
	c.DelTable(tab)
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
}
