package dsrapply_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/ironlb/ironlb/internal/proxy/dsrapply"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/testbed/netnstest"
)

// TestKernelApply applies plans in a throwaway network namespace: the table, the policy rules
// and routes of the other nodes, their removal when a node leaves, and Cleanup, all without
// running nft (forbidNFT). Skipped unless root with ip (and an nft binary to read the table with).
func TestKernelApply(t *testing.T) {
	netnstest.Require(t, "ip")
	nftPath := forbidNFT(t)
	ns, in := vethNode(t, "ironlb-dsrtest")
	in("ip", "neigh", "replace", "192.0.2.11", "lladdr", "02:00:00:00:00:0b", "dev", "d0")

	nsh, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer nsh.Close()
	h, err := netlink.NewHandleAt(nsh)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	sysctls := map[string]string{}
	a := dsrapply.New(tableIn(t, ns), h, func(k, v string) error { sysctls[k] = v; return nil }).WithSYNTable(synConnIn(t, nsh))

	m := &nftrules.Model{Node: nftrules.Node{Name: "node-a"}, Services: map[nftrules.ServiceKey]*nftrules.Service{}}
	s := &nftrules.Service{Namespace: "ns1", Name: "web", ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.10")},
		LoadBalancerIPs: []netip.Addr{netip.MustParseAddr("192.0.2.240")}, ExternalMode: nftrules.ExternalDSR,
		Ports: []nftrules.Port{{Protocol: nftrules.TCP, Port: 80, Endpoints: []nftrules.Endpoint{
			{Addr: netip.MustParseAddr("10.244.2.5"), Port: 8080, Node: "node-b", Ready: true},
			{Addr: netip.MustParseAddr("10.244.3.5"), Port: 8080, Node: "node-c", Ready: true},
			{Addr: netip.MustParseAddr("10.244.1.5"), Port: 8080, Node: "node-a", Ready: true, Local: true},
		}}}}
	m.Services[s.Key()] = s
	// node-a publishes the MAC of d0, the interface with its InternalIP.
	own, err := dsrapply.LocalMACs(h, []netip.Addr{netip.MustParseAddr("192.0.2.10")})
	if err != nil {
		t.Fatal(err)
	}
	d0, err := h.LinkByName("d0")
	if err != nil {
		t.Fatal(err)
	}
	if len(own) != 1 || own[0].String() != d0.Attrs().HardwareAddr.String() {
		t.Errorf("LocalMACs of 192.0.2.10: %v, want d0's %s only", own, d0.Attrs().HardwareAddr)
	}
	cfg := nftrules.DSRConfig{NodeIPs: map[string]netip.Addr{
		"node-a": netip.MustParseAddr("192.0.2.10"), "node-b": netip.MustParseAddr("192.0.2.11"), "node-c": netip.MustParseAddr("192.0.2.12")},
		NodeMACs: map[string][]nftrules.EtherAddr{"node-a": own, "node-b": {{0x02, 0, 0, 0, 0, 0x0b}}}}
	plan := nftrules.PlanDSR(m, cfg)
	ctx := context.Background()
	if err := a.Apply(ctx, &plan); err != nil {
		t.Fatal(err)
	}
	if sysctls["net/ipv4/ip_forward"] != "1" || sysctls["net/ipv4/conf/all/send_redirects"] != "0" || sysctls["net/ipv4/conf/d0/send_redirects"] != "0" {
		t.Errorf("sysctls not written: %v", sysctls)
	}
	rules := in("ip", "rule", "show")
	for _, slot := range []int{2, 3} {
		want := fmt.Sprintf("fwmark %#x/0xfff0000 lookup %d", nftrules.DSRMark(slot), nftrules.DSRTable(slot))
		if !strings.Contains(rules, want) {
			t.Errorf("no rule %q:\n%s", want, rules)
		}
	}
	if strings.Contains(rules, fmt.Sprintf("lookup %d", nftrules.DSRTable(1))) {
		t.Errorf("a rule for this node's own slot:\n%s", rules)
	}
	if got := in("ip", "route", "show", "table", fmt.Sprint(nftrules.DSRTable(2))); !strings.Contains(got, "default via 192.0.2.11 dev d0") {
		t.Errorf("table %d: %q", nftrules.DSRTable(2), got)
	}
	table := in(nftPath, "list", "table", "ip", nftrules.DSRTableName)
	if !strings.Contains(table, "02:00:00:00:00:0b") {
		t.Errorf("peer-macs lacks node-b's published link-layer address (loop guard):\n%s", table)
	}
	if strings.Contains(table, d0.Attrs().HardwareAddr.String()) {
		t.Errorf("peer-macs holds this node's own address:\n%s", table)
	}
	if !strings.Contains(table, "192.0.2.240 . tcp . 80 : goto dsr-") || !strings.Contains(table, "10.244.1.5 . 8080") {
		t.Errorf("table lacks the Service:\n%s", table)
	}
	// The SYN table is there, so forwarded SYNs are tracked: no notrack left in the DSR table.
	syn := in(nftPath, "list", "table", "ip", nftrules.DSRSYNTableName)
	t.Logf("the SYN table:\n%s", syn)
	// Each piece as nft prints it (nft 1.0.6's form first, then the older one).
	for _, want := range [][]string{{"ct timeout " + nftrules.DSRSYNTimeout}, {"syn_sent : 0"}, {"hook prerouting priority dstnat + 10"},
		{"meta mark & 0x0fff0000 != 0x00000000"}, {"tcp flags syn / syn,ack", "tcp flags & (syn | ack) == syn"},
		{"ct status ! confirmed,dnat", "ct status & (confirmed | dnat) == 0"}, {`ct timeout set "` + nftrules.DSRSYNTimeout + `"`},
		// the forwarded flow's policy: closing states short, set on a segment picked up mid-stream
		{"ct timeout " + nftrules.DSRFlowTimeout}, {"fin_wait : 5"}, {"close_wait : 5"}, {"time_wait : 5"},
		{"tcp flags ! syn", "tcp flags & syn == 0"}, {`ct timeout set "` + nftrules.DSRFlowTimeout + `"`}} {
		if !slices.ContainsFunc(want, func(w string) bool { return strings.Contains(syn, w) }) {
			t.Errorf("the SYN table lacks %q", want[0])
		}
	}
	if strings.Contains(table, "notrack") {
		t.Errorf("the DSR table still untracks SYNs with the SYN table present:\n%s", table)
	}

	// node-c loses its endpoint: its rule and route go; a second apply changes nothing else.
	s2 := *s
	s2.Ports = []nftrules.Port{s.Ports[0]}
	s2.Ports[0].Endpoints = s.Ports[0].Endpoints[:1]
	s2.Ports[0].Endpoints = append(s2.Ports[0].Endpoints, s.Ports[0].Endpoints[2])
	m.Services[s.Key()] = &s2
	cfg.Slots = a.Slots()
	plan = nftrules.PlanDSR(m, cfg)
	for range 2 {
		if err := a.Apply(ctx, &plan); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range a.Warnings() {
		if strings.Contains(w.Error(), nftrules.DSRSYNTableName) {
			t.Errorf("writing the SYN table again: %v", w)
		}
	}
	if syn2 := in(nftPath, "list", "table", "ip", nftrules.DSRSYNTableName); strings.Count(syn2, "ct timeout set") != 2 {
		t.Errorf("the SYN table after three writes:\n%s", syn2)
	}
	rules = in("ip", "rule", "show")
	if strings.Contains(rules, fmt.Sprintf("lookup %d", nftrules.DSRTable(3))) || strings.Count(rules, fmt.Sprintf("lookup %d", nftrules.DSRTable(2))) != 1 {
		t.Errorf("after node-c left, rules:\n%s", rules)
	}
	if got := in("ip", "route", "show", "table", "all"); strings.Contains(got, "192.0.2.12") {
		t.Errorf("node-c's route left:\n%s", got)
	}

	// The flood table (flood.go), as nft reads it back: the chain on d0, which carries node-a's
	// address, and one rule for the address and port, in node-a's buckets.
	flood := in(nftPath, "list", "table", "netdev", dsrapply.FloodTableName)
	t.Logf("the flood table:\n%s", flood)
	for _, want := range []string{`hook ingress device "d0" priority -500`,
		"meta pkttype other ip daddr 192.0.2.240 tcp dport 80 jhash ip saddr . tcp sport . ip daddr . tcp dport . meta l4proto mod 251 seed ",
		" @mine-0 meta pkttype set host"} {
		if !strings.Contains(flood, want) {
			t.Errorf("the flood table lacks %q", want)
		}
	}

	if err := a.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if out, err := netnstest.Output(ns, nftPath, "list", "table", "netdev", dsrapply.FloodTableName); err == nil {
		t.Errorf("table netdev %s left after cleanup:\n%s", dsrapply.FloodTableName, out)
	}
	if got := in("ip", "rule", "show"); strings.Contains(got, "fwmark") {
		t.Errorf("rules left after cleanup:\n%s", got)
	}
	if got := in("ip", "route", "show", "table", "all"); strings.Contains(got, "192.0.2.11") {
		t.Errorf("routes left after cleanup:\n%s", got)
	}
	for _, name := range []string{nftrules.DSRTableName, nftrules.DSRSYNTableName} {
		if out, err := netnstest.Output(ns, nftPath, "list", "table", "ip", name); err == nil {
			t.Errorf("table %s left after cleanup:\n%s", name, out)
		}
	}
}

// serveLines answers each line read on a connection ln accepts with answer(conn, line), until ln
// is closed.
func serveLines(ln net.Listener, answer func(conn net.Conn, line string)) {
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				r := bufio.NewReader(conn)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					answer(conn, line)
				}
			}()
		}
	}()
}

