package layer2

import (
	"net"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mdlayher/arp"
	"github.com/mdlayher/ndp"
)

var (
	ownMAC    = mustMAC("02:00:00:00:00:0a")
	otherMAC  = mustMAC("02:00:00:00:00:0b")
	clientMAC = mustMAC("02:00:00:00:00:c1")

	vip4    = netip.MustParseAddr("192.0.2.10")
	client4 = netip.MustParseAddr("192.0.2.100")
	vip6    = netip.MustParseAddr("2001:db8::10")
	client6 = netip.MustParseAddr("2001:db8::100")

	testIfi = &net.Interface{Index: 7, MTU: 1500, Name: "eth0", HardwareAddr: ownMAC}
)

// cmpOpts compares addresses by value and treats nil and empty MACs alike.
var cmpOpts = cmp.Options{
	cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
	cmp.Comparer(func(a, b net.HardwareAddr) bool { return string(a) == string(b) }),
}

func mustMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

func mustMarshal(t testing.TB, f frame) []byte {
	t.Helper()
	b, err := f.Marshal()
	if err != nil {
		t.Fatalf("Marshal(%+v): %v", f, err)
	}
	return b
}

// arpRequest is a request from (clientMAC, client4) for target.
func arpRequest(ethDst net.HardwareAddr, target netip.Addr) ARP {
	return ARP{
		EthDst: ethDst, EthSrc: clientMAC, Op: arp.OperationRequest,
		SenderMAC: clientMAC, SenderIP: client4, TargetMAC: zeroMAC, TargetIP: target,
	}
}

// solicitation is a neighbour solicitation for target from client6 to the
// target's solicited-node group, with a Source Link-Layer Address option.
func solicitation(target netip.Addr) NDP {
	g := solicitedNode(target)
	return NDP{
		EthDst: ipv6MulticastMAC(g), EthSrc: clientMAC, Src: client6, Dst: g, HopLimit: 255,
		Message: &ndp.NeighborSolicitation{
			TargetAddress: target,
			Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: clientMAC}},
		},
	}
}

func advertisement(target netip.Addr, from net.HardwareAddr, solicited, override bool) NDP {
	return NDP{
		EthDst: ipv6MulticastMAC(allNodes), EthSrc: from, Src: target, Dst: allNodes, HopLimit: 255,
		Message: &ndp.NeighborAdvertisement{
			Solicited: solicited, Override: override, TargetAddress: target,
			Options: []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: from}},
		},
	}
}
