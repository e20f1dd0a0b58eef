package liveness

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"hash"
	"net/netip"
	"time"
)

// Heartbeat authentication: nothing on the wire is trusted.
//
//   - Every heartbeat ends with an HMAC-SHA256 tag over the rest of the packet, keyed with the
//     cluster's heartbeat key (the Secret ironlb-heartbeat-key). Senders sign with the primary key;
//     receivers accept the primary or the secondary, so an operator rotates by moving primary to
//     secondary and writing a new primary, then (after every speaker has the new Secret) dropping the
//     secondary. Without a key a speaker neither sends nor accepts heartbeats.
//   - Only the nodes of the peer list (the Node objects) are believed, and only from their
//     InternalIP; nothing is remembered about any other name, so the tables stay bounded by the
//     number of Nodes.
//   - Replays: each run of a speaker picks a random boot nonce and numbers its packets from 1. Within
//     a boot, a packet is accepted only if its sequence number is above every one accepted so far. A
//     packet of another boot is accepted only if its timestamp is later than every packet accepted
//     from that node (a restarted node is believed at once; an earlier run's packets are all older
//     than the current run's). Every packet's timestamp must also be within Window of the receiver's
//     clock, which bounds what a receiver that just started (and so remembers nothing) can be fooled
//     with, and for how long an attacker may hold genuine packets back and release them late. The
//     nodes' clocks must agree within Window (NTP).
//
// What it does not stop: an attacker on the path can drop heartbeats (a node then looks dead, as it
// would if the link failed), and, within Window, delay them.

// Where the key lives: the Secret KeySecret in the configuration namespace (metallb-system), data
// keys KeyPrimary and, during a rotation, KeySecondary. The controller creates it with a random
// KeyMinLen-byte primary when it is absent; the speakers watch it.
const (
	KeySecret    = "ironlb-heartbeat-key"
	KeyPrimary   = "primary"
	KeySecondary = "secondary"
)

// KeyMinLen is the shortest key accepted, in bytes.
const KeyMinLen = 32

// TagLen is the length of a heartbeat's tag.
const TagLen = sha256.Size

// DefaultWindow is how far a heartbeat's timestamp may be from the receiver's clock by default.
const DefaultWindow = 2 * time.Second

// Reason says why a packet was rejected; Accepted is zero.
type Reason uint8

// The reasons, in the order Verify checks them.
const (
	Accepted    Reason = iota
	Malformed          // not a heartbeat (framing, magic, lengths)
	NoKey              // this speaker has no key yet: it accepts nothing
	UnknownNode        // the name is no Node's (or is this node's own)
	WrongSource        // not from the named node's InternalIP
	BadMAC             // the tag does not verify with any key
	Stale              // the timestamp is outside the window
	Replay             // an old sequence number, or an earlier boot
	numReasons
)

var reasonNames = [numReasons]string{"accepted", "malformed", "no-key", "unknown-node", "wrong-source", "bad-mac", "stale", "replay"}

func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// Rejections lists every reason a packet is rejected for (the metric's label values).
func Rejections() []Reason {
	return []Reason{Malformed, NoKey, UnknownNode, WrongSource, BadMAC, Stale, Replay}
}

// ValidKey reports whether k is long enough to be a heartbeat key.
func ValidKey(k []byte) bool { return len(k) >= KeyMinLen }

// Signer seals this speaker's heartbeats: boot nonce, sequence, timestamp and tag. Not safe for
// concurrent use. The zero value has no key and signs nothing.
type Signer struct {
	boot uint64
	seq  uint64
	mac  hash.Hash
	buf  []byte
}

// NewSigner returns a signer for one run of the process; boot must be random.
func NewSigner(boot uint64) *Signer { return &Signer{boot: boot, buf: make([]byte, 0, 128)} }

// SetKey replaces the signing key (the primary); an invalid key (see ValidKey) leaves none.
func (s *Signer) SetKey(primary []byte) {
	s.mac = nil
	if ValidKey(primary) {
		s.mac = hmac.New(sha256.New, primary)
	}
}

// HasKey reports whether the signer has a key.
func (s *Signer) HasKey() bool { return s.mac != nil }

// Sign stamps hb with the boot, the next sequence number and now, and returns the packet, or nil
// without a key. The packet is valid until the next call.
func (s *Signer) Sign(hb Heartbeat, now time.Time) []byte {
	if s.mac == nil {
		return nil
	}
	s.seq++
	hb.Boot, hb.Seq, hb.Time = s.boot, s.seq, now
	s.buf = hb.Append(s.buf[:0])
	s.mac.Reset()
	s.mac.Write(s.buf)
	s.buf = s.mac.Sum(s.buf)
	return s.buf
}

// Verifier decides whether a packet is a genuine, fresh heartbeat of a known node. It is fed with
// bytes, the source address and the time; it reads no clock and opens no socket. Not safe for
// concurrent use.
type Verifier struct {
	Window time.Duration // how far a heartbeat's timestamp may be from now
	keys   [2]hash.Hash  // primary, secondary; nil: none
	peers  map[string]*authPeer
	sum    [TagLen]byte
}

