package liveness

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestEchoTracker(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	e := NewEchoTracker(5*time.Millisecond, 10*time.Millisecond, 6)
	if up, _ := e.Up("b"); up {
		t.Fatal("unknown peer is up")
	}
	s := e.Sent("b", ms(0))
	if e.Reply("b", s+1, ms(1)) {
		t.Fatal("answer to a probe never sent")
	}
	if e.Reply("x", s, ms(1)) {
		t.Fatal("answer from an unknown peer")
	}
	if !e.Reply("b", s, ms(1)) {
		t.Fatal("first answer brings the peer up")
	}
	if e.Reply("b", s, ms(2)) {
		t.Fatal("a duplicate answer is no change")
	}
	if up, since := e.Up("b"); !up || !since.Equal(ms(1)) {
		t.Fatalf("up=%v since=%v", up, since)
	}
	// Power cut after the probe at 0: probes at 5..30 go unanswered.
	for i := 5; i <= 30; i += 5 {
		e.Sent("b", ms(i))
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
	if got := e.DetectionTime(); got != 40*time.Millisecond {
		t.Fatalf("DetectionTime = %v", got)
	}
	// Back: any answer to a pending probe brings it up again.
	s = e.Sent("b", ms(100))
	if !e.Reply("b", s, ms(101)) {
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
	e := NewEchoTracker(5*time.Millisecond, 10*time.Millisecond, 6)
	s := e.Sent("b", t0)
	e.Reply("b", s, t0.Add(time.Millisecond))
	s = e.Sent("b", t0.Add(5*time.Millisecond))
	// 2 s pause; the answer waited in the socket and is read first.
	now := t0.Add(2 * time.Second)
	e.Reply("b", s, now)
	if d := e.Check(now); len(d) != 0 {
		t.Fatalf("pause taken for a death: %v", d)
	}
}

// Property: with independent loss p per probe, a live peer is declared down only after Misses losses
// in a row; with 4% loss (1% on each of the four link crossings of a round trip) and six misses, a
// million probes see no false death in practice, and a dead peer is always seen within DetectionTime
// plus one interval.
func TestEchoTrackerLossAndDetection(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	e := NewEchoTracker(5*time.Millisecond, 10*time.Millisecond, 6)
	now := time.Unix(1000, 0)
	type inflight struct {
		seq uint16
		at  time.Time
	}
	var q []inflight
	falseDeaths := 0
	for i := 0; i < 1_000_000; i++ {
		now = now.Add(5 * time.Millisecond)
		for len(q) > 0 && now.Sub(q[0].at) >= time.Millisecond {
			e.Reply("b", q[0].seq, q[0].at.Add(time.Millisecond))
			q = q[1:]
		}
		falseDeaths += len(e.Check(now))
		s := e.Sent("b", now)
		if r.Float64() >= 0.04 {
			q = append(q, inflight{s, now})
		}
	}
	if falseDeaths > 0 {
		t.Fatalf("%d false deaths in 1e6 probes at 4%% loss", falseDeaths)
	}
	// Now cut: nothing answers; measure detection from the cut at random phases.
	for trial := 0; trial < 100; trial++ {
		e := NewEchoTracker(5*time.Millisecond, 10*time.Millisecond, 6)
		t0 := time.Unix(2000, 0)
		s := e.Sent("b", t0)
		e.Reply("b", s, t0.Add(time.Millisecond))
		cut := t0.Add(time.Duration(r.IntN(5000)) * time.Microsecond)
		var seen time.Time
		for now := t0.Add(5 * time.Millisecond); seen.IsZero(); now = now.Add(5 * time.Millisecond) {
			if len(e.Check(now)) > 0 {
				seen = now
			}
			e.Sent("b", now)
		}
		if got, max := seen.Sub(cut), e.DetectionTime()+e.Interval; got > max {
			t.Fatalf("trial %d: detected %v after the cut, want <= %v", trial, got, max)
		}
	}
}

func TestEchoWire(t *testing.T) {
	b := make([]byte, 16)
	marshalEcho(b, 0x1234, 7)
	if checksum(b) != 0 {
		t.Fatal("checksum does not verify")
	}
	// Turn it into a reply inside an IPv4 packet.
	b[0] = 0
	ip := append([]byte{0x45, 0, 0, 36, 0, 0, 0, 0, 64, 1, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2}, b...)
	id, seq, ok := parseEchoReply(ip)
	if !ok || id != 0x1234 || seq != 7 {
		t.Fatalf("parse = %x %d %v", id, seq, ok)
	}
	for n := 0; n < len(ip); n++ {
		parseEchoReply(ip[:n]) // never panics on truncation
	}
}

func FuzzParseEchoReply(f *testing.F) {
	f.Add([]byte{0x45, 0, 0, 28, 0, 0, 0, 0, 64, 1, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0, 0, 0, 0, 0, 1, 0, 2})
	f.Fuzz(func(t *testing.T, b []byte) { parseEchoReply(b) })
}
