package attack

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mdlayher/arp"

	"github.com/ironlb/ironlb/internal/liveness"
)

// udp4 builds an IPv4/UDP packet.
func udp4(src, dst netip.AddrPort, payload []byte) []byte {
	b := make([]byte, 28+len(payload))
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	b[8], b[9] = 64, 17
	s, d := src.Addr().As4(), dst.Addr().As4()
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	binary.BigEndian.PutUint16(b[20:], src.Port())
	binary.BigEndian.PutUint16(b[22:], dst.Port())
	binary.BigEndian.PutUint16(b[24:], uint16(8+len(payload)))
	copy(b[28:], payload)
	return b
}

func TestParseUDP4(t *testing.T) {
	src, dst := netip.MustParseAddrPort("172.18.0.3:7947"), netip.MustParseAddrPort("172.18.0.4:7947")
	hb := liveness.Heartbeat{Node: "myk8s-worker", Seq: 7, Ready: true}.Marshal()
	good := udp4(src, dst, hb)
	frag := udp4(src, dst, hb)
	frag[6] = 0x20 // more fragments
	tcp := udp4(src, dst, hb)
	tcp[9] = 6
	padded := append(udp4(src, dst, hb), 0, 0, 0, 0) // Ethernet padding after the IP packet
	for _, tc := range []struct {
		name string
		b    []byte
		want Datagram
		ok   bool
	}{
		{"a heartbeat", good, Datagram{src, dst, hb}, true},
		{"padding after the packet", padded, Datagram{src, dst, hb}, true},
		{"truncated", good[:30], Datagram{}, false},
		{"a fragment", frag, Datagram{}, false},
		{"tcp", tcp, Datagram{}, false},
		{"ipv6", append([]byte{0x60}, good[1:]...), Datagram{}, false},
		{"empty", nil, Datagram{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParseUDP4(tc.b)
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v", ok, tc.ok)
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); ok && diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func FuzzParseUDP4(f *testing.F) {
	f.Add(udp4(netip.MustParseAddrPort("172.18.0.3:7947"), netip.MustParseAddrPort("172.18.0.4:7947"), []byte("ILB1")))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, ok := ParseUDP4(b)
		if ok && len(d.Payload) > len(b) {
			t.Fatalf("payload longer than the packet")
		}
	})
}

func TestForgedHeartbeats(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	node := netip.MustParseAddrPort("172.18.0.3:7947")
	// A receiver holding the cluster's key, which the forger does not have.
	v := liveness.NewVerifier(2 * time.Second)
	v.SetKeys([]byte("the cluster's key, 32 bytes or more!"), nil)
	v.SetPeers([]liveness.Peer{{Node: "myk8s-worker", Addr: node}})
	for _, tc := range []struct {
		name string
		b    []byte
		want liveness.Heartbeat
	}{
		{"leaving", Leaving("myk8s-worker", "eth0", now), liveness.Heartbeat{Node: "myk8s-worker", Leaving: true, Interfaces: []string{"eth0"}}},
		{"not ready", NotReady("myk8s-worker", "eth0", now), liveness.Heartbeat{Node: "myk8s-worker", Interfaces: []string{"eth0"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := liveness.Parse(tc.b[:len(tc.b)-liveness.TagLen])
			if err != nil {
				t.Fatal(err)
			}
			got.Boot, got.Seq, got.Time = 0, 0, time.Time{}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
			// Well-formed, from the node's own address, fresh: only the tag betrays it.
			if _, r := v.Verify(tc.b, node.Addr(), now); r != liveness.BadMAC {
				t.Errorf("verified from the node's address: %v, want %v", r, liveness.BadMAC)
			}
		})
	}
	gs := Ghosts("ghost", 300, now)
	seen := map[string]bool{}
	for _, g := range gs {
		h, err := liveness.Parse(g[:len(g)-liveness.TagLen])
		if err != nil || !h.Ready {
			t.Fatalf("ghost %v: %+v", err, h)
		}
		seen[h.Node] = true
		if _, r := v.Verify(g, node.Addr(), now); r != liveness.UnknownNode {
			t.Fatalf("ghost %s verified: %v, want %v", h.Node, r, liveness.UnknownNode)
		}
	}
	if len(seen) != 300 {
		t.Errorf("%d distinct ghost names, want 300", len(seen))
	}
}

func TestARPClaims(t *testing.T) {
	attacker := net.HardwareAddr{2, 0x42, 0xac, 0x12, 0, 0x64}
	vip := netip.MustParseAddr("172.18.212.1")
	node := Target{Addr: netip.MustParseAddr("172.18.0.3"), MAC: net.HardwareAddr{2, 0x42, 0xac, 0x12, 0, 3}}
	fs, err := ARPClaims(attacker, vip, []Target{node})
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 3 {
		t.Fatalf("%d frames, want 2 gratuitous and 1 reply", len(fs))
	}
	for i, f := range fs {
		if !f.Packet.SenderIP.Equal(net.IP(vip.AsSlice())) || f.Packet.SenderHardwareAddr.String() != attacker.String() {
			t.Errorf("frame %d claims %s at %s, want %s at %s", i, f.Packet.SenderIP, f.Packet.SenderHardwareAddr, vip, attacker)
		}
	}
	if fs[0].Packet.Operation != arp.OperationRequest || fs[1].Packet.Operation != arp.OperationReply || !fs[0].Packet.TargetIP.Equal(net.IP(vip.AsSlice())) {
		t.Errorf("gratuitous frames %+v %+v", fs[0].Packet, fs[1].Packet)
	}
	if fs[2].To.String() != node.MAC.String() || !fs[2].Packet.TargetIP.Equal(net.IP(node.Addr.AsSlice())) {
		t.Errorf("the reply goes to %s for %s, want %s for %s", fs[2].To, fs[2].Packet.TargetIP, node.MAC, node.Addr)
	}
	if _, err := ARPClaims(attacker, netip.MustParseAddr("fc00::1"), nil); err == nil {
		t.Errorf("an IPv6 address: want an error")
	}
}

func TestFrom(t *testing.T) {
	a, b := netip.MustParseAddrPort("172.18.0.3:7947"), netip.MustParseAddrPort("172.18.0.4:7947")
	ds := []Datagram{{a, b, []byte{1}}, {b, a, []byte{2}}, {a, b, []byte{3}}}
	got := From(ds, a.Addr())
	if len(got) != 2 || got[0].Payload[0] != 1 || got[1].Payload[0] != 3 {
		t.Errorf("From = %+v", got)
	}
}
