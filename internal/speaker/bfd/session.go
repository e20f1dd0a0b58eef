package bfd

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ironlb/ironlb/internal/bfdprofile"
)

// Profile is a session's configuration: intervals, detect multiplier, passive mode. It is defined in
// package bfdprofile, a pure model that the BGP configuration builds without importing this package's
// sockets; see bfdprofile.Profile for its fields, defaults and bounds.
type Profile = bfdprofile.Profile

// SlowInterval is the least Desired Min TX Interval advertised while a session is not Up
// (RFC 5880 §6.8.3).
const SlowInterval = time.Second

// Event is a change of a session's state.
type Event struct {
	Old, New State
	// Diag is the local diagnostic after the change: why the session is not Up (DiagNone once Up).
	Diag Diag
	// RemoteState and RemoteDiag are the peer's state and diagnostic as last received before the
	// change. New == StateDown with RemoteState == StateAdminDown means the peer took the session
	// down on purpose; RFC 5882 §3.2 says clients must not treat that as a path failure.
	RemoteState State
	RemoteDiag  Diag
	At          time.Time
}

// SessionStatus is a snapshot of a session's protocol state.
type SessionStatus struct {
	State       State
	Diag        Diag
	RemoteState State
	RemoteDiag  Diag

	LocalDiscriminator  uint32
	RemoteDiscriminator uint32 // zero until a packet arrives, and again after the detection time expires

	// TransmitInterval is the interval between this system's packets before jitter: the larger of
	// the Desired Min TX Interval in use and the peer's Required Min RX Interval. Zero when the
	// session sends nothing (passive and not yet contacted, or the peer asked for no packets).
	TransmitInterval time.Duration
	// DetectionTime is how long the peer may stay silent before the session goes down: the peer's
	// Detect Mult × the larger of our Required Min RX Interval in use and the peer's Desired Min TX
	// Interval. Zero before the first packet.
	DetectionTime time.Duration
	// Polling is true while a Poll Sequence is in progress (RFC 5880 §6.5).
	Polling bool

	RemoteReceiveInterval  time.Duration
	RemoteTransmitInterval time.Duration
	RemoteDetectMultiplier uint8
}

// Session is the protocol state machine of one BFD session in asynchronous mode (RFC 5880 §6.8),
// without echo, demand mode of its own, or authentication. It does no I/O and reads no clock: the
// caller feeds it received packets (Receive) and the time (Tick), sends what Tick returns, and
// calls Tick again at NextDeadline. Not safe for concurrent use.
type Session struct {
	profile Profile // with defaults
	rnd     rand.Source

	state      State
	diag       Diag
	localDiscr uint32

	// What the peer last told us (bfd.Remote*).
	remoteDiscr      uint32
	remoteState      State
	remoteDiag       Diag
	remoteDemand     bool
	remoteMinRx      time.Duration
	remoteDesiredTx  time.Duration
	remoteDetectMult uint8

	// Timers: adv* are advertised in our packets (bfd.DesiredMinTxInterval and
	// bfd.RequiredMinRxInterval); use* are what we act on. They differ only during a Poll Sequence
	// that makes our transmission slower (useTx lags) or our reception faster (useRx lags),
	// RFC 5880 §6.8.3.
	advTx, advRx time.Duration
	useTx, useRx time.Duration
	polling      bool

	final    bool      // the next packet answers a Poll
	lastTx   time.Time // zero before the first packet
	nextTx   time.Time // when the next packet is due, if sending is allowed
	detectAt time.Time // when the detection time expires; zero when not running
}

// ErrDiscriminator is returned by NewSession for a zero local discriminator.
var ErrDiscriminator = errors.New("bfd: local discriminator must be non-zero")

