package attack

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/mdlayher/arp"

	"github.com/ironlb/ironlb/internal/liveness"
)

// ForgedSeq is the sequence number forged heartbeats carry: far above any real speaker's, so that a
// receiver that kept only the highest sequence seen would take them for the newest.
const ForgedSeq = 1 << 62

// Leaving is a heartbeat forged in node's name saying it shuts down (hand its addresses over now)
// and is not ready: what a speaker sends on SIGTERM. mac is the node's announcing MAC as its own
// heartbeats carry it (nil: none), iface its announcing interface.
func Leaving(node string, mac net.HardwareAddr, iface string) []byte {
	return liveness.Heartbeat{Node: node, Seq: ForgedSeq, Ready: false, Leaving: true, Interfaces: []string{iface}, MAC: mac}.Marshal()
}

// NotReady is a heartbeat forged in node's name saying it is alive but not ready (not synced with
// the API): not eligible in any election.
func NotReady(node string, mac net.HardwareAddr, iface string) []byte {
	return liveness.Heartbeat{Node: node, Seq: ForgedSeq, Interfaces: []string{iface}, MAC: mac}.Marshal()
}

// Ghosts returns n ready heartbeats in the names of nodes that do not exist (prefix-0, prefix-1,
// ...), each claiming mac: a flood of unknown names that a speaker must neither track nor elect.
func Ghosts(prefix string, n int, mac net.HardwareAddr) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = liveness.Heartbeat{Node: fmt.Sprintf("%s-%d", prefix, i), Seq: ForgedSeq, Ready: true,
			Interfaces: []string{"eth0"}, ReadyFor: 3600_000_000_000, MAC: mac}.Marshal()
	}
	return out
}

// Target is a host the forged ARP is aimed at.
type Target struct {
	Addr netip.Addr
	MAC  net.HardwareAddr
}

// ARPClaims returns the forged ARP packets claiming that vip is at attacker: a gratuitous request
// and a gratuitous reply (both broadcast), then one reply per target, unicast to it. Each comes with
// the destination MAC of its frame.
func ARPClaims(attacker net.HardwareAddr, vip netip.Addr, targets []Target) ([]Frame, error) {
	if !vip.Is4() {
		return nil, fmt.Errorf("forged ARP for %s: not an IPv4 address", vip)
	}
	ip := net.IP(vip.AsSlice())
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	var out []Frame
	req, err := arp.NewPacket(arp.OperationRequest, attacker, ip, bcast, ip)
	if err != nil {
		return nil, err
	}
	rep, err := arp.NewPacket(arp.OperationReply, attacker, ip, bcast, ip)
	if err != nil {
		return nil, err
	}
	out = append(out, Frame{To: bcast, Packet: req}, Frame{To: bcast, Packet: rep})
	for _, t := range targets {
		p, err := arp.NewPacket(arp.OperationReply, attacker, ip, t.MAC, net.IP(t.Addr.AsSlice()))
		if err != nil {
			return nil, err
		}
		out = append(out, Frame{To: t.MAC, Packet: p})
	}
	return out, nil
}

// Frame is an ARP packet and the MAC it is sent to.
type Frame struct {
	To     net.HardwareAddr
	Packet *arp.Packet
}
