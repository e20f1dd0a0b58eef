package attack

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/mdlayher/arp"

	"github.com/ironlb/ironlb/internal/liveness"
)

// forger signs the forged heartbeats with a key of the attacker's own: it knows the wire format but
// not the cluster's key, so every tag it makes is wrong (a receiver counts them as bad-mac, or
// rejects them earlier for their source or name).
func forge(hb Heartbeat, now time.Time) []byte {
	s := liveness.NewSigner(0x5eed)
	s.SetKey([]byte("not the cluster's key, an attacker's own 32+ bytes"))
	return append([]byte(nil), s.Sign(hb, now)...)
}

// Heartbeat is the heartbeat a forger fills in.
type Heartbeat = liveness.Heartbeat

// Leaving is a heartbeat forged in node's name saying it shuts down (hand its addresses over now)
// and is not ready: what a speaker sends on SIGTERM. iface is its announcing interface.
func Leaving(node, iface string, now time.Time) []byte {
	return forge(Heartbeat{Node: node, Ready: false, Leaving: true, Interfaces: []string{iface}}, now)
}

// NotReady is a heartbeat forged in node's name saying it is alive but not ready (not synced with
// the API): not eligible in any election.
func NotReady(node, iface string, now time.Time) []byte {
	return forge(Heartbeat{Node: node, Interfaces: []string{iface}}, now)
}

// Ghosts returns n ready heartbeats in the names of nodes that do not exist (prefix-0, prefix-1,
// ...): a flood of unknown names that a speaker must neither track nor elect.
func Ghosts(prefix string, n int, now time.Time) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = forge(Heartbeat{Node: fmt.Sprintf("%s-%d", prefix, i), Ready: true,
			Interfaces: []string{"eth0"}, ReadyFor: 3600_000_000_000}, now)
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
