package nftapply

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/testbed/netnstest"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
)

// dsrPlans are DSR plans of this node (node-a) that between them write every rule, set, map and
// element shape of the DSR table: TCP and UDP ports, with endpoints here (the loop guard, the
// local chain and its DNAT map, the rejoin chain and maps of a TCP port this node shares) and
// only elsewhere, pod networks, peers' MACs, a Service of several addresses; then the same with a
// Service gone and no pod networks; no ports at all; the first two with the SYN table (TrackSYN:
// no raw chains, every SYN tracked); and the first at a node-a without an address. Every TCP port
// has the SYN re-hash rule.
func dsrPlans() []nftrules.DSRPlan {
	a := netip.MustParseAddr
	ep := func(addr string, port uint16, node string) nftrules.Endpoint {
		return nftrules.Endpoint{Addr: a(addr), Port: port, Node: node, Ready: true, Serving: true, Local: node == "node-a"}
	}
	web := &nftrules.Service{Namespace: "ns1", Name: "web", ClusterIPs: []netip.Addr{a("10.96.0.10")},
		LoadBalancerIPs: []netip.Addr{a("192.0.2.240"), a("192.0.2.241")}, ExternalMode: nftrules.ExternalDSR,
		Ports: []nftrules.Port{
			{Name: "http", Protocol: nftrules.TCP, Port: 80, Endpoints: []nftrules.Endpoint{
				ep("10.244.1.5", 8080, "node-a"), ep("10.244.1.6", 8080, "node-a"), ep("10.244.2.5", 8080, "node-b"), ep("10.244.3.5", 8080, "node-c")}},
			{Name: "dns", Protocol: nftrules.UDP, Port: 53, Endpoints: []nftrules.Endpoint{
				ep("10.244.1.7", 5353, "node-a"), ep("10.244.3.6", 5353, "node-c")}},
		}}
	remote := &nftrules.Service{Namespace: "ns2", Name: "remote", ClusterIPs: []netip.Addr{a("10.96.0.11")},
		ExternalIPs: []netip.Addr{a("192.0.2.242")}, ExternalMode: nftrules.ExternalDSR,
		Ports: []nftrules.Port{{Protocol: nftrules.TCP, Port: 443, Endpoints: []nftrules.Endpoint{ep("10.244.2.9", 8443, "node-b")}}}}
	cfg := nftrules.DSRConfig{TableSize: 13,
		NodeIPs: map[string]netip.Addr{"node-a": a("192.0.2.10"), "node-b": a("192.0.2.11"), "node-c": a("192.0.2.12")},
		NodeMACs: map[string][]nftrules.EtherAddr{"node-a": {{2, 0, 0, 0, 0, 0x0a}}, "node-b": {{2, 0, 0, 0, 0, 0x0b}},
			"node-c": {{2, 0, 0, 0, 0, 0x0c}, {0x0e, 0xff, 0, 1, 2, 3}}}}
	m := &nftrules.Model{Node: nftrules.Node{Name: "node-a", ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}},
		Services: map[nftrules.ServiceKey]*nftrules.Service{web.Key(): web, remote.Key(): remote}}
	full := nftrules.PlanDSR(m, cfg)
	cfg.Slots = full.Slots
	m2 := &nftrules.Model{Node: nftrules.Node{Name: "node-a"}, Services: map[nftrules.ServiceKey]*nftrules.Service{web.Key(): web}}
	less := nftrules.PlanDSR(m2, cfg)
	none := nftrules.PlanDSR(&nftrules.Model{Node: nftrules.Node{Name: "node-a"}}, cfg)
	fullSYN, lessSYN := full, less
	fullSYN.TrackSYN, lessSYN.TrackSYN = true, true
	// node-a without an address: its endpoints are left out, it has a slot but owns nothing.
	cfg.NodeIPs = map[string]netip.Addr{"node-b": a("192.0.2.11"), "node-c": a("192.0.2.12")}
	noAddr := nftrules.PlanDSR(m, cfg)
	return []nftrules.DSRPlan{full, less, none, full, fullSYN, lessSYN, noAddr, full}
}

// dsrShapes are rules the plans TestNetlinkDSRMatchesNFT writes must hold between them (as
// WriteDSR renders them), so that the comparison covers them: the SYN re-hash rule at a node with
// an address and at one without, the rejoin rules, and both raw paths.
var dsrShapes = []string{
	"tcp flags & (syn | ack) == syn ct status & (confirmed | dnat) == confirmed meta mark set jhash ",
	" meta mark != 3221225994 ct mark set meta mark",
	"tcp flags & (syn | ack) == syn ct status & (confirmed | dnat) == confirmed ct mark set jhash ",
	"tcp flags & (syn | ack) == ack ct state new jhash ",
	"ct mark 0 ct mark set jhash ",
	"add chain ip ironlb-dsr untrack-syn",
	"add map ip ironlb-dsr dsr-alt-",
	"add element ip ironlb-dsr dsr-rejoin-",
}

