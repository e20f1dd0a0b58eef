// Package nftrulestest generates random nftrules models for property tests and benchmarks.
package nftrulestest

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	"github.com/ironlb/ironlb/internal/proxy/nftrules"
)

// ThisNode is the name of the node Node describes.
const ThisNode = "node-a"

// Node is a node with both families' addresses and CIDRs.
func Node() nftrules.Node {
	return nftrules.Node{
		Name:         ThisNode,
		IPs:          []netip.Addr{netip.MustParseAddr("192.168.0.10"), netip.MustParseAddr("fd00:192:168::10")},
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")},
		ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd00:10:96::/112")},
	}
}

// Gen draws models from a small universe, so that random changes collide: shared endpoint
// addresses, the same nodes, Services appearing and going.
type Gen struct{ R *rand.Rand }

// NewGen returns a Gen seeded with seed.
func NewGen(seed uint64) Gen { return Gen{rand.New(rand.NewPCG(seed, 7))} }

var genNodes = []string{ThisNode, "node-b", "node-c", ""}

func (g Gen) addr(v6 bool, base string, n int) netip.Addr {
	if v6 {
		return netip.MustParseAddr(fmt.Sprintf("fd00:%s::%x", base, n))
	}
	return netip.MustParseAddr(fmt.Sprintf("10.%s.%d.%d", base, n/250, n%250+1))
}

func (g Gen) endpoint(v6 bool) nftrules.Endpoint {
	node := genNodes[g.R.IntN(len(genNodes))]
	e := nftrules.Endpoint{
		Addr: g.addr(v6, "244", g.R.IntN(6)),
		Port: uint16(8080 + g.R.IntN(2)),
		Node: node, Local: node == ThisNode,
	}
	switch g.R.IntN(6) {
	case 0:
		e.Serving, e.Terminating = true, true
	case 1:
		e.Terminating = true
	case 2:
	default:
		e.Ready, e.Serving = true, true
	}
	return e
}

// Service returns a random Service ns/s<i>.
func (g Gen) Service(i int) *nftrules.Service {
	s := &nftrules.Service{Namespace: "ns", Name: fmt.Sprintf("s%d", i)}
	s.ClusterIPs = []netip.Addr{g.addr(false, "96", i)}
	if g.R.IntN(3) == 0 {
		s.ClusterIPs = append(s.ClusterIPs, g.addr(true, "96", i))
	}
	if g.R.IntN(3) == 0 {
		s.LoadBalancerIPs = []netip.Addr{g.addr(false, "200", i), g.addr(true, "200", i)}
		if g.R.IntN(2) == 0 {
			s.LoadBalancerSourceRanges = []netip.Prefix{netip.MustParsePrefix("192.168.0.0/16")}
		}
	}
	if g.R.IntN(5) == 0 {
		s.ExternalIPs = []netip.Addr{g.addr(false, "201", i)}
	}
	s.ExternalTrafficPolicyLocal = g.R.IntN(3) == 0
	s.InternalTrafficPolicyLocal = g.R.IntN(5) == 0
	if g.R.IntN(4) == 0 {
		s.SessionAffinityClientIP = true
		s.SessionAffinityTimeout = time.Duration(g.R.IntN(3)) * 100 * time.Second
	}
	s.Algorithm = nftrules.Algorithm(g.R.IntN(3))
	for p := range 1 + g.R.IntN(2) {
		port := nftrules.Port{Name: fmt.Sprintf("p%d", p), Protocol: []nftrules.Protocol{nftrules.TCP, nftrules.UDP, nftrules.SCTP}[g.R.IntN(3)], Port: uint16(80 + p)}
		if g.R.IntN(2) == 0 {
			port.NodePort = uint16(30000 + 10*i + p)
		}
		for range g.R.IntN(5) {
			port.Endpoints = append(port.Endpoints, g.endpoint(g.R.IntN(4) == 0))
		}
		s.Ports = append(s.Ports, port)
	}
	return s
}

// Model returns a model of Services s0 to s(nSvc-1) on Node.
func (g Gen) Model(nSvc int) *nftrules.Model {
	m := &nftrules.Model{Node: Node(), Services: map[nftrules.ServiceKey]*nftrules.Service{}}
	for i := range nSvc {
		s := g.Service(i)
		m.Services[s.Key()] = s
	}
	return m
}

