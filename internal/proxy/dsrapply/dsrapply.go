// Package dsrapply carries out a direct-server-return plan (nftrules.PlanDSR) on this node: the
// nftables table nftrules.DSRTableName, written over netlink in one batch by nftapply's writer
// (nftapply.NewNetlinkTable: the rules go as nftrules' statements, encoded as nft would encode
// their text, so no nft binary is needed), and the policy routing that sends each
// other node's mark to that node as next hop (one `ip rule fwmark SLOT<<16/0x0fff0000 lookup
// TABLE` and one `default via NODE-IP` route per node, through vishvananda/netlink), or, for a
// node behind a gateway, through the vxlan device nftrules.DSRVXLANDevice; and the sysctls the
// path needs. [Applier.Cleanup] removes all of it.
//
// # The loop guard's peers, and who can change them
//
// A packet a peer node forwarded is served by the node it reaches (nftrules.WriteDSR, set
// peer-macs): the guard knows a peer by the source MAC of its frames. Which MACs are peers' must
// come from where only the nodes write. Until issue 19's fix, Apply read them from the kernel's
// neighbour table, which every host on the segment writes with one gratuitous ARP: a host that
// claimed a node's address (the chaos soak's replayed-heartbeat attack does) put its own MAC in
// the set, and from the next sync on the entry node served that host's packets to a DSR address
// itself instead of sending them to their owner, breaking every connection another node served;
// it could as well evict a real peer's MAC. Now each node's proxy publishes the MACs of its own
// interfaces that carry its InternalIPs ([LocalMACs]) on its own Node (annotation
// convert.AnnotationDSRMACs, written through nodes/status; config/proxy's
// ValidatingAdmissionPolicy lets a proxy change that one annotation of its own Node only, by the
// node name bound into its ServiceAccount token), and the plan takes them from the Nodes
// (nftrules.DSRConfig.NodeMACs). Apply reads no neighbour entry.
//
// What a host on the segment can still do: send frames with a peer's source MAC. Those are served
// by the node they reach, as a forwarded packet is; the host gets its own flows to a DSR address
// served by a node of its choice (which has endpoints for the port), and nothing of anyone else's
// flows. And, as on any shared segment without ARP inspection, a host that claims a node's address
// receives what is sent to that address, DSR-forwarded packets included; the guard does not
// change that (it is the segment's, and snat's node-to-pod traffic has it too).
//
// # The SYN table, and a client that reuses a source port
//
// Besides the DSR table, Apply adds the small table nftrules.DSRSYNTableName over netlink
// (google/nftables directly, in its own batch: its ct timeout object is no statement of
// nftrules'): a conntrack timeout policy that makes the
// entry of a SYN this node forwards expire as it is confirmed. With it the DSR table tracks every
// SYN (nftrules.DSRPlan.TrackSYN), so that a SYN reusing the 5-tuple of an old connection reaches
// that connection's conntrack entry: conntrack replaces a TIME_WAIT or CLOSE entry (a DNAT to this
// node's own pod, say), and the DSR table re-hashes the owner remembered by an old one-way entry
// that conntrack keeps (FIN_WAIT, CLOSE_WAIT). Without the table (a kernel without
// CONFIG_NF_CONNTRACK_TIMEOUT: Apply warns) forwarded SYNs stay untracked, as before, and such a
// new connection can follow the old one's entry to the old owner or pod (docs/dsr.md, limits).
package dsrapply

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/ironlb/ironlb/internal/proxy/nftapply"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
)

// Table writes the DSR table: *nftapply.Netlink for nftrules.DSRTableName (nftapply.NewNetlinkTable),
// in production and in the netns tests alike.
type Table interface {
	// Write sends a transaction in one batch (all or nothing).
	Write(tx *nftapply.Transaction) error
	// DeleteTable deletes the table; a missing table is not an error.
	DeleteTable() error
}

var _ Table = (*nftapply.Netlink)(nil)

