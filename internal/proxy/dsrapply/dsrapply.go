// Package dsrapply carries out a direct-server-return plan (nftrules.PlanDSR) on this node: the
// nftables table nftrules.DSRTableName through knftables, and the policy routing that sends each
// other node's mark to that node as next hop (one `ip rule fwmark SLOT<<16/0x0fff0000 lookup
// TABLE` and one `default via NODE-IP` route per node, through vishvananda/netlink), and the
// sysctls the path needs. [Applier.Cleanup] removes all of it.
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

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/ironlb/ironlb/internal/proxy/nftrules"
)

// Routing is the policy-routing edge: netlink.Handle in production, a fake in tests.
type Routing interface {
	RuleList(family int) ([]netlink.Rule, error)
	RuleAdd(rule *netlink.Rule) error
	RuleDel(rule *netlink.Rule) error
	RouteListFiltered(family int, filter *netlink.Route, filterMask uint64) ([]netlink.Route, error)
	RouteReplace(route *netlink.Route) error
	RouteDel(route *netlink.Route) error
	RouteGet(destination net.IP) ([]netlink.Route, error)
	NeighList(linkIndex, family int) ([]netlink.Neigh, error)
}

var _ Routing = (*netlink.Handle)(nil)

// Sysctls are the settings the DSR path needs on every node, with why:
//   - ip_forward: the entry node forwards the unmodified packet to the owner;
//   - send_redirects off: the entry node forwards out of the interface the packet came in by, and
//     would otherwise tell the client (ICMP redirect) to talk to the owner directly;
//   - nf_conntrack_tcp_be_liberal: the entry node sees only the client's half of a TCP flow; its
//     conntrack entry must not call the client's segments out of window (INVALID);
//   - nf_conntrack_tcp_loose: a mid-stream ACK (the entry's first packet of a flow after a SYN
//     that was not tracked, or after a failover) starts a tracked flow.
var Sysctls = map[string]string{
	"net/ipv4/ip_forward":                       "1",
	"net/ipv4/conf/all/send_redirects":          "0",
	"net/ipv4/conf/default/send_redirects":      "0",
	"net/netfilter/nf_conntrack_tcp_be_liberal": "1",
	"net/netfilter/nf_conntrack_tcp_loose":      "1",
}

// Applier applies DSR plans. It is not safe for concurrent use: the proxy's sync loop owns it.
type Applier struct {
	nft    knftables.Interface
	rt     Routing
	sysctl func(name, value string) error
	done   bool // sysctls written (or tried)
	// warnings are problems that do not fail a sync (a sysctl not written, a node not on a
	// connected network), for the caller to log: Warnings returns and clears them.
	warnings []error
	slots    map[string]int
}

// New returns an Applier over nft (an Interface for family ip, table nftrules.DSRTableName) and
// rt. sysctl writes one setting (nil: /proc/sys).
func New(nft knftables.Interface, rt Routing, sysctl func(name, value string) error) *Applier {
	if sysctl == nil {
		sysctl = writeProcSys
	}
	return &Applier{nft: nft, rt: rt, sysctl: sysctl}
}

// NewKernel returns an Applier of this network namespace.
func NewKernel() (*Applier, error) {
	nft, err := knftables.New(knftables.IPv4Family, nftrules.DSRTableName)
	if err != nil {
		return nil, fmt.Errorf("nftables for %s: %w", nftrules.DSRTableName, err)
	}
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	return New(nft, h, nil), nil
}

func writeProcSys(name, value string) error {
	return os.WriteFile(filepath.Join("/proc/sys", name), []byte(value), 0o644)
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
	if err := a.syncRoutes(plan.Routes); err != nil {
		errs = append(errs, err)
	}
	if len(plan.Ports) > 0 {
		macs, err := a.peerMACs(plan.Peers)
		if err != nil {
			errs = append(errs, err)
		}
		plan.PeerMACs = macs
	}
	tx := a.nft.NewTransaction()
	// Delete and re-create: the table is small, and this drops per-port chains and maps of
	// Services that left in the same atomic transaction.
	tx.Add(&knftables.Table{})
	tx.Delete(&knftables.Table{})
	nftrules.WriteDSR(tx, plan)
	if err := a.nft.Run(ctx, tx); err != nil {
		errs = append(errs, fmt.Errorf("writing table %s: %w", nftrules.DSRTableName, err))
	}
	a.slots = plan.Slots
	return errors.Join(errs...)
}

// Cleanup deletes the DSR table and every policy rule and route of the DSR tables.
func (a *Applier) Cleanup(ctx context.Context) error {
	var errs []error
	tx := a.nft.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Delete(&knftables.Table{})
	if err := a.nft.Run(ctx, tx); err != nil {
		errs = append(errs, fmt.Errorf("deleting table %s: %w", nftrules.DSRTableName, err))
	}
	if err := a.syncRoutes(nil); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// peerMACs returns the link-layer addresses the neighbor table holds for peers, sorted. The
// proxy's echo detector probes every node, so they are there once it has run; a peer not there
// yet is left out of the loop guard until the next sync.
func (a *Applier) peerMACs(peers []netip.Addr) ([]string, error) {
	if len(peers) == 0 {
		return nil, nil
	}
	neighs, err := a.rt.NeighList(0, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("listing neighbors for the loop guard: %w", err)
	}
	var out []string
	for _, n := range neighs {
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok || len(n.HardwareAddr) != 6 || n.State&(netlink.NUD_FAILED|netlink.NUD_INCOMPLETE) != 0 {
			continue
		}
		if _, found := slices.BinarySearchFunc(peers, ip.Unmap(), netip.Addr.Compare); found {
			out = append(out, n.HardwareAddr.String())
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func isDSRTable(t int) bool {
	return t > nftrules.DSRTable(0) && t <= nftrules.DSRTable(nftrules.DSRMaxSlot)
}

// syncRoutes makes the DSR rules and routes those of want: one rule and one default route per
// route, in table DSRTable(slot). Rules and routes of DSR tables not wanted are deleted.
func (a *Applier) syncRoutes(want []nftrules.DSRRoute) error {
	var errs []error
	wantTable := map[int]nftrules.DSRRoute{}
	for _, r := range want {
		wantTable[nftrules.DSRTable(r.Slot)] = r
	}
	rules, err := a.rt.RuleList(netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("listing policy rules: %w", err)
	}
	have := map[int]bool{}
	for i := range rules {
		r := &rules[i]
		if !isDSRTable(r.Table) {
			continue
		}
		w, ok := wantTable[r.Table]
		if ok && r.Mark == nftrules.DSRMark(w.Slot) && r.Mask != nil && *r.Mask == nftrules.DSRMarkMask && !have[r.Table] {
			have[r.Table] = true
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
				a.warnings = append(a.warnings, fmt.Errorf("node %s (%s) is not on a connected network (reached via %s): direct server return across routed segments needs encapsulation, which is not built", r.Node, r.IP, via[0].Gw))
				continue
			}
		}
		if err := a.rt.RouteReplace(rt); err != nil {
			errs = append(errs, fmt.Errorf("route of node %s via %s in table %d: %w", r.Node, r.IP, t, err))
			continue
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
