package bfd

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// fixedSource always returns v: 0 makes the jitter factor 75%, ^0 makes it just under 100%.
type fixedSource uint64

func (f fixedSource) Uint64() uint64 { return uint64(f) }

const (
	localDiscr  = 0x1111
	remoteDiscr = 0x2222
)

var fast = Profile{ReceiveInterval: ms(50), TransmitInterval: ms(50), DetectMultiplier: 3}

func newTestSession(t testing.TB, p Profile, jitter fixedSource) *Session {
	t.Helper()
	s, err := NewSession(localDiscr, p, jitter, t0)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// remote returns a packet from the peer in state st, at 50 ms × 3.
func remote(st State, mods ...func(*Packet)) *Packet {
	p := &Packet{State: st, DetectMult: 3, MyDiscriminator: remoteDiscr, YourDiscriminator: localDiscr,
		DesiredMinTxInterval: ms(50), RequiredMinRxInterval: ms(50)}
	if st == StateDown || st == StateAdminDown {
		p.YourDiscriminator = 0
	}
	for _, m := range mods {
		if m != nil {
			m(p)
		}
	}
	return p
}

func receive(t *testing.T, s *Session, p *Packet, at time.Time) []Event {
	t.Helper()
	evs, err := s.Receive(p, at)
	if err != nil {
		t.Fatalf("Receive(%+v): %v", p, err)
	}
	return evs
}

// sessionIn returns a session brought to st by the peer's packets at t0.
func sessionIn(t *testing.T, st State) *Session {
	t.Helper()
	s := newTestSession(t, fast, 0)
	switch st {
	case StateAdminDown:
		s.SetAdminDown(true, t0)
	case StateInit:
		receive(t, s, remote(StateDown), t0)
	case StateUp:
		receive(t, s, remote(StateDown), t0)
		receive(t, s, remote(StateInit), t0)
	}
	if s.State() != st {
		t.Fatalf("could not reach %v: in %v", st, s.State())
	}
	return s
}

// TestReceptionTransitions is the state table of RFC 5880 §6.8.6.
func TestReceptionTransitions(t *testing.T) {
	for _, tc := range []struct {
		local, received State
		want            State
		diag            Diag
	}{
		{StateDown, StateAdminDown, StateDown, DiagNone},
		{StateDown, StateDown, StateInit, DiagNone},
		{StateDown, StateInit, StateUp, DiagNone},
		{StateDown, StateUp, StateDown, DiagNone},
		{StateInit, StateAdminDown, StateDown, DiagNeighborSignaledSessionDown},
		{StateInit, StateDown, StateInit, DiagNone},
		{StateInit, StateInit, StateUp, DiagNone},
		{StateInit, StateUp, StateUp, DiagNone},
		{StateUp, StateAdminDown, StateDown, DiagNeighborSignaledSessionDown},
		{StateUp, StateDown, StateDown, DiagNeighborSignaledSessionDown},
		{StateUp, StateInit, StateUp, DiagNone},
		{StateUp, StateUp, StateUp, DiagNone},
	} {
		t.Run(tc.local.String()+"+"+tc.received.String(), func(t *testing.T) {
			s := sessionIn(t, tc.local)
			at := t0.Add(ms(10))
			evs := receive(t, s, remote(tc.received), at)
			var want []Event
			if tc.want != tc.local {
				want = []Event{{Old: tc.local, New: tc.want, Diag: tc.diag, RemoteState: tc.received, At: at}}
			}
			if diff := cmp.Diff(want, evs); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if s.State() != tc.want {
				t.Errorf("state %v, want %v", s.State(), tc.want)
			}
			if want != nil {
				// A change is told to the peer at once.
				p, _ := s.Tick(at)
				if p == nil || p.State != tc.want || p.Diag != tc.diag {
					t.Errorf("packet after the change = %+v", p)
				}
			}
		})
	}
	t.Run("AdminDown ignores packets", func(t *testing.T) {
		s := sessionIn(t, StateAdminDown)
		for _, st := range []State{StateAdminDown, StateDown, StateInit, StateUp} {
			evs, err := s.Receive(remote(st), t0)
			if !errors.Is(err, DropAdminDown) || evs != nil || s.State() != StateAdminDown {
				t.Errorf("received %v: events %v, err %v, state %v", st, evs, err, s.State())
			}
		}
		if !s.detectAt.IsZero() {
			t.Error("AdminDown runs a detection timer")
		}
	})
	t.Run("foreign your discriminator", func(t *testing.T) {
		s := sessionIn(t, StateUp)
		_, err := s.Receive(remote(StateDown, func(p *Packet) { p.YourDiscriminator = 99 }), t0)
		if !errors.Is(err, DropYourDiscriminator) || s.State() != StateUp {
			t.Errorf("err %v, state %v", err, s.State())
		}
	})
}

// link simulates two sessions joined by a lossless, instantaneous wire, in event time.
type link struct {
	a, b     *Session
	now      time.Time
	cutAB    bool // drop a → b
	cutBA    bool
	events   map[*Session][]Event
	sent     map[*Session][]sentPacket
	received map[*Session]time.Time // last packet each received
}

type sentPacket struct {
	at time.Time
	p  Packet
}

func newLink(a, b *Session) *link {
	return &link{a: a, b: b, now: t0, events: map[*Session][]Event{}, sent: map[*Session][]sentPacket{},
		received: map[*Session]time.Time{}}
}

// run advances time, ticking and delivering, until until.
func (l *link) run(t *testing.T, until time.Time) {
	t.Helper()
	for range 100000 {
		next := time.Time{}
		for _, s := range []*Session{l.a, l.b} {
			if d := s.NextDeadline(); !d.IsZero() && (next.IsZero() || d.Before(next)) {
				next = d
			}
		}
		if next.IsZero() || next.After(until) {
			l.now = until
			return
		}
		if next.After(l.now) {
			l.now = next
		}
		for _, s := range []*Session{l.a, l.b} {
			p, evs := s.Tick(l.now)
			l.events[s] = append(l.events[s], evs...)
			if p == nil {
				continue
			}
			l.sent[s] = append(l.sent[s], sentPacket{l.now, *p})
			to, cut := l.b, l.cutAB
			if s == l.b {
				to, cut = l.a, l.cutBA
			}
			if cut {
				continue
			}
			wire, err := p.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			q, err := Parse(wire)
			if err != nil {
				t.Fatalf("peer sent a packet that does not parse: %v", err)
			}
			evs, err = to.Receive(q, l.now)
			if err != nil {
				t.Fatalf("Receive: %v", err)
			}
			l.received[to] = l.now
			l.events[to] = append(l.events[to], evs...)
		}
	}
	t.Fatal("simulation does not settle")
}

func states(evs []Event) []State {
	var out []State
	for _, e := range evs {
		out = append(out, e.New)
	}
	return out
}

func TestHandshakeAndFailure(t *testing.T) {
	a, err := NewSession(1, fast, rand.NewPCG(1, 2), t0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewSession(2, fast, rand.NewPCG(3, 4), t0.Add(ms(400)))
	if err != nil {
		t.Fatal(err)
	}
	l := newLink(a, b)
	l.cutAB, l.cutBA = true, true // b is not listening yet
	l.run(t, t0.Add(ms(1)))
	if a.State() != StateDown || len(l.sent[a]) != 1 {
		t.Fatalf("before b starts: a %v, sent %d", a.State(), len(l.sent[a]))
	}
	l.cutAB, l.cutBA = false, false
	l.run(t, t0.Add(time.Second))
	if diff := cmp.Diff([]State{StateInit, StateUp}, states(l.events[a])); diff != "" {
		t.Errorf("a's states (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]State{StateUp}, states(l.events[b])); diff != "" {
		t.Errorf("b's states (-want +got):\n%s", diff)
	}
	// b came up with its first packet, at 400 ms: one round trip.
	if up := l.events[b][0].At; up != t0.Add(ms(400)) {
		t.Errorf("b up at %v, want at once", up.Sub(t0))
	}
	// Before Up, packets advertised 1 s; once Up, a Poll Sequence moved both to 50 ms.
	for _, s := range []*Session{a, b} {
		sent := l.sent[s]
		if first := sent[0].p; first.DesiredMinTxInterval != time.Second || first.RequiredMinRxInterval != ms(50) {
			t.Errorf("first packet advertises %v/%v, want 1s/50ms", first.DesiredMinTxInterval, first.RequiredMinRxInterval)
		}
		var polled bool
		for _, sp := range sent {
			polled = polled || sp.p.Poll && sp.p.DesiredMinTxInterval == ms(50)
		}
		if !polled {
			t.Error("no poll for the 50 ms interval")
		}
		want := SessionStatus{State: StateUp, RemoteState: StateUp, LocalDiscriminator: s.localDiscr,
			RemoteDiscriminator: 3 - s.localDiscr, TransmitInterval: ms(50), DetectionTime: ms(150),
			RemoteReceiveInterval: ms(50), RemoteTransmitInterval: ms(50), RemoteDetectMultiplier: 3}
		if diff := cmp.Diff(want, s.Status()); diff != "" {
			t.Errorf("status of %d (-want +got):\n%s", s.localDiscr, diff)
		}
		// Steady state: packets every 37.5–50 ms.
		for i := len(sent) - 10; i < len(sent); i++ {
			if gap := sent[i].at.Sub(sent[i-1].at); gap < ms(50)*3/4 || gap >= ms(50) {
				t.Errorf("gap %v between packets outside 37.5–50 ms", gap)
			}
		}
	}

	// a's packets stop reaching b: b declares the session down one detection time after the last
	// one, and a learns it from b's Down.
	l.cutAB = true
	cutAt := l.now
	lastHeard := l.received[b]
	l.run(t, l.now.Add(time.Second))
	bEvents := l.events[b][1:]
	if len(bEvents) == 0 {
		t.Fatal("b never went down")
	}
	want := Event{Old: StateUp, New: StateDown, Diag: DiagControlDetectionTimeExpired, RemoteState: StateUp,
		At: lastHeard.Add(ms(150))}
	if diff := cmp.Diff(want, bEvents[0]); diff != "" {
		t.Errorf("b's failure (-want +got):\n%s", diff)
	}
	if d := want.At.Sub(cutAt); d > ms(150) || d < ms(100) {
		t.Errorf("detected %v after the cut, want 100–150 ms", d)
	}
	aDown := l.events[a][2]
	if aDown.New != StateDown || aDown.Diag != DiagNeighborSignaledSessionDown || aDown.At != want.At {
		t.Errorf("a's change = %+v, want Down (neighbor signaled) at b's failure", aDown)
	}
	// b, hearing nothing, forgot a and sends slow Down packets with Your Discriminator 0.
	last := l.sent[b][len(l.sent[b])-1].p
	if last.State != StateDown || last.YourDiscriminator != 0 || last.DesiredMinTxInterval != time.Second {
		t.Errorf("b's last packet = %+v", last)
	}

	// The path heals: both come back up.
	l.cutAB = false
	l.run(t, l.now.Add(3*time.Second))
	if a.State() != StateUp || b.State() != StateUp {
		t.Errorf("after healing: a %v, b %v", a.State(), b.State())
	}
}

func TestSlowTransmitUntilUp(t *testing.T) {
	s := newTestSession(t, fast, 0)
	if d := s.NextDeadline(); d != t0 {
		t.Fatalf("first deadline %v, want at once", d)
	}
	p, evs := s.Tick(t0)
	want := &Packet{State: StateDown, DetectMult: 3, MyDiscriminator: localDiscr,
		DesiredMinTxInterval: time.Second, RequiredMinRxInterval: ms(50)}
	if diff := cmp.Diff(want, p); diff != "" || evs != nil {
		t.Errorf("first packet (-want +got):\n%s\nevents %v", diff, evs)
	}
	if d := s.NextDeadline(); d != t0.Add(ms(750)) {
		t.Errorf("next packet at %v, want 750 ms (1 s less 25%% jitter)", d.Sub(t0))
	}
	if p, _ := s.Tick(t0.Add(ms(749))); p != nil {
		t.Error("sent early")
	}
	// A slow profile keeps its own interval.
	s = newTestSession(t, Profile{TransmitInterval: 2 * time.Second}, 0)
	if p, _ := s.Tick(t0); p.DesiredMinTxInterval != 2*time.Second {
		t.Errorf("advertised %v, want 2s", p.DesiredMinTxInterval)
	}
}

func TestJitter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mult   uint8
		src    rand.Source
		lo, hi time.Duration // inclusive
	}{
		{"least", 3, fixedSource(0), ms(750), ms(750)},
		{"most", 3, fixedSource(^uint64(0)), ms(999), ms(1000)},
		{"mult 1 most", 1, fixedSource(^uint64(0)), ms(899), ms(900)},
		{"random", 3, rand.NewPCG(5, 6), ms(750), ms(1000)},
		{"random mult 1", 1, rand.NewPCG(7, 8), ms(750), ms(900)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewSession(1, Profile{DetectMultiplier: tc.mult}, tc.src, t0)
			if err != nil {
				t.Fatal(err)
			}
			now := t0
			for range 200 {
				s.Tick(now)
				gap := s.NextDeadline().Sub(now)
				if gap < tc.lo || gap > tc.hi {
					t.Fatalf("interval %v outside [%v, %v]", gap, tc.lo, tc.hi)
				}
				now = s.NextDeadline()
			}
		})
	}
}

