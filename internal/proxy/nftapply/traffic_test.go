package nftapply

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/proxy/trace"
	"github.com/ironlb/ironlb/internal/testbed/netnstest"
	"sigs.k8s.io/knftables"
)

// trafficLab is a namespace with endpoints listening on a dummy interface and client addresses
// beside them, all on "this node".
type trafficLab struct {
	ns        string
	nlOnly    bool // sync without nft, all over netlink
	endpoints []netip.AddrPort
	clients   []netip.Addr
	accepted  chan accepted
}

type accepted struct {
	endpoint netip.AddrPort
	peer     netip.AddrPort
}

// bothPaths runs f as two subtests: through nft (full syncs) and without nft (all over netlink).
func bothPaths(t *testing.T, f func(t *testing.T, nlOnly bool)) {
	t.Run("nft", func(t *testing.T) { f(t, false) })
	t.Run("netlink-only", func(t *testing.T) { f(t, true) })
}

func newTrafficLab(t *testing.T, nlOnly bool, nClients int) *trafficLab {
	ns := testNetns(t)
	l := &trafficLab{ns: ns, nlOnly: nlOnly, accepted: make(chan accepted, 1000)}
	var batch strings.Builder
	batch.WriteString("link add d0 type veth peer name d1\nlink set d0 up\nlink set d1 up\nroute add 10.96.0.0/16 dev d0\n")
	for i := range 3 {
		ap := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 244, 0, byte(5 + i)}), 8080)
		l.endpoints = append(l.endpoints, ap)
		fmt.Fprintf(&batch, "addr add %s/32 dev d0\n", ap.Addr())
	}
	for i := range nClients {
		c := netip.AddrFrom4([4]byte{10, 244, 1, byte(1 + i)})
		l.clients = append(l.clients, c)
		fmt.Fprintf(&batch, "addr add %s/32 dev d0\n", c)
	}
	nsRun(t, ns, batch.String(), "ip", "-batch", "-")
	netnstest.In(t, ns, func() {
		for _, ap := range l.endpoints {
			ln, err := net.Listen("tcp", ap.String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					pa := c.RemoteAddr().(*net.TCPAddr).AddrPort()
					peer := netip.AddrPortFrom(pa.Addr().Unmap(), pa.Port())
					c.Close()
					l.accepted <- accepted{ap, peer}
				}
			}()
		}
	})
	return l
}

// model is one ClusterIP Service over the lab's endpoints.
func (l *trafficLab) model(alg nftrules.Algorithm) *nftrules.Model {
	s := &nftrules.Service{Namespace: "ns1", Name: "web", ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.10")}, Algorithm: alg}
	p := nftrules.Port{Name: "http", Protocol: nftrules.TCP, Port: 80}
	for _, ap := range l.endpoints {
		p.Endpoints = append(p.Endpoints, nftrules.Endpoint{Addr: ap.Addr(), Port: ap.Port(), Node: "node-a", Ready: true, Serving: true, Local: true})
	}
	s.Ports = []nftrules.Port{p}
	return &nftrules.Model{
		Node:     nftrules.Node{Name: "node-a", ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}},
		Services: map[nftrules.ServiceKey]*nftrules.Service{s.Key(): s},
	}
}

// connect opens (and closes) one connection from client to the ClusterIP and returns the
// endpoint that accepted it, which must have seen the client's address.
func (l *trafficLab) connect(t *testing.T, client netip.Addr) netip.AddrPort {
	t.Helper()
	ep, peer, _ := l.connectPeer(t, client)
	if peer.Addr() != client {
		t.Fatalf("endpoint %s saw peer %s, want %s (not masqueraded)", ep, peer, client)
	}
	return ep
}

// connectPeer is connect returning the address and port the endpoint saw, whatever they are,
// and the client's own.
func (l *trafficLab) connectPeer(t *testing.T, client netip.Addr) (endpoint, peer, local netip.AddrPort) {
	t.Helper()
	netnstest.In(t, l.ns, func() {
		d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(client, 0)), Timeout: 2 * time.Second}
		c, err := d.Dial("tcp", "10.96.0.10:80")
		if err != nil {
			t.Fatalf("dial from %s: %v", client, err)
		}
		la := c.LocalAddr().(*net.TCPAddr).AddrPort()
		local = netip.AddrPortFrom(la.Addr().Unmap(), la.Port())
		c.Close()
	})
	select {
	case a := <-l.accepted:
		return a.endpoint, a.peer, local
	case <-time.After(2 * time.Second):
		t.Fatalf("no endpoint accepted the connection from %s", client)
	}
	return netip.AddrPort{}, netip.AddrPort{}, local
}

