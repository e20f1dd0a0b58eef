package layer2

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// Ethernet framing (IEEE 802.3 / Ethernet II): destination, source, EtherType.
const (
	etherHeaderLen = 14
	// minFrameLen is the shortest Ethernet frame without its FCS. Frames
	// built here are zero-padded to it, as RFC 894 requires of short frames.
	minFrameLen = 60

	etherTypeARP  = 0x0806
	etherTypeIPv6 = 0x86dd
)

var (
	// ErrUnsupported marks a well-formed frame this package does not handle:
	// another EtherType (VLAN-tagged frames included), ARP for another
	// hardware or protocol type, or an ICMPv6 message other than a neighbour
	// solicitation or advertisement. A parse error that does not wrap it means
	// the frame is malformed.
	ErrUnsupported = errors.New("unsupported frame")

	errTruncated = errors.New("truncated")
)

var (
	broadcastMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	zeroMAC      = net.HardwareAddr{0, 0, 0, 0, 0, 0}
)

// parseEthernet splits an Ethernet II frame. The MACs alias b.
func parseEthernet(b []byte, want uint16) (dst, src net.HardwareAddr, payload []byte, err error) {
	if len(b) < etherHeaderLen {
		return nil, nil, nil, fmt.Errorf("ethernet header: %w", errTruncated)
	}
	if t := binary.BigEndian.Uint16(b[12:14]); t != want {
		return nil, nil, nil, fmt.Errorf("ethertype %#04x: %w", t, ErrUnsupported)
	}
	return net.HardwareAddr(b[0:6]), net.HardwareAddr(b[6:12]), b[etherHeaderLen:], nil
}

// appendEthernet appends an Ethernet II header to b.
func appendEthernet(b []byte, dst, src net.HardwareAddr, typ uint16) ([]byte, error) {
	if err := checkMAC("destination", dst); err != nil {
		return nil, err
	}
	if err := checkMAC("source", src); err != nil {
		return nil, err
	}
	b = append(b, dst...)
	b = append(b, src...)
	return binary.BigEndian.AppendUint16(b, typ), nil
}

// pad zero-fills b to the minimum Ethernet frame length.
func pad(b []byte) []byte {
	for len(b) < minFrameLen {
		b = append(b, 0)
	}
	return b
}

func checkMAC(what string, mac net.HardwareAddr) error {
	if len(mac) != 6 {
		return fmt.Errorf("%s MAC %q: want 6 bytes, got %d", what, mac, len(mac))
	}
	return nil
}

// isUnicastMAC reports whether mac is a 6-byte unicast MAC other than zero:
// an address an answer can be sent to.
func isUnicastMAC(mac net.HardwareAddr) bool {
	return len(mac) == 6 && mac[0]&1 == 0 && !macEqual(mac, zeroMAC)
}

func isMulticastMAC(mac net.HardwareAddr) bool { return len(mac) == 6 && mac[0]&1 == 1 }

func macEqual(a, b net.HardwareAddr) bool { return string(a) == string(b) }

// cloneMAC returns a copy of mac that does not alias a read buffer.
func cloneMAC(mac net.HardwareAddr) net.HardwareAddr {
	if mac == nil {
		return nil
	}
	return append(net.HardwareAddr(nil), mac...)
}

// ipv6MulticastMAC is the Ethernet address an IPv6 multicast group maps to
// (RFC 2464 §7): 33:33 followed by the group's last four bytes.
func ipv6MulticastMAC(group netip.Addr) net.HardwareAddr {
	a := group.As16()
	return net.HardwareAddr{0x33, 0x33, a[12], a[13], a[14], a[15]}
}
