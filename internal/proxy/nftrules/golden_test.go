package nftrules_test

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/proxy/trace"
	"sigs.k8s.io/knftables"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

type flow struct {
	name string
	pkt  trace.Packet
	// want is trace.Result.Summary(): "DNAT a:p[ masq]" per distinct outcome joined by " | ",
	// "drop", "reject" or "accept" (not DNATed).
	want string
}

func tcp(src, dst string, port uint16) trace.Packet {
	return trace.Packet{Src: a(src), Dst: a(dst), Protocol: "tcp", DPort: port}
}

func fromHost(p trace.Packet) trace.Packet { p.Origin = trace.FromHost; return p }

func withProto(p trace.Packet, proto string) trace.Packet { p.Protocol = proto; return p }

type goldenCase struct {
	name     string
	family   knftables.Family
	cfg      nftrules.Config
	node     func(*nftrules.Node)
	services []*nftrules.Service
	affinity map[string][]netip.Addr // tracer's pre-filled affinity sets, by endpoint "addr:port"
	flows    []flow
}

func goldenCases() []goldenCase {
	v4 := []netip.Addr{a("10.96.0.10")}
	local1 := ep("10.244.1.5:8080", thisNode)
	remote2 := ep("10.244.2.5:8080", "node-b")
	remote3 := ep("10.244.3.5:8080", "node-c")

	lb := func(name string, eps ...nftrules.Endpoint) *nftrules.Service {
		s := svc("ns1", name, v4, eps...)
		s.LoadBalancerIPs = []netip.Addr{a("192.168.1.240")}
		s.ExternalIPs = []netip.Addr{a("192.168.1.250")}
		s.Ports[0].NodePort = 30080
		return s
	}

	return []goldenCase{{
		name:     "clusterip",
		services: []*nftrules.Service{svc("ns1", "web", v4, local1, remote2, notReady(remote3))},
		flows: []flow{
			{"pod to ClusterIP", tcp("10.244.1.9", "10.96.0.10", 80), "DNAT 10.244.1.5:8080 | DNAT 10.244.2.5:8080"},
			{"hairpin", tcp("10.244.1.5", "10.96.0.10", 80), "DNAT 10.244.1.5:8080 masq | DNAT 10.244.2.5:8080"},
			{"off-cluster client masqueraded", tcp("192.168.5.5", "10.96.0.10", 80), "DNAT 10.244.1.5:8080 masq | DNAT 10.244.2.5:8080 masq"},
			{"host to ClusterIP masqueraded", fromHost(tcp("192.168.0.10", "10.96.0.10", 80)), "DNAT 10.244.1.5:8080 masq | DNAT 10.244.2.5:8080 masq"},
			{"wrong port rejected", tcp("10.244.1.9", "10.96.0.10", 81), "reject"},
			{"wrong protocol rejected", withProto(tcp("10.244.1.9", "10.96.0.10", 80), "udp"), "reject"},
			{"unallocated ClusterIP dropped", tcp("10.244.1.9", "10.96.0.99", 80), "drop"},
			{"other traffic untouched", tcp("10.244.1.9", "10.244.2.5", 8080), "accept"},
		},
	}, {
		name: "nodeport",
		services: []*nftrules.Service{func() *nftrules.Service {
			s := svc("ns1", "np", v4, local1, remote2)
			s.Ports[0].NodePort = 30080
			return s
		}()},
		flows: []flow{
			{"external to node port", tcp("192.168.5.5", "192.168.0.10", 30080), "DNAT 10.244.1.5:8080 masq | DNAT 10.244.2.5:8080 masq"},
			{"external to second node address", tcp("192.168.5.5", "192.168.0.11", 30080), "DNAT 10.244.1.5:8080 masq | DNAT 10.244.2.5:8080 masq"},
			{"host to node port", fromHost(tcp("192.168.0.10", "192.168.0.10", 30080)), "DNAT 10.244.1.5:8080 masq | DNAT 10.244.2.5:8080 masq"},
			{"localhost node ports are not supported", fromHost(tcp("127.0.0.1", "127.0.0.1", 30080)), "accept"},
			{"node port on a non-local address", tcp("192.168.5.5", "192.168.7.7", 30080), "accept"},
			{"other port on the node", tcp("192.168.5.5", "192.168.0.10", 22), "accept"},
		},
	}, {
		name: "nodeport-addresses",
		node: func(n *nftrules.Node) { n.NodePortAddresses = []netip.Addr{a("192.168.0.10"), a("127.0.0.1")} },
		services: []*nftrules.Service{func() *nftrules.Service {
			s := svc("ns1", "np", v4, remote2)
			s.Ports[0].NodePort = 30080
			return s
		}()},
		flows: []flow{
			{"listed address", tcp("192.168.5.5", "192.168.0.10", 30080), "DNAT 10.244.2.5:8080 masq"},
			{"unlisted local address", tcp("192.168.5.5", "192.168.0.11", 30080), "accept"},
		},
	}, {
		name:     "lb-cluster",
		services: []*nftrules.Service{lb("lb", local1, remote2)},
		flows: []flow{
			{"external to LB IP", tcp("192.168.5.5", "192.168.1.240", 80), "DNAT 10.244.1.5:8080 masq | DNAT 10.244.2.5:8080 masq"},
			{"external to external IP", tcp("192.168.5.5", "192.168.1.250", 80), "DNAT 10.244.1.5:8080 masq | DNAT 10.244.2.5:8080 masq"},
			{"pod to LB IP", tcp("10.244.1.9", "192.168.1.240", 80), "DNAT 10.244.1.5:8080 masq | DNAT 10.244.2.5:8080 masq"},
			{"node port", tcp("192.168.5.5", "192.168.0.10", 30080), "DNAT 10.244.1.5:8080 masq | DNAT 10.244.2.5:8080 masq"},
		},
	}, {
		// ironlb proxy's configuration: packets the DSR table marked are left to it (nat-prerouting
		// returns); unmarked ones, as here, take the snat path.
		name:     "lb-cluster-dsr-skip-mark",
		cfg:      nftrules.Config{SkipMark: nftrules.DSRMarkMask},
		services: []*nftrules.Service{lb("lb", local1, remote2)},
		flows: []flow{
			{"external to LB IP", tcp("192.168.5.5", "192.168.1.240", 80), "DNAT 10.244.1.5:8080 masq | DNAT 10.244.2.5:8080 masq"},
			{"pod to LB IP", tcp("10.244.1.9", "192.168.1.240", 80), "DNAT 10.244.1.5:8080 masq | DNAT 10.244.2.5:8080 masq"},
		},
	}, {
		name: "lb-local",
		services: []*nftrules.Service{func() *nftrules.Service {
			s := lb("lb", local1, remote2)
			s.ExternalTrafficPolicyLocal = true
			s.HealthCheckNodePort = 31000
			return s
		}()},
		flows: []flow{
			{"external client keeps its address, local endpoint only", tcp("192.168.5.5", "192.168.1.240", 80), "DNAT 10.244.1.5:8080"},
			{"node port too", tcp("192.168.5.5", "192.168.0.10", 30080), "DNAT 10.244.1.5:8080"},
			{"pod traffic short-circuits to all endpoints", tcp("10.244.1.9", "192.168.1.240", 80), "DNAT 10.244.1.5:8080 | DNAT 10.244.2.5:8080"},
			{"host traffic short-circuits, masqueraded", fromHost(tcp("192.168.0.10", "192.168.1.240", 80)), "DNAT 10.244.1.5:8080 masq | DNAT 10.244.2.5:8080 masq"},
			{"ClusterIP uses all endpoints", tcp("10.244.1.9", "10.96.0.10", 80), "DNAT 10.244.1.5:8080 | DNAT 10.244.2.5:8080"},
		},
	}, {
		name: "lb-local-no-local-endpoints",
		services: []*nftrules.Service{func() *nftrules.Service {
			s := lb("lb", remote2)
			s.ExternalTrafficPolicyLocal = true
			return s
		}()},
		flows: []flow{
			{"external client dropped", tcp("192.168.5.5", "192.168.1.240", 80), "drop"},
			{"external IP dropped", tcp("192.168.5.5", "192.168.1.250", 80), "drop"},
			{"node port dropped", tcp("192.168.5.5", "192.168.0.10", 30080), "drop"},
			{"pod traffic still served", tcp("10.244.1.9", "192.168.1.240", 80), "DNAT 10.244.2.5:8080"},
			{"ClusterIP still served", tcp("10.244.1.9", "10.96.0.10", 80), "DNAT 10.244.2.5:8080"},
		},
	}, {
		name:     "no-endpoints",
		services: []*nftrules.Service{lb("empty", notReady(remote2))},
		flows: []flow{
			{"ClusterIP rejected", tcp("10.244.1.9", "10.96.0.10", 80), "reject"},
			{"LB IP rejected", tcp("192.168.5.5", "192.168.1.240", 80), "reject"},
			{"external IP rejected", tcp("192.168.5.5", "192.168.1.250", 80), "reject"},
			{"node port rejected", tcp("192.168.5.5", "192.168.0.10", 30080), "reject"},
			{"host to ClusterIP rejected", fromHost(tcp("192.168.0.10", "10.96.0.10", 80)), "reject"},
			{"host to node port rejected", fromHost(tcp("192.168.0.10", "192.168.0.10", 30080)), "reject"},
		},
	}, {
		name: "terminating-fallback",
		services: []*nftrules.Service{
			svc("ns1", "term", v4, terminating(local1, true), terminating(remote2, false)),
			svc("ns1", "mixed", []netip.Addr{a("10.96.0.11")}, terminating(local1, true), remote3),
		},
		flows: []flow{
			{"only serving terminating endpoints", tcp("10.244.1.9", "10.96.0.10", 80), "DNAT 10.244.1.5:8080"},
			{"ready endpoints win over terminating", tcp("10.244.1.9", "10.96.0.11", 80), "DNAT 10.244.3.5:8080"},
		},
	}, {
		name: "affinity",
		services: []*nftrules.Service{func() *nftrules.Service {
			s := svc("ns1", "sticky", v4, local1, remote2)
			s.SessionAffinityClientIP = true
			s.SessionAffinityTimeout = 600 * time.Second
			return s
		}()},
		affinity: map[string][]netip.Addr{"10.244.2.5:8080": {a("10.244.1.77")}},
		flows: []flow{
			{"new client picks at random", tcp("10.244.1.9", "10.96.0.10", 80), "DNAT 10.244.1.5:8080 | DNAT 10.244.2.5:8080"},
			{"known client sticks", tcp("10.244.1.77", "10.96.0.10", 80), "DNAT 10.244.2.5:8080"},
		},
	}, {
		name: "source-ranges",
		services: []*nftrules.Service{func() *nftrules.Service {
			s := lb("fw", remote2)
			s.LoadBalancerSourceRanges = []netip.Prefix{pfx("203.0.113.0/25"), pfx("192.168.0.0/24"), pfx("2001:db8::/64")}
			return s
		}()},
		flows: []flow{
			{"allowed source", tcp("203.0.113.9", "192.168.1.240", 80), "DNAT 10.244.2.5:8080 masq"},
			{"other source dropped", tcp("203.0.113.200", "192.168.1.240", 80), "drop"},
			{"VIP as source allowed (range holds the node)", tcp("192.168.1.240", "192.168.1.240", 80), "DNAT 10.244.2.5:8080 masq"},
			{"node port not filtered", tcp("203.0.113.200", "192.168.0.10", 30080), "DNAT 10.244.2.5:8080 masq"},
			{"external IP not filtered", tcp("203.0.113.200", "192.168.1.250", 80), "DNAT 10.244.2.5:8080 masq"},
		},
	}, {
		name:   "dualstack-v6",
		family: knftables.IPv6Family,
		services: []*nftrules.Service{func() *nftrules.Service {
			s := svc("ns1", "dual", []netip.Addr{a("10.96.0.10"), a("fd00:10:96::10")},
				ep("10.244.1.5:8080", thisNode), ep("[fd00:10:244:1::5]:8080", thisNode), ep("[fd00:10:244:2::5]:8080", "node-b"))
			s.LoadBalancerIPs = []netip.Addr{a("192.168.1.240"), a("2001:db8:1::240")}
			s.Ports[0].NodePort = 30080
			return s
		}()},
		flows: []flow{
			{"pod to v6 ClusterIP", tcp("fd00:10:244:1::9", "fd00:10:96::10", 80), "DNAT [fd00:10:244:1::5]:8080 | DNAT [fd00:10:244:2::5]:8080"},
			{"external to v6 LB IP", tcp("2001:db8:ff::1", "2001:db8:1::240", 80), "DNAT [fd00:10:244:1::5]:8080 masq | DNAT [fd00:10:244:2::5]:8080 masq"},
			{"v6 node port", tcp("2001:db8:ff::1", "fd00:192:168::10", 30080), "DNAT [fd00:10:244:1::5]:8080 masq | DNAT [fd00:10:244:2::5]:8080 masq"},
			{"v6 unallocated ClusterIP", tcp("fd00:10:244:1::9", "fd00:10:96::99", 80), "drop"},
		},
	}, {
		name: "round-robin",
		services: []*nftrules.Service{func() *nftrules.Service {
			s := svc("ns1", "rr", v4, local1, remote2, remote3)
			s.Algorithm = nftrules.RoundRobin
			return s
		}()},
		flows: []flow{
			{"each endpoint in turn", tcp("10.244.1.9", "10.96.0.10", 80), "DNAT 10.244.1.5:8080 | DNAT 10.244.2.5:8080 | DNAT 10.244.3.5:8080"},
		},
	}, {
		name: "many-endpoints-map",
		services: []*nftrules.Service{
			func() *nftrules.Service {
				var eps []nftrules.Endpoint
				for i := range 9 {
					eps = append(eps, ep(fmt.Sprintf("10.244.%d.5:8080", i+1), "node-b"))
				}
				return svc("ns1", "many", v4, eps...)
			}(),
			func() *nftrules.Service {
				var eps []nftrules.Endpoint
				for i := range 9 {
					eps = append(eps, ep(fmt.Sprintf("10.244.%d.6:8080", i+1), "node-b"))
				}
				s := svc("ns1", "many-rr", []netip.Addr{a("10.96.0.11")}, eps...)
				s.Algorithm = nftrules.RoundRobin
				return s
			}(),
		},
		flows: []flow{
			{"random over a verdict map", tcp("10.244.0.9", "10.96.0.10", 80), "DNAT 10.244.1.5:8080 | DNAT 10.244.2.5:8080 | DNAT 10.244.3.5:8080 | DNAT 10.244.4.5:8080 | DNAT 10.244.5.5:8080 | DNAT 10.244.6.5:8080 | DNAT 10.244.7.5:8080 | DNAT 10.244.8.5:8080 | DNAT 10.244.9.5:8080"},
			{"round-robin over a verdict map", tcp("10.244.0.9", "10.96.0.11", 80), "DNAT 10.244.1.6:8080 | DNAT 10.244.2.6:8080 | DNAT 10.244.3.6:8080 | DNAT 10.244.4.6:8080 | DNAT 10.244.5.6:8080 | DNAT 10.244.6.6:8080 | DNAT 10.244.7.6:8080 | DNAT 10.244.8.6:8080 | DNAT 10.244.9.6:8080"},
		},
	}, {
		name: "maglev",
		cfg:  nftrules.Config{MaglevTableSize: 13},
		services: []*nftrules.Service{func() *nftrules.Service {
			s := svc("ns1", "hash", v4, local1, remote2, remote3)
			s.Algorithm = nftrules.Maglev
			s.Ports[0].NodePort = 30080
			return s
		}()},
		flows: []flow{
			{"client A", tcp("192.168.5.1", "10.96.0.10", 80), "DNAT 10.244.3.5:8080 masq"},
			{"client B", tcp("192.168.5.2", "10.96.0.10", 80), "DNAT 10.244.2.5:8080 masq"},
			{"client A via node port: same endpoint", tcp("192.168.5.1", "192.168.0.10", 30080), "DNAT 10.244.3.5:8080 masq"},
		},
	}, {
		name: "internal-traffic-policy-local",
		services: []*nftrules.Service{
			func() *nftrules.Service {
				s := svc("ns1", "itp", v4, local1, remote2)
				s.InternalTrafficPolicyLocal = true
				return s
			}(),
			func() *nftrules.Service {
				s := svc("ns1", "itp-none", []netip.Addr{a("10.96.0.11")}, remote2)
				s.InternalTrafficPolicyLocal = true
				return s
			}(),
		},
		flows: []flow{
			{"local endpoint only", tcp("10.244.1.9", "10.96.0.10", 80), "DNAT 10.244.1.5:8080"},
			{"no local endpoint: dropped", tcp("10.244.1.9", "10.96.0.11", 80), "drop"},
		},
	}, {
		name: "dead-node",
		node: func(n *nftrules.Node) { n.DeadNodes = map[string]bool{"node-b": true, thisNode: true} },
		services: []*nftrules.Service{
			svc("ns1", "web", v4, local1, remote2, remote3),
			svc("ns1", "all-dead", []netip.Addr{a("10.96.0.11")}, remote2),
		},
		flows: []flow{
			{"dead node's endpoint left out, own node never dead", tcp("10.244.1.9", "10.96.0.10", 80), "DNAT 10.244.1.5:8080 | DNAT 10.244.3.5:8080"},
			{"all endpoints dead: used anyway", tcp("10.244.1.9", "10.96.0.11", 80), "DNAT 10.244.2.5:8080"},
		},
	}, {
		name: "multiport-udp-sctp",
		services: []*nftrules.Service{{
			Namespace: "ns1", Name: "dns", ClusterIPs: v4,
			Ports: []nftrules.Port{
				{Name: "dns", Protocol: nftrules.UDP, Port: 53, Endpoints: []nftrules.Endpoint{ep("10.244.1.5:5353", thisNode)}},
				{Name: "dns-tcp", Protocol: nftrules.TCP, Port: 53, Endpoints: []nftrules.Endpoint{ep("10.244.1.5:5354", thisNode)}},
				{Name: "sig", Protocol: nftrules.SCTP, Port: 9000, NodePort: 30900, Endpoints: []nftrules.Endpoint{ep("10.244.2.5:9000", "node-b")}},
			},
		}},
		flows: []flow{
			{"udp", withProto(tcp("10.244.1.9", "10.96.0.10", 53), "udp"), "DNAT 10.244.1.5:5353"},
			{"tcp, same port", tcp("10.244.1.9", "10.96.0.10", 53), "DNAT 10.244.1.5:5354"},
			{"sctp node port", withProto(tcp("192.168.5.5", "192.168.0.10", 30900), "sctp"), "DNAT 10.244.2.5:9000 masq"},
		},
	}}
}

