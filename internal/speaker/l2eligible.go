package speaker

import (
	"fmt"
	"net"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Layer-2 eligibility of the node's own interface. Layer 2 answers ARP and neighbor solicitations
// with the interface's hardware address; a node whose address sits on an interface without one
// (lo, dummy, a WireGuard or other tunnel: common where nodes are routed by BGP from a loopback
// address) cannot answer, so it never takes part in layer 2: it opens no responder, its heartbeats
// say it is not ready (its peers elect without it), it announces nothing itself, and it says why
// once (a log line with the node, a Warning event on its Node, the layer2Eligible condition of its
// ConfigurationState). BGP mode and the speaker's status run as on any node, and /readyz reports
// ready.

// layer2Reason says why an interface cannot serve layer 2; empty when it can.
type layer2Reason string

const (
	// Layer2Loopback: the node address is on a loopback interface.
	Layer2Loopback layer2Reason = "Loopback"
	// Layer2PointToPoint: the interface is point-to-point (a tunnel): no neighbours to answer.
	Layer2PointToPoint layer2Reason = "PointToPoint"
	// Layer2NoHardwareAddress: the interface has no Ethernet hardware address (tun, wireguard).
	Layer2NoHardwareAddress layer2Reason = "NoHardwareAddress"
	// Layer2NoARP: the interface does no address resolution (IFF_NOARP: dummy, which has a MAC but
	// no link to answer on).
	Layer2NoARP layer2Reason = "NoARP"
)

// conditionLayer2Eligible is the ConfigurationState condition a speaker that cannot serve layer 2
// sets False (reason: its layer2Reason). It is not a configuration error: the state stays Valid.
const conditionLayer2Eligible = "layer2Eligible"

// layer2Eligibility says whether ifi can serve layer 2, and why not; noARP is its IFF_NOARP flag
// (which net.Flags does not carry). Pure: it reads ifi's flags and hardware address only.
func layer2Eligibility(ifi net.Interface, noARP bool) layer2Reason {
	switch {
	case ifi.Flags&net.FlagLoopback != 0:
		return Layer2Loopback
	case ifi.Flags&net.FlagPointToPoint != 0:
		return Layer2PointToPoint
	case len(ifi.HardwareAddr) != 6 || isZeroMAC(ifi.HardwareAddr):
		return Layer2NoHardwareAddress
	case noARP:
		return Layer2NoARP
	}
	return ""
}

func isZeroMAC(mac net.HardwareAddr) bool {
	for _, b := range mac {
		if b != 0 {
			return false
		}
	}
	return true
}

// describeLayer2 says for people why node cannot serve layer 2 on ifi.
func describeLayer2(node string, ifi *net.Interface, why layer2Reason) string {
	return fmt.Sprintf("node %q is not eligible for layer 2: its address is on %s (%s), which cannot answer ARP/NDP; it runs BGP only and never announces in layer 2",
		node, ifi.Name, why)
}

// layer2Condition is the ConfigurationState condition saying why this node is not eligible.
func layer2Condition(msg string, why layer2Reason) metav1.Condition {
	return metav1.Condition{Type: conditionLayer2Eligible, Status: metav1.ConditionFalse, Reason: string(why), Message: msg}
}
