package bfd

import (
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// upPacket is a typical packet of an Up session at 50 ms × 3.
func upPacket() *Packet {
	return &Packet{
		State:                 StateUp,
		DetectMult:            3,
		MyDiscriminator:       0x01020304,
		YourDiscriminator:     0xa0b0c0d0,
		DesiredMinTxInterval:  50 * time.Millisecond,
		RequiredMinRxInterval: 50 * time.Millisecond,
	}
}

func mustMarshal(t testing.TB, p *Packet) []byte {
	t.Helper()
	b, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMarshalBytes(t *testing.T) {
	p := upPacket()
	p.Diag = DiagControlDetectionTimeExpired
	p.Poll = true
	p.RequiredMinEchoRxInterval = 1 * time.Millisecond
	got := hex.EncodeToString(mustMarshal(t, p))
	want := "" +
		"21" + // version 1, diag 1
		"e0" + // state Up (3<<6), P
		"03" + "18" + // detect mult 3, length 24
		"01020304" + "a0b0c0d0" +
		"0000c350" + "0000c350" + // 50000 µs twice
		"000003e8" // 1000 µs
	if got != want {
		t.Errorf("Marshal = %s, want %s", got, want)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(p *Packet)
	}{
		{"up", func(p *Packet) {}},
		{"down without your discriminator", func(p *Packet) {
			p.State, p.YourDiscriminator, p.DesiredMinTxInterval = StateDown, 0, time.Second
		}},
		{"admin down", func(p *Packet) { p.State, p.Diag, p.YourDiscriminator = StateAdminDown, DiagAdministrativelyDown, 0 }},
		{"init", func(p *Packet) { p.State = StateInit }},
		{"final", func(p *Packet) { p.Final = true }},
		{"all other flags", func(p *Packet) { p.ControlPlaneIndependent, p.Demand = true, true }},
		{"reserved diag", func(p *Packet) { p.Diag = 31 }},
		{"largest intervals", func(p *Packet) {
			p.DesiredMinTxInterval, p.RequiredMinRxInterval, p.RequiredMinEchoRxInterval = MaxInterval, MaxInterval, MaxInterval
		}},
		{"keyed sha1", func(p *Packet) { p.Auth = &Auth{Type: AuthKeyedSHA1, Data: make([]byte, 26)} }},
		{"simple password", func(p *Packet) { p.Auth = &Auth{Type: AuthSimplePassword, Data: []byte("\x01secret")} }},
		{"empty auth", func(p *Packet) { p.Auth = &Auth{Type: 9, Data: []byte{}} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := upPacket()
			tc.mod(p)
			b := mustMarshal(t, p)
			if len(b) != p.Len() || int(b[3]) != len(b) {
				t.Fatalf("encoded %d bytes with length field %d, Len() = %d", len(b), b[3], p.Len())
			}
			got, err := Parse(b)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(p, got); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
			// Bytes after the Length field (padding) are ignored.
			got, err = Parse(append(b, 0xff, 0xff))
			if err != nil {
				t.Fatalf("Parse with padding: %v", err)
			}
			if diff := cmp.Diff(p, got); diff != "" {
				t.Errorf("with padding (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseDrops(t *testing.T) {
	valid := mustMarshal(t, upPacket())
	withAuth := func() []byte {
		p := upPacket()
		p.Auth = &Auth{Type: AuthKeyedMD5, Data: make([]byte, 22)}
		return mustMarshal(t, p)
	}
	for _, tc := range []struct {
		name string
		b    func() []byte
		want DropReason
	}{
		{"empty", func() []byte { return nil }, DropShort},
		{"23 bytes", func() []byte { return valid[:23] }, DropShort},
		{"version 0", func() []byte { b := clone(valid); b[0] &^= 0xe0; return b }, DropVersion},
		{"version 2", func() []byte { b := clone(valid); b[0] = 2<<5 | b[0]&0x1f; return b }, DropVersion},
		{"length 23", func() []byte { b := clone(valid); b[3] = 23; return b }, DropLength},
		{"length beyond datagram", func() []byte { b := clone(valid); b[3] = 25; return b }, DropLength},
		{"auth bit, length 24", func() []byte { b := clone(valid); b[1] |= flagAuth; return b }, DropLength},
		{"auth bit, length 25", func() []byte {
			b := append(clone(valid), 0)
			b[1] |= flagAuth
			b[3] = 25
			return b
		}, DropLength},
		{"auth length beyond length", func() []byte { b := withAuth(); b[25] = 25; return b }, DropLength},
		{"auth length 1", func() []byte { b := withAuth(); b[25] = 1; return b }, DropLength},
		{"detect mult 0", func() []byte { b := clone(valid); b[2] = 0; return b }, DropDetectMult},
		{"multipoint", func() []byte { b := clone(valid); b[1] |= flagMulti; return b }, DropMultipoint},
		{"my discriminator 0", func() []byte { b := clone(valid); copy(b[4:8], []byte{0, 0, 0, 0}); return b }, DropMyDiscriminator},
		{"your discriminator 0 when up", func() []byte { b := clone(valid); copy(b[8:12], []byte{0, 0, 0, 0}); return b }, DropYourDiscriminator},
		{"your discriminator 0 when init", func() []byte {
			b := clone(valid)
			copy(b[8:12], []byte{0, 0, 0, 0})
			b[1] = byte(StateInit) << 6
			return b
		}, DropYourDiscriminator},
		{"poll and final", func() []byte { b := clone(valid); b[1] |= flagPoll | flagFinal; return b }, DropPollFinal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse(tc.b())
			if !errors.Is(err, tc.want) {
				t.Fatalf("Parse = %+v, %v; want %v", p, err, tc.want)
			}
			var r DropReason
			if !errors.As(err, &r) || r != tc.want {
				t.Errorf("errors.As gave %v, want %v", r, tc.want)
			}
		})
	}
}

func TestParseAuthSection(t *testing.T) {
	// Keyed MD5 as RFC 5880 §4.3 lays it out: type 2, len 24, key ID, reserved, sequence, digest.
	p := upPacket()
	data := append([]byte{7, 0, 0, 0, 0, 42}, make([]byte, 16)...)
	p.Auth = &Auth{Type: AuthKeyedMD5, Data: data}
	b := mustMarshal(t, p)
	if len(b) != 48 || b[24] != 2 || b[25] != 24 || b[26] != 7 {
		t.Fatalf("encoded auth section = % x", b[24:])
	}
	got, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Auth == nil || got.Auth.Type != AuthKeyedMD5 || len(got.Auth.Data) != 22 || got.Auth.Data[0] != 7 {
		t.Errorf("parsed auth = %+v", got.Auth)
	}
	// The session refuses it: no authentication is configured (RFC 5880 §6.8.6).
	s := newTestSession(t, Profile{}, 0)
	if _, err := s.Receive(got, t0); !errors.Is(err, DropAuth) {
		t.Errorf("Receive = %v, want %v", err, DropAuth)
	}
	if s.Status().RemoteDiscriminator != 0 {
		t.Error("an authenticated packet changed the session")
	}
}

func TestMarshalErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(p *Packet)
	}{
		{"state", func(p *Packet) { p.State = 4 }},
		{"diag", func(p *Packet) { p.Diag = 32 }},
		{"negative interval", func(p *Packet) { p.DesiredMinTxInterval = -time.Microsecond }},
		{"interval too long", func(p *Packet) { p.RequiredMinRxInterval = MaxInterval + time.Microsecond }},
		{"auth too long", func(p *Packet) { p.Auth = &Auth{Data: make([]byte, 230)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := upPacket()
			tc.mod(p)
			prefix := []byte{1, 2}
			b, err := p.Append(prefix)
			if err == nil {
				t.Fatalf("Append succeeded: % x", b)
			}
			if len(b) != 2 {
				t.Errorf("Append returned %d bytes on error, want the 2 given", len(b))
			}
		})
	}
	// The largest auth section fits the one-byte Length field.
	p := upPacket()
	p.Auth = &Auth{Data: make([]byte, 229)}
	if b := mustMarshal(t, p); b[3] != 255 {
		t.Errorf("length field %d, want 255", b[3])
	}
}

func TestStrings(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{StateUp.String(), "Up"},
		{State(7).String(), "State(7)"},
		{DiagControlDetectionTimeExpired.String(), "ControlDetectionTimeExpired"},
		{Diag(20).String(), "Diag(20)"},
		{DropTTL.String(), "ttl"},
		{DropReason(99).String(), "DropReason(99)"},
		{DropAuth.Error(), "bfd: packet dropped: auth"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }
