package liveness

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Echoer runs an EchoTracker over a raw ICMP socket: every Interval (every Burst while an answer is
// overdue) it reads the answers that arrived, judges the peers, and sends each peer an ICMP echo
// request. One goroutine does all three, so a verdict is never based on an answer that waits unread;
// the socket is never polled, so answers cost no wakeups.
type Echoer struct {
	fd     int
	v6     bool // an ICMPv6 socket
	id     uint16
	nonces *mrand.ChaCha8 // the probes' nonces: seeded from crypto/rand, unguessable off the path
	log    *slog.Logger
	change func([]Down) // called from Run's goroutine on any change; nil Downs for a peer coming up

	mu    sync.Mutex // guards the following fields
	tr    *EchoTracker
	peers map[string]netip.Addr
	names map[netip.Addr]string
}

// ListenEcho opens the raw ICMP socket on local (needs CAP_NET_RAW): ICMP for an IPv4 address,
// ICMPv6 for an IPv6 one (an IPv6-only node). Only echo replies are delivered.
func ListenEcho(local netip.Addr, tr *EchoTracker, change func([]Down), log *slog.Logger) (*Echoer, error) {
	local = local.Unmap()
	if !local.IsValid() {
		return nil, errors.New("echo: no local address")
	}
	v6 := local.Is6()
	var fd int
	var err error
	if v6 {
		fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMPV6)
	} else {
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMP)
	}
	if err != nil {
		return nil, fmt.Errorf("echo socket: %w", err)
	}
	if v6 {
		// ICMP6_FILTER: a bit set blocks that type; pass only echo replies (129). The kernel computes
		// and checks ICMPv6 checksums itself on a raw ICMPv6 socket (RFC 3542 3.1).
		var f unix.ICMPv6Filter
		for i := range f.Data {
			f.Data[i] = ^uint32(0)
		}
		f.Data[icmp6EchoReply>>5] &^= 1 << (icmp6EchoReply & 31)
		err = unix.SetsockoptICMPv6Filter(fd, unix.SOL_ICMPV6, unix.ICMPV6_FILTER, &f)
	} else {
		// ICMP_FILTER (SOL_RAW, 1): a bit set drops that type; keep only echo replies (type 0).
		err = unix.SetsockoptInt(fd, unix.SOL_RAW, 1, ^1)
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("echo socket filter: %w", err)
	}
	if err := unix.Bind(fd, sockaddr(local)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("echo socket bind %s: %w", local, err)
	}
	var idb [2]byte
	_, _ = rand.Read(idb[:])
	var seed [32]byte
	_, _ = rand.Read(seed[:])
	return &Echoer{fd: fd, v6: v6, id: binary.BigEndian.Uint16(idb[:]), nonces: mrand.NewChaCha8(seed), tr: tr, change: change, log: log,
		peers: map[string]netip.Addr{}, names: map[netip.Addr]string{}}, nil
}

// sockaddr is a's socket address (no port); a zone names the interface of a link-local address.
func sockaddr(a netip.Addr) unix.Sockaddr {
	if a.Is4() {
		return &unix.SockaddrInet4{Addr: a.As4()}
	}
	sa := &unix.SockaddrInet6{Addr: a.As16()}
	if z := a.Zone(); z != "" {
		if ifi, err := net.InterfaceByName(z); err == nil {
			sa.ZoneId = uint32(ifi.Index)
		}
	}
	return sa
}

// fromSockaddr is the address a packet came from; false for another family than the socket's.
func fromSockaddr(sa unix.Sockaddr, v6 bool) (netip.Addr, bool) {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrFrom4(sa.Addr), !v6
	case *unix.SockaddrInet6:
		return netip.AddrFrom16(sa.Addr).Unmap(), v6
	}
	return netip.Addr{}, false
}

// SetPeers replaces the probed peers.
func (e *Echoer) SetPeers(peers []Peer) {
	e.mu.Lock()
	defer e.mu.Unlock()
	want := map[string]netip.Addr{}
	for _, p := range peers {
		if a := p.Addr.Addr().Unmap(); a.Is6() == e.v6 { // a peer of the other family is never answered
			want[p.Node] = a
		}
	}
	for n := range e.peers {
		if _, ok := want[n]; !ok {
			e.tr.Forget(n)
		}
	}
	e.peers = want
	e.names = map[netip.Addr]string{}
	for n, a := range want {
		e.names[a] = n
	}
}

// Up reports whether a peer answers its probes, and since when.
func (e *Echoer) Up(peer string) (bool, time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.tr.Up(peer)
}

