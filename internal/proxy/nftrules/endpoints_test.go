package nftrules

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// selectCase is a row of the SelectEndpoints tables: a Service (svc) with one TCP port 80, its node
// port nodePort (0 for none), over the endpoints eps, selected on node "me" that takes the nodes in
// dead for dead; want is what the test checks of the Selection.
type selectCase[W any] struct {
	name     string
	svc      Service
	nodePort uint16
	eps      []Endpoint
	dead     map[string]bool
	want     W
}

// selectIn selects the row's IPv4 endpoints on node "me" in zone ("" for none).
func (tc selectCase[W]) selectIn(zone string) Selection {
	svc := tc.svc
	p := Port{Protocol: TCP, Port: 80, NodePort: tc.nodePort, Endpoints: tc.eps}
	return SelectEndpoints(&svc, &p, &Node{Name: "me", Zone: zone, DeadNodes: tc.dead}, false)
}

// addrs lists the endpoints' addresses, in order.
func addrs(eps []Endpoint) []string {
	var out []string
	for _, ep := range eps {
		out = append(out, ep.Addr.String())
	}
	return out
}

func TestSelectEndpoints(t *testing.T) {
	e := func(addr, node string, ready, serving, term bool) Endpoint {
		return Endpoint{Addr: netip.MustParseAddr(addr), Port: 80, Node: node, Ready: ready, Serving: serving, Terminating: term, Local: node == "me"}
	}
	ready := func(addr, node string) Endpoint { return e(addr, node, true, true, false) }
	termServing := func(addr, node string) Endpoint { return e(addr, node, false, true, true) }
	termGone := func(addr, node string) Endpoint { return e(addr, node, false, false, true) }
	type want struct {
		Cluster, Local                      []string
		Has, ClusterTerm, LocalTerm, DeadFB bool
		Skipped                             map[string]SkipReason
	}
	for _, tc := range []selectCase[want]{{
		name: "ready only",
		eps:  []Endpoint{ready("10.0.0.2", "b"), ready("10.0.0.1", "me"), e("10.0.0.3", "c", false, false, false)},
		want: want{Cluster: []string{"10.0.0.1", "10.0.0.2"}, Has: true, Skipped: map[string]SkipReason{"10.0.0.3": SkipNotReady}},
	}, {
		name: "terminating fallback, never non-serving",
		eps:  []Endpoint{termServing("10.0.0.1", "me"), termGone("10.0.0.2", "b")},
		want: want{Cluster: []string{"10.0.0.1"}, Has: true, ClusterTerm: true, Skipped: map[string]SkipReason{"10.0.0.2": SkipNotReady}},
	}, {
		name: "ready beats terminating",
		eps:  []Endpoint{termServing("10.0.0.1", "me"), ready("10.0.0.2", "b")},
		want: want{Cluster: []string{"10.0.0.2"}, Has: true, Skipped: map[string]SkipReason{"10.0.0.1": SkipNotReady}},
	}, {
		name:     "ETP Local: fallback per scope",
		svc:      Service{ExternalTrafficPolicyLocal: true},
		nodePort: 30000,
		eps:      []Endpoint{termServing("10.0.0.1", "me"), ready("10.0.0.2", "b")},
		want:     want{Cluster: []string{"10.0.0.2"}, Local: []string{"10.0.0.1"}, Has: true, LocalTerm: true},
	}, {
		name: "ETP Local without external addresses is Cluster",
		svc:  Service{ExternalTrafficPolicyLocal: true},
		eps:  []Endpoint{ready("10.0.0.2", "b")},
		want: want{Cluster: []string{"10.0.0.2"}, Has: true},
	}, {
		name: "ITP Local only",
		svc:  Service{InternalTrafficPolicyLocal: true},
		eps:  []Endpoint{ready("10.0.0.1", "me"), ready("10.0.0.2", "b")},
		want: want{Local: []string{"10.0.0.1"}, Has: true, Skipped: map[string]SkipReason{"10.0.0.2": SkipNotReady}},
	}, {
		name: "ITP Local, none local, endpoints elsewhere",
		svc:  Service{InternalTrafficPolicyLocal: true},
		eps:  []Endpoint{ready("10.0.0.2", "b")},
		want: want{Has: true, Skipped: map[string]SkipReason{"10.0.0.2": SkipNotReady}},
	}, {
		name: "dead node left out",
		eps:  []Endpoint{ready("10.0.0.1", "me"), ready("10.0.0.2", "b")},
		dead: map[string]bool{"b": true, "me": true},
		want: want{Cluster: []string{"10.0.0.1"}, Has: true, Skipped: map[string]SkipReason{"10.0.0.2": SkipDeadNode}},
	}, {
		name: "dead node fallback",
		eps:  []Endpoint{ready("10.0.0.2", "b"), termGone("10.0.0.3", "c")},
		dead: map[string]bool{"b": true},
		want: want{Cluster: []string{"10.0.0.2"}, Has: true, DeadFB: true, Skipped: map[string]SkipReason{"10.0.0.3": SkipNotReady}},
	}, {
		name: "dead node's ready beats live terminating",
		eps:  []Endpoint{ready("10.0.0.2", "b"), termServing("10.0.0.3", "c")},
		dead: map[string]bool{"b": true},
		want: want{Cluster: []string{"10.0.0.3"}, Has: true, ClusterTerm: true, Skipped: map[string]SkipReason{"10.0.0.2": SkipDeadNode}},
	}, {
		name: "family, validity, duplicates",
		eps: []Endpoint{ready("10.0.0.1", "me"), ready("fd00::1", "me"), {Port: 80}, e("10.0.0.1", "me", false, false, false),
			{Addr: netip.MustParseAddr("10.0.0.9"), Port: 0, Ready: true}, ready("::ffff:10.0.0.7", "b")},
		want: want{Cluster: []string{"10.0.0.1", "10.0.0.7"}, Has: true, Skipped: map[string]SkipReason{
			"fd00::1": SkipOtherFamily, "invalid IP": SkipInvalid, "10.0.0.1": SkipDuplicate, "10.0.0.9": SkipInvalid}},
	}, {
		name: "none usable",
		eps:  []Endpoint{termGone("10.0.0.1", "me")},
		want: want{Skipped: map[string]SkipReason{"10.0.0.1": SkipNotReady}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			sel := tc.selectIn("")
			got := want{Cluster: addrs(sel.Cluster), Local: addrs(sel.Local), Has: sel.HasEndpoints,
				ClusterTerm: sel.ClusterTerminating, LocalTerm: sel.LocalTerminating, DeadFB: sel.DeadNodeFallback}
			for _, s := range sel.Skipped {
				if got.Skipped == nil {
					got.Skipped = map[string]SkipReason{}
				}
				got.Skipped[s.Endpoint.Addr.String()] = s.Reason
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	ok := Service{Namespace: "ns", Name: "web", Ports: []Port{{Name: "http", Protocol: TCP, Port: 80}, {Protocol: UDP, Port: 80}}}
	if err := validate(&ok); err != nil {
		t.Errorf("valid service: %v", err)
	}
	// Upstream e2e "Services should support named targetPorts that resolve to different ports on
	// different endpoints": a 18-character port name, valid for the apiserver (a DNS-1123 label).
	long := ok
	long.Ports = []Port{{Name: "mutable-named-port", Protocol: TCP, Port: 8001}, {Name: strings.Repeat("a", 63), Protocol: TCP, Port: 8002}}
	if err := validate(&long); err != nil {
		t.Errorf("port names of 18 and 63 characters: %v", err)
	}
	for name, mutate := range map[string]func(*Service){
		"namespace with a space":   func(s *Service) { s.Namespace = "a b" },
		"name with a brace":        func(s *Service) { s.Name = "x}" },
		"empty name":               func(s *Service) { s.Name = "" },
		"upper case":               func(s *Service) { s.Name = "Web" },
		"long port name":           func(s *Service) { s.Ports[0].Name = strings.Repeat("a", 64) },
		"port name with a dot":     func(s *Service) { s.Ports[0].Name = "a.b" },
		"unknown protocol":         func(s *Service) { s.Ports[0].Protocol = "icmp" },
		"port 0":                   func(s *Service) { s.Ports[0].Port = 0 },
		"duplicate protocol, port": func(s *Service) { s.Ports[1].Protocol = TCP },
		"negative timeout":         func(s *Service) { s.SessionAffinityTimeout = -1 },
		"unknown algorithm":        func(s *Service) { s.Algorithm = 9 },
	} {
		s := ok
		s.Ports = append([]Port(nil), ok.Ports...)
		mutate(&s)
		if err := validate(&s); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
