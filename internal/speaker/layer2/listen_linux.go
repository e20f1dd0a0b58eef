package layer2

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/mdlayher/packet"
	"golang.org/x/net/bpf"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// ListenARP opens a packet socket receiving ifi's ARP frames whole, for
// NewARP. Sockets belong to the network namespace of the calling thread.
func ListenARP(ifi *net.Interface) (*packet.Conn, error) {
	c, err := packet.Listen(ifi, packet.Raw, unix.ETH_P_ARP, nil)
	if err != nil {
		return nil, fmt.Errorf("listening for ARP on %s: %w", ifi.Name, err)
	}
	return c, nil
}

// ListenNDP opens a packet socket receiving ifi's IPv6 neighbour
// solicitations and advertisements whole, for NewNDP. A BPF filter, applied
// before the socket is bound, keeps all other IPv6 traffic out. It sees
// unicast solicitations for addresses the node does not hold, which an
// ICMPv6 socket would not. The interface only receives a multicast
// solicitation once its group is joined (ListenGroups).
func ListenNDP(ifi *net.Interface) (*packet.Conn, error) {
	filter, err := bpf.Assemble(ndpFilter)
	if err != nil {
		return nil, fmt.Errorf("listening for NDP on %s: %w", ifi.Name, err)
	}
	c, err := packet.Listen(ifi, packet.Raw, unix.ETH_P_IPV6, &packet.Config{Filter: filter})
	if err != nil {
		return nil, fmt.Errorf("listening for NDP on %s: %w", ifi.Name, err)
	}
	return c, nil
}

// MulticastGroups joins IPv6 multicast groups on one interface through an
// otherwise unused UDP socket: the kernel then accepts the groups' frames
// on the interface and sends MLD reports for them, so snooping switches
// forward them. Closing it leaves every group.
type MulticastGroups struct {
	ifi  *net.Interface
	conn net.PacketConn
	pc   *ipv6.PacketConn
}

var _ Groups = (*MulticastGroups)(nil)

// ListenGroups opens the socket for MulticastGroups on ifi, in the network
// namespace of the calling thread.
func ListenGroups(ifi *net.Interface) (*MulticastGroups, error) {
	c, err := net.ListenPacket("udp6", "[::]:0")
	if err != nil {
		return nil, fmt.Errorf("opening multicast socket for %s: %w", ifi.Name, err)
	}
	return &MulticastGroups{ifi: ifi, conn: c, pc: ipv6.NewPacketConn(c)}, nil
}

// JoinGroup implements Groups.
func (g *MulticastGroups) JoinGroup(group netip.Addr) error {
	if err := g.pc.JoinGroup(g.ifi, &net.UDPAddr{IP: group.AsSlice()}); err != nil {
		return fmt.Errorf("joining %v on %s: %w", group, g.ifi.Name, err)
	}
	return nil
}

// LeaveGroup implements Groups.
func (g *MulticastGroups) LeaveGroup(group netip.Addr) error {
	if err := g.pc.LeaveGroup(g.ifi, &net.UDPAddr{IP: group.AsSlice()}); err != nil {
		return fmt.Errorf("leaving %v on %s: %w", group, g.ifi.Name, err)
	}
	return nil
}

// Close leaves all groups and closes the socket.
func (g *MulticastGroups) Close() error { return g.conn.Close() }

// DialARP opens a packet socket on ifi (ListenARP) and returns an ARP
// responder over it. The socket belongs to the calling thread's network
// namespace.
func DialARP(ifi *net.Interface, cfg Config) (*Responder, error) {
	c, err := ListenARP(ifi)
	if err != nil {
		return nil, err
	}
	r, err := NewARP(ifi, c, cfg)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return r, nil
}

// DialNDP opens a packet socket (ListenNDP) and a multicast socket
// (ListenGroups) on ifi and returns an NDP responder over them. The sockets
// belong to the calling thread's network namespace.
func DialNDP(ifi *net.Interface, cfg Config) (*Responder, error) {
	c, err := ListenNDP(ifi)
	if err != nil {
		return nil, err
	}
	g, err := ListenGroups(ifi)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	r, err := NewNDP(ifi, c, g, cfg)
	if err != nil {
		return nil, errors.Join(err, c.Close(), g.Close())
	}
	return r, nil
}