// NewSession returns a session in state Down with the given local discriminator (non-zero and
// unique on this system) and profile. src supplies the transmission jitter (nil: math/rand/v2's
// global source). An active session is due to send its first packet at now; a passive one waits
// for the peer. It fails for a zero discriminator or an invalid profile.
func NewSession(localDiscr uint32, p Profile, src rand.Source, now time.Time) (*Session, error) {
	if localDiscr == 0 {
		return nil, ErrDiscriminator
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if src == nil {
		src = globalSource{}
	}
	s := &Session{
		profile:     p.WithDefaults(),
		rnd:         src,
		state:       StateDown,
		localDiscr:  localDiscr,
		remoteState: StateDown,
		remoteMinRx: time.Microsecond, // RFC 5880 §6.8.1: initialised to 1
		nextTx:      now,
	}
	s.advTx, s.advRx = s.wantTimers()
	s.useTx, s.useRx = s.advTx, s.advRx
	return s, nil
}

type globalSource struct{}

func (globalSource) Uint64() uint64 { return rand.Uint64() }

// State returns the session state.
func (s *Session) State() State { return s.state }

// LocalDiscriminator returns the discriminator the session was built with.
func (s *Session) LocalDiscriminator() uint32 { return s.localDiscr }

// Profile returns the profile in use, with defaults filled in.
func (s *Session) Profile() Profile { return s.profile }

// Status returns a snapshot of the session.
func (s *Session) Status() SessionStatus {
	st := SessionStatus{
		State:                  s.state,
		Diag:                   s.diag,
		RemoteState:            s.remoteState,
		RemoteDiag:             s.remoteDiag,
		LocalDiscriminator:     s.localDiscr,
		RemoteDiscriminator:    s.remoteDiscr,
		Polling:                s.polling,
		RemoteReceiveInterval:  s.remoteMinRx,
		RemoteTransmitInterval: s.remoteDesiredTx,
		RemoteDetectMultiplier: s.remoteDetectMult,
	}
	if s.canSend() {
		st.TransmitInterval = s.txInterval()
	}
	if !s.detectAt.IsZero() {
		st.DetectionTime = s.detectionTime()
	}
	return st
}

// NextDeadline returns when Tick must next be called: the earlier of the next transmission and the
// expiry of the detection time. It is the zero time when neither is pending (a passive session the
// peer has not contacted), and may be in the past (send at once).
func (s *Session) NextDeadline() time.Time {
	d := s.detectAt
	if s.canSend() && (d.IsZero() || s.nextTx.Before(d)) {
		d = s.nextTx
	}
	return d
}

// Tick advances the session to now. If the detection time has expired it takes the session down
// (ControlDetectionTimeExpired) and returns the change; if a packet is due it returns it, and the
// caller should send it at once. Calling Tick early is harmless.
func (s *Session) Tick(now time.Time) (*Packet, []Event) {
	var evs []Event
	if !s.detectAt.IsZero() && !now.Before(s.detectAt) {
		evs = s.expire(now)
	}
	if !s.canSend() || now.Before(s.nextTx) {
		return nil, evs
	}
	p := s.packet()
	s.final = false
	s.lastTx = now
	s.nextTx = now.Add(s.jitter(s.txInterval()))
	return p, evs
}

// Receive processes a packet from the peer (RFC 5880 §6.8.6, after the checks Parse does and the
// caller's session selection). It returns the state changes it caused; a packet due in answer (a
// Final, or news of a state change) is then returned by Tick(now). Packets with an authentication
// section (DropAuth) or a Your Discriminator that is neither zero nor ours (DropYourDiscriminator)
// are rejected without effect; in state AdminDown a packet updates the peer's parameters and is
// otherwise discarded (DropAdminDown). Errors wrap a DropReason.
func (s *Session) Receive(p *Packet, now time.Time) ([]Event, error) {
	if p.Auth != nil {
		return nil, fmt.Errorf("authentication type %d, none configured: %w", p.Auth.Type, DropAuth)
	}
	if p.YourDiscriminator != 0 && p.YourDiscriminator != s.localDiscr {
		return nil, fmt.Errorf("your discriminator %d, want %d: %w", p.YourDiscriminator, s.localDiscr, DropYourDiscriminator)
	}
	oldInterval := s.txInterval()
	s.remoteDiscr = p.MyDiscriminator
	s.remoteState = p.State
	s.remoteDiag = p.Diag
	s.remoteDemand = p.Demand
	s.remoteMinRx = p.RequiredMinRxInterval
	s.remoteDesiredTx = p.DesiredMinTxInterval
	s.remoteDetectMult = p.DetectMult
	if p.Final && s.polling {
		s.polling = false
		s.useTx, s.useRx = s.advTx, s.advRx
		s.updateTimers(now) // a change that waited for this poll to end
	}
	if iv := s.txInterval(); iv != oldInterval && !s.lastTx.IsZero() && s.nextTx.After(now) {
		// The peer's Required Min RX (or our own timers) changed: reschedule from the last packet,
		// unless a packet is due at once anyway.
		s.nextTx = s.lastTx.Add(s.jitter(iv))
		if s.nextTx.Before(now) {
			s.nextTx = now
		}
	}
	if s.state == StateAdminDown {
		return nil, DropAdminDown
	}

	var evs []Event
	if p.State == StateAdminDown {
		if s.state != StateDown {
			evs = s.setState(StateDown, DiagNeighborSignaledSessionDown, now)
		}
	} else {
		switch s.state {
		case StateDown:
			switch p.State {
			case StateDown:
				evs = s.setState(StateInit, s.diag, now)
			case StateInit:
				evs = s.setState(StateUp, DiagNone, now)
			}
		case StateInit:
			if p.State == StateInit || p.State == StateUp {
				evs = s.setState(StateUp, DiagNone, now)
			}
		case StateUp:
			if p.State == StateDown {
				evs = s.setState(StateDown, DiagNeighborSignaledSessionDown, now)
			}
		}
	}
	if p.Poll {
		s.final = true
		s.nextTx = now
	}
	s.detectAt = now.Add(s.detectionTime())
	return evs, nil
}

// SetProfile changes the session's profile. While Up, changed intervals are negotiated with a Poll
// Sequence, and a slower transmission or a faster reception takes effect only when it completes.
// It fails, changing nothing, for an invalid profile.
func (s *Session) SetProfile(p Profile, now time.Time) error {
	if err := p.Validate(); err != nil {
		return err
	}
	s.profile = p.WithDefaults()
	s.updateTimers(now)
	return nil
}

// SetAdminDown takes the session to AdminDown (diagnostic AdministrativelyDown) or, with down
// false, back from AdminDown to Down. An AdminDown session stops detecting failures but keeps
// telling the peer it is AdminDown, so the peer does not mistake the shutdown for a failure. It
// returns the state change, if any.
func (s *Session) SetAdminDown(down bool, now time.Time) []Event {
	switch {
	case down && s.state != StateAdminDown:
		s.detectAt = time.Time{}
		return s.setState(StateAdminDown, DiagAdministrativelyDown, now)
	case !down && s.state == StateAdminDown:
		return s.setState(StateDown, DiagNone, now)
	}
	return nil
}

func (s *Session) setState(st State, diag Diag, now time.Time) []Event {
	ev := Event{Old: s.state, New: st, Diag: diag, RemoteState: s.remoteState, RemoteDiag: s.remoteDiag, At: now}
	s.state, s.diag = st, diag
	if st != StateUp {
		s.polling = false // a poll ends with the Up state it was negotiating for
	}
	s.updateTimers(now)
	s.nextTx = now // tell the peer at once
	return []Event{ev}
}

// expire handles the end of the detection time (RFC 5880 §6.8.4, §6.8.1 bfd.RemoteDiscr).
func (s *Session) expire(now time.Time) []Event {
	var evs []Event
	if s.state == StateInit || s.state == StateUp {
		evs = s.setState(StateDown, DiagControlDetectionTimeExpired, now)
	}
	s.detectAt = time.Time{}
	s.remoteDiscr = 0
	s.remoteState = StateDown
	s.remoteDemand = false
	return evs
}

// wantTimers returns the Desired Min TX and Required Min RX intervals the session should advertise
// now: the profile's, with transmission no faster than once a second unless Up (RFC 5880 §6.8.3).
func (s *Session) wantTimers() (tx, rx time.Duration) {
	tx, rx = s.profile.TransmitInterval, s.profile.ReceiveInterval
	if s.state != StateUp {
		tx = max(tx, SlowInterval)
	}
	return tx, rx
}

// updateTimers moves the advertised timers to the wanted ones: at once unless Up, else by starting
// a Poll Sequence (one at a time; a change during a poll waits for its Final).
func (s *Session) updateTimers(now time.Time) {
	tx, rx := s.wantTimers()
	if s.polling || tx == s.advTx && rx == s.advRx {
		return
	}
	if s.state != StateUp {
		s.advTx, s.advRx, s.useTx, s.useRx = tx, rx, tx, rx
		return
	}
	if tx < s.useTx {
		s.useTx = tx // sending faster needs no agreement
	}
	if rx > s.useRx {
		s.useRx = rx // so does waiting longer
	}
	s.advTx, s.advRx = tx, rx
	s.polling = true
	s.nextTx = now
}

func (s *Session) txInterval() time.Duration { return max(s.useTx, s.remoteMinRx) }

func (s *Session) detectionTime() time.Duration {
	return time.Duration(s.remoteDetectMult) * max(s.useRx, s.remoteDesiredTx)
}

// canSend reports whether the session may send at all (RFC 5880 §6.8.7): not while passive and
// uncontacted, not when the peer wants no packets, and not periodically while the peer is in
// demand mode with both sides Up.
func (s *Session) canSend() bool {
	switch {
	case s.profile.Passive && s.remoteDiscr == 0:
		return false
	case s.remoteMinRx == 0:
		return false
	case s.remoteDemand && s.state == StateUp && s.remoteState == StateUp && !s.polling && !s.final:
		return false
	}
	return true
}

// jitter reduces an interval by a random 0–25% (10–25% when the detect multiplier is 1), as
// RFC 5880 §6.8.7 requires.
func (s *Session) jitter(iv time.Duration) time.Duration {
	u := float64(s.rnd.Uint64()>>11) / (1 << 53) // [0, 1)
	span := 0.25
	if s.profile.DetectMultiplier == 1 {
		span = 0.15
	}
	return time.Duration(float64(iv) * (0.75 + span*u))
}

func (s *Session) packet() *Packet {
	return &Packet{
		Diag:                  s.diag,
		State:                 s.state,
		Poll:                  s.polling && !s.final,
		Final:                 s.final,
		DetectMult:            s.profile.DetectMultiplier,
		MyDiscriminator:       s.localDiscr,
		YourDiscriminator:     s.remoteDiscr,
		DesiredMinTxInterval:  s.advTx,
		RequiredMinRxInterval: s.advRx,
	}
}