// Routing is the policy-routing edge: netlink.Handle in production, a fake in tests.
type Routing interface {
	RuleList(family int) ([]netlink.Rule, error)
	RuleAdd(rule *netlink.Rule) error
	RuleDel(rule *netlink.Rule) error
	RouteListFiltered(family int, filter *netlink.Route, filterMask uint64) ([]netlink.Route, error)
	RouteReplace(route *netlink.Route) error
	RouteDel(route *netlink.Route) error
	RouteGet(destination net.IP) ([]netlink.Route, error)
	NeighSet(neigh *netlink.Neigh) error
	LinkByName(name string) (netlink.Link, error)
	LinkAdd(link netlink.Link) error
	LinkSetUp(link netlink.Link) error
	LinkDel(link netlink.Link) error
	LinkByIndex(index int) (netlink.Link, error)
	AddrList(link netlink.Link, family int) ([]netlink.Addr, error)
	AddrReplace(link netlink.Link, addr *netlink.Addr) error
}

var _ Routing = (*netlink.Handle)(nil)

// Sysctls are the settings the DSR path needs on every node, with why:
//   - ip_forward: the entry node forwards the unmodified packet to the owner;
//   - send_redirects off: the entry node forwards out of the interface the packet came in by, and
//     would otherwise tell the client (ICMP redirect) to talk to the owner directly. The kernel
//     sends redirects if "all" OR the device says so, so the devices that reach the peers are set
//     too (Apply; in the lab, eth0 kept 1 and mypc counted ICMP redirects from the entry node);
//   - nf_conntrack_tcp_be_liberal: the entry node sees only the client's half of a TCP flow; its
//     conntrack entry must not call the client's segments out of window (INVALID);
//   - nf_conntrack_tcp_loose: a mid-stream ACK (the entry's first packet of a flow after a SYN
//     whose entry expired at once (the SYN table) or that was not tracked, or after a failover)
//     starts a tracked flow.
var Sysctls = map[string]string{
	"net/ipv4/ip_forward":                       "1",
	"net/ipv4/conf/all/send_redirects":          "0",
	"net/ipv4/conf/default/send_redirects":      "0",
	"net/netfilter/nf_conntrack_tcp_be_liberal": "1",
	"net/netfilter/nf_conntrack_tcp_loose":      "1",
}

// Applier applies DSR plans. It is not safe for concurrent use: the proxy's sync loop owns it.
type Applier struct {
	table  Table
	rt     Routing
	sysctl func(name, value string) error
	done   bool // sysctls written (or tried)
	// warnings are problems that do not fail a sync (a sysctl not written, a node not on a
	// connected network), for the caller to log: Warnings returns and clears them.
	warnings []error
	slots    map[string]int
	// quiet are the devices whose send_redirects was written (the devices that reach peers).
	quiet map[string]bool
	// syn writes the SYN table (nftrules.DSRSYNTableName; nil: none, SYNs of forwarded flows
	// stay untracked); synOK says the last write worked, synFailed that a failure was reported.
	syn              *nftables.Conn
	synOK, synFailed bool
	// floodFailed says a failure to write the flood table (flood.go, through syn's connection)
	// was reported.
	floodFailed bool
	// links are the links DSR routes were written through (RouteLinks, WatchLinks).
	links routeLinks
}

// New returns an Applier over table (a writer of family ip's table nftrules.DSRTableName) and
// rt. sysctl writes one setting (nil: /proc/sys).
func New(table Table, rt Routing, sysctl func(name, value string) error) *Applier {
	if sysctl == nil {
		sysctl = ProcSysWriter("")
	}
	return &Applier{table: table, rt: rt, sysctl: sysctl}
}

// NewTable returns the writer of the DSR table in the network namespace netns (an open file
// descriptor of a namespace, or 0 for the calling thread's).
func NewTable(netns int) (*nftapply.Netlink, error) {
	return nftapply.NewNetlinkTable(knftables.IPv4Family, nftrules.DSRTableName, netns)
}

// NewKernel returns an Applier of this network namespace that writes its sysctls under procSys
// ("" = /proc/sys; a container's mount of the host's, such as /host/proc/sys). It needs no nft binary.
func NewKernel(procSys string) (*Applier, error) {
	t, err := NewTable(0)
	if err != nil {
		return nil, err
	}
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	syn, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("nftables netlink: %w", err)
	}
	return New(t, h, ProcSysWriter(procSys)).WithSYNTable(syn), nil
}