// TestGolden builds each case's full ruleset, compares the Fake's dump with
// testdata/<case>.golden (go test -update rewrites them), and traces packets through it.
func TestGolden(t *testing.T) {
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			fam := tc.family
			if fam == "" {
				fam = knftables.IPv4Family
			}
			cfg := tc.cfg
			cfg.Family = fam
			b := builder(t, cfg)
			n := testNode()
			if tc.node != nil {
				tc.node(&n)
			}
			m := model(n, tc.services...)
			fake, plan := fullFake(t, b, m)
			if len(plan.Skipped) > 0 || len(plan.Conflicts) > 0 {
				t.Errorf("plan: skipped %v, conflicts %v", plan.Skipped, plan.Conflicts)
			}
			rs, err := trace.FromFake(fam, fake)
			if err != nil {
				t.Fatal(err)
			}
			host := trace.Host{LocalAddrs: hostAddrs, Affinity: affinitySets(fake, tc.affinity)}
			var traces strings.Builder
			for _, f := range tc.flows {
				res, err := rs.Trace(f.pkt, host)
				if err != nil {
					t.Errorf("%s: %v", f.name, err)
					continue
				}
				if got := res.Summary(); got != f.want {
					t.Errorf("%s: %s\n got %s\nwant %s\n%s", f.name, f.pkt, got, f.want, res)
				}
				fmt.Fprintf(&traces, "# %s\n%s\n", f.name, res)
			}
			got := fake.Dump() + "\n" + traces.String()
			checkGolden(t, filepath.Join("testdata", tc.name+".golden"), got)
		})
	}
}

// affinitySets maps "addr:port" keys to the affinity set names of those endpoints in fake.
func affinitySets(fake *knftables.Fake, byEndpoint map[string][]netip.Addr) map[string][]netip.Addr {
	if len(byEndpoint) == 0 {
		return nil
	}
	out := map[string][]netip.Addr{}
	for name := range fake.Table.Sets {
		for ep, clients := range byEndpoint {
			ap := netip.MustParseAddrPort(ep)
			if strings.HasSuffix(name, "__"+ap.Addr().String()+"/"+fmt.Sprint(ap.Port())) {
				out[name] = clients
			}
		}
	}
	return out
}

func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got; go test -update rewrites it):\n%s", path, diff)
	}
}
