package nftrules

import (
	"cmp"
	"net/netip"
	"slices"
)

// SkipReason says why an endpoint is not used in a family's rules.
type SkipReason uint8

const (
	// SkipOtherFamily: the endpoint's address is of the other IP family.
	SkipOtherFamily SkipReason = iota + 1
	// SkipInvalid: no valid address (or a zoned one), or target port 0.
	SkipInvalid
	// SkipDeadNode: the endpoint's node is in Node.DeadNodes and other endpoints are usable.
	SkipDeadNode
	// SkipNotReady: not ready, and either not serving-terminating or ready endpoints exist in its
	// scope.
	SkipNotReady
	// SkipDuplicate: the same address and port is listed again (e.g. in two EndpointSlices).
	SkipDuplicate
	// SkipTopology: ready, but its hints are for other zones or nodes (Selection.Topology) and it
	// is not used by Local policy.
	SkipTopology
)

func (r SkipReason) String() string {
	switch r {
	case SkipOtherFamily:
		return "other-family"
	case SkipInvalid:
		return "invalid"
	case SkipDeadNode:
		return "dead-node"
	case SkipNotReady:
		return "not-ready"
	case SkipDuplicate:
		return "duplicate"
	case SkipTopology:
		return "topology"
	}
	return "unknown"
}

// SkippedEndpoint is an endpoint left out of a Selection and why.
type SkippedEndpoint struct {
	Endpoint Endpoint
	Reason   SkipReason
}

// Selection is the endpoints one Service port uses in one family on this node, following
// kube-proxy's rules (KEP-1669 terminating fallback, per scope) plus ironlb's dead-node view.
// Endpoint lists are sorted by address and port.
type Selection struct {
	// Cluster are the endpoints for Cluster policy: the ready ones, or if none the serving and
	// terminating ones. Nil when the port uses no Cluster policy (internal Local, no external
	// addresses).
	Cluster []Endpoint
	// Local are this node's endpoints for Local policy, with the same fallback. Nil when the port
	// uses no Local policy.
	Local []Endpoint
	// HasEndpoints is true if any endpoint in the cluster is usable (ready, or serving and
	// terminating); false means traffic is rejected.
	HasEndpoints bool
	// ClusterTerminating and LocalTerminating are true when that scope fell back to serving and
	// terminating endpoints.
	ClusterTerminating, LocalTerminating bool
	// DeadNodeFallback is true when every usable endpoint is on a dead node, so dead nodes were
	// ignored rather than leave the Service without endpoints.
	DeadNodeFallback bool
	// Topology is the mode (TopologyMode) the Cluster endpoints were filtered by: "" for none,
	// PreferSameZone or PreferSameNode.
	Topology string
	// Skipped lists the endpoints left out of both scopes and why.
	Skipped []SkippedEndpoint
}

// Reachable returns the union of Cluster and Local: the endpoints that need an endpoint chain.
func (s *Selection) Reachable() []Endpoint {
	if len(s.Local) == 0 {
		return s.Cluster
	}
	if len(s.Cluster) == 0 {
		return s.Local
	}
	out := append(slices.Clip(s.Cluster), s.Local...)
	sortEndpoints(out)
	return slices.CompactFunc(out, func(a, b Endpoint) bool { return a.Addr == b.Addr && a.Port == b.Port })
}