// WithSYNTable has a write the SYN table (nftrules.DSRSYNTableName) and the flood table
// (FloodTableName) through c, in the network namespace c works in, and returns a. Without it the
// SYNs of flows other nodes own are not tracked (nftrules.DSRPlan.TrackSYN), and frames flooded to
// a dead entry node are not taken.
func (a *Applier) WithSYNTable(c *nftables.Conn) *Applier {
	a.syn = c
	return a
}

// ProcSysWriter returns the sysctl writer of New that writes name (net/ipv4/ip_forward) under
// root ("" = /proc/sys). A read-only root (a container that is not privileged) gives an error
// that says how to mount the host's.
func ProcSysWriter(root string) func(name, value string) error {
	if root == "" {
		root = "/proc/sys"
	}
	return func(name, value string) error {
		err := os.WriteFile(filepath.Join(root, name), []byte(value), 0o644)
		if errors.Is(err, unix.EROFS) {
			return fmt.Errorf("%w (the container's %s is read-only: mount the host's /proc/sys/net at /host/proc/sys/net and pass --proc-sys=/host/proc/sys, as the chart does)", err, root)
		}
		return err
	}
}

// Warnings returns the problems of the last Apply calls that did not fail them, and forgets them:
// a sysctl that could not be written, a node that is not on a connected network (its flows are
// routed by the main table, i.e. not delivered).
func (a *Applier) Warnings() []error {
	w := a.warnings
	a.warnings = nil
	return w
}

// Slots returns the node slots of the last plan applied, for the next PlanDSR.
func (a *Applier) Slots() map[string]int { return a.slots }

// Apply writes plan's table (in one transaction) and makes policy routing match plan.Routes.
// The table is written even for a plan without ports (it then passes every packet); sysctls are
// written once, when the first plan with ports comes.
func (a *Applier) Apply(ctx context.Context, plan *nftrules.DSRPlan) error {
	var errs []error
	if len(plan.Ports) > 0 && !a.done {
		for _, k := range sortedKeys(Sysctls) {
			if err := a.sysctl(k, Sysctls[k]); err != nil {
				a.warnings = append(a.warnings, fmt.Errorf("sysctl %s=%s: %w", k, Sysctls[k], err))
			}
		}
		a.done = true
	}
	// Routes first: a mark whose route is missing would be routed by the main table, toward the
	// address itself, i.e. back to the router.
	vx := 0
	if self := plan.NodeIPs[plan.Self]; len(plan.Ports) > 0 && self.Is4() && a.offLinkPeer(plan.Peers) {
		// A node with a peer behind a gateway may send or receive encapsulated flows.
		var err error
		if vx, err = a.ensureVXLAN(self); err != nil {
			a.warnings = append(a.warnings, err)
		} else if err := a.sysctl("net/ipv4/conf/"+nftrules.DSRVXLANDevice+"/rp_filter", "2"); err != nil {
			a.warnings = append(a.warnings, fmt.Errorf("loose rp_filter on %s: %w", nftrules.DSRVXLANDevice, err))
		}
	}
	if err := a.syncRoutes(plan.Routes, vx); err != nil {
		errs = append(errs, err)
	}
	if len(plan.Ports) > 0 {
		a.noRedirects(plan.Peers)
	}
	// The SYN table before the table that tracks forwarded SYNs, on every sync (so that one
	// deleted by hand comes back): adding it again only replaces its one rule, and keeps the
	// timeout object (deleting one walks the whole conntrack table).
	if len(plan.Ports) > 0 && a.syn != nil {
		if err := writeSYNTable(a.syn); err != nil {
			a.synOK = false
			if !a.synFailed {
				a.warnings = append(a.warnings, fmt.Errorf("table %s (conntrack timeout policies, CONFIG_NF_CONNTRACK_TIMEOUT): %w: SYNs of flows other nodes own stay untracked, and a client reusing a source port can meet its old connection's conntrack entry", nftrules.DSRSYNTableName, err))
				a.synFailed = true
			}
		} else {
			a.synOK, a.synFailed = true, false
		}
	}
	p := *plan
	p.TrackSYN = a.synOK
	tx := &nftapply.Transaction{}
	// Delete and re-create: the table is small, and this drops per-port chains and maps of
	// Services that left in the same atomic batch.
	tx.Add(&knftables.Table{})
	tx.Delete(&knftables.Table{})
	nftrules.WriteDSR(tx, &p)
	if err := a.table.Write(tx); err != nil {
		errs = append(errs, fmt.Errorf("writing table %s: %w", nftrules.DSRTableName, err))
	}
	// The flood table after the DSR table, whose rules serve what it takes (flood.go).
	if a.syn != nil {
		links, err := floodLinks(a.rt, []netip.Addr{plan.NodeIPs[plan.Self]})
		if err == nil {
			err = writeFloodTable(a.syn, &p, links)
		}
		if err != nil {
			if !a.floodFailed {
				a.warnings = append(a.warnings, fmt.Errorf("table netdev %s: %w: frames flooded to a dead entry node's MAC are not taken; a request sent into a layer-2 failover waits for the client's retransmission", FloodTableName, err))
				a.floodFailed = true
			}
		} else {
			a.floodFailed = false
		}
	}
	a.slots = plan.Slots
	return errors.Join(errs...)
}