func TestPollFinal(t *testing.T) {
	s := sessionIn(t, StateUp)
	p, _ := s.Tick(t0)
	if !p.Poll || p.Final || p.DesiredMinTxInterval != ms(50) || !s.Status().Polling {
		t.Fatalf("first packet when Up = %+v, want a poll for 50 ms", p)
	}
	// The peer polls too: answer with a Final (never both bits), then keep polling.
	receive(t, s, remote(StateUp, func(p *Packet) { p.Poll = true }), t0.Add(ms(1)))
	if d := s.NextDeadline(); d != t0.Add(ms(1)) {
		t.Errorf("Final due at %v, want at once", d.Sub(t0))
	}
	p, _ = s.Tick(t0.Add(ms(1)))
	if !p.Final || p.Poll {
		t.Errorf("answer = %+v, want Final without Poll", p)
	}
	p, _ = s.Tick(s.NextDeadline())
	if !p.Poll {
		t.Errorf("next packet = %+v, want Poll again", p)
	}
	// The peer's Final ends the sequence.
	receive(t, s, remote(StateUp, func(p *Packet) { p.Final = true }), t0.Add(ms(60)))
	if s.Status().Polling {
		t.Error("still polling after the Final")
	}
	if p, _ := s.Tick(s.NextDeadline()); p.Poll || p.Final {
		t.Errorf("packet after the sequence = %+v", p)
	}
	// A Final without a poll in progress is ignored.
	receive(t, s, remote(StateUp, func(p *Packet) { p.Final = true }), t0.Add(ms(100)))
}

