package layer2

import (
	"encoding/hex"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mdlayher/arp"
)

func TestARPMarshalParse(t *testing.T) {
	req, rep := gratuitousARP(vip4, broadcastMAC, ownMAC, otherMAC)
	tests := []struct {
		name string
		p    ARP
	}{
		{"request", arpRequest(broadcastMAC, vip4)},
		{"reply", arpReply(arpRequest(broadcastMAC, vip4), ownMAC, ownMAC)},
		{"probe", ARP{EthDst: broadcastMAC, EthSrc: clientMAC, Op: arp.OperationRequest, SenderMAC: clientMAC,
			SenderIP: netip.IPv4Unspecified(), TargetMAC: zeroMAC, TargetIP: vip4}},
		{"gratuitous request", req},
		{"gratuitous reply", rep},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mustMarshal(t, tt.p)
			if len(b) != minFrameLen {
				t.Errorf("frame is %d bytes, want %d", len(b), minFrameLen)
			}
			got, err := ParseARP(b)
			if err != nil {
				t.Fatalf("ParseARP: %v", err)
			}
			if diff := cmp.Diff(tt.p, got, cmpOpts); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

// TestARPWire checks the exact bytes of a reply against a hand-written frame.
func TestARPWire(t *testing.T) {
	p := arpReply(arpRequest(broadcastMAC, vip4), ownMAC, otherMAC)
	want := strings.Join([]string{
		"0200000000c1", "02000000000a", "0806", // Ethernet: to the client, from us, ARP
		"0001", "0800", "06", "04", "0002", // Ethernet/IPv4, reply
		"02000000000b", "c000020a", // sender: the answer MAC, the VIP
		"0200000000c1", "c0000264", // target: the client
		strings.Repeat("00", 18), // padding to 60 bytes
	}, "")
	if got := hex.EncodeToString(mustMarshal(t, p)); got != want {
		t.Errorf("Marshal =\n%s\nwant\n%s", got, want)
	}
}

func TestGratuitousARPShape(t *testing.T) {
	req, rep := gratuitousARP(vip4, broadcastMAC, ownMAC, otherMAC)
	for _, p := range []ARP{req, rep} {
		if p.SenderIP != vip4 || p.TargetIP != vip4 {
			t.Errorf("%v: sender %v target %v, want both %v", p.Op, p.SenderIP, p.TargetIP, vip4)
		}
		if !macEqual(p.EthDst, broadcastMAC) || !macEqual(p.EthSrc, ownMAC) || !macEqual(p.SenderMAC, otherMAC) {
			t.Errorf("%v: eth %v -> %v, sender MAC %v", p.Op, p.EthSrc, p.EthDst, p.SenderMAC)
		}
	}
	if req.Op != arp.OperationRequest || !macEqual(req.TargetMAC, zeroMAC) {
		t.Errorf("request: op %v target MAC %v, want request with zero target MAC (RFC 5227 §3)", req.Op, req.TargetMAC)
	}
	if rep.Op != arp.OperationReply || !macEqual(rep.TargetMAC, rep.SenderMAC) {
		t.Errorf("reply: op %v target MAC %v, want reply with target MAC = sender MAC", rep.Op, rep.TargetMAC)
	}
}

func TestParseARPErrors(t *testing.T) {
	good := mustMarshal(t, arpRequest(broadcastMAC, vip4))
	edit := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	tests := []struct {
		name        string
		b           []byte
		unsupported bool
	}{
		{"empty", nil, false},
		{"short ethernet", good[:13], false},
		{"truncated payload", good[:14+20], false},
		{"IPv4 ethertype", edit(func(b []byte) []byte { b[12], b[13] = 0x08, 0x00; return b }), true},
		{"VLAN tagged", edit(func(b []byte) []byte { b[12], b[13] = 0x81, 0x00; return b }), true},
		{"IEEE 802 hardware", edit(func(b []byte) []byte { b[15] = 6; return b }), true},
		{"IPv6 protocol", edit(func(b []byte) []byte { b[16], b[17] = 0x86, 0xdd; return b }), true},
		{"hardware length 8", edit(func(b []byte) []byte { b[18] = 8; return b }), true},
		{"RARP operation", edit(func(b []byte) []byte { b[21] = 3; return b }), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseARP(tt.b)
			if err == nil {
				t.Fatal("ParseARP succeeded, want error")
			}
			if got := errors.Is(err, ErrUnsupported); got != tt.unsupported {
				t.Errorf("errors.Is(%v, ErrUnsupported) = %v, want %v", err, got, tt.unsupported)
			}
		})
	}
}

func TestARPMarshalErrors(t *testing.T) {
	good := arpRequest(broadcastMAC, vip4)
	tests := []struct {
		name string
		edit func(*ARP)
	}{
		{"short sender MAC", func(p *ARP) { p.SenderMAC = p.SenderMAC[:5] }},
		{"nil target MAC", func(p *ARP) { p.TargetMAC = nil }},
		{"long eth destination", func(p *ARP) { p.EthDst = append(p.EthDst, 0) }},
		{"IPv6 target", func(p *ARP) { p.TargetIP = vip6 }},
		{"zero sender IP", func(p *ARP) { p.SenderIP = netip.Addr{} }},
		{"operation 0", func(p *ARP) { p.Op = 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := good
			tt.edit(&p)
			if b, err := p.Marshal(); err == nil {
				t.Errorf("Marshal = %x, want error", b)
			}
		})
	}
}
