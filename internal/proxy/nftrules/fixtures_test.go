package nftrules_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"sigs.k8s.io/knftables"
)

var (
	a   = netip.MustParseAddr
	pfx = netip.MustParsePrefix
)

const thisNode = "node-a"

// testNode is the node the golden rulesets are built for.
func testNode() nftrules.Node {
	return nftrules.Node{
		Name:         thisNode,
		IPs:          []netip.Addr{a("192.168.0.10"), a("fd00:192:168::10")},
		ClusterCIDRs: []netip.Prefix{pfx("10.244.0.0/16"), pfx("fd00:10:244::/56")},
		ServiceCIDRs: []netip.Prefix{pfx("10.96.0.0/16"), pfx("fd00:10:96::/112")},
	}
}

// hostAddrs are the addresses configured on the test node, for the tracer.
var hostAddrs = []netip.Addr{a("192.168.0.10"), a("192.168.0.11"), a("fd00:192:168::10")}

// ep returns a ready endpoint "addr:port" on node.
func ep(addrPort, node string) nftrules.Endpoint {
	ap := netip.MustParseAddrPort(addrPort)
	return nftrules.Endpoint{
		Addr: ap.Addr(), Port: ap.Port(), Node: node,
		Ready: true, Serving: true, Local: node == thisNode,
	}
}

func terminating(e nftrules.Endpoint, serving bool) nftrules.Endpoint {
	e.Ready, e.Serving, e.Terminating = false, serving, true
	return e
}

func notReady(e nftrules.Endpoint) nftrules.Endpoint {
	e.Ready, e.Serving = false, false
	return e
}

// svc returns a Service ns/name with one port "http" tcp 80 -> eps.
func svc(ns, name string, clusterIPs []netip.Addr, eps ...nftrules.Endpoint) *nftrules.Service {
	return &nftrules.Service{
		Namespace: ns, Name: name, ClusterIPs: clusterIPs,
		Ports: []nftrules.Port{{Name: "http", Protocol: nftrules.TCP, Port: 80, Endpoints: eps}},
	}
}

func model(n nftrules.Node, svcs ...*nftrules.Service) *nftrules.Model {
	m := &nftrules.Model{Node: n, Services: map[nftrules.ServiceKey]*nftrules.Service{}}
	for _, s := range svcs {
		m.Services[s.Key()] = s
	}
	return m
}

func builder(t testing.TB, cfg nftrules.Config) *nftrules.Builder {
	t.Helper()
	b, err := nftrules.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fullFake runs a full sync of m into a new Fake, with a new State.
func fullFake(t testing.TB, b *nftrules.Builder, m *nftrules.Model) (*knftables.Fake, nftrules.Plan) {
	t.Helper()
	return fullFakeWith(t, b, m, nil)
}

// fullFakeWith runs a full sync of m with State st into a new Fake.
func fullFakeWith(t testing.TB, b *nftrules.Builder, m *nftrules.Model, st *nftrules.State) (*knftables.Fake, nftrules.Plan) {
	t.Helper()
	fake := knftables.NewFake(b.Config().Family, nftrules.TableName)
	tx := fake.NewTransaction()
	plan := b.Full(tx, m, nftrules.Existing{}, st)
	if err := fake.Run(context.Background(), tx); err != nil {
		t.Fatalf("full sync: %v\n%s", err, tx)
	}
	return fake, plan
}