// authPeer is what the Verifier knows of one node: its address and the newest packet accepted.
type authPeer struct {
	name  string
	addr  netip.Addr
	heard bool
	boot  uint64
	seq   uint64
	last  int64 // the latest timestamp accepted from it (Unix ns)
	// the last interface list, kept so that an unchanged one costs no allocation
	ifsRaw []byte
	ifs    []string
}

// NewVerifier returns a verifier with no key and no peers.
func NewVerifier(window time.Duration) *Verifier {
	if window <= 0 {
		window = DefaultWindow
	}
	return &Verifier{Window: window, peers: map[string]*authPeer{}}
}

// SetKeys replaces the keys a tag may verify with. An invalid key (see ValidKey) counts as none;
// with no valid key every packet is rejected (NoKey).
func (v *Verifier) SetKeys(primary, secondary []byte) {
	v.keys = [2]hash.Hash{}
	if ValidKey(primary) {
		v.keys[0] = hmac.New(sha256.New, primary)
	}
	if ValidKey(secondary) {
		v.keys[1] = hmac.New(sha256.New, secondary)
	}
}

// HasKey reports whether any key is set.
func (v *Verifier) HasKey() bool { return v.keys[0] != nil || v.keys[1] != nil }

// SetPeers replaces the known nodes (from the Node objects: name and InternalIP). What is known of a
// node that stays is kept (a node whose address changed is still the same sender); every other
// node is forgotten.
func (v *Verifier) SetPeers(peers []Peer) {
	keep := make(map[string]*authPeer, len(peers))
	for _, p := range peers {
		ap, ok := v.peers[p.Node]
		if !ok {
			ap = &authPeer{name: p.Node}
		}
		ap.addr = p.Addr.Addr().Unmap()
		keep[p.Node] = ap
	}
	v.peers = keep
}

// Known reports whether name is a known node.
func (v *Verifier) Known(name string) bool { _, ok := v.peers[name]; return ok }

// Verify checks a packet received from `from` at now, and returns the heartbeat when it is genuine
// and fresh (Accepted), or why not. Only an accepted packet changes what the Verifier remembers. The
// heartbeat's Interfaces are shared with later results while they stay the same (so that steady
// heartbeats cost no allocation): do not modify them.
func (v *Verifier) Verify(pkt []byte, from netip.Addr, now time.Time) (Heartbeat, Reason) {
	if len(pkt) < TagLen {
		return Heartbeat{}, Malformed
	}
	msg, tag := pkt[:len(pkt)-TagLen], pkt[len(pkt)-TagLen:]
	f, ok := split(msg)
	if !ok {
		return Heartbeat{}, Malformed
	}
	if !v.HasKey() {
		return Heartbeat{}, NoKey
	}
	p, ok := v.peers[string(f.node)]
	if !ok {
		return Heartbeat{}, UnknownNode
	}
	if from.Unmap() != p.addr {
		return Heartbeat{}, WrongSource
	}
	if !v.verifyTag(msg, tag) {
		return Heartbeat{}, BadMAC
	}
	if d := now.UnixNano() - f.time; f.time == 0 || d > int64(v.Window) || -d > int64(v.Window) {
		return Heartbeat{}, Stale
	}
	if p.heard {
		if f.boot == p.boot && f.seq <= p.seq || f.boot != p.boot && f.time <= p.last {
			return Heartbeat{}, Replay
		}
	}
	p.heard, p.boot, p.seq = true, f.boot, f.seq
	p.last = max(p.last, f.time)
	if !bytes.Equal(f.ifaces, p.ifsRaw) || p.ifsRaw == nil {
		p.ifsRaw = append(p.ifsRaw[:0], f.ifaces...)
		if p.ifsRaw == nil {
			p.ifsRaw = []byte{}
		}
		p.ifs = splitInterfaces(f.ifaces)
	}
	return f.heartbeat(p.name, p.ifs), Accepted
}

// verifyTag reports whether tag is msg's HMAC under either key (each compared in constant time).
func (v *Verifier) verifyTag(msg, tag []byte) bool {
	for _, k := range v.keys {
		if k == nil {
			continue
		}
		k.Reset()
		k.Write(msg)
		if hmac.Equal(k.Sum(v.sum[:0]), tag) {
			return true
		}
	}
	return false
}

// Claimed returns the node name and send time a packet claims, unverified (for logging a
// rejection); ok is false for a malformed packet.
func Claimed(pkt []byte) (node string, sent time.Time, ok bool) {
	if len(pkt) < TagLen {
		return "", time.Time{}, false
	}
	f, ok := split(pkt[:len(pkt)-TagLen])
	if !ok {
		return "", time.Time{}, false
	}
	if f.time != 0 {
		sent = time.Unix(0, f.time)
	}
	return string(f.node), sent, true
}
