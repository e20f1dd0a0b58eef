package layer2

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/mdlayher/arp"
)

// ARP payload constants for IPv4 over Ethernet (RFC 826).
const (
	arpHardwareEthernet = 1
	arpProtocolIPv4     = 0x0800
)

// ARP is an ARP packet for IPv4 over Ethernet in its Ethernet frame (RFC 826).
// The zero value is not a valid packet: Marshal needs 6-byte MACs and IPv4
// addresses.
type ARP struct {
	// EthDst and EthSrc are the frame's destination and source.
	EthDst, EthSrc net.HardwareAddr
	// Op is arp.OperationRequest or arp.OperationReply.
	Op        arp.Operation
	SenderMAC net.HardwareAddr
	SenderIP  netip.Addr
	TargetMAC net.HardwareAddr
	TargetIP  netip.Addr
}

// ParseARP decodes an Ethernet frame carrying an ARP request or reply for
// IPv4 over Ethernet. Bytes after the ARP payload (Ethernet padding) are
// ignored. The result does not alias b. It returns an error wrapping
// ErrUnsupported for frames of another EtherType, ARP for other hardware or
// protocol types, and operations other than request and reply; any other
// error means the frame is malformed.
func ParseARP(b []byte) (ARP, error) {
	dst, src, payload, err := parseEthernet(b, etherTypeARP)
	if err != nil {
		return ARP{}, fmt.Errorf("parsing ARP: %w", err)
	}
	var p arp.Packet
	if err := p.UnmarshalBinary(payload); err != nil {
		return ARP{}, fmt.Errorf("parsing ARP: %w", err)
	}
	if p.HardwareType != arpHardwareEthernet || p.ProtocolType != arpProtocolIPv4 ||
		p.HardwareAddrLength != 6 || p.IPLength != 4 {
		return ARP{}, fmt.Errorf("parsing ARP: hardware type %d, protocol %#04x, lengths %d/%d: %w",
			p.HardwareType, p.ProtocolType, p.HardwareAddrLength, p.IPLength, ErrUnsupported)
	}
	if p.Operation != arp.OperationRequest && p.Operation != arp.OperationReply {
		return ARP{}, fmt.Errorf("parsing ARP: operation %d: %w", p.Operation, ErrUnsupported)
	}
	// UnmarshalBinary copied the addresses out of payload.
	sip, _ := netip.AddrFromSlice(p.SenderIP)
	tip, _ := netip.AddrFromSlice(p.TargetIP)
	return ARP{
		EthDst:    cloneMAC(dst),
		EthSrc:    cloneMAC(src),
		Op:        p.Operation,
		SenderMAC: p.SenderHardwareAddr,
		SenderIP:  sip,
		TargetMAC: p.TargetHardwareAddr,
		TargetIP:  tip,
	}, nil
}

// Marshal encodes p as an Ethernet frame, zero-padded to 60 bytes. It returns
// an error if a MAC is not 6 bytes long, an address is not IPv4, or Op is
// neither request nor reply.
func (p ARP) Marshal() ([]byte, error) {
	if p.Op != arp.OperationRequest && p.Op != arp.OperationReply {
		return nil, fmt.Errorf("marshaling ARP: operation %d", p.Op)
	}
	if err := checkMAC("sender", p.SenderMAC); err != nil {
		return nil, fmt.Errorf("marshaling ARP: %w", err)
	}
	if err := checkMAC("target", p.TargetMAC); err != nil {
		return nil, fmt.Errorf("marshaling ARP: %w", err)
	}
	if !p.SenderIP.Is4() || !p.TargetIP.Is4() {
		return nil, fmt.Errorf("marshaling ARP: sender %v and target %v must be IPv4", p.SenderIP, p.TargetIP)
	}
	pkt, err := arp.NewPacket(p.Op, p.SenderMAC, p.SenderIP.AsSlice(), p.TargetMAC, p.TargetIP.AsSlice())
	if err != nil {
		return nil, fmt.Errorf("marshaling ARP: %w", err)
	}
	payload, err := pkt.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("marshaling ARP: %w", err)
	}
	b, err := appendEthernet(make([]byte, 0, minFrameLen), p.EthDst, p.EthSrc, etherTypeARP)
	if err != nil {
		return nil, fmt.Errorf("marshaling ARP: %w", err)
	}
	return pad(append(b, payload...)), nil
}

// arpReply is the answer to request q for q.TargetIP, claiming it for mac and
// sent from the interface's own MAC src. The frame is unicast to the
// requester (RFC 826: swap sender and target, set the op to reply).
func arpReply(q ARP, src, mac net.HardwareAddr) ARP {
	return ARP{
		EthDst:    q.SenderMAC,
		EthSrc:    src,
		Op:        arp.OperationReply,
		SenderMAC: mac,
		SenderIP:  q.TargetIP,
		TargetMAC: q.SenderMAC,
		TargetIP:  q.SenderIP,
	}
}

// gratuitousARP returns the two announcements of ip at mac, sent from src to
// dst (broadcast, or one client for a unicast re-point):
//
//   - a request with sender = target = ip and a zero target MAC: an "ARP
//     Announcement" (RFC 5227 §3);
//   - a reply with sender = target = ip and target MAC = sender MAC, the form
//     Linux recognises as a gratuitous reply (arp_is_garp), which lets it
//     override an entry updated less than locktime ago.
//
// Both update an existing cache entry on any host following RFC 826's merge
// rule, which runs before the "am I the target" check.
func gratuitousARP(ip netip.Addr, dst, src, mac net.HardwareAddr) (request, reply ARP) {
	request = ARP{
		EthDst:    dst,
		EthSrc:    src,
		Op:        arp.OperationRequest,
		SenderMAC: mac,
		SenderIP:  ip,
		TargetMAC: zeroMAC,
		TargetIP:  ip,
	}
	reply = request
	reply.Op = arp.OperationReply
	reply.TargetMAC = mac
	return request, reply
}