// Cleanup deletes the DSR table, the SYN table (if a has one: WithSYNTable) and every policy rule
// and route of the DSR routing tables, all over netlink.
func (a *Applier) Cleanup(ctx context.Context) error {
	var errs []error
	if err := a.table.DeleteTable(); err != nil {
		errs = append(errs, fmt.Errorf("deleting table %s: %w", nftrules.DSRTableName, err))
	}
	if a.syn != nil {
		t := synTable()
		a.syn.AddTable(t) // so that the delete finds one
		a.syn.DelTable(t)
		if err := a.syn.Flush(); err != nil {
			errs = append(errs, fmt.Errorf("deleting table %s: %w", nftrules.DSRSYNTableName, err))
		}
		a.synOK = false
		ft := a.syn.AddTable(floodTable())
		a.syn.DelTable(ft)
		if err := a.syn.Flush(); err != nil {
			errs = append(errs, fmt.Errorf("deleting table netdev %s: %w", FloodTableName, err))
		}
	}
	if err := a.syncRoutes(nil, 0); err != nil {
		errs = append(errs, err)
	}
	if l, err := a.rt.LinkByName(nftrules.DSRVXLANDevice); err == nil {
		if err := a.rt.LinkDel(l); err != nil {
			errs = append(errs, fmt.Errorf("deleting %s: %w", nftrules.DSRVXLANDevice, err))
		}
	}
	return errors.Join(errs...)
}

// VXLAN settings: every node uses the same VNI and port; a node's device MAC is derived from its
// address, so that entry nodes know it without asking.
const (
	VXLANID       = 0x1b1b
	VXLANPort     = 4789
	vxlanOverhead = 50 // outer IPv4 20 + UDP 8 + vxlan 8 + inner Ethernet 14
)

// vxlanMAC is the MAC of the DSR vxlan device of the node at ip.
func vxlanMAC(ip netip.Addr) net.HardwareAddr {
	b := ip.As4()
	return net.HardwareAddr{0x02, 0x1b, b[0], b[1], b[2], b[3]}
}

// encapNextHop is the link-local next hop that stands for slot's node on the vxlan device.
func encapNextHop(slot int) net.IP { return net.IPv4(169, 254, byte(0x1b+slot>>8), byte(slot)) }