// upAndSettled returns a session Up at 50 ms whose Poll Sequence has completed, and the time.
func upAndSettled(t *testing.T, peer func(*Packet)) (*Session, time.Time) {
	t.Helper()
	s := newTestSession(t, fast, 0)
	receive(t, s, remote(StateDown, peer), t0)
	receive(t, s, remote(StateInit, peer), t0)
	s.Tick(t0)
	now := t0.Add(ms(10))
	receive(t, s, remote(StateUp, peer, func(p *Packet) { p.Final = true }), now)
	if st := s.Status(); st.Polling || st.State != StateUp {
		t.Fatalf("not settled: %+v", st)
	}
	return s, now
}

// TestTimerChanges covers RFC 5880 §6.8.3: while Up, a slower transmission and a faster reception
// wait for the Poll Sequence; the opposite changes apply at once.
func TestTimerChanges(t *testing.T) {
	fastPeer := func(p *Packet) { p.DesiredMinTxInterval, p.RequiredMinRxInterval = ms(10), ms(10) }
	t.Run("slower transmission waits for the final", func(t *testing.T) {
		s, now := upAndSettled(t, fastPeer)
		if err := s.SetProfile(Profile{ReceiveInterval: ms(50), TransmitInterval: ms(200)}, now); err != nil {
			t.Fatal(err)
		}
		p, _ := s.Tick(now)
		if !p.Poll || p.DesiredMinTxInterval != ms(200) {
			t.Fatalf("packet = %+v, want a poll advertising 200 ms", p)
		}
		if iv := s.Status().TransmitInterval; iv != ms(50) {
			t.Errorf("interval during the poll %v, want still 50 ms", iv)
		}
		receive(t, s, remote(StateUp, fastPeer, func(p *Packet) { p.Final = true }), now)
		if iv := s.Status().TransmitInterval; iv != ms(200) {
			t.Errorf("interval after the poll %v, want 200 ms", iv)
		}
	})
	t.Run("faster transmission at once", func(t *testing.T) {
		s, now := upAndSettled(t, fastPeer)
		if err := s.SetProfile(Profile{ReceiveInterval: ms(50), TransmitInterval: ms(20)}, now); err != nil {
			t.Fatal(err)
		}
		if st := s.Status(); st.TransmitInterval != ms(20) || !st.Polling {
			t.Errorf("status %+v, want 20 ms while polling", st)
		}
	})
	t.Run("faster reception waits for the final", func(t *testing.T) {
		s, now := upAndSettled(t, fastPeer)
		if d := s.Status().DetectionTime; d != ms(150) {
			t.Fatalf("detection time %v, want 150 ms", d)
		}
		if err := s.SetProfile(Profile{ReceiveInterval: ms(20), TransmitInterval: ms(50)}, now); err != nil {
			t.Fatal(err)
		}
		p, _ := s.Tick(now)
		if !p.Poll || p.RequiredMinRxInterval != ms(20) {
			t.Fatalf("packet = %+v, want a poll advertising 20 ms", p)
		}
		receive(t, s, remote(StateUp, fastPeer), now)
		if d := s.Status().DetectionTime; d != ms(150) {
			t.Errorf("detection time during the poll %v, want still 150 ms", d)
		}
		receive(t, s, remote(StateUp, fastPeer, func(p *Packet) { p.Final = true }), now)
		if d := s.Status().DetectionTime; d != ms(60) {
			t.Errorf("detection time after the poll %v, want 3 × 20 ms", d)
		}
	})
	t.Run("slower reception at once", func(t *testing.T) {
		s, now := upAndSettled(t, fastPeer)
		if err := s.SetProfile(Profile{ReceiveInterval: ms(300), TransmitInterval: ms(50)}, now); err != nil {
			t.Fatal(err)
		}
		receive(t, s, remote(StateUp, fastPeer), now)
		if d := s.Status().DetectionTime; d != ms(900) {
			t.Errorf("detection time %v, want 900 ms at once", d)
		}
	})
	t.Run("change during a poll waits for it", func(t *testing.T) {
		s, now := upAndSettled(t, fastPeer)
		s.SetProfile(Profile{ReceiveInterval: ms(50), TransmitInterval: ms(100)}, now)
		s.SetProfile(Profile{ReceiveInterval: ms(50), TransmitInterval: ms(200)}, now)
		p, _ := s.Tick(now)
		if p.DesiredMinTxInterval != ms(100) {
			t.Fatalf("advertised %v during the first poll, want 100 ms", p.DesiredMinTxInterval)
		}
		receive(t, s, remote(StateUp, fastPeer, func(p *Packet) { p.Final = true }), now)
		p, _ = s.Tick(now)
		if !p.Poll || p.DesiredMinTxInterval != ms(200) {
			t.Errorf("after the first final: %+v, want a second poll for 200 ms", p)
		}
	})
	t.Run("peer's slower reception reschedules", func(t *testing.T) {
		s, now := upAndSettled(t, nil)
		s.Tick(now)
		receive(t, s, remote(StateUp, func(p *Packet) { p.RequiredMinRxInterval = ms(500) }), now.Add(ms(1)))
		if st := s.Status(); st.TransmitInterval != ms(500) {
			t.Errorf("interval %v, want the peer's 500 ms", st.TransmitInterval)
		}
		// The last packet went at t0 (upAndSettled); the next one is 500 ms less 25% after it.
		if s.nextTx != t0.Add(ms(375)) {
			t.Errorf("next packet at %v, want 375 ms", s.nextTx.Sub(t0))
		}
	})
	t.Run("invalid profile", func(t *testing.T) {
		s, now := upAndSettled(t, nil)
		if err := s.SetProfile(Profile{ReceiveInterval: time.Millisecond}, now); err == nil {
			t.Error("1 ms accepted")
		}
		if s.Profile() != fast {
			t.Errorf("profile changed to %+v", s.Profile())
		}
	})
}

