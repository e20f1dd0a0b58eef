package bfd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ListenConfig configures Listen. The zero value receives on every address.
type ListenConfig struct {
	// Addrs are the local addresses to receive on; empty means all (0.0.0.0 and ::, the latter
	// skipped when the kernel has no IPv6).
	Addrs []netip.Addr
	// Device, when set, binds every socket to that interface (SO_BINDTODEVICE).
	Device string
}

// UDPConn is the Conn of RFC 5881 on raw UDP sockets: it receives on port 3784 with the TTL and
// destination address of every packet (IP_RECVTTL, IP_PKTINFO and their IPv6 forms), and sends
// each session's packets from its own socket, bound to the session's local address and a source
// port in 49152–65535, with TTL 255 and traffic class CS6. It does not use Go's network poller:
// Recv waits in ppoll(2) on the calling thread, which lets a Manager's protocol loop wake on time
// on its own realtime thread.
type UDPConn struct {
	rx     []int // receiving sockets
	wake   int   // eventfd written by Wake
	device string
	pfds   []unix.PollFd
	oob    []byte
	next   int // rx socket to read first, for fairness

	closeOnce sync.Once
}

var _ Conn = (*UDPConn)(nil)

// Listen opens the receiving sockets. Errors name the address that failed (EADDRINUSE: another
// BFD daemon, such as FRR's bfdd, holds port 3784 there).
func Listen(cfg ListenConfig) (_ *UDPConn, err error) {
	c := &UDPConn{wake: -1, device: cfg.Device, oob: make([]byte, 256)}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if c.wake, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		return nil, fmt.Errorf("bfd: eventfd: %w", err)
	}
	addrs := cfg.Addrs
	wildcard := len(addrs) == 0
	if wildcard {
		addrs = []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified()}
	}
	for _, a := range addrs {
		fd, err := c.listen(a.Unmap())
		if err != nil {
			if wildcard && a.Is6() && errors.Is(err, unix.EAFNOSUPPORT) {
				continue
			}
			return nil, fmt.Errorf("bfd: listening on %v port %d: %w", a, ControlPort, err)
		}
		c.rx = append(c.rx, fd)
		c.pfds = append(c.pfds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
	}
	c.pfds = append(c.pfds, unix.PollFd{Fd: int32(c.wake), Events: unix.POLLIN})
	return c, nil
}

func (c *UDPConn) listen(a netip.Addr) (int, error) {
	fd, err := c.socket(a.Is4())
	if err != nil {
		return -1, err
	}
	// No SO_REUSEADDR: on UDP it would let us share the port with another BFD daemon, which would
	// then receive our peers' packets.
	opts := [][3]int{{unix.IPPROTO_IP, unix.IP_RECVTTL, 1}, {unix.IPPROTO_IP, unix.IP_PKTINFO, 1}}
	if a.Is6() {
		opts = [][3]int{{unix.IPPROTO_IPV6, unix.IPV6_RECVHOPLIMIT, 1}, {unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1}}
	}
	if err := setsockopts(fd, opts); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.Bind(fd, sockaddr(a, ControlPort)); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// socket returns a non-blocking UDP socket, IPv6-only for IPv6, bound to the device if one is set.
func (c *UDPConn) socket(v4 bool) (int, error) {
	family := unix.AF_INET
	if !v4 {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	if !v4 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
			unix.Close(fd)
			return -1, os.NewSyscallError("setsockopt IPV6_V6ONLY", err)
		}
	}
	if c.device != "" {
		if err := unix.BindToDevice(fd, c.device); err != nil {
			unix.Close(fd)
			return -1, os.NewSyscallError("setsockopt SO_BINDTODEVICE", err)
		}
	}
	return fd, nil
}

func setsockopts(fd int, opts [][3]int) error {
	for _, o := range opts {
		if err := unix.SetsockoptInt(fd, o[0], o[1], o[2]); err != nil {
			return os.NewSyscallError(fmt.Sprintf("setsockopt %d/%d", o[0], o[1]), err)
		}
	}
	return nil
}

func sockaddr(a netip.Addr, port int) unix.Sockaddr {
	if a.Is4() {
		return &unix.SockaddrInet4{Port: port, Addr: a.As4()}
	}
	return &unix.SockaddrInet6{Port: port, Addr: a.As16()}
}

// Close closes the sockets. Call it after the Manager using c has returned from Run; senders from
// Dial are closed by their own Close.
func (c *UDPConn) Close() error {
	c.closeOnce.Do(func() {
		for _, fd := range c.rx {
			unix.Close(fd)
		}
		if c.wake >= 0 {
			unix.Close(c.wake)
		}
	})
	return nil
}

// Wake implements Conn.
func (c *UDPConn) Wake() {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	_, _ = unix.Write(c.wake, one[:])
}