// ensureVXLAN creates (or finds) the DSR vxlan device, sourced from self, and returns its index.
func (a *Applier) ensureVXLAN(self netip.Addr) (int, error) {
	if l, err := a.rt.LinkByName(nftrules.DSRVXLANDevice); err == nil {
		if l.Attrs().OperState != netlink.OperUp {
			_ = a.rt.LinkSetUp(l)
		}
		return l.Attrs().Index, a.vxlanAddr(l)
	}
	mtu := 1500 // of the interface that has self's address, if found
	if addrs, err := a.rt.AddrList(nil, netlink.FAMILY_V4); err == nil {
		for _, ad := range addrs {
			if ip, ok := netip.AddrFromSlice(ad.IP); ok && ip.Unmap() == self {
				if l, err := a.rt.LinkByIndex(ad.LinkIndex); err == nil && l.Attrs().MTU > 0 {
					mtu = l.Attrs().MTU
				}
			}
		}
	}
	vx := &netlink.Vxlan{
		LinkAttrs: netlink.LinkAttrs{Name: nftrules.DSRVXLANDevice, HardwareAddr: vxlanMAC(self), MTU: mtu - vxlanOverhead},
		VxlanId:   VXLANID, SrcAddr: net.IP(self.AsSlice()), Port: VXLANPort, Learning: false,
	}
	if err := a.rt.LinkAdd(vx); err != nil {
		return 0, fmt.Errorf("creating %s: %w", nftrules.DSRVXLANDevice, err)
	}
	l, err := a.rt.LinkByName(nftrules.DSRVXLANDevice)
	if err != nil {
		return 0, fmt.Errorf("finding %s: %w", nftrules.DSRVXLANDevice, err)
	}
	if err := a.rt.LinkSetUp(l); err != nil {
		return 0, fmt.Errorf("setting %s up: %w", nftrules.DSRVXLANDevice, err)
	}
	return l.Attrs().Index, a.vxlanAddr(l)
}

// offLinkPeer reports whether a peer is reached through a gateway (then this node needs the vxlan
// device, to send to it or receive from it).
// noRedirects turns ICMP redirects off on each device a peer is reached through (once per device):
// "all" alone does not, since the kernel ORs it with the device's own value.
func (a *Applier) noRedirects(peers []netip.Addr) {
	for _, p := range peers {
		via, err := a.rt.RouteGet(net.IP(p.AsSlice()))
		if err != nil || len(via) == 0 || via[0].LinkIndex == 0 {
			continue
		}
		l, err := a.rt.LinkByIndex(via[0].LinkIndex)
		if err != nil || a.quiet[l.Attrs().Name] {
			continue
		}
		name := l.Attrs().Name
		if a.quiet == nil {
			a.quiet = map[string]bool{}
		}
		a.quiet[name] = true
		if err := a.sysctl("net/ipv4/conf/"+name+"/send_redirects", "0"); err != nil {
			a.warnings = append(a.warnings, fmt.Errorf("send_redirects off on %s: %w", name, err))
		}
	}
}

func (a *Applier) offLinkPeer(peers []netip.Addr) bool {
	for _, p := range peers {
		if via, err := a.rt.RouteGet(net.IP(p.AsSlice())); err == nil && len(via) > 0 && via[0].Gw != nil {
			return true
		}
	}
	return false
}

// vxlanAddr gives the vxlan device an IPv4 address (the same link-local /32 on every node): the
// kernel's reverse-path check fails every packet that arrives on a device without one, in strict
// and loose mode alike.
func (a *Applier) vxlanAddr(l netlink.Link) error {
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(169, 254, 26, 1).To4(), Mask: net.CIDRMask(32, 32)}, Scope: int(netlink.SCOPE_LINK)}
	if err := a.rt.AddrReplace(l, addr); err != nil {
		return fmt.Errorf("address of %s: %w", nftrules.DSRVXLANDevice, err)
	}
	return nil
}

// encap points rt (r's default route) through the vxlan device vx: neighbor and forwarding-database
// entries for r's node.
func (a *Applier) encap(vx int, r nftrules.DSRRoute, rt *netlink.Route) error {
	mac, nh := vxlanMAC(r.IP), encapNextHop(r.Slot)
	if err := a.rt.NeighSet(&netlink.Neigh{LinkIndex: vx, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT, IP: nh, HardwareAddr: mac}); err != nil {
		return fmt.Errorf("neighbor of node %s on %s: %w", r.Node, nftrules.DSRVXLANDevice, err)
	}
	if err := a.rt.NeighSet(&netlink.Neigh{LinkIndex: vx, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF, State: netlink.NUD_PERMANENT,
		IP: net.IP(r.IP.AsSlice()), HardwareAddr: mac}); err != nil {
		return fmt.Errorf("forwarding entry of node %s on %s: %w", r.Node, nftrules.DSRVXLANDevice, err)
	}
	rt.Gw, rt.LinkIndex, rt.Flags = nh, vx, int(netlink.FLAG_ONLINK)
	return nil
}