func (l *trafficLab) apply(t *testing.T, m *nftrules.Model) *trace.Ruleset {
	t.Helper()
	return l.applyConfig(t, m, nftrules.Config{Family: knftables.IPv4Family})
}

// applyConfig is apply with the rule builder's configuration.
func (l *trafficLab) applyConfig(t *testing.T, m *nftrules.Model, cfg nftrules.Config) *trace.Ruleset {
	t.Helper()
	var s *Syncer
	var err error
	if l.nlOnly {
		path := os.Getenv("PATH")
		os.Setenv("PATH", t.TempDir()) // no nft (testNetns set PATH with t.Setenv: restored at the end)
		s, err = NewKernel(cfg, WithNetlink(mustNetlink(t, cfg.Family, netnsFD(t, l.ns))))
		os.Setenv("PATH", path)
		if err == nil && s.Stats().NFT == nil {
			t.Fatal("NewKernel found nft")
		}
	} else {
		s, err = NewKernel(cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Sync(context.Background(), m, true); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); l.nlOnly && (st.Exec != 0 || st.Netlink == 0) {
		t.Fatalf("stats %+v: want the sync over netlink", st)
	}
	b, _ := nftrules.New(cfg)
	fake := knftables.NewFake(knftables.IPv4Family, nftrules.TableName)
	tx := fake.NewTransaction()
	b.Full(tx, m, nftrules.Existing{}, nil)
	if err := fake.Run(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	rs, err := trace.FromFake(knftables.IPv4Family, fake)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// TestTrafficMaglevMatchesTracer: real connections through the kernel land on exactly the
// endpoint the tracer predicts from the built rules (the kernel's jhash and reciprocal_scale,
// the fixed seed), and a client keeps its endpoint.
func TestTrafficMaglevMatchesTracer(t *testing.T) {
	bothPaths(t, func(t *testing.T, nlOnly bool) {
		l := newTrafficLab(t, nlOnly, 40)
		rs := l.apply(t, l.model(nftrules.Maglev))
		host := trace.Host{}
		for _, c := range l.clients {
			host.LocalAddrs = append(host.LocalAddrs, c)
		}
		for _, ap := range l.endpoints {
			host.LocalAddrs = append(host.LocalAddrs, ap.Addr())
		}
		share := map[netip.AddrPort]int{}
		for _, c := range l.clients {
			res, err := rs.Trace(trace.Packet{Src: c, Dst: netip.MustParseAddr("10.96.0.10"), Protocol: "tcp", DPort: 80, Origin: trace.FromHost}, host)
			if err != nil {
				t.Fatal(err)
			}
			want := res.Targets()
			got := l.connect(t, c)
			if len(want) != 1 || want[0] != got {
				t.Errorf("client %s: kernel chose %s, tracer predicted %v\n%s", c, got, want, res)
			}
			if again := l.connect(t, c); again != got {
				t.Errorf("client %s moved from %s to %s", c, got, again)
			}
			share[got]++
		}
		if len(share) != 3 {
			t.Errorf("40 clients reached %d endpoints: %v", len(share), share)
		}
	})
}

// TestTrafficRoundRobin: round-robin hands 30 connections to 3 endpoints 10 each, exactly.
func TestTrafficRoundRobin(t *testing.T) {
	bothPaths(t, func(t *testing.T, nlOnly bool) {
		l := newTrafficLab(t, nlOnly, 1)
		l.apply(t, l.model(nftrules.RoundRobin))
		count := map[netip.AddrPort]int{}
		for range 30 {
			count[l.connect(t, l.clients[0])]++
		}
		for _, ap := range l.endpoints {
			if count[ap] != 10 {
				t.Errorf("round-robin: %v, want 10 each", count)
				break
			}
		}
	})
}

// TestTrafficRandom: random spreads 300 connections over 3 endpoints (each within 100 +- 35, about
// four standard deviations).
func TestTrafficRandom(t *testing.T) {
	bothPaths(t, func(t *testing.T, nlOnly bool) {
		if testing.Short() {
			t.Skip("300 connections")
		}
		l := newTrafficLab(t, nlOnly, 1)
		l.apply(t, l.model(nftrules.Random))
		count := map[netip.AddrPort]int{}
		for range 300 {
			count[l.connect(t, l.clients[0])]++
		}
		for _, ap := range l.endpoints {
			if c := count[ap]; c < 65 || c > 135 {
				t.Errorf("random: %v, want 100 +- 35 each", count)
				break
			}
		}
	})
}

// TestTrafficHairpin: an endpoint reaching its own Service through a DNAT map is masqueraded
// when the map picks itself (hairpin-endpoints), and keeps its address and port when it picks
// another. (In this lab the connections are local: masquerading out of lo keeps the address, so
// the sign of it is the port, which masquerade fully-random changes.)
func TestTrafficHairpin(t *testing.T) {
	bothPaths(t, func(t *testing.T, nlOnly bool) {
		l := newTrafficLab(t, nlOnly, 0)
		l.apply(t, l.model(nftrules.Random))
		self := l.endpoints[0]
		var toSelf, toOther int
		for i := 0; i < 60 && (toSelf == 0 || toOther == 0); i++ {
			ep, peer, local := l.connectPeer(t, self.Addr())
			switch {
			case ep == self && peer == local:
				t.Fatalf("hairpin connection to %s not masqueraded (peer %s)", ep, peer)
			case ep == self:
				toSelf++
			case peer != local:
				t.Fatalf("connection from %s to %s masqueraded (peer %s)", local, ep, peer)
			default:
				toOther++
			}
		}
		if toSelf == 0 || toOther == 0 {
			t.Errorf("60 connections: %d to itself, %d to the others; want some of each", toSelf, toOther)
		}
	})
}

// TestTrafficSessionAffinity: sessionAffinity ClientIP with timeoutSeconds 1, over round-robin so
// that without affinity each new connection would go to the next endpoint. A client keeps its
// endpoint while it keeps connecting within the timeout, another client is not held to it, and
// once the client has been idle for longer than the timeout its next connection goes to the next
// endpoint in turn (the affinity set's element expired; round-robin only turns when affinity does
// not match).
func TestTrafficSessionAffinity(t *testing.T) {
	bothPaths(t, func(t *testing.T, nlOnly bool) {
		l := newTrafficLab(t, nlOnly, 2)
		m := l.model(nftrules.RoundRobin)
		for _, svc := range m.Services {
			svc.SessionAffinityClientIP, svc.SessionAffinityTimeout = true, time.Second
		}
		l.apply(t, m)
		a, b := l.clients[0], l.clients[1]
		first := l.connect(t, a)
		for i := range 10 {
			if got := l.connect(t, a); got != first {
				t.Fatalf("connection %d from %s within the affinity timeout went to %s, not %s", i+2, a, got, first)
			}
		}
		second := l.connect(t, b)
		if second == first {
			t.Errorf("client %s was held to %s's endpoint %s", b, a, first)
		}
		if again := l.connect(t, b); again != second {
			t.Errorf("client %s moved from %s to %s within the timeout", b, second, again)
		}
		// Idle for twice the timeout: the next connection is not held. Round-robin has handed out two
		// endpoints (a's and b's), so a now gets the third.
		time.Sleep(2 * time.Second)
		after := l.connect(t, a)
		if after == first || after == second {
			t.Errorf("after the affinity timeout, %s went to %s again (first %s, b's %s): affinity did not expire", a, after, first, second)
		}
		// And the new endpoint holds again.
		if again := l.connect(t, a); again != after {
			t.Errorf("after expiry, %s moved from %s to %s: affinity not re-established", a, after, again)
		}
	})
}

// TestTrafficMasqueradeAll: with masqueradeAll, a client inside the cluster CIDR reaching a
// ClusterIP is masqueraded (without it, the endpoint sees the client's own address and port, which
// connect checks). In this lab the connection is local, so masquerade keeps the address and the
// sign of it is the port, which masquerade fully-random changes.
func TestTrafficMasqueradeAll(t *testing.T) {
	bothPaths(t, func(t *testing.T, nlOnly bool) {
		l := newTrafficLab(t, nlOnly, 1)
		c := l.clients[0]
		l.apply(t, l.model(nftrules.Random))
		for range 5 {
			l.connect(t, c) // not masqueraded: fails the test otherwise
		}
		l.applyConfig(t, l.model(nftrules.Random), nftrules.Config{Family: knftables.IPv4Family, MasqueradeAll: true})
		masqueraded := 0
		for range 5 {
			_, peer, local := l.connectPeer(t, c)
			if peer != local {
				masqueraded++
			}
		}
		if masqueraded != 5 {
			t.Errorf("masqueradeAll: %d of 5 connections from %s masqueraded, want all", masqueraded, c)
		}
	})
}
