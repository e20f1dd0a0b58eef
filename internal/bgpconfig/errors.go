package bgpconfig

import (
	"errors"
	"fmt"
)

// The errors a ConfigError wraps.
var (
	// ErrInvalidASN: an AS number is missing, 0 or 23456 (AS_TRANS), or peerASN and dynamicASN are
	// both set or both unset.
	ErrInvalidASN = errors.New("invalid AS number")
	// ErrInvalidAddress: an address (peerAddress, sourceAddress, routerID) is missing or malformed,
	// or of the wrong family.
	ErrInvalidAddress = errors.New("invalid address")
	// ErrInvalidTimers: holdTime, keepaliveTime or connectTime is out of range.
	ErrInvalidTimers = errors.New("invalid timers")
	// ErrInvalidPassword: the TCP MD5 password has a line break or is longer than 80 bytes, or both
	// password and passwordSecret are set.
	ErrInvalidPassword = errors.New("invalid password")
	// ErrSecretNotFound: passwordSecret names a Secret that Input.Passwords does not hold.
	ErrSecretNotFound = errors.New("password secret not found")
	// ErrUnusableSecret: passwordSecret names a Secret that exists but holds no password MetalLB
	// would read (a type other than kubernetes.io/basic-auth, or no "password" key).
	ErrUnusableSecret = errors.New("unusable password secret")
	// ErrUnknownBFDProfile: bfdProfile names no valid BFDProfile.
	ErrUnknownBFDProfile = errors.New("unknown bfd profile")
	// ErrInvalidBFDProfile: a BFDProfile field is out of range.
	ErrInvalidBFDProfile = errors.New("invalid bfd profile")
	// ErrInvalidCommunity: a community has the form of one but a value out of range
	// ("70000:1", "large:1:2:99999999999").
	ErrInvalidCommunity = errors.New("invalid community")
	// ErrUnknownCommunity: a BGPAdvertisement community is neither a community nor a Community alias.
	ErrUnknownCommunity = errors.New("unknown community alias")
	// ErrInvalidAggregation: an aggregation length is out of range, shorter than a prefix of a pool
	// it applies to, or combined with serviceSelectors.
	ErrInvalidAggregation = errors.New("invalid aggregation length")
	// ErrInvalidSelector: a label selector is malformed.
	ErrInvalidSelector = errors.New("invalid label selector")
	// ErrConflict: the object contradicts itself (two fields that exclude each other) or an earlier
	// object (same peer address, another router ID, a duplicate name or alias).
	ErrConflict = errors.New("conflict")
	// ErrUnsupported: the object asks for something the speaker does not do (BGP unnumbered, VRFs,
	// BFD on a multi-hop session).
	ErrUnsupported = errors.New("not supported")
)

// ConfigError is an invalid object, left out of the State.
type ConfigError struct {
	// Kind is the object's kind: "BGPPeer", "BGPAdvertisement", "BFDProfile" or "Community".
	Kind string
	// Name is the object's name.
	Name string
	// Field is the offending field, as a JSON path ("spec.holdTime"); empty for the whole object.
	Field string
	// Err wraps one of the Err sentinels and says what is wrong.
	Err error
}

func (e *ConfigError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s %s: %v", e.Kind, e.Name, e.Err)
	}
	return fmt.Sprintf("%s %s: %s: %v", e.Kind, e.Name, e.Field, e.Err)
}

func (e *ConfigError) Unwrap() error { return e.Err }

// errf wraps sentinel with a message: errf(ErrInvalidTimers, "hold time %v", h).
func errf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}
