package layer2

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mdlayher/ndp"
	"golang.org/x/net/bpf"
)

func TestNDPMarshalParse(t *testing.T) {
	dad := solicitation(vip6)
	dad.Src = netip.IPv6Unspecified()
	dad.Message = &ndp.NeighborSolicitation{TargetAddress: vip6}
	tests := []struct {
		name string
		p    NDP
	}{
		{"solicitation", solicitation(vip6)},
		{"duplicate address detection", dad},
		{"solicited advertisement", neighborAdvertisement(vip6, clientMAC, ownMAC, client6, otherMAC, true)},
		{"unsolicited advertisement", neighborAdvertisement(vip6, ipv6MulticastMAC(allNodes), ownMAC, allNodes, ownMAC, false)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mustMarshal(t, tt.p)
			got, err := ParseNDP(b)
			if err != nil {
				t.Fatalf("ParseNDP: %v", err)
			}
			if diff := cmp.Diff(tt.p, got, cmpOpts); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNDPChecksum checks our checksum against the one mdlayher/ndp (and
// x/net/icmp) computes, and that a verified message sums to zero.
func TestNDPChecksum(t *testing.T) {
	na := neighborAdvertisement(vip6, clientMAC, ownMAC, client6, ownMAC, true)
	icmp, err := ndp.MarshalMessageChecksum(na.Message, na.Src, na.Dst)
	if err != nil {
		t.Fatal(err)
	}
	if got := icmpv6Checksum(na.Src, na.Dst, icmp); got != 0 {
		t.Errorf("checksum over a correct message = %#04x, want 0", got)
	}
	want := binary.BigEndian.Uint16(icmp[2:4])
	icmp[2], icmp[3] = 0, 0
	if got := icmpv6Checksum(na.Src, na.Dst, icmp); got != want {
		t.Errorf("checksum = %#04x, ndp computed %#04x", got, want)
	}
	// An odd-length message is padded with a zero byte (RFC 1071): the
	// same bytes plus a zero sum alike once the lengths are accounted for.
	odd := append(icmp[:len(icmp):len(icmp)], 0xab)
	odd[2], odd[3] = 0, 0
	sum := icmpv6Checksum(na.Src, na.Dst, odd)
	binary.BigEndian.PutUint16(odd[2:4], sum)
	if got := icmpv6Checksum(na.Src, na.Dst, odd); got != 0 {
		t.Errorf("checksum over a correct odd-length message = %#04x, want 0", got)
	}
}

// TestNDPWire checks the headers of a solicited advertisement byte by byte.
func TestNDPWire(t *testing.T) {
	b := mustMarshal(t, neighborAdvertisement(vip6, clientMAC, ownMAC, client6, otherMAC, true))
	if len(b) != 14+40+32 {
		t.Fatalf("frame is %d bytes, want 86", len(b))
	}
	check := func(what string, got, want any) {
		t.Helper()
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", what, diff)
		}
	}
	check("eth dst", b[0:6], []byte(clientMAC))
	check("eth src", b[6:12], []byte(ownMAC))
	check("ethertype", b[12:14], []byte{0x86, 0xdd})
	check("version/class/flow", b[14:18], []byte{0x60, 0, 0, 0})
	check("payload length", binary.BigEndian.Uint16(b[18:20]), uint16(32))
	check("next header, hop limit", b[20:22], []byte{58, 255})
	check("source", b[22:38], vip6.AsSlice())
	check("destination", b[38:54], client6.AsSlice())
	check("type, code", b[54:56], []byte{136, 0})
	check("flags R S O", b[58], byte(0x60))
	check("target", b[62:78], vip6.AsSlice())
	check("target link-layer option", b[78:86], append([]byte{2, 1}, otherMAC...))
}

func TestParseNDPErrors(t *testing.T) {
	// rebuild re-marshals p after edit, so the checksum stays right.
	rebuild := func(p NDP, edit func(*NDP)) []byte {
		edit(&p)
		return mustMarshal(t, p)
	}
	// raw edits bytes of a correct solicitation.
	raw := func(edit func(b []byte)) []byte {
		b := mustMarshal(t, solicitation(vip6))
		edit(b)
		return b
	}
	ns := solicitation(vip6)
	tests := []struct {
		name        string
		b           []byte
		unsupported bool
	}{
		{"empty", nil, false},
		{"short IPv6 header", raw(func(b []byte) {})[:14+39], false},
		{"ARP ethertype", raw(func(b []byte) { b[12], b[13] = 0x08, 0x06 }), true},
		{"IP version 4", raw(func(b []byte) { b[14] = 0x40 }), false},
		{"hop-by-hop header", raw(func(b []byte) { b[20] = 0 }), true},
		{"payload length beyond frame", raw(func(b []byte) { b[18], b[19] = 0x10, 0 }), false},
		{"payload length 2", raw(func(b []byte) { b[18], b[19] = 0, 2 }), false},
		{"bad checksum", raw(func(b []byte) { b[56] ^= 0xff }), false},
		{"hop limit 254", rebuild(ns, func(p *NDP) { p.HopLimit = 254 }), false},
		{"router solicitation", raw(func(b []byte) { b[54] = 133 }), true},
		{"echo request", raw(func(b []byte) { b[54] = 128 }), true},
		{"multicast source", rebuild(ns, func(p *NDP) { p.Src = allNodes }), false},
		{"IPv4-mapped destination", raw(func(b []byte) { copy(b[38:54], netip.MustParseAddr("::ffff:192.0.2.1").AsSlice()) }), false},
		{"multicast target", rebuild(ns, func(p *NDP) {
			p.Message = &ndp.NeighborSolicitation{TargetAddress: allNodes}
		}), false},
		{"DAD with source option", rebuild(ns, func(p *NDP) { p.Src = netip.IPv6Unspecified() }), false},
		{"DAD to the target", rebuild(ns, func(p *NDP) {
			p.Src, p.Dst = netip.IPv6Unspecified(), vip6
			p.Message = &ndp.NeighborSolicitation{TargetAddress: vip6}
		}), false},
		{"solicited advertisement to multicast", rebuild(advertisement(vip6, otherMAC, true, true), func(*NDP) {}), false},
		{"truncated option", raw(func(b []byte) { b[79] = 2 }), false},
	}
	// The code field is covered by the checksum: fix it after editing.
	code1 := mustMarshal(t, ns)
	code1[55] = 1
	code1[56], code1[57] = 0, 0
	binary.BigEndian.PutUint16(code1[56:58], icmpv6Checksum(ns.Src, ns.Dst, code1[54:]))
	tests = append(tests, struct {
		name        string
		b           []byte
		unsupported bool
	}{"code 1", code1, false})

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseNDP(tt.b)
			if err == nil {
				t.Fatal("ParseNDP succeeded, want error")
			}
			if got := errors.Is(err, ErrUnsupported); got != tt.unsupported {
				t.Errorf("errors.Is(%v, ErrUnsupported) = %v, want %v", err, got, tt.unsupported)
			}
		})
	}
}

