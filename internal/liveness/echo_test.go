package liveness

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestEchoTracker(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	e := NewEchoTracker(5*time.Millisecond, 0, 10*time.Millisecond, 6)
	if up, _ := e.Up("b"); up {
		t.Fatal("unknown peer is up")
	}
	s := e.Sent("b", 0, ms(0))
	if e.Reply("b", s+1, 0, ms(1)) {
		t.Fatal("answer to a probe never sent")
	}
	if e.Reply("x", s, 0, ms(1)) {
		t.Fatal("answer from an unknown peer")
	}
	if !e.Reply("b", s, 0, ms(1)) {
		t.Fatal("first answer brings the peer up")
	}
	if e.Reply("b", s, 0, ms(2)) {
		t.Fatal("a duplicate answer is no change")
	}
	if up, since := e.Up("b"); !up || !since.Equal(ms(1)) {
		t.Fatalf("up=%v since=%v", up, since)
	}
	// Power cut after the probe at 0: probes at 5..30 go unanswered.
	for i := 5; i <= 30; i += 5 {
		e.Sent("b", 0, ms(i))
		if d := e.Check(ms(i)); len(d) != 0 {
			t.Fatalf("declared down at %d ms with young probes: %v", i, d)
		}
	}
	// The sixth unanswered probe (sent at 30) is older than the timeout only after 40 ms.
	if d := e.Check(ms(40)); len(d) != 0 {
		t.Fatalf("down at exactly the timeout: %v", d)
	}
	d := e.Check(ms(41))
	if len(d) != 1 || d[0].Peer != "b" || d[0].Silence != 40*time.Millisecond {
		t.Fatalf("want b down after 40 ms of silence, got %+v", d)
	}
	if d := e.Check(ms(42)); len(d) != 0 {
		t.Fatalf("reported twice: %v", d)
	}
	if got := NewEchoTracker(8*time.Millisecond, 1500*time.Microsecond, 4*time.Millisecond, 6).DetectionTime(); got != 27500*time.Microsecond {
		t.Fatalf("DetectionTime of the defaults = %v, want 27.5ms", got)
	}
	// Back: any answer to a pending probe brings it up again.
	s = e.Sent("b", 0, ms(100))
	if !e.Reply("b", s, 0, ms(101)) {
		t.Fatal("return not reported")
	}
	e.Forget("b")
	if len(e.Peers()) != 0 {
		t.Fatal("forgotten peer still tracked")
	}
}

// A starved prober sends nothing and so judges nothing: a long pause is never a death, as long as the
// answers that arrived meanwhile are read before judging (Echoer drains the socket first).
func TestEchoTrackerPauseIsNotDeath(t *testing.T) {
	t0 := time.Unix(1000, 0)
	e := NewEchoTracker(5*time.Millisecond, 0, 10*time.Millisecond, 6)
	s := e.Sent("b", 0, t0)
	e.Reply("b", s, 0, t0.Add(time.Millisecond))
	s = e.Sent("b", 0, t0.Add(5*time.Millisecond))
	// 2 s pause; the answer waited in the socket and is read first.
	now := t0.Add(2 * time.Second)
	e.Reply("b", s, 0, now)
	if d := e.Check(now); len(d) != 0 {
		t.Fatalf("pause taken for a death: %v", d)
	}
}

// simulate runs Echoer's schedule (a tick every Interval, every Burst while Suspicious) against one
// peer whose answers take 100 µs and are lost with probability loss, until the peer is cut at cut (never
// if zero) and declared down, or until ticks run out. It returns the false deaths before the cut and
// when the peer was declared down after it.
func simulate(e *EchoTracker, r *rand.Rand, loss float64, start, cut time.Time, ticks int) (falseDeaths int, down time.Time) {
	type inflight struct {
		seq uint16
		at  time.Time
	}
	var q []inflight
	now := start
	for i := 0; i < ticks; i++ {
		for len(q) > 0 && !q[0].at.After(now) {
			e.Reply("b", q[0].seq, 0, q[0].at)
			q = q[1:]
		}
		if len(e.Check(now)) > 0 {
			if cut.IsZero() || now.Before(cut) {
				falseDeaths++
			} else {
				return falseDeaths, now
			}
		}
		next := e.Interval
		if e.Suspicious(now) {
			next = e.Burst
		}
		s := e.Sent("b", 0, now)
		if (cut.IsZero() || now.Before(cut)) && r.Float64() >= loss {
			q = append(q, inflight{s, now.Add(100 * time.Microsecond)})
		}
		now = now.Add(next)
	}
	return falseDeaths, time.Time{}
}

// Property: with 4% loss per probe (1% on each of the four link crossings of a round trip), a live peer
// is never declared down in a million ticks, and a cut peer is always declared down within
// DetectionTime, whatever the phase of the cut.
func TestEchoTrackerLossAndDetection(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	e := NewEchoTracker(8*time.Millisecond, 1500*time.Microsecond, 4*time.Millisecond, 6)
	start := time.Unix(1000, 0)
	e.Reply("b", e.Sent("b", 0, start), 0, start)
	if f, _ := simulate(e, r, 0.04, start.Add(10*time.Millisecond), time.Time{}, 1_000_000); f > 0 {
		t.Fatalf("%d false deaths in 1e6 ticks at 4%% loss", f)
	}
	var worst time.Duration
	for trial := 0; trial < 1000; trial++ {
		e := NewEchoTracker(8*time.Millisecond, 1500*time.Microsecond, 4*time.Millisecond, 6)
		e.Reply("b", e.Sent("b", 0, start), 0, start)
		cut := start.Add(time.Second + time.Duration(r.IntN(10000))*time.Microsecond)
		f, down := simulate(e, r, 0.04, start.Add(10*time.Millisecond), cut, 10_000)
		if down.IsZero() {
			t.Fatalf("trial %d: never declared down", trial)
		}
		if f > 0 {
			t.Fatalf("trial %d: %d false deaths", trial, f)
		}
		worst = max(worst, down.Sub(cut))
	}
	if worst > e.DetectionTime() {
		t.Fatalf("worst detection %v > DetectionTime %v", worst, e.DetectionTime())
	}
	t.Logf("worst detection over 1000 cuts: %v (bound %v)", worst, e.DetectionTime())
}

