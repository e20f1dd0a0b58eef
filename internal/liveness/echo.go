package liveness

import (
	"sort"
	"time"
)

// EchoTracker is the pure state machine of the echo function (RFC 5880 §6.4 in spirit): this speaker
// sends a probe to every peer each interval and the peer's kernel loops it back (an ICMP echo, answered
// in the peer's softirq without waking any process there). A peer is down when Misses consecutive
// probes, each older than Timeout, went unanswered.
//
// Judging only this speaker's own probes makes the detector immune to scheduling pauses on both sides:
// the peer's answer never waits for a process, and if this process is starved it sends no probes, so
// there is nothing to judge; answers that arrived while it was starved are read before judging (Run
// drains the socket first). A power cut or a dead link is seen after about Misses × Interval + Timeout.
//
// Not safe for concurrent use; Echoer owns one.
type EchoTracker struct {
	Interval time.Duration // how often each peer is probed
	Burst    time.Duration // how often while a peer is suspicious (see Suspicious); 0 = Interval
	Timeout  time.Duration // how long a probe may wait for its answer
	Misses   int           // consecutive unanswered probes before a peer is down
	peers    map[string]*echoPeer
}

type echoPeer struct {
	next      uint16      // sequence number of the next probe
	pending   []sentProbe // unanswered probes newer than the last answered one, oldest first
	up        bool
	upSince   time.Time
	lastReply time.Time
}

type sentProbe struct {
	seq   uint16
	nonce uint64 // random per probe: an answer must echo it
	at    time.Time
}

// maxPending bounds the memory of a peer that never answers.
const maxPending = 256

// NewEchoTracker returns a tracker. The speaker's defaults, interval 8 ms, burst 1.5 ms, timeout 4 ms and
// 6 misses, detect a power cut in 20-28 ms and tolerate five lost probes in a row.
func NewEchoTracker(interval, burst, timeout time.Duration, misses int) *EchoTracker {
	if burst <= 0 || burst > interval {
		burst = interval
	}
	return &EchoTracker{Interval: interval, Burst: burst, Timeout: timeout, Misses: misses, peers: map[string]*echoPeer{}}
}

// DetectionTime is the longest a dead peer stays up when probed as Echoer does: the first unanswered
// probe is noticed one interval after it was sent, then Misses-1 burst probes follow, and the last
// must be older than Timeout, judged on the next burst tick.
func (e *EchoTracker) DetectionTime() time.Duration {
	burst := e.Burst
	if burst <= 0 {
		burst = e.Interval
	}
	return 2*e.Interval + time.Duration(e.Misses-2)*burst + e.Timeout + burst
}

func (e *EchoTracker) peer(name string) *echoPeer {
	p, ok := e.peers[name]
	if !ok {
		p = &echoPeer{}
		e.peers[name] = p
	}
	return p
}

// Sent records a probe to peer carrying nonce (random per probe, unguessable by anyone who does not
// see the probe) and returns its sequence number.
func (e *EchoTracker) Sent(peer string, nonce uint64, now time.Time) uint16 {
	p := e.peer(peer)
	seq := p.next
	p.next++
	p.pending = append(p.pending, sentProbe{seq: seq, nonce: nonce, at: now})
	if len(p.pending) > maxPending {
		p.pending = p.pending[len(p.pending)-maxPending:]
	}
	return seq
}

// Reply records the answer to probe seq of peer, echoing nonce; it reports whether the peer just came
// up. Answers to probes older than the last answered one, duplicates, answers from unknown peers and
// answers whose nonce is not the probe's (forged: a spoofed echo reply must not keep a dead node
// alive) change nothing. The caller matches the answer's source address to peer and its ICMP id to
// its own.
func (e *EchoTracker) Reply(peer string, seq uint16, nonce uint64, now time.Time) bool {
	p, ok := e.peers[peer]
	if !ok {
		return false
	}
	i := -1
	for j, s := range p.pending {
		if s.seq == seq {
			if s.nonce == nonce {
				i = j
			}
			break
		}
	}
	if i < 0 {
		return false
	}
	// The peer was alive when it answered seq; anything sent before seq no longer matters.
	p.pending = append(p.pending[:0], p.pending[i+1:]...)
	p.lastReply = now
	if !p.up {
		p.up, p.upSince = true, now
		return true
	}
	return false
}

// Down is a peer that Check declared down, with how long it had been silent.
type Down struct {
	Peer    string
	Silence time.Duration // since its last answer (zero if it never answered)
}

// Check declares down every up peer with Misses unanswered probes older than Timeout, sorted by name.
func (e *EchoTracker) Check(now time.Time) []Down {
	var out []Down
	for name, p := range e.peers {
		if !p.up {
			continue
		}
		old := 0
		for _, s := range p.pending {
			if now.Sub(s.at) > e.Timeout {
				old++
			}
		}
		if old >= e.Misses {
			p.up = false
			d := Down{Peer: name}
			if !p.lastReply.IsZero() {
				d.Silence = now.Sub(p.lastReply)
			}
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Peer < out[j].Peer })
	return out
}

// Suspicious reports whether any up peer has an unanswered probe older than Timeout: the prober then
// probes in a burst (Echoer) to confirm or clear the suspicion quickly, instead of waiting out Misses
// full intervals.
func (e *EchoTracker) Suspicious(now time.Time) bool {
	for _, p := range e.peers {
		if p.up && len(p.pending) > 0 && now.Sub(p.pending[0].at) > e.Timeout {
			return true
		}
	}
	return false
}

// Up reports whether a peer answers its probes, and since when.
func (e *EchoTracker) Up(peer string) (bool, time.Time) {
	p, ok := e.peers[peer]
	if !ok || !p.up {
		return false, time.Time{}
	}
	return true, p.upSince
}

// Forget drops a peer.
func (e *EchoTracker) Forget(peer string) { delete(e.peers, peer) }

// Peers lists the tracked peers.
func (e *EchoTracker) Peers() []string {
	out := make([]string, 0, len(e.peers))
	for n := range e.peers {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
