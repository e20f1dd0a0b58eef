package probe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/mdlayher/ndp"
	"golang.org/x/sys/unix"

	"github.com/ironlb/ironlb/internal/speaker/layer2"
)

// stampedNDP is an AF_PACKET socket for IPv6 frames on one interface: it sends neighbor
// solicitations for the service address and reports every neighbor advertisement with the
// kernel's receive timestamp (SO_TIMESTAMPNS), the IPv6 counterpart of stampedARP.
type stampedNDP struct {
	fd     int
	ifi    *net.Interface
	src    netip.Addr // the client's own address on ifi, the solicitations' source
	closed atomic.Bool
}

func listenNDPStamped(ifi *net.Interface) (*stampedNDP, error) {
	src, err := ownIPv6(ifi)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_IPV6)))
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IPV6), Ifindex: ifi.Index}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		unix.Close(fd)
		return nil, err
	}
	tv := unix.Timeval{Usec: 200000} // see listenARPStamped
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	return &stampedNDP{fd: fd, ifi: ifi, src: src}, nil
}

// ownIPv6 is ifi's first global IPv6 address, else its link-local one.
func ownIPv6(ifi *net.Interface) (netip.Addr, error) {
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.Addr{}, err
	}
	var ll netip.Addr
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a.String())
		if err != nil || !p.Addr().Is6() || p.Addr().Is4In6() {
			continue
		}
		if p.Addr().IsLinkLocalUnicast() {
			ll = p.Addr().WithZone(ifi.Name)
			continue
		}
		return p.Addr(), nil
	}
	if ll.IsValid() {
		return ll, nil
	}
	return netip.Addr{}, fmt.Errorf("no IPv6 address on %s", ifi.Name)
}

// solicit sends a neighbor solicitation for target to its solicited-node group.
func (s *stampedNDP) solicit(target netip.Addr) error {
	t := target.As16()
	group := netip.AddrFrom16([16]byte{0xff, 0x02, 11: 0x01, 12: 0xff, 13: t[13], 14: t[14], 15: t[15]})
	g := group.As16()
	dstMAC := net.HardwareAddr{0x33, 0x33, g[12], g[13], g[14], g[15]}
	frame, err := layer2.NDP{EthDst: dstMAC, EthSrc: s.ifi.HardwareAddr, Src: s.src.WithZone(""), Dst: group,
		Message: &ndp.NeighborSolicitation{TargetAddress: target, Options: []ndp.Option{
			&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: s.ifi.HardwareAddr}}}}.Marshal()
	if err != nil {
		return err
	}
	return unix.Sendto(s.fd, frame, 0, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IPV6), Ifindex: s.ifi.Index, Halen: 6,
		Addr: [8]byte{dstMAC[0], dstMAC[1], dstMAC[2], dstMAC[3], dstMAC[4], dstMAC[5]}})
}

// read returns the next neighbor advertisement: its target, whether it was solicited, the MAC it
// names (its target link-layer option, else the frame's source), and when the kernel received it.
func (s *stampedNDP) read() (target netip.Addr, solicited bool, mac net.HardwareAddr, at time.Time, err error) {
	buf := make([]byte, 1600)
	oob := make([]byte, 128)
	for {
		if s.closed.Load() {
			unix.Close(s.fd)
			return netip.Addr{}, false, nil, time.Time{}, errClosed
		}
		n, oobn, _, _, err := unix.Recvmsg(s.fd, buf, oob, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			return netip.Addr{}, false, nil, time.Time{}, err
		}
		at := time.Now()
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, m := range msgs {
				if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= 16 {
					at = time.Unix(int64(binary.NativeEndian.Uint64(m.Data[0:])), int64(binary.NativeEndian.Uint64(m.Data[8:])))
				}
			}
		}
		p, err := layer2.ParseNDP(buf[:n])
		if err != nil {
			continue
		}
		na, ok := p.Message.(*ndp.NeighborAdvertisement)
		if !ok {
			continue
		}
		mac := p.EthSrc
		for _, o := range na.Options {
			if l, ok := o.(*ndp.LinkLayerAddress); ok && l.Direction == ndp.Target {
				mac = l.Addr
			}
		}
		return na.TargetAddress, na.Solicited, mac, at, nil
	}
}

// close makes read return (within 200 ms), which closes the socket.
func (s *stampedNDP) close() { s.closed.Store(true) }