// Recv implements Conn. It must not run concurrently with itself or Close.
func (c *UDPConn) Recv(b []byte, deadline time.Time) (Datagram, bool, error) {
	for {
		for i := range c.rx {
			fd := c.rx[(c.next+i)%len(c.rx)]
			d, ok, err := c.recv(fd, b)
			if err != nil || ok {
				c.next = (c.next + i + 1) % len(c.rx)
				return d, ok, err
			}
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return Datagram{}, false, nil
		}
		ts := unix.NsecToTimespec(int64(wait))
		n, err := unix.Ppoll(c.pfds, &ts, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return Datagram{}, false, os.NewSyscallError("ppoll", err)
		}
		if n == 0 {
			return Datagram{}, false, nil
		}
		for _, pfd := range c.pfds[:len(c.rx)] {
			switch {
			case pfd.Revents&unix.POLLNVAL != 0:
				return Datagram{}, false, fmt.Errorf("bfd: receiving socket %d: %w", pfd.Fd, net.ErrClosed)
			case pfd.Revents&unix.POLLERR != 0:
				// A pending socket error would make ppoll return at once forever: clear it.
				_, _ = unix.GetsockoptInt(int(pfd.Fd), unix.SOL_SOCKET, unix.SO_ERROR)
			}
		}
		if c.pfds[len(c.pfds)-1].Revents != 0 {
			var buf [8]byte
			_, _ = unix.Read(c.wake, buf[:])
			return Datagram{}, false, nil
		}
	}
}

// recv reads one datagram from fd without waiting.
func (c *UDPConn) recv(fd int, b []byte) (Datagram, bool, error) {
	for {
		n, oobn, _, from, err := unix.Recvmsg(fd, b, c.oob, unix.MSG_DONTWAIT)
		switch err {
		case nil:
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return Datagram{}, false, nil
		default:
			return Datagram{}, false, os.NewSyscallError("recvmsg", err)
		}
		d := Datagram{N: n, TTL: -1}
		switch sa := from.(type) {
		case *unix.SockaddrInet4:
			d.Src, d.SrcPort = netip.AddrFrom4(sa.Addr), uint16(sa.Port)
		case *unix.SockaddrInet6:
			d.Src, d.SrcPort = netip.AddrFrom16(sa.Addr).Unmap(), uint16(sa.Port)
		}
		msgs, err := unix.ParseSocketControlMessage(c.oob[:oobn])
		if err != nil {
			return d, true, nil // TTL unknown: dropped by the manager
		}
		for _, m := range msgs {
			switch {
			case (m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TTL ||
				m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_HOPLIMIT) && len(m.Data) >= 4:
				d.TTL = int(int32(binary.NativeEndian.Uint32(m.Data)))
			case m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_PKTINFO && len(m.Data) >= unix.SizeofInet4Pktinfo:
				d.Dst = netip.AddrFrom4([4]byte(m.Data[8:12])) // struct in_pktinfo: ifindex, spec_dst, addr
			case m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_PKTINFO && len(m.Data) >= unix.SizeofInet6Pktinfo:
				d.Dst = netip.AddrFrom16([16]byte(m.Data[:16])).Unmap() // struct in6_pktinfo: addr, ifindex
			}
		}
		return d, true, nil
	}
}

// Dial implements Conn: a socket bound to local (or the wildcard) and a free source port in
// 49152–65535 tried from a random start, sending with TTL 255 and traffic class CS6 (0xc0).
func (c *UDPConn) Dial(local, peer netip.Addr) (Sender, error) {
	peer = peer.Unmap()
	if !local.IsValid() {
		local = netip.IPv4Unspecified()
		if peer.Is6() {
			local = netip.IPv6Unspecified()
		}
	}
	fd, err := c.socket(peer.Is4())
	if err != nil {
		return nil, err
	}
	opts := [][3]int{{unix.IPPROTO_IP, unix.IP_TTL, TTL}, {unix.IPPROTO_IP, unix.IP_TOS, 0xc0}}
	if peer.Is6() {
		opts = [][3]int{{unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS, TTL}, {unix.IPPROTO_IPV6, unix.IPV6_TCLASS, 0xc0}}
	}
	if err := setsockopts(fd, opts); err != nil {
		unix.Close(fd)
		return nil, err
	}
	const ports = SourcePortMax - SourcePortMin + 1
	start := rand.IntN(ports)
	for i := range ports {
		port := SourcePortMin + (start+i)%ports
		err = unix.Bind(fd, sockaddr(local.Unmap(), port))
		if err == nil {
			return &udpSender{fd: fd, to: sockaddr(peer, ControlPort)}, nil
		}
		if err != unix.EADDRINUSE {
			break
		}
	}
	unix.Close(fd)
	return nil, fmt.Errorf("bfd: binding %v for peer %v: %w", local, peer, os.NewSyscallError("bind", err))
}

type udpSender struct {
	fd int
	to unix.Sockaddr
}

func (s *udpSender) Send(b []byte) error {
	if err := unix.Sendto(s.fd, b, 0, s.to); err != nil {
		return os.NewSyscallError("sendto", err)
	}
	return nil
}

func (s *udpSender) Close() error { return unix.Close(s.fd) }

// localPort returns the source port a Sender from UDPConn.Dial sends from, or 0.
func localPort(s Sender) int {
	us, ok := s.(*udpSender)
	if !ok {
		return 0
	}
	sa, err := unix.Getsockname(us.fd)
	if err != nil {
		return 0
	}
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return sa.Port
	case *unix.SockaddrInet6:
		return sa.Port
	}
	return 0
}
