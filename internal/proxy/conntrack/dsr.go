package conntrack

import (
	"slices"

	"github.com/ironlb/ironlb/internal/proxy/nftrules"
)

// DSRMoved returns the filters deleting this node's conntrack entries of direct-server-return
// flows that it forwarded to an owner now gone from their port's owners (docs/dsr.md, "A false
// death's hold"), in a deterministic order.
//
// Why: an entry node forwards a DSR flow it does not own without DNAT, and remembers the owner in
// the entry's mark. For UDP, Keep is Nodes: when the owner leaves Nodes (the echo detector declares
// it dead), the DSR table sends the flow's next datagram by the hash and writes the new owner into
// the mark. If the hash now says this node, the datagram would have to be DNATed to a local pod,
// but the entry is confirmed and a confirmed entry is never NATed again: the flow is dropped, and,
// its mark naming this node (in Keep), it stays so even after the old owner comes back, for as
// long as the client keeps sending. No rule can help (the nat hook never sees the entry again, and
// the raw hook, the only one before conntrack, cannot see the mark), so the entry must go: the
// flow's next datagram makes a new one, hashed like any new flow, DNATed here if the hash says
// this node, forwarded otherwise (as the rewritten mark would have).
//
// TCP's Keep holds every node that lists an endpoint of the port, so a remembered owner leaves it
// only when its pods are gone from the EndpointSlices: the connections it held are over. Its
// entries go too. Left, a segment of such a flow would be sent by the hash and, if the hash says
// this node, get the same stuck entry (the mark rewritten to this node, no DNAT): a black hole
// instead of the reset a live pod answers with, and a client reusing the source port (its SYN meets
// the old entry, which the rules cannot serve here) unanswered for as long as the entry lives,
// days for one the client never closed through this node (docs/dsr.md, "The one-way entry node").
//
// For every UDP port of now whose Nodes lost a node of old's Nodes, and every TCP port whose Keep
// lost a node of old's Keep (same Service, protocol and port), and for each of its addresses A,
// the entries to A and the port that were not DNATed (reply source A) and whose mark is a lost
// node's NodeID, or this node's own NodeID (an entry a packet already rewrote to this node between
// the new table and this deletion). An entry of this node's own pod is DNATed (its reply source is
// the pod) and never selected.
//
// old nil (the first plan of this process): for every UDP and TCP port, the entries not DNATed
// whose mark is this node's own: the stuck state a previous process may have left. Which owners it
// lost is not known, and an entry still naming a lost owner is moved by the rules anyway (unless to
// this node: then it is stuck, and the next plan that loses a node, or a restart, clears it).
func DSRMoved(old, now *nftrules.DSRPlan) []Filter {
	if now == nil {
		return nil
	}
	var self uint32
	if ip := now.NodeIPs[now.Self]; ip.Is4() {
		self = nftrules.NodeID(ip)
	}
	var out []Filter
	for i := range now.Ports {
		p := &now.Ports[i]
		if p.Protocol != nftrules.UDP && p.Protocol != nftrules.TCP {
			continue
		}
		var marks []uint32
		if old == nil {
			if self == 0 {
				continue
			}
			marks = []uint32{self}
		} else {
			marks = lostOwners(old, p)
			if len(marks) == 0 {
				continue
			}
			if self != 0 && !slices.Contains(marks, self) {
				marks = append(marks, self)
			}
			slices.Sort(marks)
		}
		for _, a := range p.Addrs {
			if !a.Is4() {
				continue
			}
			for _, m := range marks {
				out = append(out, Filter{Protocol: p.Protocol, OrigDst: a, DPort: p.Port, ReplySrc: a, Mark: m})
			}
		}
	}
	return out
}

// lostOwners returns the NodeIDs (by old's addresses) of the owners of p's port in old that are
// not owners in p: for UDP its Nodes, for TCP its Keep (see DSRMoved).
func lostOwners(old *nftrules.DSRPlan, p *nftrules.DSRPort) []uint32 {
	owners := func(q *nftrules.DSRPort) []string {
		if q.Protocol == nftrules.TCP {
			return q.Keep
		}
		return q.Nodes
	}
	var out []uint32
	for i := range old.Ports {
		o := &old.Ports[i]
		if o.Service != p.Service || o.Protocol != p.Protocol || o.Port != p.Port {
			continue
		}
		for _, n := range owners(o) {
			if slices.Contains(owners(p), n) {
				continue
			}
			if ip := old.NodeIPs[n]; ip.Is4() {
				if id := nftrules.NodeID(ip); !slices.Contains(out, id) {
					out = append(out, id)
				}
			}
		}
	}
	return out
}