// LocalMACs returns the Ethernet addresses of this namespace's interfaces that carry one of ips,
// sorted, each once: what the proxy publishes on its Node (convert.AnnotationDSRMACs) for the
// other nodes' loop guard. A peer forwards to this node's InternalIP, so its frames leave from the
// interface that has its own InternalIP; this node's frames to a peer likewise. Interfaces without
// an Ethernet address (loopback, tunnels) are left out.
func LocalMACs(rt Routing, ips []netip.Addr) ([]nftrules.EtherAddr, error) {
	addrs, err := rt.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("listing addresses: %w", err)
	}
	var out []nftrules.EtherAddr
	seen := map[int]bool{}
	for _, ad := range addrs {
		ip, ok := netip.AddrFromSlice(ad.IP)
		if !ok || !slices.Contains(ips, ip.Unmap()) || seen[ad.LinkIndex] {
			continue
		}
		seen[ad.LinkIndex] = true
		l, err := rt.LinkByIndex(ad.LinkIndex)
		if err != nil {
			return nil, fmt.Errorf("link %d of %s: %w", ad.LinkIndex, ip, err)
		}
		if hw := l.Attrs().HardwareAddr; len(hw) == 6 {
			out = append(out, nftrules.EtherAddr(hw))
		}
	}
	slices.SortFunc(out, func(a, b nftrules.EtherAddr) int { return slices.Compare(a[:], b[:]) })
	return slices.Compact(out), nil
}

func isDSRTable(t int) bool {
	return t > nftrules.DSRTable(0) && t <= nftrules.DSRTable(nftrules.DSRMaxSlot)
}

