package dsrapply_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ironlb/ironlb/internal/proxy/dsrapply"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/testbed/netnstest"
)

// TestKernelDSRPath builds a small segment in throwaway namespaces, every address inside them:
// client C, entry nodes E1 and E2, backend node B with a pod P behind it, all on one bridge. C
// reaches the service address through E1 (as through a layer-2 announcer); E1 forwards the
// unmodified packets to B, which DNATs them to P without masquerading; P answers straight to C.
// Then C's route moves to E2 (the announcer's failover) and the same TCP connection goes on
// through E2, which never saw its start. P sees C's own address throughout. A UDP flow does the
// same.
func TestKernelDSRPath(t *testing.T) {
	nss := dsrTopology(t, "ilbdsr", "e1",
		[]dsrHost{{"c", "192.0.2.100"}, {"e1", "192.0.2.11"}, {"e2", "192.0.2.12"}, {"b", "192.0.2.20"}},
		[]dsrPod{{"p", "b", "10.244.2.1", "10.244.2.5"}})
	c, e1, e2, b, p := nss["c"], nss["e1"], nss["e2"], nss["b"], nss["p"]
	// The same Service on every node; endpoints only on B.
	svc := &nftrules.Service{Namespace: "ns1", Name: "web", ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.10")},
		LoadBalancerIPs: []netip.Addr{netip.MustParseAddr(dsrVIP)}, ExternalMode: nftrules.ExternalDSR,
		Ports: []nftrules.Port{{Protocol: nftrules.TCP, Port: 80, Endpoints: []nftrules.Endpoint{
			{Addr: netip.MustParseAddr("10.244.2.5"), Port: 8080, Node: "b", Ready: true},
		}}, {Name: "dns", Protocol: nftrules.UDP, Port: 53, Endpoints: []nftrules.Endpoint{
			{Addr: netip.MustParseAddr("10.244.2.5"), Port: 5353, Node: "b", Ready: true},
		}}}}
	ips := map[string]netip.Addr{"e1": netip.MustParseAddr("192.0.2.11"), "e2": netip.MustParseAddr("192.0.2.12"), "b": netip.MustParseAddr("192.0.2.20")}
	applyDSR(t, svc, ips, map[string]string{"e1": e1, "e2": e2, "b": b})

	// P: a line server that answers each line with the peer's address.
	ln := listenIn(t, p, "tcp", "10.244.2.5:8080")
	defer ln.Close()
	serveLines(ln, func(conn net.Conn, line string) {
		if line == "big\n" {
			conn.Write(make([]byte, bigReply))
		}
		fmt.Fprintf(conn, "%s\n", conn.RemoteAddr())
	})

	// P: a UDP server that answers each datagram with the peer's address.
	serveDatagrams(t, p, "10.244.2.5:5353", func(_ net.PacketConn, from net.Addr) string { return from.String() })
	var uc net.Conn
	inNetns(t, c, func() (err error) { uc, err = net.Dial("udp4", dsrVIP+":53"); return err })
	defer uc.Close()
	askUDP := func(when string) {
		t.Helper()
		uc.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := uc.Write([]byte("q")); err != nil {
			t.Fatalf("%s: udp write: %v", when, err)
		}
		buf := make([]byte, 64)
		n, err := uc.Read(buf)
		if err != nil {
			t.Fatalf("%s: udp read: %v", when, err)
		}
		if got := string(buf[:n]); got != uc.LocalAddr().String() {
			t.Fatalf("%s: the pod saw %q, want the client's %s", when, got, uc.LocalAddr())
		}
	}

	conn := dialIn(t, c, dsrVIP+":80")
	defer conn.Close()
	r := bufio.NewReader(conn)
	ask := func(when string) {
		t.Helper()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := fmt.Fprintf(conn, "hello\n"); err != nil {
			t.Fatalf("%s: write: %v", when, err)
		}
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("%s: read: %v", when, err)
		}
		if !strings.HasPrefix(line, "192.0.2.100:") {
			t.Fatalf("%s: the pod saw %q, want the client's 192.0.2.100", when, strings.TrimSpace(line))
		}
	}
	for i := range 3 {
		ask(fmt.Sprintf("request %d through e1", i))
		askUDP(fmt.Sprintf("datagram %d through e1", i))
	}
	// A reply-heavy request: the reply goes from B straight to C, not through E1.
	rx := func() int {
		out, err := exec.Command("ip", "netns", "exec", e1, "cat", "/sys/class/net/eth0/statistics/rx_bytes").Output()
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(strings.TrimSpace(string(out)))
		return n
	}
	before := rx()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "big\n")
	if _, err := io.ReadFull(r, make([]byte, bigReply)); err != nil {
		t.Fatalf("reading the %d-byte reply: %v", bigReply, err)
	}
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	got := rx() - before
	t.Logf("a %d-byte reply: the entry node received %d bytes meanwhile", bigReply, got)
	if got > bigReply/4 {
		t.Errorf("the entry node received %d bytes during a %d-byte reply: the reply went through it", got, bigReply)
	}

	// The announcer fails over: C now reaches the address through E2, mid-connection.
	netnstest.Run(t, c, "ip", "route", "replace", dsrVIP+"/32", "via", "192.0.2.12")
	for i := range 3 {
		ask(fmt.Sprintf("request %d through e2 after the failover", i))
		askUDP(fmt.Sprintf("datagram %d through e2 after the failover", i))
	}
}