// Run probes until ctx ends, then closes the socket.
func (e *Echoer) Run(ctx context.Context) error {
	defer unix.Close(e.fd)
	t := time.NewTimer(e.tr.Interval)
	defer t.Stop()
	buf := make([]byte, 1500)
	req := make([]byte, echoLen)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		now := time.Now()
		came := e.drain(buf, now)
		e.mu.Lock()
		downs := e.tr.Check(now)
		// Probe every Interval; while an answer is overdue, every Burst, to confirm the loss fast.
		if e.tr.Suspicious(now) {
			t.Reset(e.tr.Burst)
		} else {
			t.Reset(e.tr.Interval)
		}
		for name, addr := range e.peers {
			nonce := e.nonces.Uint64()
			seq := e.tr.Sent(name, nonce, now)
			marshalEcho(req, e.v6, e.id, seq, nonce)
			if err := unix.Sendto(e.fd, req, unix.MSG_DONTWAIT, sockaddr(addr)); err != nil &&
				!errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.ENETUNREACH) && !errors.Is(err, unix.EHOSTUNREACH) {
				e.log.Debug("echo send", "peer", name, "err", err)
			}
		}
		e.mu.Unlock()
		if len(downs) > 0 {
			e.change(downs)
		} else if came {
			e.change(nil)
		}
	}
}

// drain reads every waiting answer; it reports whether a peer came up. An answer counts only if it
// comes from the probed peer's address, carries this Echoer's ICMP id and echoes the probe's
// sequence number and nonce (EchoTracker.Reply): a host that never saw the probe cannot forge it.
func (e *Echoer) drain(buf []byte, now time.Time) bool {
	came := false
	for {
		n, from, err := unix.Recvfrom(e.fd, buf, unix.MSG_DONTWAIT)
		if err != nil {
			return came // EAGAIN: empty
		}
		src, ok := fromSockaddr(from, e.v6)
		if !ok {
			continue
		}
		id, seq, nonce, ok := parseEchoReply(buf[:n], e.v6)
		if !ok || id != e.id {
			continue
		}
		e.mu.Lock()
		if name, ok := e.names[src.WithZone("")]; ok && e.tr.Reply(name, seq, nonce, now) {
			came = true
			e.log.Info("speaker peer answers echo", "node", name)
		}
		e.mu.Unlock()
	}
}

// echoMagic starts every probe's payload; the nonce follows.
const echoMagic = "ironlbE2"

// echoLen is the length of a probe: the ICMP header, the magic and the nonce.
const echoLen = 8 + len(echoMagic) + 8

// ICMP types of the echo (RFC 792, RFC 4443).
const (
	icmpEchoRequest  = 8
	icmpEchoReply    = 0
	icmp6EchoRequest = 128
	icmp6EchoReply   = 129
)

// marshalEcho writes an ICMP echo request (type 8; ICMPv6 type 128 when v6) whose payload is the
// magic and the probe's nonce into b (echoLen bytes). An ICMPv6 request's checksum is left zero:
// the kernel fills it in (it covers the IPv6 pseudo-header, which only the kernel knows for sure).
func marshalEcho(b []byte, v6 bool, id, seq uint16, nonce uint64) {
	b[0], b[1] = icmpEchoRequest, 0
	if v6 {
		b[0] = icmp6EchoRequest
	}
	binary.BigEndian.PutUint16(b[2:], 0)
	binary.BigEndian.PutUint16(b[4:], id)
	binary.BigEndian.PutUint16(b[6:], seq)
	copy(b[8:], echoMagic)
	binary.BigEndian.PutUint64(b[8+len(echoMagic):], nonce)
	if !v6 {
		binary.BigEndian.PutUint16(b[2:], checksum(b[:echoLen]))
	}
}

// parseEchoReply takes what a raw socket reads, an IPv4 packet (header included) or, when v6, an
// ICMPv6 message (a raw IPv6 socket delivers no IPv6 header), and returns an echo reply's id, seq
// and nonce; a reply to anything but one of our probes (no magic, too short, another family) is not
// ok.
func parseEchoReply(p []byte, v6 bool) (id, seq uint16, nonce uint64, ok bool) {
	icmp, reply := p, byte(icmp6EchoReply)
	if !v6 {
		if len(p) < 20 || p[0]>>4 != 4 {
			return 0, 0, 0, false
		}
		ihl := int(p[0]&0x0f) * 4
		if ihl < 20 || len(p) < ihl {
			return 0, 0, 0, false
		}
		icmp, reply = p[ihl:], icmpEchoReply
	}
	if len(icmp) < echoLen || icmp[0] != reply || icmp[1] != 0 || string(icmp[8:8+len(echoMagic)]) != echoMagic {
		return 0, 0, 0, false
	}
	return binary.BigEndian.Uint16(icmp[4:]), binary.BigEndian.Uint16(icmp[6:]),
		binary.BigEndian.Uint64(icmp[8+len(echoMagic):]), true
}

func checksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
