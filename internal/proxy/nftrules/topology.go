package nftrules

import "slices"

// The topology modes of kube-proxy's CategorizeEndpoints (pkg/proxy/topology.go), the values of
// Service trafficDistribution that the EndpointSlice controller turns into hints.
const (
	TopologyNone           = ""
	TopologyPreferSameZone = "PreferSameZone" // also what PreferClose gives
	TopologyPreferSameNode = "PreferSameNode"
)

// TopologyMode is kube-proxy's topologyModeFromHints: which hints the Cluster-policy endpoints of
// a port are filtered by on node (name) in zone, from the endpoints' hints alone (the EndpointSlice
// controller writes them from the Service's trafficDistribution: PreferClose and PreferSameZone
// give zone hints, PreferSameNode node hints, both):
//   - PreferSameNode if every ready endpoint has a node hint and one is hinted for this node;
//   - else PreferSameZone if every ready endpoint has a zone hint and one is hinted for this zone;
//   - else none: every ready endpoint is used (no hints, partial hints, or none for this
//     node or zone, e.g. a node without the topology.kubernetes.io/zone label).
func TopologyMode(eps []Endpoint, node, zone string) string {
	ready := false
	allNode, forNode := true, false
	allZone, forZone := true, false
	for _, ep := range eps {
		if !ep.Ready {
			continue
		}
		ready = true
		if len(ep.NodeHints) == 0 {
			allNode = false
		} else if slices.Contains(ep.NodeHints, node) {
			forNode = true
		}
		if len(ep.ZoneHints) == 0 {
			allZone = false
		} else if slices.Contains(ep.ZoneHints, zone) {
			forZone = true
		}
	}
	switch {
	case !ready:
		return TopologyNone
	case allNode && forNode:
		return TopologyPreferSameNode
	case allZone && forZone:
		return TopologyPreferSameZone
	}
	return TopologyNone
}

// availableForTopology is kube-proxy's: whether ep serves this node in mode (no fallback here;
// TopologyMode already chose a mode with at least one endpoint).
func availableForTopology(ep Endpoint, mode, node, zone string) bool {
	switch mode {
	case TopologyNone:
		return true
	case TopologyPreferSameNode:
		return slices.Contains(ep.NodeHints, node)
	case TopologyPreferSameZone:
		return slices.Contains(ep.ZoneHints, zone)
	}
	return false
}