// segment creates the throwaway network namespaces PREFIX-NAME-PID for the names, in their order
// (removed when the test ends), and returns them with a function running a command in one of them
// (failing the test if it fails). It skips the test unless root with ip and sysctl. nft must not
// run (forbidNFT).
func segment(t *testing.T, prefix string, names ...string) (nss []string, in func(ns string, args ...string)) {
	t.Helper()
	netnstest.Require(t, "ip", "sysctl")
	forbidNFT(t)
	for _, n := range names {
		nss = append(nss, fmt.Sprintf("%s-%s-%d", prefix, n, os.Getpid()))
	}
	netnstest.Add(t, nss...)
	return nss, func(ns string, args ...string) {
		t.Helper()
		netnstest.Run(t, ns, args...)
	}
}

// applyDSR applies the DSR plan for svc on each node (name -> its namespace), with nft and sysctl
// run in that namespace and netlink bound to it, and returns the appliers by node.
func applyDSR(t *testing.T, svc *nftrules.Service, ips map[string]netip.Addr, nodes map[string]string) map[string]*dsrapply.Applier {
	t.Helper()
	appliers := map[string]*dsrapply.Applier{}
	for node, ns := range nodes {
		a, _ := applierIn(t, ns)
		m := &nftrules.Model{Node: nftrules.Node{Name: node}, Services: map[nftrules.ServiceKey]*nftrules.Service{svc.Key(): svc}}
		plan := nftrules.PlanDSR(m, nftrules.DSRConfig{NodeIPs: ips})
		if err := a.Apply(context.Background(), &plan); err != nil {
			t.Fatalf("%s: %v", node, err)
		}
		appliers[node] = a
	}
	return appliers
}

const bigReply = 1 << 20

// listenIn listens in network namespace ns (the socket stays there).
func listenIn(t *testing.T, ns, network, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	inNetns(t, ns, func() (err error) { ln, err = net.Listen(network, addr); return err })
	return ln
}

func dialIn(t *testing.T, ns, addr string) net.Conn {
	t.Helper()
	var conn net.Conn
	inNetns(t, ns, func() (err error) { conn, err = net.DialTimeout("tcp", addr, 5*time.Second); return err })
	return conn
}

func inNetns(t *testing.T, ns string, f func() error) {
	t.Helper()
	var err error
	netnstest.In(t, ns, func() { err = f() })
	if err != nil {
		t.Fatalf("in %s: %v", ns, err)
	}
}

