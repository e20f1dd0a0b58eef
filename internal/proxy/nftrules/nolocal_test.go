package nftrules

import (
	"net/netip"
	"testing"
)

func TestNoLocalEndpoints(t *testing.T) {
	ready := func(addr, node string) Endpoint {
		return Endpoint{Addr: netip.MustParseAddr(addr), Port: 80, Node: node, Ready: true, Serving: true, Local: node == "me"}
	}
	ip := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, a := range s {
			out = append(out, netip.MustParseAddr(a))
		}
		return out
	}
	port := func(nodePort uint16, eps ...Endpoint) Port {
		return Port{Protocol: TCP, Port: 80, NodePort: nodePort, Endpoints: eps}
	}
	for _, tc := range []struct {
		name                  string
		svc                   Service
		v6                    bool
		wantInternal, wantExt int
	}{{
		name: "Cluster policies never count",
		svc:  Service{ClusterIPs: ip("10.96.0.1"), Ports: []Port{port(30000, ready("10.0.0.2", "b"))}},
	}, {
		name:         "ITP Local, endpoints elsewhere only",
		svc:          Service{ClusterIPs: ip("10.96.0.1"), InternalTrafficPolicyLocal: true, Ports: []Port{port(0, ready("10.0.0.2", "b"))}},
		wantInternal: 1,
	}, {
		name: "ITP Local with a local endpoint",
		svc:  Service{ClusterIPs: ip("10.96.0.1"), InternalTrafficPolicyLocal: true, Ports: []Port{port(0, ready("10.0.0.1", "me"))}},
	}, {
		name: "no endpoint anywhere: rejected, not counted",
		svc:  Service{ClusterIPs: ip("10.96.0.1"), InternalTrafficPolicyLocal: true, ExternalTrafficPolicyLocal: true, Ports: []Port{port(30000)}},
	}, {
		name:    "ETP Local with a node port, endpoints elsewhere, counted per port",
		svc:     Service{ClusterIPs: ip("10.96.0.1"), ExternalTrafficPolicyLocal: true, Ports: []Port{port(30000, ready("10.0.0.2", "b")), port(30001, ready("10.0.0.2", "b"))}},
		wantExt: 2,
	}, {
		name: "ETP Local without external addresses: not external",
		svc:  Service{ClusterIPs: ip("10.96.0.1"), ExternalTrafficPolicyLocal: true, Ports: []Port{port(0, ready("10.0.0.2", "b"))}},
	}, {
		name:    "ETP Local, load-balancer IP of the family",
		svc:     Service{ClusterIPs: ip("10.96.0.1"), LoadBalancerIPs: ip("192.168.1.240"), ExternalTrafficPolicyLocal: true, Ports: []Port{port(0, ready("10.0.0.2", "b"))}},
		wantExt: 1,
	}, {
		name: "other family's Service",
		svc:  Service{ClusterIPs: ip("10.96.0.1"), InternalTrafficPolicyLocal: true, Ports: []Port{port(0, ready("fd00::2", "b"))}},
		v6:   true,
	}, {
		name:         "IPv6 family",
		svc:          Service{ClusterIPs: ip("10.96.0.1", "fd00:96::1"), InternalTrafficPolicyLocal: true, Ports: []Port{port(0, ready("10.0.0.1", "me"), ready("fd00::2", "b"))}},
		v6:           true,
		wantInternal: 1,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			svc := tc.svc
			svc.Namespace, svc.Name = "ns", "s"
			m := &Model{Node: Node{Name: "me"}, Services: map[ServiceKey]*Service{svc.Key(): &svc}}
			in, ext := NoLocalEndpoints(m, tc.v6)
			if in != tc.wantInternal || ext != tc.wantExt {
				t.Errorf("internal %d, external %d; want %d, %d", in, ext, tc.wantInternal, tc.wantExt)
			}
		})
	}
}
