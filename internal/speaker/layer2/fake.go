package layer2

import (
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/mdlayher/packet"
)

// FakeConn is an in-memory net.PacketConn carrying Ethernet frames, for
// tests of code that drives a Responder. Frames passed to Inject are
// returned by ReadFrom in order; frames written are kept for Sent. Read
// deadlines work as on a socket, including unblocking a pending ReadFrom.
// It works inside a testing/synctest bubble when created there.
type FakeConn struct {
	in     chan fakeRead
	closed chan struct{}
	once   sync.Once

	mu      sync.Mutex // guards the following fields
	sent    [][]byte
	expired chan struct{} // closed when the read deadline passes
	changed chan struct{} // closed when the read deadline is set
	timer   *time.Timer
}

type fakeRead struct {
	frame []byte
	err   error
}

var _ net.PacketConn = (*FakeConn)(nil)

// NewFakeConn returns a FakeConn with room for 1024 injected frames.
func NewFakeConn() *FakeConn {
	return &FakeConn{
		in:      make(chan fakeRead, 1024),
		closed:  make(chan struct{}),
		expired: make(chan struct{}),
		changed: make(chan struct{}),
	}
}

// Inject queues a copy of frame for ReadFrom. It blocks while 1024 frames
// are queued.
func (c *FakeConn) Inject(frame []byte) { c.in <- fakeRead{frame: slices.Clone(frame)} }

// InjectError makes a later ReadFrom return err, in order with the frames.
func (c *FakeConn) InjectError(err error) { c.in <- fakeRead{err: err} }

// Sent returns copies of the frames written so far, oldest first.
func (c *FakeConn) Sent() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([][]byte, len(c.sent))
	for i, f := range c.sent {
		out[i] = slices.Clone(f)
	}
	return out
}

// Reset forgets the frames written so far.
func (c *FakeConn) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent = nil
}

// ReadFrom implements net.PacketConn. The address is the frame's source MAC.
func (c *FakeConn) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		c.mu.Lock()
		expired, changed := c.expired, c.changed
		c.mu.Unlock()
		select {
		case <-c.closed:
			return 0, nil, c.opError("read", net.ErrClosed)
		case <-expired:
			return 0, nil, c.opError("read", os.ErrDeadlineExceeded)
		default:
		}
		select {
		case r := <-c.in:
			if r.err != nil {
				return 0, nil, r.err
			}
			n := copy(b, r.frame)
			var src net.HardwareAddr
			if len(r.frame) >= 12 {
				src = cloneMAC(r.frame[6:12])
			}
			return n, &packet.Addr{HardwareAddr: src}, nil
		case <-c.closed:
		case <-expired:
		case <-changed:
		}
	}
}

// WriteTo implements net.PacketConn; addr is ignored.
func (c *FakeConn) WriteTo(b []byte, _ net.Addr) (int, error) {
	select {
	case <-c.closed:
		return 0, c.opError("write", net.ErrClosed)
	default:
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent = append(c.sent, slices.Clone(b))
	return len(b), nil
}

// Close implements net.PacketConn.
func (c *FakeConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

// LocalAddr implements net.PacketConn.
func (c *FakeConn) LocalAddr() net.Addr { return &packet.Addr{} }

// SetDeadline implements net.PacketConn; only the read deadline is kept.
func (c *FakeConn) SetDeadline(t time.Time) error { return c.SetReadDeadline(t) }

// SetWriteDeadline implements net.PacketConn; writes never block.
func (c *FakeConn) SetWriteDeadline(time.Time) error { return nil }

// SetReadDeadline implements net.PacketConn.
func (c *FakeConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	expired := make(chan struct{})
	switch d := time.Until(t); {
	case t.IsZero():
	case d <= 0:
		close(expired)
	default:
		c.timer = time.AfterFunc(d, func() { close(expired) })
	}
	c.expired = expired
	close(c.changed)
	c.changed = make(chan struct{})
	return nil
}

func (c *FakeConn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "fake", Err: err}
}

// FakeGroups is a Groups that records memberships. JoinErr, if set, is
// returned by JoinGroup, which then joins nothing.
type FakeGroups struct {
	JoinErr error // set before use

	mu     sync.Mutex // guards the following fields
	joined map[netip.Addr]bool
}

// JoinGroup implements Groups.
func (g *FakeGroups) JoinGroup(group netip.Addr) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.JoinErr != nil {
		return g.JoinErr
	}
	if g.joined == nil {
		g.joined = make(map[netip.Addr]bool)
	}
	g.joined[group] = true
	return nil
}

// LeaveGroup implements Groups.
func (g *FakeGroups) LeaveGroup(group netip.Addr) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.joined, group)
	return nil
}

// Joined returns the groups joined, in ascending order.
func (g *FakeGroups) Joined() []netip.Addr {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []netip.Addr
	for a := range g.joined {
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}