// TestKernelDSRPathRouted: the backend node B is on another segment, behind router R; the entry
// node E reaches it through the vxlan device (encapsulation), and B answers the client C through
// R. The pod sees C's address. Skipped unless root with nft, ip and sysctl.
func TestKernelDSRPathRouted(t *testing.T) {
	nss, in := segment(t, "ilbdsrr", "swa", "swb", "c", "e", "r", "b", "p")
	swa, swb, c, e, r, b, p := nss[0], nss[1], nss[2], nss[3], nss[4], nss[5], nss[6]
	for _, sw := range []string{swa, swb} {
		in(sw, "ip", "link", "add", "br0", "type", "bridge")
		in(sw, "ip", "link", "set", "br0", "up")
	}
	hosts := []struct{ sw, ns, dev, addr, gw string }{
		{swa, c, "eth0", "192.0.2.100", "192.0.2.1"}, {swa, e, "eth0", "192.0.2.11", "192.0.2.1"}, {swa, r, "eth0", "192.0.2.1", ""},
		{swb, r, "eth1", "203.0.113.1", ""}, {swb, b, "eth0", "203.0.113.20", "203.0.113.1"},
	}
	for i, h := range hosts {
		port := fmt.Sprintf("p%d", i)
		in(h.sw, "ip", "link", "add", port, "type", "veth", "peer", "name", h.dev, "netns", h.ns)
		in(h.sw, "ip", "link", "set", port, "master", "br0", "up")
		in(h.ns, "ip", "addr", "add", h.addr+"/24", "dev", h.dev)
		in(h.ns, "ip", "link", "set", h.dev, "up")
		in(h.ns, "ip", "link", "set", "lo", "up")
		if h.gw != "" {
			in(h.ns, "ip", "route", "add", "default", "via", h.gw)
		}
	}
	in(r, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	podBehind(t, b, p, "10.244.2.1", "10.244.2.5")
	in(c, "ip", "route", "add", dsrVIP+"/32", "via", "192.0.2.11")

	svc := &nftrules.Service{Namespace: "ns1", Name: "web", ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.10")},
		LoadBalancerIPs: []netip.Addr{netip.MustParseAddr(dsrVIP)}, ExternalMode: nftrules.ExternalDSR,
		Ports: []nftrules.Port{{Protocol: nftrules.TCP, Port: 80, Endpoints: []nftrules.Endpoint{
			{Addr: netip.MustParseAddr("10.244.2.5"), Port: 8080, Node: "b", Ready: true},
		}}}}
	ips := map[string]netip.Addr{"e": netip.MustParseAddr("192.0.2.11"), "b": netip.MustParseAddr("203.0.113.20")}
	for node, a := range applyDSR(t, svc, ips, map[string]string{"e": e, "b": b}) {
		if w := a.Warnings(); len(w) > 0 {
			t.Fatalf("%s: %v", node, w)
		}
	}

	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, cmd := range [][]string{{e, "ip", "rule"}, {e, "ip", "route", "show", "table", "all"}, {e, "ip", "-d", "-s", "link", "show", "ironlb-dsr0"},
			{e, "bridge", "fdb", "show", "dev", "ironlb-dsr0"}, {e, "ip", "neigh", "show", "dev", "ironlb-dsr0"}, {b, "ip", "-d", "-s", "link", "show", "ironlb-dsr0"},
			{b, "ip", "-s", "link", "show", "eth0"}, {b, "conntrack", "-L"}, {b, "sysctl", "net.ipv4.conf.all.rp_filter", "net.ipv4.conf.ironlb-dsr0.rp_filter", "net.ipv4.ip_forward"}, {p, "ip", "-s", "link", "show", "eth0"}, {b, "nstat", "-az"}, {p, "nstat", "-az"}} {
			out, _ := exec.Command("ip", append([]string{"netns", "exec"}, cmd...)...).CombinedOutput()
			t.Logf("%v:\n%s", cmd[1:], out)
		}
	})
	ln := listenIn(t, p, "tcp", "10.244.2.5:8080")
	defer ln.Close()
	serveLines(ln, func(conn net.Conn, _ string) { fmt.Fprintf(conn, "%s\n", conn.RemoteAddr()) })
	conn := dialIn(t, c, dsrVIP+":80")
	defer conn.Close()
	rd := bufio.NewReader(conn)
	for i := range 3 {
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "hello\n")
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("request %d through the vxlan device: %v", i, err)
		}
		if !strings.HasPrefix(line, "192.0.2.100:") {
			t.Fatalf("request %d: the pod saw %q, want the client's 192.0.2.100", i, strings.TrimSpace(line))
		}
	}
}