func TestDetectionTime(t *testing.T) {
	s, now := upAndSettled(t, func(p *Packet) { p.DetectMult = 4; p.DesiredMinTxInterval = ms(100) })
	if d := s.Status().DetectionTime; d != ms(400) {
		t.Fatalf("detection time %v, want 4 × max(50, 100) ms", d)
	}
	s.Tick(now)
	if _, evs := s.Tick(now.Add(ms(399))); evs != nil {
		t.Fatalf("down before the detection time: %v", evs)
	}
	p, evs := s.Tick(now.Add(ms(400)))
	want := []Event{{Old: StateUp, New: StateDown, Diag: DiagControlDetectionTimeExpired, RemoteState: StateUp, At: now.Add(ms(400))}}
	if diff := cmp.Diff(want, evs); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if p == nil || p.State != StateDown || p.YourDiscriminator != 0 || p.Diag != DiagControlDetectionTimeExpired {
		t.Errorf("packet = %+v, want Down without your discriminator", p)
	}
	if st := s.Status(); st.RemoteDiscriminator != 0 || st.DetectionTime != 0 || st.RemoteState != StateDown {
		t.Errorf("status %+v", st)
	}
	// Init times out the same way; Down just forgets the peer.
	s = sessionIn(t, StateInit)
	if _, evs := s.Tick(t0.Add(ms(150))); len(evs) != 1 || evs[0].New != StateDown {
		t.Errorf("Init: %v", evs)
	}
	s = newTestSession(t, fast, 0)
	receive(t, s, remote(StateUp), t0) // Down + Up: no change, but the timer runs
	if _, evs := s.Tick(t0.Add(time.Hour)); evs != nil || s.Status().RemoteDiscriminator != 0 {
		t.Errorf("Down: %v, %+v", evs, s.Status())
	}
}

