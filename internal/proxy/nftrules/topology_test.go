package nftrules

import (
	"net/netip"
	"slices"
	"testing"
)

// hinted is a ready endpoint on node with zone and node hints ("" for none).
func hinted(addr, node, zoneHint, nodeHint string) Endpoint {
	ep := Endpoint{Addr: netip.MustParseAddr(addr), Port: 80, Node: node, Ready: true, Serving: true, Local: node == "me"}
	if zoneHint != "" {
		ep.ZoneHints = []string{zoneHint}
	}
	if nodeHint != "" {
		ep.NodeHints = []string{nodeHint}
	}
	return ep
}

// TestTopologyMode follows kube-proxy's topologyModeFromHints (pkg/proxy/topology.go) case by case.
func TestTopologyMode(t *testing.T) {
	notReady := func(ep Endpoint) Endpoint { ep.Ready, ep.Serving = false, false; return ep }
	for _, tc := range []struct {
		name       string
		eps        []Endpoint
		node, zone string
		want       string
	}{
		{"no endpoints", nil, "me", "zone-a", TopologyNone},
		{"no hints", []Endpoint{hinted("10.0.0.1", "me", "", ""), hinted("10.0.0.2", "b", "", "")}, "me", "zone-a", TopologyNone},
		{"zone hints, one for this zone (PreferClose, PreferSameZone)",
			[]Endpoint{hinted("10.0.0.1", "b", "zone-a", ""), hinted("10.0.0.2", "c", "zone-b", "")}, "me", "zone-a", TopologyPreferSameZone},
		{"zone hints, none for this zone", []Endpoint{hinted("10.0.0.1", "b", "zone-b", ""), hinted("10.0.0.2", "c", "zone-c", "")}, "me", "zone-a", TopologyNone},
		{"zone hints but the node has no zone", []Endpoint{hinted("10.0.0.1", "b", "zone-a", "")}, "me", "", TopologyNone},
		{"one ready endpoint without a zone hint", []Endpoint{hinted("10.0.0.1", "b", "zone-a", ""), hinted("10.0.0.2", "c", "", "")}, "me", "zone-a", TopologyNone},
		{"a not-ready endpoint without hints does not count",
			[]Endpoint{hinted("10.0.0.1", "b", "zone-a", ""), notReady(hinted("10.0.0.2", "c", "", ""))}, "me", "zone-a", TopologyPreferSameZone},
		{"only not-ready endpoints", []Endpoint{notReady(hinted("10.0.0.1", "b", "zone-a", ""))}, "me", "zone-a", TopologyNone},
		{"node hints for this node (PreferSameNode)",
			[]Endpoint{hinted("10.0.0.1", "me", "zone-a", "me"), hinted("10.0.0.2", "b", "zone-a", "b")}, "me", "zone-a", TopologyPreferSameNode},
		{"node hints, none for this node: zone hints next",
			[]Endpoint{hinted("10.0.0.1", "b", "zone-a", "b"), hinted("10.0.0.2", "c", "zone-b", "c")}, "me", "zone-a", TopologyPreferSameZone},
		{"node hints on some endpoints only: zone hints",
			[]Endpoint{hinted("10.0.0.1", "me", "zone-a", "me"), hinted("10.0.0.2", "b", "zone-a", "")}, "me", "zone-a", TopologyPreferSameZone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := TopologyMode(tc.eps, tc.node, tc.zone); got != tc.want {
				t.Errorf("mode %q, want %q", got, tc.want)
			}
		})
	}
}

// TestSelectEndpointsTopology: the Cluster endpoints are filtered by the topology mode, the Local
// ones never; the serving-terminating fallback ignores topology; dead nodes are left out first.
func TestSelectEndpointsTopology(t *testing.T) {
	term := func(ep Endpoint) Endpoint { ep.Ready, ep.Terminating = false, true; return ep }
	// want: the Cluster and Local endpoints' addresses, the topology mode and the endpoints skipped
	// for topology
	type want struct {
		Cluster, Local  []string
		Mode            string
		SkippedTopology []string
	}
	for _, tc := range []selectCase[want]{{
		name: "same zone only",
		eps:  []Endpoint{hinted("10.0.0.1", "b", "zone-a", ""), hinted("10.0.0.2", "c", "zone-b", ""), hinted("10.0.0.3", "d", "zone-a", "")},
		want: want{Cluster: []string{"10.0.0.1", "10.0.0.3"}, Mode: TopologyPreferSameZone, SkippedTopology: []string{"10.0.0.2"}},
	}, {
		name: "same node only",
		eps:  []Endpoint{hinted("10.0.0.1", "me", "zone-a", "me"), hinted("10.0.0.2", "b", "zone-a", "b")},
		want: want{Cluster: []string{"10.0.0.1"}, Mode: TopologyPreferSameNode, SkippedTopology: []string{"10.0.0.2"}},
	}, {
		name: "no hint for this zone: all",
		eps:  []Endpoint{hinted("10.0.0.1", "b", "zone-b", ""), hinted("10.0.0.2", "c", "zone-c", "")},
		want: want{Cluster: []string{"10.0.0.1", "10.0.0.2"}},
	}, {
		name: "terminating in this zone, ready elsewhere: no ready endpoint for this zone, so no topology",
		eps:  []Endpoint{term(hinted("10.0.0.1", "b", "zone-a", "")), hinted("10.0.0.2", "c", "zone-b", "")},
		want: want{Cluster: []string{"10.0.0.2"}},
	}, {
		name: "no ready endpoint: serving-terminating ones, whatever their zone",
		eps:  []Endpoint{term(hinted("10.0.0.1", "b", "zone-b", "")), term(hinted("10.0.0.2", "c", "zone-a", ""))},
		want: want{Cluster: []string{"10.0.0.1", "10.0.0.2"}},
	}, {
		name:     "ETP Local: Local endpoints ignore topology, Cluster ones follow it",
		svc:      Service{ExternalTrafficPolicyLocal: true},
		nodePort: 30000,
		eps:      []Endpoint{hinted("10.0.0.1", "me", "zone-b", ""), hinted("10.0.0.2", "c", "zone-a", "")},
		// none skipped for topology: 10.0.0.1 is used, by Local policy
		want: want{Cluster: []string{"10.0.0.2"}, Local: []string{"10.0.0.1"}, Mode: TopologyPreferSameZone},
	}, {
		name: "the zone's only endpoint is on a dead node: the mode is computed without it",
		eps:  []Endpoint{hinted("10.0.0.1", "dead", "zone-a", ""), hinted("10.0.0.2", "c", "zone-b", "")},
		dead: map[string]bool{"dead": true},
		want: want{Cluster: []string{"10.0.0.2"}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			sel := tc.selectIn("zone-a")
			if got := addrs(sel.Cluster); !slices.Equal(got, tc.want.Cluster) {
				t.Errorf("cluster %v, want %v", got, tc.want.Cluster)
			}
			if got := addrs(sel.Local); !slices.Equal(got, tc.want.Local) {
				t.Errorf("local %v, want %v", got, tc.want.Local)
			}
			if sel.Topology != tc.want.Mode {
				t.Errorf("mode %q, want %q", sel.Topology, tc.want.Mode)
			}
			var skipped []string
			for _, s := range sel.Skipped {
				if s.Reason == SkipTopology {
					skipped = append(skipped, s.Endpoint.Addr.String())
				}
			}
			if !slices.Equal(skipped, tc.want.SkippedTopology) {
				t.Errorf("skipped for topology %v, want %v", skipped, tc.want.SkippedTopology)
			}
		})
	}
}