func TestSolicitedNode(t *testing.T) {
	if got, want := solicitedNode(vip6), netip.MustParseAddr("ff02::1:ff00:10"); got != want {
		t.Errorf("solicitedNode(%v) = %v, want %v", vip6, got, want)
	}
	if !isSolicitedNode(netip.MustParseAddr("ff02::1:ffab:cdef")) || isSolicitedNode(allNodes) || isSolicitedNode(vip6) {
		t.Error("isSolicitedNode misclassifies")
	}
	if got, want := ipv6MulticastMAC(solicitedNode(vip6)).String(), "33:33:ff:00:00:10"; got != want {
		t.Errorf("multicast MAC = %s, want %s", got, want)
	}
}

// TestNDPFilter runs the socket's BPF program on frames in the BPF VM.
func TestNDPFilter(t *testing.T) {
	vm, err := bpf.NewVM(ndpFilter)
	if err != nil {
		t.Fatal(err)
	}
	echo := mustMarshal(t, solicitation(vip6))
	echo[54] = 128
	hbh := mustMarshal(t, solicitation(vip6))
	hbh[20] = 0
	tests := []struct {
		name string
		b    []byte
		want bool
	}{
		{"solicitation", mustMarshal(t, solicitation(vip6)), true},
		{"advertisement", mustMarshal(t, advertisement(vip6, otherMAC, false, true)), true},
		{"echo request", echo, false},
		{"hop-by-hop header", hbh, false},
		{"ARP", mustMarshal(t, arpRequest(broadcastMAC, vip4)), false},
		{"runt", []byte{1, 2, 3}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := vm.Run(tt.b)
			if err != nil {
				t.Fatal(err)
			}
			if got := n > 0; got != tt.want {
				t.Errorf("accepted = %v (%d bytes), want %v", got, n, tt.want)
			}
			if tt.want && n < len(tt.b) {
				t.Errorf("accepted %d of %d bytes", n, len(tt.b))
			}
		})
	}
}