// TestNetlinkDSRMatchesNFT writes DSR plans (dsrPlans, then random ones) into two namespaces, one through nft (the rules'
// text, as dsrapply wrote them before) and one over netlink (dsrapply's path), each replacing the
// table as dsrapply does, and checks after each plan that both kernels list the same table, in
// JSON and expression by expression.
func TestNetlinkDSRMatchesNFT(t *testing.T) {
	execNS, nlNS := newNetns(t), newNetns(t)
	nl, err := NewNetlinkTable(knftables.IPv4Family, nftrules.DSRTableName, netnsFD(t, nlNS))
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	fake := knftables.NewFake(knftables.IPv4Family, nftrules.DSRTableName)
	plans := dsrPlans()
	for seed := range uint64(6) {
		plans = append(plans, randomDSRPlan(seed))
	}
	var all strings.Builder
	tracked := 0
	for i, plan := range plans {
		if i == 0 && len(plan.Ports) < 3 {
			t.Fatalf("the first plan has %d ports, want 3", len(plan.Ports))
		}
		text := fake.NewTransaction()
		text.Add(&knftables.Table{})
		text.Delete(&knftables.Table{})
		nftrules.WriteDSR(text, &plan)
		all.WriteString(text.String())
		if plan.TrackSYN && len(plan.Ports) > 0 {
			tracked++
		}
		nsRun(t, execNS, text.String(), "nft", "-f", "-")

		tx := &Transaction{}
		tx.Add(&knftables.Table{})
		tx.Delete(&knftables.Table{})
		nftrules.WriteDSR(tx, &plan)
		if err := nl.Write(tx); err != nil {
			t.Fatalf("plan %d over netlink: %v", i, err)
		}
		for _, view := range []struct {
			name string
			list func(t *testing.T, ns string, fam knftables.Family, table string) []string
		}{{"nft -j list", jsonListingOf}, {"nft --debug=netlink list", netlinkListingOf}, {"the kernel's table, chains and sets", kernelObjects}} {
			want := view.list(t, execNS, knftables.IPv4Family, nftrules.DSRTableName)
			got := view.list(t, nlNS, knftables.IPv4Family, nftrules.DSRTableName)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("plan %d: %s differs (-nft +netlink):\n%s", i, view.name, diff)
			}
			if len(want) < 5 {
				t.Fatalf("plan %d: %s lists %d lines: no table?", i, view.name, len(want))
			}
		}
	}
	for _, shape := range dsrShapes {
		if !strings.Contains(all.String(), shape) {
			t.Errorf("no plan writes %q: the comparison does not cover it", shape)
		}
	}
	if tracked == 0 {
		t.Error("no plan with ports has TrackSYN")
	}
	if err := nl.DeleteTable(); err != nil {
		t.Fatal(err)
	}
	if out, err := netnstest.Output(nlNS, "nft", "list", "table", "ip", nftrules.DSRTableName); err == nil {
		t.Errorf("table left after DeleteTable:\n%s", out)
	}
	if err := nl.DeleteTable(); err != nil {
		t.Errorf("deleting a missing table: %v", err)
	}
}

// kernelObjects returns the attributes the kernel holds for the table, its chains and its sets,
// one sorted line per object, handles left out: what neither listing shows in full (the userdata
// of sets, which nft reads declarations back from, and of chains and the table, which hold their
// comments; key and data types and lengths; set flags and backends).
func kernelObjects(t *testing.T, ns string, fam knftables.Family, table string) []string {
	t.Helper()
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: netnsFD(t, ns)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	nfproto := byte(unix.NFPROTO_IPV4)
	if fam == knftables.IPv6Family {
		nfproto = unix.NFPROTO_IPV6
	}
	var lines []string
	for _, k := range []struct {
		name      string
		msg       uint16
		tableAttr uint16
		handle    uint16
	}{
		{"table", unix.NFT_MSG_GETTABLE, unix.NFTA_TABLE_NAME, 4 /* NFTA_TABLE_HANDLE */},
		{"chain", unix.NFT_MSG_GETCHAIN, unix.NFTA_CHAIN_TABLE, unix.NFTA_CHAIN_HANDLE},
		{"set", unix.NFT_MSG_GETSET, unix.NFTA_SET_TABLE, 16 /* NFTA_SET_HANDLE */},
	} {
		msgs, err := c.Execute(netlink.Message{
			Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | k.msg), Flags: netlink.Request | netlink.Dump},
			Data:   []byte{nfproto, unix.NFNETLINK_V0, 0, 0},
		})
		if err != nil {
			t.Fatalf("dumping %ss: %v", k.name, err)
		}
		for _, m := range msgs {
			attrs, err := netlink.UnmarshalAttributes(m.Data[4:])
			if err != nil {
				t.Fatal(err)
			}
			ours := false
			line := k.name
			for _, a := range attrs {
				if a.Type == k.tableAttr && string(a.Data) == table+"\x00" {
					ours = true
				}
				if a.Type != k.handle {
					line += fmt.Sprintf(" %d:%x", a.Type, a.Data)
				}
			}
			if ours {
				lines = append(lines, line)
			}
		}
	}
	slices.Sort(lines)
	return lines
}
