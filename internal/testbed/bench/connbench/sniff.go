package connbench

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// FrameFlow reads an Ethernet frame: if it is an IPv4 TCP or UDP packet to vip, it returns its flow
// (protocol and source port) and its destination MAC, the node the router sends it to.
func FrameFlow(frame []byte, vip netip.Addr) (Flow, string, bool) {
	if len(frame) < 14+20 || binary.BigEndian.Uint16(frame[12:]) != 0x0800 {
		return Flow{}, "", false
	}
	ip := frame[14:]
	ihl := int(ip[0]&0x0f) * 4
	if ip[0]>>4 != 4 || ihl < 20 || len(ip) < ihl+4 {
		return Flow{}, "", false
	}
	if dst := netip.AddrFrom4([4]byte(ip[16:20])); dst != vip {
		return Flow{}, "", false
	}
	if binary.BigEndian.Uint16(ip[6:])&0x1fff != 0 { // a later fragment has no ports
		return Flow{}, "", false
	}
	var proto string
	switch ip[9] {
	case unix.IPPROTO_TCP:
		proto = "tcp"
	case unix.IPPROTO_UDP:
		proto = "udp"
	default:
		return Flow{}, "", false
	}
	sport := int(binary.BigEndian.Uint16(ip[ihl:]))
	return Flow{Proto: proto, Port: sport}, net.HardwareAddr(frame[0:6]).String(), true
}

// Hops records, per flow, the next hops (MACs) its packets went to and when that changed.
type Hops struct {
	mu    sync.Mutex
	flows map[Flow][]hop
}

type hop struct {
	At  time.Time
	MAC string
}

// Add records a packet of f sent to mac at at (in time order per flow).
func (h *Hops) Add(at time.Time, f Flow, mac string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.flows == nil {
		h.flows = map[Flow][]hop{}
	}
	hs := h.flows[f]
	if n := len(hs); n > 0 && hs[n-1].MAC == mac {
		return
	}
	h.flows[f] = append(hs, hop{At: at, MAC: mac})
}

// Moved counts the flows whose packets last went to one next hop before event and, last of all
// before end, to another one; flows with no packet on either side are not counted. It also returns
// how many flows it could compare.
func (h *Hops) Moved(event, end time.Time) (moved, compared int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, hs := range h.flows {
		var pre, post string
		for _, x := range hs {
			if x.At.Before(event) {
				pre = x.MAC
			}
			if !x.At.After(end) {
				post = x.MAC
			}
		}
		if pre == "" || post == "" {
			continue
		}
		compared++
		if pre != post {
			moved++
		}
	}
	return moved, compared
}

// String lists every flow's next hops, a line each change: "hop <proto> <port> <ns> <mac>".
func (h *Hops) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	flows := slices.SortedFunc(maps.Keys(h.flows), func(a, b Flow) int {
		return cmp.Or(cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.Port, b.Port))
	})
	var b strings.Builder
	for _, f := range flows {
		for _, x := range h.flows[f] {
			fmt.Fprintf(&b, "hop %s %d %d %s\n", f.Proto, f.Port, x.At.UnixNano(), x.MAC)
		}
	}
	return b.String()
}

// Sniffer watches the frames a namespace's interface sends (an AF_PACKET socket opened in that
// namespace) and records the flows to an address in Hops.
type Sniffer struct {
	Hops   Hops
	fd     int
	closed atomic.Bool
	done   chan struct{}
}

// Sniff starts recording the flows to vip that leave interface iface of the named network
// namespace nsPath (the router's side towards the nodes).
func Sniff(nsPath, iface string, vip netip.Addr) (*Sniffer, error) {
	fd, err := socketIn(nsPath, iface)
	if err != nil {
		return nil, err
	}
	s := &Sniffer{fd: fd, done: make(chan struct{})}
	go s.loop(vip)
	return s, nil
}

// socketIn opens a packet socket bound to iface in the namespace at nsPath: the socket stays in
// that namespace after the thread goes back.
func socketIn(nsPath, iface string) (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return -1, err
	}
	defer orig.Close()
	target, err := netns.GetFromPath(nsPath)
	if err != nil {
		return -1, err
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		return -1, err
	}
	defer func() { _ = netns.Set(orig) }()
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return -1, fmt.Errorf("%s in %s: %w", iface, nsPath, err)
	}
	// ETH_P_ALL: the kernel hands the frames a host sends only to packet sockets of every protocol
	// (a socket bound to ETH_P_IP saw none of the router's in the lab); FrameFlow keeps IPv4.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return -1, err
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	tv := unix.Timeval{Usec: 200000} // so that Close is noticed
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	return fd, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (s *Sniffer) loop(vip netip.Addr) {
	defer close(s.done)
	defer unix.Close(s.fd)
	buf := make([]byte, 256) // headers are enough; the rest is truncated
	for !s.closed.Load() {
		n, from, err := unix.Recvfrom(s.fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); !ok || ll.Pkttype != unix.PACKET_OUTGOING {
			continue
		}
		if f, mac, ok := FrameFlow(buf[:n], vip); ok {
			s.Hops.Add(time.Now(), f, mac)
		}
	}
}

// Close stops the sniffer (within 200 ms) and closes its socket.
func (s *Sniffer) Close() {
	s.closed.Store(true)
	<-s.done
}
