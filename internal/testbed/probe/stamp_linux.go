package probe

import (
	"encoding/binary"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/mdlayher/arp"
	"golang.org/x/sys/unix"
)

// stampedARP is an AF_PACKET socket for ARP frames that reports the kernel's receive timestamp
// (SO_TIMESTAMPNS) of each.
type stampedARP struct {
	fd     int
	closed atomic.Bool
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func listenARPStamped(ifi *net.Interface) (*stampedARP, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ARP)))
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: ifi.Index}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		unix.Close(fd)
		return nil, err
	}
	// Wake up every 200 ms so that close is noticed by the reader, which closes the socket.
	tv := unix.Timeval{Usec: 200000}
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	return &stampedARP{fd: fd}, nil
}

var errClosed = errors.New("closed")

func (s *stampedARP) read() (*arp.Packet, time.Time, error) {
	buf := make([]byte, 1600)
	oob := make([]byte, 128)
	for {
		if s.closed.Load() {
			unix.Close(s.fd)
			return nil, time.Time{}, errClosed
		}
		n, oobn, _, _, err := unix.Recvmsg(s.fd, buf, oob, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			return nil, time.Time{}, err
		}
		at := time.Now()
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, m := range msgs {
				if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= 16 {
					sec := int64(binary.NativeEndian.Uint64(m.Data[0:]))
					nsec := int64(binary.NativeEndian.Uint64(m.Data[8:]))
					at = time.Unix(sec, nsec)
				}
			}
		}
		var p arp.Packet
		if err := p.UnmarshalBinary(buf[:n]); err != nil {
			continue
		}
		return &p, at, nil
	}
}

// close makes read return (within 200 ms), which closes the socket.
func (s *stampedARP) close() { s.closed.Store(true) }