// serveDatagrams listens on UDP addr in namespace ns (closed when the test ends) and answers each
// datagram with answer(the socket, the sender).
func serveDatagrams(t *testing.T, ns, addr string, answer func(pc net.PacketConn, from net.Addr) string) {
	t.Helper()
	var pc net.PacketConn
	inNetns(t, ns, func() (err error) { pc, err = net.ListenPacket("udp4", addr); return err })
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 64)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo([]byte(answer(pc, from)), from)
		}
	}()
}

// vethNode makes a namespace (prefix and the test's pid) for node-a, whose InternalIP 192.0.2.10/24
// is on d0, a veth whose peer d1 is up in the same namespace, and returns its name and a runner of
// commands in it.
func vethNode(t *testing.T, prefix string) (string, func(args ...string) string) {
	t.Helper()
	ns := fmt.Sprintf("%s-%d", prefix, os.Getpid())
	netnstest.Add(t, ns)
	in := func(args ...string) string {
		t.Helper()
		return netnstest.Run(t, ns, args...)
	}
	in("ip", "link", "add", "d0", "type", "veth", "peer", "name", "d1")
	in("ip", "link", "set", "d1", "up")
	in("ip", "addr", "add", "192.0.2.10/24", "dev", "d0")
	in("ip", "link", "set", "d0", "up")
	return ns, in
}
