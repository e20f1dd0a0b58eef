// Package conntrack flushes stale UDP conntrack entries when a Service's endpoints go away, as
// kube-proxy does (pkg/proxy/conntrack). A UDP "connection" has no end: as long as a client keeps
// sending, its conntrack entry keeps DNAT-ing to the endpoint chosen for the first packet, even
// after the rules have moved on, so the entry must be deleted. TCP entries are left alone: their
// endpoint answers with a reset, and graceful termination needs them.
//
// Direct server return has its own case: DSRMoved (pure) compares two DSR plans and selects the
// entries of UDP flows this node forwarded to an owner that is gone (not DNATed, their mark the
// owner's), which no rule can move to a pod of this node.
//
// Stale (pure) compares the models of two syncs and returns Filters; a Deleter applies them:
// Netlink over NETLINK_NETFILTER with vishvananda/netlink's filters (the proxy's, as kube-proxy
// since v1.32), Exec by running the conntrack tool (kept for hosts without the netlink interface
// and as a second opinion in tests), Fake by recording them.
package conntrack

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/ironlb/ironlb/internal/proxy/nftrules"
)

// Filter selects conntrack entries. Zero fields match anything.
type Filter struct {
	// IPv6 selects IPv6 entries; false, IPv4 ones.
	IPv6     bool
	Protocol nftrules.Protocol
	// OrigDst is the destination the client sent to (a Service address); invalid: any (node
	// ports, which arrive on any node address).
	OrigDst netip.Addr
	// DPort is the destination port the client sent to; 0: any.
	DPort uint16
	// ReplySrc is the source of replies, that is the endpoint the DNAT chose; invalid: any.
	// OrigDst itself selects the entries that were not DNATed (DSRMoved).
	ReplySrc netip.Addr
	// Mark is the entry's conntrack mark; 0: any (a DSR owner's NodeID is never 0).
	Mark uint32
}

// Args returns the conntrack(8) arguments that delete the entries f selects.
func (f Filter) Args() []string {
	args := []string{"-D"}
	if f.IPv6 {
		args = append(args, "-f", "ipv6")
	}
	args = append(args, "-p", string(f.Protocol))
	if f.OrigDst.IsValid() {
		args = append(args, "--orig-dst", f.OrigDst.String())
	}
	if f.DPort != 0 {
		args = append(args, "--dport", strconv.Itoa(int(f.DPort)))
	}
	if f.ReplySrc.IsValid() {
		args = append(args, "--reply-src", f.ReplySrc.String())
	}
	if f.Mark != 0 {
		args = append(args, "--mark", strconv.FormatUint(uint64(f.Mark), 10))
	}
	return args
}

func (f Filter) String() string { return strings.Join(f.Args()[1:], " ") }

// target is one way clients reach a Service port in one family: an address and port, or a node
// port (addr invalid).
type target struct {
	v6   bool
	addr netip.Addr
	port uint16
}

// Stale returns the filters deleting the UDP entries that the rules of old created and those of
// m no longer honour, in a deterministic order:
//
//   - for every address and port (and node port) of a UDP Service port in old, the entries
//     whose reply source is an endpoint old used there and m does not (the endpoint went, became
//     unready or sits on a node declared dead; or the Service or port went);
//   - for every address and port that had no endpoints in old but has in m, all entries to it:
//     packets sent before may have created entries that bypassed the rules.
//
// old nil (the first sync) gives none: entries made before this process started are not known.
func Stale(old, m *nftrules.Model) []Filter {
	if old == nil || m == nil {
		return nil
	}
	deadSame := sameDead(old.Node.DeadNodes, m.Node.DeadNodes)
	keys := make([]nftrules.ServiceKey, 0)
	for k, o := range old.Services {
		if n := m.Services[k]; o != n || !deadSame {
			keys = append(keys, k)
		}
	}
	for k := range m.Services {
		if _, ok := old.Services[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, compareKeys)
	return staleOf(old, m, keys)
}

func compareKeys(a, b nftrules.ServiceKey) int { return strings.Compare(a.String(), b.String()) }

// StaleOf is Stale when the caller knows which Services may differ between old and m (their
// *Service pointers): keys, in any order, with duplicates. Other Services are not looked at,
// unless the dead nodes differ, when it is Stale.
func StaleOf(old, m *nftrules.Model, keys []nftrules.ServiceKey) []Filter {
	if old == nil || m == nil {
		return nil
	}
	if !sameDead(old.Node.DeadNodes, m.Node.DeadNodes) {
		return Stale(old, m)
	}
	keys = slices.Clone(keys)
	slices.SortFunc(keys, compareKeys)
	return staleOf(old, m, slices.Compact(keys))
}

// staleOf diffs the Services of keys, sorted.
func staleOf(old, m *nftrules.Model, keys []nftrules.ServiceKey) []Filter {
	var out []Filter
	for _, k := range keys {
		for _, v6 := range []bool{false, true} {
			before := endpointsByTarget(old.Services[k], &old.Node, v6)
			after := endpointsByTarget(m.Services[k], &m.Node, v6)
			out = append(out, diff(before, after)...)
		}
	}
	return out
}

// diff turns two target -> endpoints views into filters. An endpoint is stale when its address and
// port are gone: a targetPort change keeps the pod's address but not its port, and the entries the
// old port got must go (upstream's "cleanup conntrack entries when UDP service target port changes"
// test). The filter names the address only, as the kernel's reply source is matched by address;
// entries already on the new port are made again by the next packet.
func diff(before, after map[target][]netip.AddrPort) []Filter {
	var out []Filter
	var targets []target
	for t := range before {
		targets = append(targets, t)
	}
	for t := range after {
		if _, ok := before[t]; !ok {
			targets = append(targets, t)
		}
	}
	slices.SortFunc(targets, func(a, b target) int {
		if a.v6 != b.v6 {
			if a.v6 {
				return 1
			}
			return -1
		}
		if c := a.addr.Compare(b.addr); c != 0 {
			return c
		}
		return int(a.port) - int(b.port)
	})
	for _, t := range targets {
		old, now := before[t], after[t]
		if len(old) == 0 && len(now) > 0 {
			out = append(out, Filter{IPv6: t.v6, Protocol: nftrules.UDP, OrigDst: t.addr, DPort: t.port})
			continue
		}
		var gone []netip.Addr
		for _, ep := range old {
			if !slices.Contains(now, ep) && !slices.Contains(gone, ep.Addr()) {
				gone = append(gone, ep.Addr())
				out = append(out, Filter{IPv6: t.v6, Protocol: nftrules.UDP, OrigDst: t.addr, DPort: t.port, ReplySrc: ep.Addr()})
			}
		}
	}
	return out
}

// endpointsByTarget maps every UDP address:port and node port of svc in one family to the
// endpoint addresses and ports its rules may DNAT to, sorted. Targets without endpoints map to nil.
func endpointsByTarget(svc *nftrules.Service, n *nftrules.Node, v6 bool) map[target][]netip.AddrPort {
	if svc == nil {
		return nil
	}
	var out map[target][]netip.AddrPort
	for i := range svc.Ports {
		p := &svc.Ports[i]
		if p.Protocol != nftrules.UDP {
			continue
		}
		if out == nil {
			out = map[target][]netip.AddrPort{}
		}
		sel := nftrules.SelectEndpoints(svc, p, n, v6)
		var eps []netip.AddrPort
		for _, ep := range sel.Reachable() {
			if ap := netip.AddrPortFrom(ep.Addr, ep.Port); !slices.Contains(eps, ap) {
				eps = append(eps, ap)
			}
		}
		slices.SortFunc(eps, netip.AddrPort.Compare)
		for _, list := range [][]netip.Addr{svc.ClusterIPs, svc.ExternalIPs, svc.LoadBalancerIPs} {
			for _, a := range list {
				if a = a.Unmap(); a.IsValid() && a.Is6() == v6 {
					out[target{v6, a, p.Port}] = eps
				}
			}
		}
		if p.NodePort != 0 && hasFamily(svc.ClusterIPs, v6) {
			out[target{v6: v6, port: p.NodePort}] = eps
		}
	}
	return out
}

func hasFamily(addrs []netip.Addr, v6 bool) bool {
	for _, a := range addrs {
		if a = a.Unmap(); a.IsValid() && a.Is6() == v6 {
			return true
		}
	}
	return false
}

func sameDead(a, b map[string]bool) bool {
	for k, v := range a {
		if v != b[k] {
			return false
		}
	}
	for k, v := range b {
		if v != a[k] {
			return false
		}
	}
	return true
}