// syncRoutes makes the DSR rules and routes those of want: one rule and one default route per
// route, in table DSRTable(slot). Rules and routes of DSR tables not wanted are deleted.
//
// A node on a connected network is the next hop itself. A node behind a gateway is reached
// through the vxlan device vx (0: none): its route goes to a link-local next hop whose neighbor
// entry is the node's vxlan MAC, and the forwarding database sends that MAC to the node's address.
func (a *Applier) syncRoutes(want []nftrules.DSRRoute, vx int) error {
	var errs []error
	wantTable := map[int]nftrules.DSRRoute{}
	for _, r := range want {
		wantTable[nftrules.DSRTable(r.Slot)] = r
	}
	rules, err := a.rt.RuleList(netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("listing policy rules: %w", err)
	}
	// Two rules per slot: the mark to the slot's table, and, one priority earlier, the mark of
	// a packet this node sends (iif lo: the vxlan device's outer packet, which keeps the inner
	// packet's mark) to the main table, or the outer packet would be routed into the tunnel again.
	have, haveLocal := map[int]bool{}, map[uint32]bool{}
	wantMark := map[uint32]bool{}
	for _, r := range want {
		wantMark[nftrules.DSRMark(r.Slot)] = true
	}
	for i := range rules {
		r := &rules[i]
		ours := r.Mask != nil && *r.Mask == nftrules.DSRMarkMask
		switch {
		case isDSRTable(r.Table):
			w, ok := wantTable[r.Table]
			if ok && ours && r.Mark == nftrules.DSRMark(w.Slot) && !have[r.Table] {
				have[r.Table] = true
				continue
			}
		case ours && r.Priority == nftrules.DSRRulePriority-1 && r.IifName == "lo":
			if wantMark[r.Mark] && !haveLocal[r.Mark] {
				haveLocal[r.Mark] = true
				continue
			}
		default:
			continue
		}
		if err := a.rt.RuleDel(r); err != nil {
			errs = append(errs, fmt.Errorf("deleting policy rule to table %d: %w", r.Table, err))
		}
	}
	// Routes of DSR tables no longer wanted (one dump of every table).
	routes, err := a.rt.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		errs = append(errs, fmt.Errorf("listing routes: %w", err))
	}
	for i := range routes {
		if _, ok := wantTable[routes[i].Table]; ok || !isDSRTable(routes[i].Table) {
			continue
		}
		if err := a.rt.RouteDel(&routes[i]); err != nil {
			errs = append(errs, fmt.Errorf("deleting route of table %d: %w", routes[i].Table, err))
		}
	}
	for _, r := range want {
		t := nftrules.DSRTable(r.Slot)
		gw := net.IP(r.IP.AsSlice())
		rt := &netlink.Route{Table: t, Gw: gw, Dst: &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}}
		if via, err := a.rt.RouteGet(gw); err == nil && len(via) > 0 {
			rt.LinkIndex = via[0].LinkIndex
			if via[0].Gw != nil {
				if vx == 0 {
					a.warnings = append(a.warnings, fmt.Errorf("node %s (%s) is not on a connected network (reached via %s) and %s is missing: its flows are not delivered", r.Node, r.IP, via[0].Gw, nftrules.DSRVXLANDevice))
					continue
				}
				if err := a.encap(vx, r, rt); err != nil {
					errs = append(errs, err)
					continue
				}
			}
		}
		if err := a.rt.RouteReplace(rt); err != nil {
			errs = append(errs, fmt.Errorf("route of node %s via %s in table %d: %w", r.Node, r.IP, t, err))
			continue
		}
		a.links.add(rt.LinkIndex)
		if m := nftrules.DSRMark(r.Slot); !haveLocal[m] {
			rule := netlink.NewRule()
			rule.Family = netlink.FAMILY_V4
			rule.Table = unix.RT_TABLE_MAIN
			rule.Mark = m
			mask := uint32(nftrules.DSRMarkMask)
			rule.Mask = &mask
			rule.IifName = "lo"
			rule.Priority = nftrules.DSRRulePriority - 1
			if err := a.rt.RuleAdd(rule); err != nil {
				errs = append(errs, fmt.Errorf("policy rule of this node's own packets with mark %#x: %w", m, err))
			}
		}
		if !have[t] {
			rule := netlink.NewRule()
			rule.Family = netlink.FAMILY_V4
			rule.Table = t
			rule.Mark = nftrules.DSRMark(r.Slot)
			mask := uint32(nftrules.DSRMarkMask)
			rule.Mask = &mask
			rule.Priority = nftrules.DSRRulePriority
			if err := a.rt.RuleAdd(rule); err != nil {
				errs = append(errs, fmt.Errorf("policy rule of node %s (mark %#x): %w", r.Node, rule.Mark, err))
			}
		}
	}
	return errors.Join(errs...)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func synTable() *nftables.Table {
	return &nftables.Table{Family: nftables.TableFamilyIPv4, Name: nftrules.DSRSYNTableName}
}

// forwardedTCP is the SYN table's rule `meta mark & 0x0fff0000 != 0 meta l4proto tcp tcp flags &
// mask == flags ct status & (confirmed | dnat) == 0 ct timeout set "timeout"`: a TCP segment the
// DSR table marked for an owner, whose entry is new and not served here (a forwarded flow's).
func forwardedTCP(mask, flags byte, timeout string) []expr.Any {
	zero := make([]byte, 4)
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(nftrules.DSRMarkMask), Xor: zero},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: zero},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{mask}, Xor: []byte{0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{flags}},
		&expr.Ct{Key: expr.CtKeySTATUS, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(ipsConfirmed | ipsDstNAT), Xor: zero},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: zero},
		&expr.Objref{Type: unix.NFT_OBJECT_CT_TIMEOUT, Name: timeout},
	}
}

// Conntrack status bits (include/uapi/linux/netfilter/nf_conntrack_common.h).
const (
	ipsConfirmed = 1 << 3
	ipsDstNAT    = 1 << 5
)