func TestPassive(t *testing.T) {
	s := newTestSession(t, Profile{Passive: true}, 0)
	if d := s.NextDeadline(); !d.IsZero() {
		t.Errorf("deadline %v before contact, want none", d)
	}
	if p, _ := s.Tick(t0.Add(time.Hour)); p != nil {
		t.Fatalf("passive session sent %+v", p)
	}
	now := t0.Add(2 * time.Hour)
	receive(t, s, remote(StateDown), now)
	p, _ := s.Tick(now)
	if p == nil || p.State != StateInit || p.YourDiscriminator != remoteDiscr {
		t.Fatalf("answer = %+v", p)
	}
	// The peer goes silent: the session forgets it and falls silent too.
	s.Tick(now.Add(time.Hour))
	if p, _ := s.Tick(now.Add(2 * time.Hour)); p != nil {
		t.Errorf("sent after forgetting the peer: %+v", p)
	}
}

func TestPeerAsksForNothing(t *testing.T) {
	s := sessionIn(t, StateUp)
	s.Tick(t0)
	receive(t, s, remote(StateUp, func(p *Packet) { p.RequiredMinRxInterval = 0 }), t0.Add(ms(1)))
	if p, _ := s.Tick(t0.Add(time.Minute)); p != nil {
		t.Errorf("sent %+v to a peer with Required Min RX 0", p)
	}
	if st := s.Status(); st.TransmitInterval != 0 {
		t.Errorf("transmit interval %v, want 0", st.TransmitInterval)
	}
}

