package config

import (
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
	"github.com/ironlb/ironlb/internal/bgpconfig"
)

// TestUnsupportedFields: every MetalLB field ironlb does not implement is refused at admission with
// ErrUnsupported and the field's name; the same objects without it are accepted.
func TestUnsupportedFields(t *testing.T) {
	u32 := func(v uint32) *uint32 { return &v }
	yes, no := true, false
	peer := func(mut func(*v1beta2.BGPPeerSpec)) *v1beta2.BGPPeer {
		p := &v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Spec: v1beta2.BGPPeerSpec{MyASN: 64513, ASN: 64512, Address: "172.18.255.254"}}
		mut(&p.Spec)
		return p
	}
	bfd := func(mut func(*v1beta1.BFDProfileSpec)) *v1beta1.BFDProfile {
		p := &v1beta1.BFDProfile{ObjectMeta: metav1.ObjectMeta{Name: "b"}}
		mut(&p.Spec)
		return p
	}
	for _, tt := range []struct {
		name  string
		check func() error
		field string // "" = accepted
	}{
		{"peer: dualStackAddressFamily", func() error {
			return ValidatePeer(peer(func(s *v1beta2.BGPPeerSpec) { s.DualStackAddressFamily = true }))
		}, "spec.dualStackAddressFamily"},
		{"peer: dualStackAddressFamily false (the default)", func() error { return ValidatePeer(peer(func(*v1beta2.BGPPeerSpec) {})) }, ""},
		{"peer: disableMP (deprecated; ironlb's sessions are single-family anyway)", func() error { return ValidatePeer(peer(func(s *v1beta2.BGPPeerSpec) { s.DisableMP = true })) }, ""},
		{"bfd: echoMode true", func() error { return ValidateBFDProfile(bfd(func(s *v1beta1.BFDProfileSpec) { s.EchoMode = &yes })) }, "spec.echoMode"},
		{"bfd: echoMode false (what ironlb does)", func() error { return ValidateBFDProfile(bfd(func(s *v1beta1.BFDProfileSpec) { s.EchoMode = &no })) }, ""},
		{"bfd: echoInterval", func() error {
			return ValidateBFDProfile(bfd(func(s *v1beta1.BFDProfileSpec) { s.EchoInterval = u32(50) }))
		}, "spec.echoInterval"},
		{"bfd: minimumTtl", func() error {
			return ValidateBFDProfile(bfd(func(s *v1beta1.BFDProfileSpec) { s.MinimumTTL = u32(254) }))
		}, "spec.minimumTtl"},
		{"bfd: the implemented fields", func() error {
			return ValidateBFDProfile(bfd(func(s *v1beta1.BFDProfileSpec) {
				s.ReceiveInterval, s.TransmitInterval, s.DetectMultiplier, s.PassiveMode = u32(50), u32(50), u32(3), &yes
			}))
		}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.check()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ce *bgpconfig.ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, bgpconfig.ErrUnsupported) || ce.Field != tt.field {
				t.Fatalf("got %v, want a ConfigError on %s wrapping ErrUnsupported", err, tt.field)
			}
		})
	}
}