// synPolicy is the forwarded SYN's timeout policy: the kernel's TCP defaults but SYN_SENT 0 (the
// entry expires as it is confirmed). Every state is given: google/nftables fills the missing
// ones from its own defaults (ESTABLISHED 43200, not the kernel's 432000).
var synPolicy = expr.CtStatePolicyTimeout{
	expr.CtStateTCPSYNSENT: 0, expr.CtStateTCPSYNRECV: 60, expr.CtStateTCPESTABLISHED: 432000,
	expr.CtStateTCPFINWAIT: 120, expr.CtStateTCPCLOSEWAIT: 60, expr.CtStateTCPLASTACK: 30,
	expr.CtStateTCPTIMEWAIT: 120, expr.CtStateTCPCLOSE: 10, expr.CtStateTCPSYNSENT2: 120,
	expr.CtStateTCPRETRANS: 300, expr.CtStateTCPUNACK: 300,
}

// flowPolicy is the timeout policy of the entry a forwarded flow's first segment after its SYN
// makes (picked up mid-stream, nf_conntrack_tcp_loose): the kernel's TCP defaults but the closing
// states short. This node sees the client's half only and keeps the entry for one thing, the
// owner in its mark; once the client has sent its FIN, or an RST, the connection is over, and
// the entry would wait for up to two minutes (FIN_WAIT 120 s) for a client that reuses the source
// port. A SYN meeting it is a new connection that the entry cannot serve itself (no DNAT on a
// confirmed entry): when the hash says this node and no live alternate owner exists, it went to
// the old, remembered owner (the chaos soak of 2026-11-27 20:51, docs/dsr.md).
var flowPolicy = expr.CtStatePolicyTimeout{
	expr.CtStateTCPSYNSENT: 120, expr.CtStateTCPSYNRECV: 60, expr.CtStateTCPESTABLISHED: 432000,
	expr.CtStateTCPFINWAIT: forwardedClosing, expr.CtStateTCPCLOSEWAIT: forwardedClosing, expr.CtStateTCPLASTACK: forwardedClosing,
	expr.CtStateTCPTIMEWAIT: forwardedClosing, expr.CtStateTCPCLOSE: forwardedClosing, expr.CtStateTCPSYNSENT2: 120,
	expr.CtStateTCPRETRANS: 300, expr.CtStateTCPUNACK: 300,
}

// forwardedClosing is how long, in seconds, a forwarded flow's entry outlives the client's FIN or
// RST (flowPolicy): its last segments' time, a retransmitted FIN's.
const forwardedClosing = 5

// writeSYNTable adds the SYN table (nftrules.DSRSYNTableName, whose documentation says why) in one
// batch; adding it again replaces the chain's rule and keeps the timeout object (the kernel leaves
// an existing one as it is).
func writeSYNTable(c *nftables.Conn) error {
	t := c.AddTable(synTable())
	c.AddObj(&nftables.NamedObj{Table: t, Name: nftrules.DSRSYNTimeout, Type: nftables.ObjTypeCtTimeout,
		Obj: &expr.CtTimeout{L3Proto: unix.NFPROTO_IPV4, L4Proto: unix.IPPROTO_TCP, Policy: synPolicy}})
	c.AddObj(&nftables.NamedObj{Table: t, Name: nftrules.DSRFlowTimeout, Type: nftables.ObjTypeCtTimeout,
		Obj: &expr.CtTimeout{L3Proto: unix.NFPROTO_IPV4, L4Proto: unix.IPPROTO_TCP, Policy: flowPolicy}})
	prio := nftables.ChainPriority(nftrules.DSRSYNPriority)
	ch := c.AddChain(&nftables.Chain{Table: t, Name: "prerouting", Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: &prio})
	c.FlushChain(ch)
	// tcp flags & (syn | ack) == syn: a SYN; tcp flags & syn == 0: a segment picked up mid-stream
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: forwardedTCP(0x12, 0x02, nftrules.DSRSYNTimeout)})
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: forwardedTCP(0x02, 0, nftrules.DSRFlowTimeout)})
	return c.Flush()
}
