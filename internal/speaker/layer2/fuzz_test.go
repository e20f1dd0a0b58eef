package layer2

import (
	"encoding/binary"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/mdlayher/ndp"
)

// discardConn is a FakeConn that forgets what is written, so fuzzing does
// not accumulate frames.
type discardConn struct{ *FakeConn }

func (discardConn) WriteTo(b []byte, _ net.Addr) (int, error) { return len(b), nil }

// fuzzResponder returns a responder announcing the fuzz seeds' addresses,
// over a conn that discards what it sends. The fuzz targets call handle
// directly: Run's loop adds nothing but the read.
func fuzzResponder(t testing.TB, fam family) *Responder {
	var (
		r   *Responder
		err error
	)
	if fam == familyARP {
		r, err = NewARP(testIfi, discardConn{NewFakeConn()}, Config{})
	} else {
		r, err = NewNDP(testIfi, discardConn{NewFakeConn()}, &FakeGroups{}, Config{})
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, ip := range []netip.Addr{vip4, client4, vip6, client6} {
		_ = r.Announce(ip) // the other family fails
	}
	return r
}

func FuzzParseARP(f *testing.F) {
	req, rep := gratuitousARP(vip4, broadcastMAC, otherMAC, otherMAC)
	for _, p := range []ARP{arpRequest(broadcastMAC, vip4), arpRequest(ownMAC, vip4), req, rep,
		arpReply(arpRequest(broadcastMAC, vip4), ownMAC, otherMAC)} {
		f.Add(mustMarshal(f, p))
	}
	f.Add([]byte{})
	r := fuzzResponder(f, familyARP)
	f.Fuzz(func(t *testing.T, b []byte) {
		r.handle(b) // must not panic whatever b is
		p, err := ParseARP(b)
		if err != nil {
			return
		}
		out, err := p.Marshal()
		if err != nil {
			t.Fatalf("Marshal of parsed %+v: %v", p, err)
		}
		q, err := ParseARP(out)
		if err != nil {
			t.Fatalf("ParseARP of marshaled %x: %v", out, err)
		}
		if !reflect.DeepEqual(p, q) {
			t.Fatalf("round trip changed the packet:\n%+v\n%+v", p, q)
		}
	})
}

func FuzzParseNDP(f *testing.F) {
	dad := solicitation(vip6)
	dad.Src = netip.IPv6Unspecified()
	dad.Message = &ndp.NeighborSolicitation{TargetAddress: vip6}
	withNonce := solicitation(vip6)
	withNonce.Message.(*ndp.NeighborSolicitation).Options = append(
		withNonce.Message.(*ndp.NeighborSolicitation).Options, ndp.NewNonce())
	for _, p := range []NDP{solicitation(vip6), dad, withNonce,
		neighborAdvertisement(vip6, clientMAC, ownMAC, client6, otherMAC, true),
		advertisement(vip6, otherMAC, false, true)} {
		f.Add(mustMarshal(f, p))
	}
	f.Add([]byte{})
	r := fuzzResponder(f, familyNDP)
	f.Fuzz(func(t *testing.T, b []byte) {
		// Random bytes rarely carry a right checksum; also try b with its
		// checksum fixed, to reach the message parsing and the responder.
		fuzzNDP(t, r, b)
		if fixed, ok := fixChecksum(b); ok {
			fuzzNDP(t, r, fixed)
		}
	})
}

func fuzzNDP(t *testing.T, r *Responder, b []byte) {
	r.handle(b) // must not panic whatever b is
	p, err := ParseNDP(b)
	if err != nil {
		return
	}
	out, err := p.Marshal()
	if err != nil {
		t.Fatalf("Marshal of parsed %+v: %v", p, err)
	}
	q, err := ParseNDP(out)
	if err != nil {
		t.Fatalf("ParseNDP of marshaled %x: %v", out, err)
	}
	if !reflect.DeepEqual(p, q) {
		t.Fatalf("round trip changed the packet:\n%+v\n%+v", p, q)
	}
}

// fixChecksum returns a copy of b with the ICMPv6 checksum set right, if b
// is long enough to hold one where its IPv6 payload length says.
func fixChecksum(b []byte) ([]byte, bool) {
	const off = etherHeaderLen + ipv6HeaderLen
	if len(b) < off+4 {
		return nil, false
	}
	plen := int(binary.BigEndian.Uint16(b[etherHeaderLen+4:]))
	if plen < 4 || off+plen > len(b) {
		return nil, false
	}
	c := slices.Clone(b)
	src := netip.AddrFrom16([16]byte(c[etherHeaderLen+8:]))
	dst := netip.AddrFrom16([16]byte(c[etherHeaderLen+24:]))
	c[off+2], c[off+3] = 0, 0
	binary.BigEndian.PutUint16(c[off+2:], icmpv6Checksum(src, dst, c[off:off+plen]))
	return c, true
}

// withRawOption returns frame b (an NDP message) with the raw option opt
// appended, its payload length and checksum fixed.
func withRawOption(t testing.TB, b, opt []byte) []byte {
	t.Helper()
	c := append(slices.Clone(b), opt...)
	plen := binary.BigEndian.Uint16(c[etherHeaderLen+4:])
	binary.BigEndian.PutUint16(c[etherHeaderLen+4:], plen+uint16(len(opt)))
	fixed, ok := fixChecksum(c)
	if !ok {
		t.Fatalf("cannot fix the checksum of %x", c)
	}
	return fixed
}

// An RA flags extension without flags (found by FuzzParseNDP in CI) parses
// but does not encode; it is dropped and the solicitation is still answered.
func TestParseNDPDropsUnencodableOption(t *testing.T) {
	raFlagsNoFlags := []byte{26, 1, 0, 0, 0, 0, 0, 0}
	b := withRawOption(t, mustMarshal(t, solicitation(vip6)), raFlagsNoFlags)
	p, err := ParseNDP(b)
	if err != nil {
		t.Fatalf("ParseNDP: %v", err)
	}
	ns := p.Message.(*ndp.NeighborSolicitation)
	if len(ns.Options) != 1 || linkLayerOption(ns.Options, ndp.Source) == nil {
		t.Fatalf("options = %+v, want only the source link-layer address", ns.Options)
	}
	fuzzNDP(t, fuzzResponder(t, familyNDP), b)
}
