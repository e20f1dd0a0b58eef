// Package bfdprofile is the configuration of a BFD session, after MetalLB's BFDProfile: the
// intervals and detect multiplier a session runs with, their defaults and their bounds. It is the
// pure model that the BGP configuration (package bgpconfig) builds and the BFD implementation
// (package speaker/bfd) runs, so that the model names a session's profile without importing the
// sockets that run it. Standard library only, no I/O.
package bfdprofile

import (
	"fmt"
	"time"
)

// Defaults for zero Profile fields: MetalLB's and FRR's (300 ms × 3).
const (
	DefaultInterval         = 300 * time.Millisecond
	DefaultDetectMultiplier = 3
	// MinInterval and MaxProfileInterval bound a Profile's intervals, as MetalLB's BFDProfile and
	// FRR do (10–60000 ms).
	MinInterval        = 10 * time.Millisecond
	MaxProfileInterval = 60 * time.Second
)

// Profile is a session's configuration, after MetalLB's BFDProfile. The zero value is valid and
// means 300 ms × 3, active.
type Profile struct {
	// ReceiveInterval is the least interval between received packets this system can handle
	// (bfd.RequiredMinRxInterval). Zero means DefaultInterval.
	ReceiveInterval time.Duration
	// TransmitInterval is the interval at which this system wants to send (bfd.DesiredMinTxInterval)
	// once Up; the peer's ReceiveInterval may make it longer. Zero means DefaultInterval.
	TransmitInterval time.Duration
	// DetectMultiplier is how many of this system's packets the peer may miss before it declares
	// the session down (bfd.DetectMult). Zero means DefaultDetectMultiplier.
	DetectMultiplier uint8
	// Passive sessions send nothing until a packet from the peer arrives (RFC 5880 §6.1).
	Passive bool
	// EchoMode is accepted and ignored: the echo function is not implemented, and every packet
	// sent advertises a Required Min Echo RX Interval of zero, which tells the peer not to send
	// echo packets either (RFC 5880 §6.8.9).
	EchoMode bool
}

// WithDefaults returns p with zero fields replaced by the defaults.
func (p Profile) WithDefaults() Profile {
	if p.ReceiveInterval == 0 {
		p.ReceiveInterval = DefaultInterval
	}
	if p.TransmitInterval == 0 {
		p.TransmitInterval = DefaultInterval
	}
	if p.DetectMultiplier == 0 {
		p.DetectMultiplier = DefaultDetectMultiplier
	}
	return p
}

// Validate reports whether p, after defaults, has intervals within MinInterval–MaxProfileInterval
// on whole microseconds.
func (p Profile) Validate() error {
	p = p.WithDefaults()
	for _, iv := range []struct {
		name string
		d    time.Duration
	}{{"receive interval", p.ReceiveInterval}, {"transmit interval", p.TransmitInterval}} {
		if iv.d < MinInterval || iv.d > MaxProfileInterval {
			return fmt.Errorf("bfd: %s %v outside %v–%v", iv.name, iv.d, MinInterval, MaxProfileInterval)
		}
		if iv.d%time.Microsecond != 0 {
			return fmt.Errorf("bfd: %s %v is not a whole number of microseconds", iv.name, iv.d)
		}
	}
	return nil
}