// SelectEndpoints decides which endpoints of svc's port p the rules of family v6 (false: IPv4)
// use on node n.
func SelectEndpoints(svc *Service, p *Port, n *Node, v6 bool) Selection {
	var sel Selection
	// Normalise, filter by family and deduplicate (merging conditions: an address listed twice
	// is as usable as its best listing).
	eps := make([]Endpoint, 0, len(p.Endpoints))
	for _, ep := range p.Endpoints {
		a := ep.Addr.Unmap()
		switch {
		case !a.IsValid() || a.Zone() != "" || ep.Port == 0:
			sel.Skipped = append(sel.Skipped, SkippedEndpoint{ep, SkipInvalid})
			continue
		case a.Is6() != v6:
			sel.Skipped = append(sel.Skipped, SkippedEndpoint{ep, SkipOtherFamily})
			continue
		}
		ep.Addr = a
		eps = append(eps, ep)
	}
	sortEndpoints(eps)
	merged := eps[:0]
	for _, ep := range eps {
		if k := len(merged) - 1; k >= 0 && merged[k].Addr == ep.Addr && merged[k].Port == ep.Port {
			m := &merged[k]
			m.Ready, m.Serving, m.Local = m.Ready || ep.Ready, m.Serving || ep.Serving, m.Local || ep.Local
			m.Terminating = m.Terminating && ep.Terminating
			sel.Skipped = append(sel.Skipped, SkippedEndpoint{ep, SkipDuplicate})
			continue
		}
		merged = append(merged, ep)
	}
	eps = merged

	alive := eps
	var dead []Endpoint
	if len(n.DeadNodes) > 0 {
		alive = make([]Endpoint, 0, len(eps))
		for _, ep := range eps {
			if !ep.Local && ep.Node != "" && ep.Node != n.Name && n.DeadNodes[ep.Node] {
				dead = append(dead, ep)
				continue
			}
			alive = append(alive, ep)
		}
	}

	external := p.NodePort != 0 || hasFamily(svc.ExternalIPs, v6) || hasFamily(svc.LoadBalancerIPs, v6)
	usesCluster := !svc.InternalTrafficPolicyLocal || external
	usesLocal := svc.InternalTrafficPolicyLocal || (svc.ExternalTrafficPolicyLocal && external)

	pick := func(candidates []Endpoint) {
		sel.Cluster, sel.Local, sel.ClusterTerminating, sel.LocalTerminating = nil, nil, false, false
		sel.HasEndpoints = false
		for _, ep := range candidates {
			if usable(ep) {
				sel.HasEndpoints = true
				break
			}
		}
		sel.Topology = TopologyNone
		if usesCluster {
			// kube-proxy's CategorizeEndpoints: ready endpoints are filtered by the topology
			// mode, which only applies when some ready endpoint is hinted for this node or zone;
			// the serving-terminating fallback (no ready endpoint anywhere) ignores topology.
			inScope := candidates
			if sel.Topology = TopologyMode(candidates, n.Name, n.Zone); sel.Topology != TopologyNone {
				inScope = make([]Endpoint, 0, len(candidates))
				for _, ep := range candidates {
					if !ep.Ready || availableForTopology(ep, sel.Topology, n.Name, n.Zone) {
						inScope = append(inScope, ep)
					}
				}
			}
			sel.Cluster, sel.ClusterTerminating = scope(inScope, false)
		}
		if usesLocal {
			sel.Local, sel.LocalTerminating = scope(candidates, true)
		}
	}
	pick(alive)
	if !sel.HasEndpoints && len(dead) > 0 {
		pick(eps)
		sel.DeadNodeFallback = sel.HasEndpoints
	}
	if !sel.DeadNodeFallback {
		for _, ep := range dead {
			sel.Skipped = append(sel.Skipped, SkippedEndpoint{ep, SkipDeadNode})
		}
	}
	used := map[netip.AddrPort]bool{}
	for _, ep := range sel.Cluster {
		used[netip.AddrPortFrom(ep.Addr, ep.Port)] = true
	}
	for _, ep := range sel.Local {
		used[netip.AddrPortFrom(ep.Addr, ep.Port)] = true
	}
	candidates := eps
	if !sel.DeadNodeFallback {
		candidates = alive
	}
	for _, ep := range candidates {
		if !used[netip.AddrPortFrom(ep.Addr, ep.Port)] {
			why := SkipNotReady
			if ep.Ready && sel.Topology != TopologyNone && !availableForTopology(ep, sel.Topology, n.Name, n.Zone) {
				why = SkipTopology
			}
			sel.Skipped = append(sel.Skipped, SkippedEndpoint{ep, why})
		}
	}
	return sel
}

func usable(ep Endpoint) bool { return ep.Ready || (ep.Serving && ep.Terminating) }

// scope returns the ready endpoints (only local ones if local), or if there are none the serving
// and terminating ones, and whether it fell back.
func scope(eps []Endpoint, local bool) ([]Endpoint, bool) {
	var ready, term []Endpoint
	for _, ep := range eps {
		if local && !ep.Local {
			continue
		}
		switch {
		case ep.Ready:
			ready = append(ready, ep)
		case ep.Serving && ep.Terminating:
			term = append(term, ep)
		}
	}
	if len(ready) > 0 {
		return ready, false
	}
	return term, len(term) > 0
}

func sortEndpoints(eps []Endpoint) {
	slices.SortFunc(eps, func(a, b Endpoint) int {
		if c := a.Addr.Compare(b.Addr); c != 0 {
			return c
		}
		return cmp.Compare(a.Port, b.Port)
	})
}

// hasFamily reports whether addrs has a valid address of the family.
func hasFamily(addrs []netip.Addr, v6 bool) bool {
	for _, a := range addrs {
		if a = a.Unmap(); a.IsValid() && a.Zone() == "" && a.Is6() == v6 {
			return true
		}
	}
	return false
}
