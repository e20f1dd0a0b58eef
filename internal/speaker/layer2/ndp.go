package layer2

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/mdlayher/ndp"
	"golang.org/x/net/ipv6"
)

const (
	ipv6HeaderLen = 40
	protoICMPv6   = 58
	// ndpHopLimit is the only hop limit NDP messages may carry (RFC 4861
	// §7.1): anything else was forwarded by a router and is discarded.
	ndpHopLimit = 255
	// icmpTypeOffset is where the ICMPv6 type sits in an untagged frame.
	icmpTypeOffset = etherHeaderLen + ipv6HeaderLen
)

var allNodes = netip.MustParseAddr("ff02::1")

// NDP is a neighbour solicitation or advertisement in its IPv6 packet and
// Ethernet frame (RFC 4861 §4.3, §4.4). Marshal computes the ICMPv6 checksum.
type NDP struct {
	// EthDst and EthSrc are the frame's destination and source.
	EthDst, EthSrc net.HardwareAddr
	// Src and Dst are the IPv6 source and destination.
	Src, Dst netip.Addr
	// HopLimit is the IPv6 hop limit; Marshal writes 255 when it is zero.
	HopLimit uint8
	// Message is a *ndp.NeighborSolicitation or *ndp.NeighborAdvertisement.
	Message ndp.Message
}

// ParseNDP decodes and validates an Ethernet frame carrying an IPv6 neighbour
// solicitation or advertisement, applying the checks of RFC 4861 §7.1.1 and
// §7.1.2: hop limit 255, valid ICMPv6 checksum, code 0, a target that is not
// multicast, no Source Link-Layer Address option on a solicitation from the
// unspecified address (which must go to a solicited-node group), and no
// Solicited flag on an advertisement sent to a multicast group. The result
// does not alias b. Errors wrap ErrUnsupported for other EtherTypes, IPv6
// packets with extension headers or another upper-layer protocol, and other
// ICMPv6 messages; any other error means the frame is malformed or invalid.
func ParseNDP(b []byte) (NDP, error) {
	dst, src, pkt, err := parseEthernet(b, etherTypeIPv6)
	if err != nil {
		return NDP{}, fmt.Errorf("parsing NDP: %w", err)
	}
	if len(pkt) < ipv6HeaderLen {
		return NDP{}, fmt.Errorf("parsing NDP: IPv6 header: %w", errTruncated)
	}
	if v := pkt[0] >> 4; v != 6 {
		return NDP{}, fmt.Errorf("parsing NDP: IP version %d", v)
	}
	if nh := pkt[6]; nh != protoICMPv6 {
		return NDP{}, fmt.Errorf("parsing NDP: next header %d: %w", nh, ErrUnsupported)
	}
	plen := int(binary.BigEndian.Uint16(pkt[4:6]))
	if plen > len(pkt)-ipv6HeaderLen {
		return NDP{}, fmt.Errorf("parsing NDP: payload length %d: %w", plen, errTruncated)
	}
	icmp := pkt[ipv6HeaderLen : ipv6HeaderLen+plen]
	if len(icmp) < 4 {
		return NDP{}, fmt.Errorf("parsing NDP: ICMPv6 header: %w", errTruncated)
	}
	typ := ipv6.ICMPType(icmp[0])
	if typ != ipv6.ICMPTypeNeighborSolicitation && typ != ipv6.ICMPTypeNeighborAdvertisement {
		return NDP{}, fmt.Errorf("parsing NDP: ICMPv6 type %d: %w", icmp[0], ErrUnsupported)
	}
	p := NDP{
		EthDst:   cloneMAC(dst),
		EthSrc:   cloneMAC(src),
		Src:      netip.AddrFrom16([16]byte(pkt[8:24])),
		Dst:      netip.AddrFrom16([16]byte(pkt[24:40])),
		HopLimit: pkt[7],
	}
	if p.HopLimit != ndpHopLimit {
		return NDP{}, fmt.Errorf("parsing NDP: hop limit %d, want 255", p.HopLimit)
	}
	if code := icmp[1]; code != 0 {
		return NDP{}, fmt.Errorf("parsing NDP: ICMPv6 code %d, want 0", code)
	}
	if p.Src.IsMulticast() {
		return NDP{}, fmt.Errorf("parsing NDP: multicast source %v", p.Src)
	}
	if p.Src.Is4In6() || p.Dst.Is4In6() {
		// RFC 4291 §2.5.5.2: never on the wire; Linux drops these too.
		return NDP{}, fmt.Errorf("parsing NDP: IPv4-mapped address %v -> %v", p.Src, p.Dst)
	}
	if sum := icmpv6Checksum(p.Src, p.Dst, icmp); sum != 0 {
		return NDP{}, fmt.Errorf("parsing NDP: bad ICMPv6 checksum")
	}
	m, err := ndp.ParseMessage(icmp)
	if err != nil {
		return NDP{}, fmt.Errorf("parsing NDP: %w", err)
	}
	p.Message = dropUnencodableOptions(m)
	if err := p.validate(); err != nil {
		return NDP{}, fmt.Errorf("parsing NDP: %w", err)
	}
	return p, nil
}