// Mutate returns a copy of m with a few random changes; unchanged Services keep their pointers,
// changed ones get new ones (the contract Incremental relies on).
func (g Gen) Mutate(m *nftrules.Model, universe int) *nftrules.Model {
	n := &nftrules.Model{Node: m.Node, Services: maps.Clone(m.Services)}
	n.Node.DeadNodes = maps.Clone(m.Node.DeadNodes)
	for range 1 + g.R.IntN(3) {
		i := g.R.IntN(universe)
		key := nftrules.ServiceKey{Namespace: "ns", Name: fmt.Sprintf("s%d", i)}
		old := n.Services[key]
		switch op := g.R.IntN(8); {
		case op == 0 || old == nil:
			s := g.Service(i)
			n.Services[key] = s
		case op == 1:
			delete(n.Services, key)
		case op == 2:
			if n.Node.DeadNodes == nil {
				n.Node.DeadNodes = map[string]bool{}
			}
			node := genNodes[g.R.IntN(len(genNodes)-1)]
			n.Node.DeadNodes[node] = !n.Node.DeadNodes[node]
		default:
			s := CloneService(old)
			p := &s.Ports[g.R.IntN(len(s.Ports))]
			switch g.R.IntN(5) {
			case 0:
				p.Endpoints = append(p.Endpoints, g.endpoint(g.R.IntN(4) == 0))
			case 1:
				if len(p.Endpoints) > 0 {
					p.Endpoints = slices.Delete(p.Endpoints, 0, 1)
				}
			case 2:
				if len(p.Endpoints) > 0 {
					e := &p.Endpoints[g.R.IntN(len(p.Endpoints))]
					e.Ready = !e.Ready
				}
			case 3:
				s.ExternalTrafficPolicyLocal = !s.ExternalTrafficPolicyLocal
				s.Algorithm = nftrules.Algorithm(g.R.IntN(3))
			case 4:
				s.SessionAffinityClientIP = !s.SessionAffinityClientIP
				s.SessionAffinityTimeout = time.Duration(g.R.IntN(3)) * 100 * time.Second
			}
			n.Services[key] = s
		}
	}
	return n
}

// CloneService deep-copies s's ports and endpoints.
func CloneService(s *nftrules.Service) *nftrules.Service {
	c := *s
	c.Ports = slices.Clone(s.Ports)
	for i := range c.Ports {
		c.Ports[i].Endpoints = slices.Clone(s.Ports[i].Endpoints)
	}
	return &c
}

// Scale returns a model of n ClusterIP Services (every other one also a NodePort), each with two
// ready endpoints, one of them on this node: the shape of the benchmarks.
func Scale(n int) *nftrules.Model {
	m := &nftrules.Model{Node: Node(), Services: make(map[nftrules.ServiceKey]*nftrules.Service, n)}
	for i := range n {
		s := &nftrules.Service{
			Namespace: "ns1", Name: fmt.Sprintf("svc-%d", i),
			ClusterIPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)})},
			Ports: []nftrules.Port{{Name: "http", Protocol: nftrules.TCP, Port: 80, Endpoints: []nftrules.Endpoint{
				{Addr: netip.AddrFrom4([4]byte{10, 244, byte(i >> 8), byte(i)}), Port: 8080, Node: ThisNode, Ready: true, Serving: true, Local: true},
				{Addr: netip.AddrFrom4([4]byte{10, 245, byte(i >> 8), byte(i)}), Port: 8080, Node: "node-b", Ready: true, Serving: true},
			}}},
		}
		if i >= 1<<16 {
			s.ClusterIPs[0] = netip.AddrFrom4([4]byte{10, 97, byte(i >> 8), byte(i)})
		}
		if i%2 == 0 && i < 2*2768 {
			s.Ports[0].NodePort = uint16(30000 + i/2)
		}
		m.Services[s.Key()] = s
	}
	return m
}

// WithEndpointChange returns a copy of m (sharing all other Services) in which Service svc-i's
// second endpoint has moved to another address (generation gen picks which).
func WithEndpointChange(m *nftrules.Model, i int, gen byte) *nftrules.Model {
	n := &nftrules.Model{Node: m.Node, Services: maps.Clone(m.Services)}
	key := nftrules.ServiceKey{Namespace: "ns1", Name: fmt.Sprintf("svc-%d", i)}
	s := CloneService(m.Services[key])
	s.Ports[0].Endpoints[1].Addr = netip.AddrFrom4([4]byte{10, 246 + gen%8, byte(i >> 8), byte(i)})
	n.Services[key] = s
	return n
}