func TestPeerInDemandMode(t *testing.T) {
	s, now := upAndSettled(t, nil)
	demand := func(p *Packet) { p.Demand = true }
	receive(t, s, remote(StateUp, demand), now)
	if p, _ := s.Tick(now.Add(ms(100))); p != nil {
		t.Errorf("periodic packet %+v to a peer in demand mode", p)
	}
	// A Poll is still answered.
	receive(t, s, remote(StateUp, demand, func(p *Packet) { p.Poll = true }), now.Add(ms(110)))
	if p, _ := s.Tick(now.Add(ms(110))); p == nil || !p.Final {
		t.Errorf("answer to a poll in demand mode = %+v", p)
	}
}

func TestAdminDown(t *testing.T) {
	s, now := upAndSettled(t, nil)
	evs := s.SetAdminDown(true, now)
	want := []Event{{Old: StateUp, New: StateAdminDown, Diag: DiagAdministrativelyDown, RemoteState: StateUp, At: now}}
	if diff := cmp.Diff(want, evs); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if evs := s.SetAdminDown(true, now); evs != nil {
		t.Errorf("second SetAdminDown: %v", evs)
	}
	p, _ := s.Tick(now)
	if p == nil || p.State != StateAdminDown || p.Diag != DiagAdministrativelyDown || p.DesiredMinTxInterval != time.Second {
		t.Errorf("packet = %+v", p)
	}
	if _, evs := s.Tick(now.Add(time.Hour)); evs != nil {
		t.Errorf("AdminDown detected a failure: %v", evs)
	}
	evs = s.SetAdminDown(false, now.Add(time.Hour))
	if len(evs) != 1 || evs[0].New != StateDown || s.State() != StateDown {
		t.Errorf("re-enabled: %v", evs)
	}
}

func TestNewSessionErrors(t *testing.T) {
	if _, err := NewSession(0, Profile{}, nil, t0); !errors.Is(err, ErrDiscriminator) {
		t.Errorf("discriminator 0: %v", err)
	}
	if _, err := NewSession(1, Profile{TransmitInterval: time.Hour}, nil, t0); err == nil {
		t.Error("1 h interval accepted")
	}
	s, err := NewSession(1, Profile{}, nil, t0) // nil source: the global one
	if err != nil {
		t.Fatal(err)
	}
	s.Tick(t0)
	if d := s.NextDeadline().Sub(t0); d < ms(750) || d >= time.Second {
		t.Errorf("interval %v with the global source", d)
	}
}
