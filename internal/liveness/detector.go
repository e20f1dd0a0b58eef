package liveness

import (
	"sort"
	"time"
)

// Detector tracks when each peer was last heard. Not safe for concurrent use; Run owns one.
type Detector struct {
	Interval   time.Duration // how often peers send
	Multiplier int           // missed intervals before a peer is declared dead
	peers      map[string]*peerState
}

type peerState struct {
	lastSeen   time.Time
	alive      bool
	aliveSince time.Time
	info       Heartbeat
}

// NewDetector returns a detector; interval 10 ms and multiplier 5 give a 50 ms detection time.
func NewDetector(interval time.Duration, multiplier int) *Detector {
	return &Detector{Interval: interval, Multiplier: multiplier, peers: map[string]*peerState{}}
}

// Timeout is how long a peer may be silent before it is declared dead.
func (d *Detector) Timeout() time.Duration { return d.Interval * time.Duration(d.Multiplier) }

// Heard records a heartbeat; it reports whether the peer just came alive.
func (d *Detector) Heard(hb Heartbeat, now time.Time) bool {
	p, ok := d.peers[hb.Node]
	if !ok {
		p = &peerState{}
		d.peers[hb.Node] = p
	}
	p.lastSeen = now
	p.info = hb
	if !p.alive {
		p.alive, p.aliveSince = true, now
		return true
	}
	return false
}

// Check declares dead every peer silent for longer than Timeout and returns them, sorted.
func (d *Detector) Check(now time.Time) []string {
	var died []string
	for name, p := range d.peers {
		if p.alive && now.Sub(p.lastSeen) > d.Timeout() {
			p.alive = false
			died = append(died, name)
		}
	}
	sort.Strings(died)
	return died
}

// Alive reports whether a peer is alive and since when.
func (d *Detector) Alive(name string) (bool, time.Time) {
	p, ok := d.peers[name]
	if !ok || !p.alive {
		return false, time.Time{}
	}
	return true, p.aliveSince
}

// Info returns the last heartbeat of a peer.
func (d *Detector) Info(name string) (Heartbeat, bool) {
	p, ok := d.peers[name]
	if !ok {
		return Heartbeat{}, false
	}
	return p.info, true
}

// Forget drops a peer (its Node was deleted).
func (d *Detector) Forget(name string) { delete(d.peers, name) }
