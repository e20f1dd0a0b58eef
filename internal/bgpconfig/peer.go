package bgpconfig

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
	"github.com/ironlb/ironlb/internal/bfdprofile"
)

// MetalLB's timers when a BGPPeer sets neither (its native mode's hold time, keepalive = hold / 3).
const (
	DefaultHoldTime      = 90 * time.Second
	DefaultKeepaliveTime = DefaultHoldTime / 3
	// MinHoldTime is the shortest non-zero hold time (RFC 4271 §4.2).
	MinHoldTime = 3 * time.Second
	// DefaultPort is BGP's port.
	DefaultPort = 179
	// maxPasswordLen is the longest TCP MD5 key Linux takes (TCP_MD5SIG_MAXKEYLEN).
	maxPasswordLen = 80
)

// peer is a validated BGPPeer, before node selection.
type peer struct {
	session   Session
	routerID  netip.Addr // zero when unset
	selectors []labels.Selector
}

// parsePeer validates a BGPPeer. Every error is a *ConfigError.
func parsePeer(p *v1beta2.BGPPeer, profiles map[string]bfdprofile.Profile, passwords, unusable map[string]string) (*peer, error) {
	bad := func(field string, err error) error {
		return &ConfigError{Kind: "BGPPeer", Name: p.Name, Field: field, Err: err}
	}
	sp := &p.Spec
	s := Session{Name: p.Name, Port: sp.Port, EBGPMultiHop: sp.EBGPMultiHop, GracefulRestart: sp.EnableGracefulRestart}
	if s.Port == 0 {
		s.Port = DefaultPort
	}

	// AS numbers.
	if err := checkASN(sp.MyASN); err != nil {
		return nil, bad("spec.myASN", err)
	}
	s.LocalASN = sp.MyASN
	if sp.LocalASN != 0 {
		if err := checkASN(sp.LocalASN); err != nil {
			return nil, bad("spec.localASN", err)
		}
		s.LocalASN = sp.LocalASN
	}
	switch {
	case sp.ASN != 0 && sp.DynamicASN != "":
		return nil, bad("spec.peerASN", errf(ErrInvalidASN, "peerASN and dynamicASN are both set"))
	case sp.ASN != 0:
		if err := checkASN(sp.ASN); err != nil {
			return nil, bad("spec.peerASN", err)
		}
		s.PeerASN = sp.ASN
		s.IBGP = sp.ASN == s.LocalASN
	case sp.DynamicASN == v1beta2.InternalASNMode:
		s.DynamicASN, s.PeerASN, s.IBGP = sp.DynamicASN, s.LocalASN, true
	case sp.DynamicASN == v1beta2.ExternalASNMode:
		s.DynamicASN = sp.DynamicASN
	case sp.DynamicASN != "":
		return nil, bad("spec.dynamicASN", errf(ErrInvalidASN, "%q is neither internal nor external", sp.DynamicASN))
	default:
		return nil, bad("spec.peerASN", errf(ErrInvalidASN, "one of peerASN and dynamicASN is required"))
	}
	if s.IBGP && sp.EBGPMultiHop {
		return nil, bad("spec.ebgpMultiHop", errf(ErrConflict, "ebgpMultiHop is set on an iBGP session"))
	}

	// Addresses.
	switch {
	case sp.Interface != "" && sp.Address != "":
		return nil, bad("spec.interface", errf(ErrConflict, "peerAddress and interface are both set"))
	case sp.Interface != "":
		return nil, bad("spec.interface", errf(ErrUnsupported, "BGP unnumbered (interface %q)", sp.Interface))
	case sp.Address == "":
		return nil, bad("spec.peerAddress", errf(ErrInvalidAddress, "one of peerAddress and interface is required"))
	}
	addr, err := netip.ParseAddr(sp.Address)
	if err != nil || addr.IsUnspecified() || addr.IsMulticast() {
		return nil, bad("spec.peerAddress", errf(ErrInvalidAddress, "%q is not a unicast IP address", sp.Address))
	}
	if addr.Is6() && addr.IsLinkLocalUnicast() && addr.Zone() == "" {
		// A link-local address means nothing without the interface it is on; the BGPPeer can name
		// none besides peerAddress (interface is BGP unnumbered), so the session could never open.
		return nil, bad("spec.peerAddress", errf(ErrInvalidAddress, "%v is link-local: it needs an interface, which a BGPPeer cannot give with peerAddress", addr))
	}
	s.Addr = addr.Unmap()
	if sp.SrcAddress != "" {
		src, err := netip.ParseAddr(sp.SrcAddress)
		if err != nil || src.IsUnspecified() || src.IsMulticast() {
			return nil, bad("spec.sourceAddress", errf(ErrInvalidAddress, "%q is not a unicast IP address", sp.SrcAddress))
		}
		src = src.Unmap()
		if src.Is4() != s.Addr.Is4() {
			return nil, bad("spec.sourceAddress", errf(ErrInvalidAddress, "%v is not of the family of peer address %v", src, s.Addr))
		}
		s.SourceAddr = src
	}
	var routerID netip.Addr
	if sp.RouterID != "" {
		routerID, err = netip.ParseAddr(sp.RouterID)
		if err != nil || !routerID.Unmap().Is4() || routerID.IsUnspecified() {
			return nil, bad("spec.routerID", errf(ErrInvalidAddress, "%q is not an IPv4 address", sp.RouterID))
		}
		routerID = routerID.Unmap()
	}
	if sp.VRFName != "" {
		return nil, bad("spec.vrf", errf(ErrUnsupported, "VRF %q", sp.VRFName))
	}

	// Timers.
	s.HoldTime, s.KeepaliveTime, err = parseTimers(sp.HoldTime, sp.KeepaliveTime)
	if err != nil {
		return nil, bad("spec.holdTime", err)
	}
	if sp.ConnectTime != nil {
		ct := sp.ConnectTime.Duration
		if ct < time.Second || ct > 65535*time.Second || ct%time.Second != 0 {
			return nil, bad("spec.connectTime", errf(ErrInvalidTimers, "connect time %v is not a whole number of seconds from 1 to 65535", ct))
		}
		s.ConnectTime = ct
	}

	// Password.
	switch {
	case sp.Password != "" && sp.PasswordSecret.Name != "":
		return nil, bad("spec.password", errf(ErrInvalidPassword, "password and passwordSecret are both set"))
	case sp.Password != "":
		s.Password = sp.Password
	case sp.PasswordSecret.Name != "":
		pw, ok := passwords[sp.PasswordSecret.Name]
		if why, unusable := unusable[sp.PasswordSecret.Name]; !ok && unusable {
			return nil, bad("spec.passwordSecret", errf(ErrUnusableSecret, "%s", why))
		}
		if !ok {
			return nil, bad("spec.passwordSecret", errf(ErrSecretNotFound, "secret %q", sp.PasswordSecret.Name))
		}
		s.Password = pw
	}
	if strings.ContainsAny(s.Password, "\r\n") {
		return nil, bad("spec.password", errf(ErrInvalidPassword, "line break in password"))
	}
	if len(s.Password) > maxPasswordLen {
		return nil, bad("spec.password", errf(ErrInvalidPassword, "%d bytes, more than TCP MD5's %d", len(s.Password), maxPasswordLen))
	}

	// BFD.
	if sp.BFDProfile != "" {
		prof, ok := profiles[sp.BFDProfile]
		if !ok {
			return nil, bad("spec.bfdProfile", errf(ErrUnknownBFDProfile, "%q (missing or invalid)", sp.BFDProfile))
		}
		if sp.EBGPMultiHop {
			return nil, bad("spec.bfdProfile", errf(ErrUnsupported, "BFD on a multi-hop session"))
		}
		s.BFDProfile, s.BFD = sp.BFDProfile, prof
	}

	sels, err := selectors(sp.NodeSelectors)
	if err != nil {
		return nil, bad("spec.nodeSelectors", err)
	}
	return &peer{session: s, routerID: routerID, selectors: sels}, nil
}