func TestEchoWire(t *testing.T) {
	ipv4Header := []byte{0x45, 0, 0, 44, 0, 0, 0, 0, 64, 1, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2}
	for _, tc := range []struct {
		name   string
		v6     bool
		req    byte   // the request's type
		reply  byte   // the answer's type
		header []byte // what a raw socket delivers before the ICMP message
	}{
		{name: "ICMP", req: 8, reply: 0, header: ipv4Header},
		{name: "ICMPv6 (no header on a raw IPv6 socket)", v6: true, req: 128, reply: 129},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := make([]byte, echoLen)
			marshalEcho(b, tc.v6, 0x1234, 7, 0xfeedface01020304)
			if b[0] != tc.req {
				t.Fatalf("request type %d, want %d", b[0], tc.req)
			}
			if !tc.v6 && checksum(b) != 0 {
				t.Fatal("checksum does not verify")
			}
			// Turn it into the answer.
			b[0] = tc.reply
			pkt := append(slices.Clone(tc.header), b...)
			id, seq, nonce, ok := parseEchoReply(pkt, tc.v6)
			if !ok || id != 0x1234 || seq != 7 || nonce != 0xfeedface01020304 {
				t.Fatalf("parse = %x %d %x %v", id, seq, nonce, ok)
			}
			// Read as the other family, it is not one of ours.
			if _, _, _, ok := parseEchoReply(pkt, !tc.v6); ok {
				t.Fatal("accepted as the other family")
			}
			// A reply to someone else's ping (no magic) is not one of ours.
			other := slices.Clone(pkt)
			copy(other[len(tc.header)+8:], "pingpong")
			if _, _, _, ok := parseEchoReply(other, tc.v6); ok {
				t.Fatal("accepted a reply without our magic")
			}
			// The request itself (a looped-back probe) is not an answer.
			req := slices.Clone(pkt)
			req[len(tc.header)] = tc.req
			if _, _, _, ok := parseEchoReply(req, tc.v6); ok {
				t.Fatal("accepted a request as an answer")
			}
			for n := 0; n < len(pkt); n++ {
				parseEchoReply(pkt[:n], tc.v6) // never panics on truncation
			}
		})
	}
}

func FuzzParseEchoReply(f *testing.F) {
	f.Add([]byte{0x45, 0, 0, 28, 0, 0, 0, 0, 64, 1, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0, 0, 0, 0, 0, 1, 0, 2}, false)
	f.Add(append([]byte{0x45, 0, 0, 44, 0, 0, 0, 0, 64, 1, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0, 0, 0, 0, 0, 1, 0, 2}, "ironlbE2\x00\x01\x02\x03\x04\x05\x06\x07"...), false)
	f.Add(append([]byte{129, 0, 0, 0, 0, 1, 0, 2}, "ironlbE2\x00\x01\x02\x03\x04\x05\x06\x07"...), true)
	f.Fuzz(func(t *testing.T, b []byte, v6 bool) { parseEchoReply(b, v6) })
}

// TestEchoTrackerForgedReplies: a spoofed echo reply must not keep a dead node alive. Only an answer
// echoing the probe's sequence number and its nonce counts; the peer stays down, and goes down, as
// if the forged answers had never come.
func TestEchoTrackerForgedReplies(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	for _, tc := range []struct {
		name  string
		reply func(seq uint16, nonce uint64) (uint16, uint64)
		up    bool
	}{
		{"genuine", func(s uint16, n uint64) (uint16, uint64) { return s, n }, true},
		{"wrong nonce", func(s uint16, n uint64) (uint16, uint64) { return s, n + 1 }, false},
		{"zero nonce", func(s uint16, _ uint64) (uint16, uint64) { return s, 0 }, false},
		{"right nonce, next seq", func(s uint16, n uint64) (uint16, uint64) { return s + 1, n }, false},
		{"right nonce, previous seq", func(s uint16, n uint64) (uint16, uint64) { return s - 1, n }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := NewEchoTracker(5*time.Millisecond, 0, 10*time.Millisecond, 3)
			s := e.Sent("b", 0xabcdef, ms(0))
			rs, rn := tc.reply(s, 0xabcdef)
			if got := e.Reply("b", rs, rn, ms(1)); got != tc.up {
				t.Fatalf("Reply came up = %v, want %v", got, tc.up)
			}
			if !tc.up {
				return
			}
			// Up; then the node dies and an attacker answers every probe with guessed nonces.
			for i := 1; i <= 10; i++ {
				s := e.Sent("b", uint64(1000+i), ms(5*i))
				e.Reply("b", s, uint64(i), ms(5*i+1))
			}
			if d := e.Check(ms(61)); len(d) != 1 {
				t.Fatalf("forged answers kept a dead peer up: %v", d)
			}
			if e.Reply("b", 9, 1009, ms(62)) == false {
				t.Fatal("a genuine late answer to a pending probe should bring it back")
			}
		})
	}
}
