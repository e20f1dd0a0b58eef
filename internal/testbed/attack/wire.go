package attack

import (
	"encoding/binary"
	"net/netip"
	"slices"
)

// Datagram is a UDP datagram seen on the wire.
type Datagram struct {
	Src, Dst netip.AddrPort
	Payload  []byte
}

// ParseUDP4 reads an IPv4 packet (from its IP header: an AF_PACKET SOCK_DGRAM socket strips the
// link header) and returns its UDP datagram. ok is false for anything else: another protocol, a
// fragment, a truncated or malformed packet. The payload is copied.
func ParseUDP4(b []byte) (d Datagram, ok bool) {
	if len(b) < 20 || b[0]>>4 != 4 {
		return d, false
	}
	ihl := int(b[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(b[2:4]))
	if ihl < 20 || total < ihl+8 || total > len(b) {
		return d, false
	}
	if b[9] != 17 { // UDP
		return d, false
	}
	if frag := binary.BigEndian.Uint16(b[6:8]); frag&0x3fff != 0 { // more fragments, or an offset
		return d, false
	}
	u := b[ihl:total]
	ulen := int(binary.BigEndian.Uint16(u[4:6]))
	if ulen < 8 || ulen > len(u) {
		return d, false
	}
	src := netip.AddrFrom4([4]byte(b[12:16]))
	dst := netip.AddrFrom4([4]byte(b[16:20]))
	d.Src = netip.AddrPortFrom(src, binary.BigEndian.Uint16(u[0:2]))
	d.Dst = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(u[2:4]))
	d.Payload = slices.Clone(u[8:ulen])
	return d, true
}

// From returns the datagrams sent from addr, in their order.
func From(ds []Datagram, addr netip.Addr) []Datagram {
	var out []Datagram
	for _, d := range ds {
		if d.Src.Addr() == addr {
			out = append(out, d)
		}
	}
	return out
}
