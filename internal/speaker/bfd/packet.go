package bfd

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"
)

// Protocol constants (RFC 5880 §4.1, RFC 5881 §4 and §5).
const (
	// Version is the only protocol version this package speaks.
	Version = 1
	// HeaderLen is the length of a control packet without an authentication section.
	HeaderLen = 24
	// ControlPort is the UDP port single-hop control packets are sent to.
	ControlPort = 3784
	// SourcePortMin and SourcePortMax bound the UDP source port of control packets.
	SourcePortMin = 49152
	SourcePortMax = 65535
	// TTL is the IPv4 TTL / IPv6 hop limit of every packet sent, and the only one accepted (GTSM,
	// RFC 5881 §5): a packet with a lower TTL came from more than one hop away.
	TTL = 255
	// MaxInterval is the largest interval a packet can carry: 2^32-1 microseconds (about 71.6 min).
	MaxInterval = time.Duration(1<<32-1) * time.Microsecond
)

// State is a session state (RFC 5880 §4.1, the Sta field, and bfd.SessionState).
type State uint8

// The session states. The zero value is AdminDown, as on the wire.
const (
	StateAdminDown State = 0
	StateDown      State = 1
	StateInit      State = 2
	StateUp        State = 3
)

func (s State) String() string {
	switch s {
	case StateAdminDown:
		return "AdminDown"
	case StateDown:
		return "Down"
	case StateInit:
		return "Init"
	case StateUp:
		return "Up"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Diag is a diagnostic code: why the sender's session last left Up or is not Up (RFC 5880 §4.1).
type Diag uint8

// The diagnostic codes of RFC 5880 §4.1; 9–31 are reserved and kept as received.
const (
	DiagNone                        Diag = 0
	DiagControlDetectionTimeExpired Diag = 1
	DiagEchoFunctionFailed          Diag = 2
	DiagNeighborSignaledSessionDown Diag = 3
	DiagForwardingPlaneReset        Diag = 4
	DiagPathDown                    Diag = 5
	DiagConcatenatedPathDown        Diag = 6
	DiagAdministrativelyDown        Diag = 7
	DiagReverseConcatenatedPathDown Diag = 8
)

// maxDiag is the largest value the 5-bit Diag field holds.
const maxDiag = 31

func (d Diag) String() string {
	switch d {
	case DiagNone:
		return "None"
	case DiagControlDetectionTimeExpired:
		return "ControlDetectionTimeExpired"
	case DiagEchoFunctionFailed:
		return "EchoFunctionFailed"
	case DiagNeighborSignaledSessionDown:
		return "NeighborSignaledSessionDown"
	case DiagForwardingPlaneReset:
		return "ForwardingPlaneReset"
	case DiagPathDown:
		return "PathDown"
	case DiagConcatenatedPathDown:
		return "ConcatenatedPathDown"
	case DiagAdministrativelyDown:
		return "AdministrativelyDown"
	case DiagReverseConcatenatedPathDown:
		return "ReverseConcatenatedPathDown"
	}
	return fmt.Sprintf("Diag(%d)", uint8(d))
}

// AuthType is the type of an authentication section (RFC 5880 §4.1).
type AuthType uint8

// The authentication types of RFC 5880 §4.1. This package parses authentication sections but does
// not authenticate, so a packet carrying one is dropped (DropAuth).
const (
	AuthSimplePassword      AuthType = 1
	AuthKeyedMD5            AuthType = 2
	AuthMeticulousKeyedMD5  AuthType = 3
	AuthKeyedSHA1           AuthType = 4
	AuthMeticulousKeyedSHA1 AuthType = 5
)

// Wire layout details.
const (
	authHeaderLen  = 2                    // Auth Type and Auth Len
	maxAuthData    = 255 - minLenWithAuth // the Length field is one byte
	minLenWithAuth = HeaderLen + authHeaderLen

	flagPoll, flagFinal, flagCPI    = 0x20, 0x10, 0x08
	flagAuth, flagDemand, flagMulti = 0x04, 0x02, 0x01
	stateShift, diagMask            = 6, 0x1f
)

// Auth is an authentication section as received: its type and the bytes after the Auth Type and
// Auth Len fields (the Auth Key ID and the type-specific data).
type Auth struct {
	Type AuthType
	Data []byte
}

// Packet is a BFD control packet (RFC 5880 §4.1). Intervals are durations on microsecond
// boundaries; a zero interval means zero on the wire (for RequiredMinEchoRxInterval: the sender
// does not want echo packets, which is what this package always sends).
type Packet struct {
	Diag  Diag
	State State

	Poll                    bool // P: the sender is verifying connectivity or a parameter change
	Final                   bool // F: the answer to a Poll
	ControlPlaneIndependent bool // C
	Demand                  bool // D: the sender wants to operate in demand mode
	Multipoint              bool // M: reserved, must be zero

	DetectMult        uint8
	MyDiscriminator   uint32
	YourDiscriminator uint32

	DesiredMinTxInterval      time.Duration
	RequiredMinRxInterval     time.Duration
	RequiredMinEchoRxInterval time.Duration

	// Auth is the authentication section, nil when the A bit is clear.
	Auth *Auth
}

// Len is the number of bytes Marshal produces for p.
func (p *Packet) Len() int {
	if p.Auth == nil {
		return HeaderLen
	}
	return minLenWithAuth + len(p.Auth.Data)
}

// Marshal encodes p. It fails only for values the wire cannot carry: a State above Up, a Diag above
// 31, an interval that is negative or above MaxInterval, or more than 229 bytes of Auth.Data.
// Intervals are truncated to whole microseconds. Marshal does not check the rules Parse enforces
// on received packets (a zero DetectMult encodes fine), so tests can build invalid packets.
func (p *Packet) Marshal() ([]byte, error) {
	return p.Append(make([]byte, 0, p.Len()))
}

// Append appends the encoding of p to b, failing as Marshal does; b is returned unchanged on error.
func (p *Packet) Append(b []byte) ([]byte, error) {
	if p.State > StateUp {
		return b, fmt.Errorf("bfd: state %d out of range", p.State)
	}
	if p.Diag > maxDiag {
		return b, fmt.Errorf("bfd: diagnostic %d out of range", p.Diag)
	}
	ivs := [3]time.Duration{p.DesiredMinTxInterval, p.RequiredMinRxInterval, p.RequiredMinEchoRxInterval}
	for _, iv := range ivs {
		if iv < 0 || iv > MaxInterval {
			return b, fmt.Errorf("bfd: interval %v out of range", iv)
		}
	}
	if p.Auth != nil && len(p.Auth.Data) > maxAuthData {
		return b, fmt.Errorf("bfd: %d bytes of authentication data, want at most %d", len(p.Auth.Data), maxAuthData)
	}
	flags := byte(p.State) << stateShift
	for _, f := range []struct {
		set bool
		bit byte
	}{{p.Poll, flagPoll}, {p.Final, flagFinal}, {p.ControlPlaneIndependent, flagCPI},
		{p.Auth != nil, flagAuth}, {p.Demand, flagDemand}, {p.Multipoint, flagMulti}} {
		if f.set {
			flags |= f.bit
		}
	}
	b = append(b, Version<<5|byte(p.Diag), flags, p.DetectMult, byte(p.Len()))
	b = binary.BigEndian.AppendUint32(b, p.MyDiscriminator)
	b = binary.BigEndian.AppendUint32(b, p.YourDiscriminator)
	for _, iv := range ivs {
		b = binary.BigEndian.AppendUint32(b, uint32(iv/time.Microsecond))
	}
	if p.Auth != nil {
		b = append(b, byte(p.Auth.Type), byte(authHeaderLen+len(p.Auth.Data)))
		b = append(b, p.Auth.Data...)
	}
	return b, nil
}

// Parse decodes and validates a control packet: the UDP payload b. It applies the checks of
// RFC 5880 §6.8.6 that need no session: version 1, a Length field at least 24 (26 with the A bit)
// and at most len(b), a non-zero Detect Mult, a clear M bit, a non-zero My Discriminator, a
// non-zero Your Discriminator unless the State is Down or AdminDown, and P and F not both set. An
// authentication section is decoded (its Auth Len must fit within Length) but not checked; the
// caller drops such packets since no authentication is configured (Session.Receive does). Bytes
// after Length are ignored. Every error wraps a DropReason; Parse never panics and does not keep b.
func Parse(b []byte) (*Packet, error) {
	if len(b) < HeaderLen {
		return nil, fmt.Errorf("%d bytes, want at least %d: %w", len(b), HeaderLen, DropShort)
	}
	if v := b[0] >> 5; v != Version {
		return nil, fmt.Errorf("version %d: %w", v, DropVersion)
	}
	flags := b[1]
	p := &Packet{
		Diag:                    Diag(b[0] & diagMask),
		State:                   State(flags >> stateShift),
		Poll:                    flags&flagPoll != 0,
		Final:                   flags&flagFinal != 0,
		ControlPlaneIndependent: flags&flagCPI != 0,
		Demand:                  flags&flagDemand != 0,
		Multipoint:              flags&flagMulti != 0,
		DetectMult:              b[2],
		MyDiscriminator:         binary.BigEndian.Uint32(b[4:]),
		YourDiscriminator:       binary.BigEndian.Uint32(b[8:]),
		DesiredMinTxInterval:    time.Duration(binary.BigEndian.Uint32(b[12:])) * time.Microsecond,
		RequiredMinRxInterval:   time.Duration(binary.BigEndian.Uint32(b[16:])) * time.Microsecond,
		RequiredMinEchoRxInterval: time.Duration(binary.BigEndian.Uint32(b[20:])) *
			time.Microsecond,
	}
	length, auth := int(b[3]), flags&flagAuth != 0
	switch {
	case length < HeaderLen || auth && length < minLenWithAuth:
		return nil, fmt.Errorf("length field %d too small: %w", length, DropLength)
	case length > len(b):
		return nil, fmt.Errorf("length field %d beyond the %d bytes received: %w", length, len(b), DropLength)
	case p.DetectMult == 0:
		return nil, fmt.Errorf("detect multiplier zero: %w", DropDetectMult)
	case p.Multipoint:
		return nil, fmt.Errorf("multipoint bit set: %w", DropMultipoint)
	case p.MyDiscriminator == 0:
		return nil, fmt.Errorf("my discriminator zero: %w", DropMyDiscriminator)
	case p.YourDiscriminator == 0 && p.State != StateDown && p.State != StateAdminDown:
		return nil, fmt.Errorf("your discriminator zero in state %v: %w", p.State, DropYourDiscriminator)
	case p.Poll && p.Final:
		return nil, fmt.Errorf("poll and final both set: %w", DropPollFinal)
	}
	if auth {
		alen := int(b[HeaderLen+1])
		if alen < authHeaderLen || HeaderLen+alen > length {
			return nil, fmt.Errorf("auth length %d does not fit length field %d: %w", alen, length, DropLength)
		}
		p.Auth = &Auth{Type: AuthType(b[HeaderLen]), Data: slices.Clone(b[HeaderLen+authHeaderLen : HeaderLen+alen])}
	}
	return p, nil
}

// DropReason says why a received packet was discarded. It is an error (Parse and Session.Receive
// wrap one; match it with errors.Is or errors.As) and the key of Stats.Dropped.
type DropReason uint8

// The reasons a packet is dropped.
const (
	DropShort             DropReason = iota + 1 // fewer than 24 bytes
	DropVersion                                 // version field not 1
	DropLength                                  // Length field (or Auth Len) inconsistent with the datagram
	DropDetectMult                              // Detect Mult zero
	DropMultipoint                              // M bit set
	DropMyDiscriminator                         // My Discriminator zero
	DropYourDiscriminator                       // Your Discriminator zero outside Down/AdminDown, or not ours
	DropPollFinal                               // P and F both set
	DropAuth                                    // authentication section present; none is configured
	DropTTL                                     // TTL / hop limit not 255 (GTSM, RFC 5881 §5)
	DropNoSession                               // no session for this discriminator or source address
	DropAdminDown                               // the session is AdminDown (RFC 5880 §6.8.6)
)

var dropNames = [...]string{
	DropShort:             "short",
	DropVersion:           "version",
	DropLength:            "length",
	DropDetectMult:        "detect-mult",
	DropMultipoint:        "multipoint",
	DropMyDiscriminator:   "my-discriminator",
	DropYourDiscriminator: "your-discriminator",
	DropPollFinal:         "poll-final",
	DropAuth:              "auth",
	DropTTL:               "ttl",
	DropNoSession:         "no-session",
	DropAdminDown:         "admin-down",
}

// String returns a short name fit for a metric label, such as "ttl".
func (r DropReason) String() string {
	if int(r) < len(dropNames) && dropNames[r] != "" {
		return dropNames[r]
	}
	return fmt.Sprintf("DropReason(%d)", uint8(r))
}

func (r DropReason) Error() string { return "bfd: packet dropped: " + r.String() }
