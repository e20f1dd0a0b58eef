package dsrapply_test

import (
	"fmt"
	"testing"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/ironlb/ironlb/internal/proxy/dsrapply"
	"github.com/ironlb/ironlb/internal/testbed/netnstest"
)

// dsrVIP is the DSR address of the Service in the segment tests: client C reaches it through an
// entry node (dsrTopology's route, as through a layer-2 announcer).
const dsrVIP = "198.51.100.10"

// dsrHost is a host on the segment's bridge: its name and its IPv4 address (a /24 on its eth0).
type dsrHost struct{ name, addr string }

// dsrPod is a pod behind the host node: node's end of their veth (vp) has gw/24, the pod's eth0
// addr/24, and the pod's default route goes through gw.
type dsrPod struct{ name, node, gw, addr string }

// dsrTopology builds the segment the DSR tests share in throwaway network namespaces
// PREFIX-NAME-PID, every address inside them, each removed when the test ends (on every path):
// a bridge in namespace "sw", each host joined to it by its eth0, each pod behind its node, and
// the route of host "c" (the client) to dsrVIP through the host named entry. It returns the
// namespaces by name ("sw", the hosts', the pods'). It skips the test unless root with nft, ip
// and sysctl.
func dsrTopology(t *testing.T, prefix, entry string, hosts []dsrHost, pods []dsrPod) map[string]string {
	t.Helper()
	names := []string{"sw"}
	for _, h := range hosts {
		names = append(names, h.name)
	}
	for _, p := range pods {
		names = append(names, p.name)
	}
	list, in := segment(t, prefix, names...)
	nss := map[string]string{}
	for i, n := range names {
		nss[n] = list[i]
	}
	sw := nss["sw"]
	in(sw, "ip", "link", "add", "br0", "type", "bridge")
	in(sw, "ip", "link", "set", "br0", "up")
	via := ""
	for i, h := range hosts {
		port := fmt.Sprintf("p%d", i)
		netnstest.Veth(t, netnstest.End{NS: sw, Name: port}, netnstest.End{NS: nss[h.name], Name: "eth0", Addrs: []string{h.addr + "/24"}})
		in(sw, "ip", "link", "set", port, "master", "br0")
		in(nss[h.name], "ip", "link", "set", "lo", "up")
		if h.name == entry {
			via = h.addr
		}
	}
	for _, p := range pods {
		podBehind(t, nss[p.node], nss[p.name], p.gw, p.addr)
	}
	if via == "" {
		t.Fatalf("the entry host %q is not among the hosts", entry)
	}
	in(nss["c"], "ip", "route", "add", dsrVIP+"/32", "via", via)
	return nss
}

// podBehind joins the pod's namespace to its node's by a veth pair: the node's end vp with gw/24,
// the pod's eth0 with addr/24 and the pod's default route through gw.
func podBehind(t *testing.T, node, pod, gw, addr string) {
	t.Helper()
	netnstest.Veth(t, netnstest.End{NS: node, Name: "vp", Addrs: []string{gw + "/24"}}, netnstest.End{NS: pod, Name: "eth0", Addrs: []string{addr + "/24"}})
	netnstest.Run(t, pod, "ip", "link", "set", "lo", "up")
	netnstest.Run(t, pod, "ip", "route", "add", "default", "via", gw)
}

// applierIn returns an Applier of network namespace ns (sysctl run there, netlink bound to it, the
// handles closed when the test ends) and its netlink handle.
func applierIn(t *testing.T, ns string) (*dsrapply.Applier, *netlink.Handle) {
	t.Helper()
	nsh, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	h, err := netlink.NewHandleAt(nsh)
	if err != nil {
		nsh.Close()
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	defer nsh.Close()
	return dsrapply.New(tableIn(t, ns), h, netnstest.Sysctl(ns)).WithSYNTable(synConnIn(t, nsh)), h
}

// synConnIn returns a google/nftables connection that stays in the network namespace of nsh,
// closed when the test ends.
func synConnIn(t *testing.T, nsh netns.NsHandle) *nftables.Conn {
	t.Helper()
	c, err := nftables.New(nftables.AsLasting(), nftables.WithNetNSFd(int(nsh)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseLasting() })
	return c
}
