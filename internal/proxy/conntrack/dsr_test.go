package conntrack

import (
	"net"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ironlb/ironlb/internal/proxy/nftrules"
)

func TestDSRMoved(t *testing.T) {
	vip, vip2, vip6 := a("192.168.1.240"), a("192.168.1.241"), a("fd00::240")
	ips := map[string]netip.Addr{"node-a": a("192.168.0.10"), "node-b": a("192.168.0.11"), "node-c": a("192.168.0.12")}
	idA, idB, idC := nftrules.NodeID(ips["node-a"]), nftrules.NodeID(ips["node-b"]), nftrules.NodeID(ips["node-c"])
	dnsKey := nftrules.ServiceKey{Namespace: "ns1", Name: "dns"}
	// plan is node-a's plan of ns1/dns: udp 53 and tcp 53 on vip (and vip2, vip6 when given), each
	// owned by nodes; the tcp port keeps every node's flows (all three list endpoints).
	plan := func(ipsOf map[string]netip.Addr, addrs []netip.Addr, nodes ...string) *nftrules.DSRPlan {
		return &nftrules.DSRPlan{Self: "node-a", NodeIPs: ipsOf, Ports: []nftrules.DSRPort{
			{Service: dnsKey, Protocol: nftrules.UDP, Port: 53, Addrs: addrs, Nodes: nodes},
			{Service: dnsKey, Protocol: nftrules.TCP, Port: 53, Addrs: addrs, Nodes: nodes, Keep: []string{"node-a", "node-b", "node-c"}},
		}}
	}
	one := []netip.Addr{vip}
	f := func(addr netip.Addr, mark uint32) Filter {
		return Filter{Protocol: nftrules.UDP, OrigDst: addr, DPort: 53, ReplySrc: addr, Mark: mark}
	}
	ft := func(addr netip.Addr, mark uint32) Filter {
		return Filter{Protocol: nftrules.TCP, OrigDst: addr, DPort: 53, ReplySrc: addr, Mark: mark}
	}
	tcpOnly := plan(ips, one, "node-a", "node-b")
	tcpOnly.Ports[0].Nodes = []string{"node-a"} // udp lost node-b: the tcp port's change alone selects nothing
	for _, tc := range []struct {
		name     string
		old, now *nftrules.DSRPlan
		want     []Filter
	}{
		{"no plan", plan(ips, one, "node-a"), nil, nil},
		{"first plan: this node's own mark, udp and tcp", nil, plan(ips, one, "node-a", "node-b"), []Filter{f(vip, idA), ft(vip, idA)}},
		{"first plan, this node without IPv4", nil, plan(map[string]netip.Addr{"node-b": ips["node-b"]}, one, "node-b"), nil},
		{"no change", plan(ips, one, "node-a", "node-b"), plan(ips, one, "node-a", "node-b"), nil},
		{"an owner added", plan(ips, one, "node-a"), plan(ips, one, "node-a", "node-b"), nil},
		{"an owner lost: its mark and this node's", plan(ips, one, "node-a", "node-b", "node-c"), plan(ips, one, "node-a", "node-c"),
			[]Filter{f(vip, idA), f(vip, idB)}},
		{"two lost, every IPv4 address, marks sorted", plan(ips, []netip.Addr{vip, vip2, vip6}, "node-a", "node-b", "node-c"),
			plan(ips, []netip.Addr{vip, vip2, vip6}, "node-a"),
			[]Filter{f(vip, idA), f(vip, idB), f(vip, idC), f(vip2, idA), f(vip2, idB), f(vip2, idC)}},
		{"this node lost itself: its mark once", plan(ips, one, "node-a", "node-b"), plan(ips, one, "node-b"), []Filter{f(vip, idA)}},
		{"lost owner without an address in the old plan", plan(map[string]netip.Addr{"node-a": ips["node-a"]}, one, "node-a", "node-b"),
			plan(ips, one, "node-a"), nil},
		{"the tcp port lost an owner of new flows, not of kept ones; the udp port lost none", plan(ips, one, "node-a", "node-b"), func() *nftrules.DSRPlan {
			p := plan(ips, one, "node-a", "node-b")
			p.Ports[1].Nodes = []string{"node-a"} // node-b dead, its pods still listed
			return p
		}(), nil},
		{"the tcp port's Keep lost a node (its pods gone): its mark and this node's", plan(ips, one, "node-a", "node-b", "node-c"), func() *nftrules.DSRPlan {
			p := plan(ips, one, "node-a", "node-b", "node-c")
			p.Ports[1].Nodes = []string{"node-a", "node-c"}
			p.Ports[1].Keep = []string{"node-a", "node-c"}
			return p
		}(), []Filter{ft(vip, idA), ft(vip, idB)}},
		{"both lost node-b", plan(ips, one, "node-a", "node-b"), func() *nftrules.DSRPlan {
			p := plan(ips, one, "node-a")
			p.Ports[1].Keep = []string{"node-a", "node-c"}
			return p
		}(), []Filter{f(vip, idA), f(vip, idB), ft(vip, idA), ft(vip, idB)}},
		{"the udp port lost an owner", plan(ips, one, "node-a", "node-b"), tcpOnly, []Filter{f(vip, idA), f(vip, idB)}},
		{"another port number: not the same port", plan(ips, one, "node-a", "node-b"), func() *nftrules.DSRPlan {
			p := plan(ips, one, "node-a")
			p.Ports[0].Port = 54
			return p
		}(), nil},
		{"another Service: not the same port", plan(ips, one, "node-a", "node-b"), func() *nftrules.DSRPlan {
			p := plan(ips, one, "node-a")
			p.Ports[0].Service.Name = "dns2"
			return p
		}(), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := DSRMoved(tc.old, tc.now)
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(x, y netip.Addr) bool { return x == y })); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestFilterMark: a filter with a mark says so to the conntrack tool, and its netlink filter wants
// the mark as well as the rest.
func TestFilterMark(t *testing.T) {
	f := Filter{Protocol: nftrules.UDP, OrigDst: a("192.168.1.240"), DPort: 53, ReplySrc: a("192.168.1.240"), Mark: 3232235531}
	if got, want := f.String(), "-p udp --orig-dst 192.168.1.240 --dport 53 --reply-src 192.168.1.240 --mark 3232235531"; got != want {
		t.Errorf("args %q, want %q", got, want)
	}
	nf, err := f.netlink()
	if err != nil {
		t.Fatal(err)
	}
	flow := func(replySrc string, mark uint32) *netlink.ConntrackFlow {
		return newFlow("192.0.2.100", "192.168.1.240", replySrc, 53, mark)
	}
	for _, tc := range []struct {
		name string
		flow *netlink.ConntrackFlow
		want bool
	}{
		{"not DNATed, the mark", flow("192.168.1.240", 3232235531), true},
		{"not DNATed, another mark", flow("192.168.1.240", 3232235530), false},
		{"not DNATed, no mark", flow("192.168.1.240", 0), false},
		{"DNATed, the mark", flow("10.244.1.5", 3232235531), false},
	} {
		if got := nf.MatchConntrackFlow(tc.flow); got != tc.want {
			t.Errorf("%s: match %v, want %v", tc.name, got, tc.want)
		}
	}
	// Without a mark, any mark.
	f.Mark = 0
	if nf, err = f.netlink(); err != nil {
		t.Fatal(err)
	}
	if !nf.MatchConntrackFlow(flow("192.168.1.240", 7)) {
		t.Error("a filter without a mark did not match a marked entry")
	}
}

// newFlow is a UDP entry from src to dst:dport whose replies come from replySrc, with mark.
func newFlow(src, dst, replySrc string, dport uint16, mark uint32) *netlink.ConntrackFlow {
	return &netlink.ConntrackFlow{FamilyType: unix.AF_INET, Mark: mark,
		Forward: netlink.IPTuple{Protocol: unix.IPPROTO_UDP, SrcIP: net.ParseIP(src), DstIP: net.ParseIP(dst), SrcPort: 40000, DstPort: dport},
		Reverse: netlink.IPTuple{Protocol: unix.IPPROTO_UDP, SrcIP: net.ParseIP(replySrc), DstIP: net.ParseIP(src), SrcPort: dport, DstPort: 40000}}
}