// parseTimers applies MetalLB's defaulting and validation (its parseTimers) to a BGPPeer's timers,
// and also requires keepalive < hold.
func parseTimers(hold, keepalive *metav1.Duration) (time.Duration, time.Duration, error) {
	var h, k time.Duration
	switch {
	case hold == nil && keepalive == nil:
		return DefaultHoldTime, DefaultKeepaliveTime, nil
	case hold != nil && keepalive != nil:
		h, k = hold.Duration, keepalive.Duration
	case hold != nil:
		h = hold.Duration
		k = h / 3
	default:
		k = keepalive.Duration
		h = 3 * k
	}
	if h < 0 || k < 0 {
		return 0, 0, errf(ErrInvalidTimers, "negative timer (hold %v, keepalive %v)", h, k)
	}
	// BGP carries the hold time in whole seconds; MetalLB checks the rounded-down value.
	if rounded := h.Truncate(time.Second); rounded != 0 && rounded < MinHoldTime {
		return 0, 0, errf(ErrInvalidTimers, "hold time %v must be 0 or at least %v", h, MinHoldTime)
	}
	if h == 0 && k != 0 {
		return 0, 0, errf(ErrInvalidTimers, "keepalive %v with hold time 0 (no keepalives)", k)
	}
	if h != 0 && k >= h {
		return 0, 0, errf(ErrInvalidTimers, "keepalive %v must be less than hold time %v", k, h)
	}
	return h, k, nil
}

