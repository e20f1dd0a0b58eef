package attack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/mdlayher/arp"
	"golang.org/x/sys/unix"

	"github.com/ironlb/ironlb/internal/testbed/lab"
)

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Capture records, for d (or until ctx ends), the UDP datagrams to or from port that cross iface in
// the network namespace netns, both directions, through an AF_PACKET socket: the bytes real speakers
// sent, for a later replay.
func Capture(ctx context.Context, netns, iface string, port uint16, d time.Duration) ([]Datagram, error) {
	var fd int
	err := lab.InNetNS(netns, func() error {
		ifi, err := net.InterfaceByName(iface)
		if err != nil {
			return err
		}
		// ETH_P_ALL: a socket of one protocol sees only what arrives, not what the node sends.
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
			unix.Close(fd)
			return fmt.Errorf("binding the packet socket to %s: %w", iface, err)
		}
		tv := unix.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
		return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	})
	if err != nil {
		return nil, fmt.Errorf("capturing on %s in %s: %w", iface, netns, err)
	}
	defer unix.Close(fd)
	var out []Datagram
	buf := make([]byte, 65536)
	end := time.Now().Add(d)
	for time.Now().Before(end) && ctx.Err() == nil {
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			return out, err
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); !ok || ll.Protocol != htons(unix.ETH_P_IP) {
			continue
		}
		if dg, ok := ParseUDP4(buf[:n]); ok && (dg.Dst.Port() == port || dg.Src.Port() == port) {
			out = append(out, dg)
		}
	}
	return out, ctx.Err()
}

// UDPSender sends datagrams from a socket opened in the attacker's namespace.
type UDPSender struct{ c *net.UDPConn }

// DialUDP opens a UDP socket in netns bound to src (a zero port picks one; the address must be the
// namespace's, e.g. one the caller added to take over a cut node's).
func DialUDP(netns string, src netip.AddrPort) (*UDPSender, error) {
	var c *net.UDPConn
	err := lab.InNetNS(netns, func() error {
		var err error
		c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(src))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("udp socket on %s in %s: %w", src, netns, err)
	}
	return &UDPSender{c: c}, nil
}

// Send sends b to dst.
func (s *UDPSender) Send(dst netip.AddrPort, b []byte) error {
	_, err := s.c.WriteToUDPAddrPort(b, dst)
	return err
}

// Close closes the socket.
func (s *UDPSender) Close() error { return s.c.Close() }

// ARPSender sends ARP frames from an interface of the attacker's namespace.
type ARPSender struct{ c *arp.Client }

// DialARP opens an ARP socket on iface in netns.
func DialARP(netns, iface string) (*ARPSender, error) {
	var c *arp.Client
	err := lab.InNetNS(netns, func() error {
		ifi, err := net.InterfaceByName(iface)
		if err != nil {
			return err
		}
		c, err = arp.Dial(ifi)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("arp socket on %s in %s: %w", iface, netns, err)
	}
	return &ARPSender{c: c}, nil
}

// Send writes one frame.
func (s *ARPSender) Send(f Frame) error { return s.c.WriteTo(f.Packet, f.To) }

// Close closes the socket.
func (s *ARPSender) Close() error { return s.c.Close() }
