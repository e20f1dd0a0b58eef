package bfd

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// FuzzParse checks that Parse never panics, that every error carries a DropReason, and that what
// it accepts survives Marshal and Parse again unchanged.
func FuzzParse(f *testing.F) {
	for _, p := range []*Packet{
		upPacket(),
		{State: StateDown, DetectMult: 3, MyDiscriminator: 1, DesiredMinTxInterval: time.Second, RequiredMinRxInterval: 300 * time.Millisecond},
		{State: StateAdminDown, Diag: DiagAdministrativelyDown, DetectMult: 1, MyDiscriminator: 9},
		{State: StateUp, Final: true, DetectMult: 255, MyDiscriminator: 1, YourDiscriminator: 2,
			Auth: &Auth{Type: AuthMeticulousKeyedSHA1, Data: make([]byte, 26)}},
	} {
		b, err := p.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add(make([]byte, 24))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse(b)
		if err != nil {
			var r DropReason
			if !errors.As(err, &r) || r == 0 {
				t.Fatalf("error %v carries no DropReason", err)
			}
			if p != nil {
				t.Fatalf("Parse returned a packet with error %v", err)
			}
			return
		}
		enc, err := p.Marshal()
		if err != nil {
			t.Fatalf("Marshal of a parsed packet: %v", err)
		}
		again, err := Parse(enc)
		if err != nil {
			t.Fatalf("Parse(Marshal(p)): %v", err)
		}
		if diff := cmp.Diff(p, again); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
		// A session must digest anything Parse accepts.
		s, err := NewSession(1, Profile{}, fixedSource(0), t0)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = s.Receive(p, t0)
		s.Tick(t0.Add(time.Hour))
	})
}