// dropUnencodableOptions removes the options that the ndp package parses but
// cannot encode again (an RA flags extension without flags, say). None of them
// belongs in a solicitation or an advertisement, and RFC 4861 §4.6 has a
// receiver ignore options it does not use, so the message is still answered.
func dropUnencodableOptions(m ndp.Message) ndp.Message {
	if _, err := ndp.MarshalMessage(m); err == nil {
		return m
	}
	keep := func(opts []ndp.Option, with func([]ndp.Option) ndp.Message) []ndp.Option {
		var out []ndp.Option
		for _, o := range opts {
			if _, err := ndp.MarshalMessage(with([]ndp.Option{o})); err == nil {
				out = append(out, o)
			}
		}
		return out
	}
	switch m := m.(type) {
	case *ndp.NeighborSolicitation:
		c := *m
		c.Options = keep(m.Options, func(o []ndp.Option) ndp.Message {
			return &ndp.NeighborSolicitation{TargetAddress: m.TargetAddress, Options: o}
		})
		return &c
	case *ndp.NeighborAdvertisement:
		c := *m
		c.Options = keep(m.Options, func(o []ndp.Option) ndp.Message {
			return &ndp.NeighborAdvertisement{TargetAddress: m.TargetAddress, Options: o}
		})
		return &c
	}
	return m
}

// validate applies RFC 4861 §7.1.1 and §7.1.2 to the message.
func (p NDP) validate() error {
	switch m := p.Message.(type) {
	case *ndp.NeighborSolicitation:
		if m.TargetAddress.IsMulticast() {
			return fmt.Errorf("solicitation for multicast target %v", m.TargetAddress)
		}
		if p.Src.IsUnspecified() {
			if !isSolicitedNode(p.Dst) {
				return fmt.Errorf("solicitation from :: to %v, not a solicited-node group", p.Dst)
			}
			if linkLayerOption(m.Options, ndp.Source) != nil {
				return fmt.Errorf("solicitation from :: with a source link-layer address")
			}
		}
	case *ndp.NeighborAdvertisement:
		if m.TargetAddress.IsMulticast() {
			return fmt.Errorf("advertisement for multicast target %v", m.TargetAddress)
		}
		if p.Dst.IsMulticast() && m.Solicited {
			return fmt.Errorf("solicited advertisement to multicast %v", p.Dst)
		}
	default:
		return fmt.Errorf("message %T: %w", p.Message, ErrUnsupported)
	}
	return nil
}

// Marshal encodes p as an Ethernet frame with its IPv6 header and ICMPv6
// checksum. It returns an error if a MAC is not 6 bytes long, an address is
// not IPv6, or the message cannot be encoded.
func (p NDP) Marshal() ([]byte, error) {
	if !p.Src.Is6() || p.Src.Is4In6() || !p.Dst.Is6() || p.Dst.Is4In6() {
		return nil, fmt.Errorf("marshaling NDP: source %v and destination %v must be IPv6", p.Src, p.Dst)
	}
	switch p.Message.(type) {
	case *ndp.NeighborSolicitation, *ndp.NeighborAdvertisement:
	default:
		return nil, fmt.Errorf("marshaling NDP: message %T is not a neighbour solicitation or advertisement", p.Message)
	}
	icmp, err := ndp.MarshalMessageChecksum(p.Message, p.Src, p.Dst)
	if err != nil {
		return nil, fmt.Errorf("marshaling NDP: %w", err)
	}
	if len(icmp) > 0xffff {
		return nil, fmt.Errorf("marshaling NDP: message of %d bytes", len(icmp))
	}
	b, err := appendEthernet(make([]byte, 0, etherHeaderLen+ipv6HeaderLen+len(icmp)), p.EthDst, p.EthSrc, etherTypeIPv6)
	if err != nil {
		return nil, fmt.Errorf("marshaling NDP: %w", err)
	}
	hop := p.HopLimit
	if hop == 0 {
		hop = ndpHopLimit
	}
	b = append(b, 6<<4, 0, 0, 0) // version 6, traffic class 0, flow label 0
	b = binary.BigEndian.AppendUint16(b, uint16(len(icmp)))
	b = append(b, protoICMPv6, hop)
	b = append(b, p.Src.AsSlice()...)
	b = append(b, p.Dst.AsSlice()...)
	return pad(append(b, icmp...)), nil
}

// icmpv6Checksum returns the Internet checksum of an ICMPv6 message with its
// pseudo-header (RFC 8200 §8.1). Over a message that carries its checksum,
// the result is 0 when the checksum is right.
func icmpv6Checksum(src, dst netip.Addr, msg []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for len(b) >= 2 {
			sum += uint32(b[0])<<8 | uint32(b[1])
			b = b[2:]
		}
		if len(b) == 1 {
			sum += uint32(b[0]) << 8
		}
	}
	s, d := src.As16(), dst.As16()
	add(s[:])
	add(d[:])
	sum += uint32(len(msg)>>16) + uint32(len(msg)&0xffff)
	sum += protoICMPv6
	add(msg)
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// linkLayerOption returns the first link-layer address option of direction
// d, or nil.
func linkLayerOption(opts []ndp.Option, d ndp.Direction) net.HardwareAddr {
	for _, o := range opts {
		if lla, ok := o.(*ndp.LinkLayerAddress); ok && lla.Direction == d {
			return lla.Addr
		}
	}
	return nil
}

// solicitedNode returns the solicited-node multicast group of ip
// (ff02::1:ffXX:XXXX, RFC 4291 §2.7.1).
func solicitedNode(ip netip.Addr) netip.Addr {
	g, err := ndp.SolicitedNodeMulticast(ip)
	if err != nil {
		return netip.Addr{}
	}
	return g
}

func isSolicitedNode(ip netip.Addr) bool {
	a := ip.As16()
	return ip.Is6() && a == [16]byte{0: 0xff, 1: 0x02, 11: 0x01, 12: 0xff, 13: a[13], 14: a[14], 15: a[15]}
}

// neighborAdvertisement builds an advertisement of target at mac, sent from
// the interface MAC src. The IPv6 source is the target itself, as a host
// that owns the address sends it (RFC 4861 §7.2.4: "an address assigned to
// the interface"); the VIP need not be configured on the node.
func neighborAdvertisement(target netip.Addr, ethDst, src net.HardwareAddr, dst netip.Addr, mac net.HardwareAddr, solicited bool) NDP {
	return NDP{
		EthDst:   ethDst,
		EthSrc:   src,
		Src:      target,
		Dst:      dst,
		HopLimit: ndpHopLimit,
		Message: &ndp.NeighborAdvertisement{
			Solicited:     solicited,
			Override:      true,
			TargetAddress: target,
			Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: mac}},
		},
	}
}

// neighborSolicitation builds a multicast solicitation for target from the
// host's own address src at mac (RFC 4861 §7.2.2: to target's solicited-node
// group, with the source link-layer address option).
func neighborSolicitation(target, src netip.Addr, mac net.HardwareAddr) NDP {
	group := solicitedNode(target)
	return NDP{
		EthDst:   ipv6MulticastMAC(group),
		EthSrc:   mac,
		Src:      src,
		Dst:      group,
		HopLimit: ndpHopLimit,
		Message: &ndp.NeighborSolicitation{
			TargetAddress: target,
			Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: mac}},
		},
	}
}
