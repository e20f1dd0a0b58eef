package config

import (
	"fmt"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
	"github.com/ironlb/ironlb/internal/bgpconfig"
)

// MetalLB fields ironlb does not implement. The admission webhook refuses an object that sets one
// (ValidatePeer, ValidateBFDProfile), so that a field is never accepted and silently left without
// effect; the speakers warn about one in an object stored without the webhook. docs/install.md
// lists them with why. Each error is a *bgpconfig.ConfigError wrapping
// bgpconfig.ErrUnsupported and naming the field.

// UnsupportedPeerFields returns, as an error, the first field of a BGPPeer that ironlb does not implement.
//   - dualStackAddressFamily: true would carry the other family's routes over the session
//     (multiprotocol BGP across families, FRR's "dual-stack" neighbour); ironlb's sessions carry
//     their own address family only, so an IPv4 peer would never learn the IPv6 addresses.
func UnsupportedPeerFields(p *v1beta2.BGPPeer) error {
	if p.Spec.DualStackAddressFamily {
		return &bgpconfig.ConfigError{Kind: "BGPPeer", Name: p.Name, Field: "spec.dualStackAddressFamily", Err: fmt.Errorf(
			"%w: ironlb's BGP sessions carry the routes of their own address family only; remove the field (or set it to false) and add a BGPPeer with the peer's address of the other family", bgpconfig.ErrUnsupported)}
	}
	return nil
}

// UnsupportedBFDFields returns, as an error, the first field of a BFDProfile that ironlb does not implement.
//   - echoMode: true asks for the echo function (RFC 5880 §6.4), which ironlb's BFD does not have:
//     it advertises a Required Min Echo RX Interval of zero, so neither side sends echo packets.
//   - echoInterval sets the echo interval FRR advertises and sends at; without the echo function
//     ironlb has nothing to apply it to.
//   - minimumTtl applies to multi-hop BFD sessions only, which ironlb does not run (BFD on a
//     multi-hop BGPPeer is refused); its single-hop sessions accept only TTL 255 (RFC 5881 §5).
func UnsupportedBFDFields(p *v1beta1.BFDProfile) error {
	bad := func(field, why string) error {
		return &bgpconfig.ConfigError{Kind: "BFDProfile", Name: p.Name, Field: field, Err: fmt.Errorf("%w: %s", bgpconfig.ErrUnsupported, why)}
	}
	sp := &p.Spec
	switch {
	case sp.EchoMode != nil && *sp.EchoMode:
		return bad("spec.echoMode", "ironlb's BFD has no echo function; remove the field or set it to false")
	case sp.EchoInterval != nil:
		return bad("spec.echoInterval", "ironlb's BFD has no echo function, so there is no echo interval to set; remove the field")
	case sp.MinimumTTL != nil:
		return bad("spec.minimumTtl", "it applies to multi-hop BFD sessions, which ironlb does not run (its single-hop sessions accept TTL 255 only); remove the field")
	}
	return nil
}