// parseBFDProfile converts a BFDProfile with MetalLB's ranges (its bfdProfileFromCR). Unset fields
// take bfdprofile's defaults, which are FRR's.
func parseBFDProfile(p *v1beta1.BFDProfile) (bfdprofile.Profile, error) {
	bad := func(field string, err error) error {
		return &ConfigError{Kind: "BFDProfile", Name: p.Name, Field: field, Err: err}
	}
	check := func(field string, v *uint32, lo, hi uint32) error {
		if v != nil && (*v < lo || *v > hi) {
			return bad(field, errf(ErrInvalidBFDProfile, "%d is not within %d–%d", *v, lo, hi))
		}
		return nil
	}
	sp := &p.Spec
	for _, c := range []struct {
		field  string
		v      *uint32
		lo, hi uint32
	}{
		{"spec.receiveInterval", sp.ReceiveInterval, 10, 60000},
		{"spec.transmitInterval", sp.TransmitInterval, 10, 60000},
		{"spec.detectMultiplier", sp.DetectMultiplier, 2, 255},
		{"spec.echoInterval", sp.EchoInterval, 10, 60000},
		{"spec.minimumTtl", sp.MinimumTTL, 1, 254},
	} {
		if err := check(c.field, c.v, c.lo, c.hi); err != nil {
			return bfdprofile.Profile{}, err
		}
	}
	var prof bfdprofile.Profile
	if sp.ReceiveInterval != nil {
		prof.ReceiveInterval = time.Duration(*sp.ReceiveInterval) * time.Millisecond
	}
	if sp.TransmitInterval != nil {
		prof.TransmitInterval = time.Duration(*sp.TransmitInterval) * time.Millisecond
	}
	if sp.DetectMultiplier != nil {
		prof.DetectMultiplier = uint8(*sp.DetectMultiplier)
	}
	if sp.PassiveMode != nil {
		prof.Passive = *sp.PassiveMode
	}
	if sp.EchoMode != nil {
		prof.EchoMode = *sp.EchoMode
	}
	prof = prof.WithDefaults()
	if err := prof.Validate(); err != nil {
		return bfdprofile.Profile{}, bad("spec", fmt.Errorf("%w: %w", ErrInvalidBFDProfile, err))
	}
	return prof, nil
}

// selectors converts label selectors; an empty list stays empty (matches everything).
func selectors(in []metav1.LabelSelector) ([]labels.Selector, error) {
	var out []labels.Selector
	for i := range in {
		sel, err := metav1.LabelSelectorAsSelector(&in[i])
		if err != nil {
			return nil, errf(ErrInvalidSelector, "[%d]: %v", i, err)
		}
		out = append(out, sel)
	}
	return out, nil
}

// matchesAny reports whether sels is empty or one of them matches lbls.
func matchesAny(sels []labels.Selector, lbls map[string]string) bool {
	if len(sels) == 0 {
		return true
	}
	for _, s := range sels {
		if s.Matches(labels.Set(lbls)) {
			return true
		}
	}
	return false
}
