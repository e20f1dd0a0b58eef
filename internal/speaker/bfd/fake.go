package bfd

import (
	"errors"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// FakeNetwork is an in-memory network of FakeConns, for tests of code that runs a Manager. Packets
// are delivered at once, with TTL 255, unless the path is cut. It works inside a testing/synctest
// bubble when its conns are used there.
type FakeNetwork struct {
	mu       sync.Mutex // guards the following fields
	hosts    map[netip.Addr]*FakeConn
	cut      map[[2]netip.Addr]bool
	tap      func(src, dst netip.Addr, b []byte)
	nextPort uint16
}

// NewFakeNetwork returns an empty network.
func NewFakeNetwork() *FakeNetwork {
	return &FakeNetwork{hosts: map[netip.Addr]*FakeConn{}, cut: map[[2]netip.Addr]bool{}, nextPort: SourcePortMin}
}

// Host returns a Conn that owns addrs: packets sent to them are queued for its Recv (up to 1024;
// more are lost). An address already owned moves to the new host.
func (n *FakeNetwork) Host(addrs ...netip.Addr) *FakeConn {
	c := &FakeConn{net: n, addrs: addrs, in: make(chan fakePacket, 1024), wake: make(chan struct{}, 1)}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, a := range addrs {
		n.hosts[a] = c
	}
	return c
}

// Cut drops packets from src to dst (cut true) or lets them pass again. It is one-way: cut both
// directions for a broken link.
func (n *FakeNetwork) Cut(src, dst netip.Addr, cut bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut[[2]netip.Addr{src, dst}] = cut
}

// Tap calls fn (nil: nothing) with every packet sent, delivered or not, from the sender's goroutine.
func (n *FakeNetwork) Tap(fn func(src, dst netip.Addr, b []byte)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.tap = fn
}

func (n *FakeNetwork) deliver(src, dst netip.Addr, port uint16, b []byte) {
	n.mu.Lock()
	to, tap := n.hosts[dst], n.tap
	if n.cut[[2]netip.Addr{src, dst}] {
		to = nil
	}
	n.mu.Unlock()
	if tap != nil {
		tap(src, dst, b)
	}
	if to != nil {
		to.Inject(b, src, dst, port, TTL)
	}
}

// FakeConn is one host's Conn on a FakeNetwork.
type FakeConn struct {
	net   *FakeNetwork
	addrs []netip.Addr
	in    chan fakePacket
	wake  chan struct{}
}

type fakePacket struct {
	b        []byte
	src, dst netip.Addr
	port     uint16
	ttl      int
}

var _ Conn = (*FakeConn)(nil)

// Inject queues a copy of b as if it had arrived from src:port to dst with the given TTL. It drops
// the packet when 1024 are queued, as a full socket buffer would.
func (c *FakeConn) Inject(b []byte, src, dst netip.Addr, port uint16, ttl int) {
	select {
	case c.in <- fakePacket{b: slices.Clone(b), src: src, dst: dst, port: port, ttl: ttl}:
	default:
	}
}

// Recv implements Conn.
func (c *FakeConn) Recv(b []byte, deadline time.Time) (Datagram, bool, error) {
	var p fakePacket
	if d := time.Until(deadline); d <= 0 {
		select {
		case p = <-c.in:
		default:
			return Datagram{}, false, nil
		}
	} else {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case p = <-c.in:
		case <-c.wake:
			return Datagram{}, false, nil
		case <-t.C:
			return Datagram{}, false, nil
		}
	}
	n := copy(b, p.b)
	return Datagram{N: n, Src: p.src, Dst: p.dst, SrcPort: p.port, TTL: p.ttl}, true, nil
}

// Wake implements Conn.
func (c *FakeConn) Wake() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Dial implements Conn. A zero local address becomes the host's first address of peer's family;
// it fails when there is none.
func (c *FakeConn) Dial(local, peer netip.Addr) (Sender, error) {
	if !local.IsValid() {
		for _, a := range c.addrs {
			if a.Is4() == peer.Is4() {
				local = a
				break
			}
		}
		if !local.IsValid() {
			return nil, errors.New("bfd: fake host has no address of the peer's family")
		}
	}
	c.net.mu.Lock()
	port := c.net.nextPort
	c.net.nextPort++
	if c.net.nextPort == 0 {
		c.net.nextPort = SourcePortMin
	}
	c.net.mu.Unlock()
	return &fakeSender{net: c.net, local: local, peer: peer, port: port}, nil
}

type fakeSender struct {
	net         *FakeNetwork
	local, peer netip.Addr
	port        uint16

	mu     sync.Mutex // guards closed
	closed bool
}

func (s *fakeSender) Send(b []byte) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return errors.New("bfd: send on closed fake sender")
	}
	s.net.deliver(s.local, s.peer, s.port, b)
	return nil
}

func (s *fakeSender) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}
