package liveness

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"time"
)

// Heartbeat is what a speaker says every interval.
type Heartbeat struct {
	Node string // the sender's node name
	// Boot is the sender's random nonce for this run of its process, and Seq increments per packet
	// within it; Time is the sender's clock when it sent the packet. The Verifier rejects replays with
	// them (auth.go).
	Boot       uint64
	Seq        uint64
	Time       time.Time
	Ready      bool     // the speaker is synced with the API and ready to announce
	Leaving    bool     // the speaker is shutting down (SIGTERM): hand its addresses over now
	Interfaces []string // the sender's interfaces that are up (for advertisements naming interfaces)
	// ReadyFor is how long the sender has been ready (so that every speaker computes the same hold-down
	// end for it), capped at about 49 days.
	ReadyFor time.Duration
}

// A heartbeat carries no hardware address: a node's MAC is learned from this node's own neighbour
// table (the speaker's owner), never from a packet anyone on the network could forge.

// Changed reports whether next says something about its sender that the elections depend on and
// prev did not: it became ready or not, or it leaves. (Seq, ReadyFor and the rest change with every
// heartbeat or are read when the elections run.)
func Changed(prev, next Heartbeat) bool {
	return prev.Ready != next.Ready || prev.Leaving != next.Leaving
}

// The wire format, version 2 (magic "ILB2"; version 1 carried no key and is not accepted):
//
//	magic     4  "ILB2"
//	flags     1  bit 0 ready, bit 1 leaving
//	boot      8  the sender's per-run random nonce
//	seq       8  increments per packet within a boot
//	time      8  the sender's clock, Unix nanoseconds
//	readyFor  4  milliseconds
//	node      2+n  length-prefixed
//	ifaces    2+n  length-prefixed, comma-separated
//	tag       32 HMAC-SHA256 of everything before it, with the cluster key (auth.go)
//
// Marshal and Parse handle the body (everything but the tag); Signer and Verifier add and check it.
const (
	magic     = "ILB2"
	maxName   = 253
	headerLen = len(magic) + 1 + 8 + 8 + 8 + 4
	// offsets in the header
	offFlags    = 4
	offBoot     = 5
	offSeq      = 13
	offTime     = 21
	offReadyFor = 29
)

// ErrMalformed marks a packet that is not a heartbeat.
var ErrMalformed = errors.New("malformed heartbeat")

// Marshal encodes a heartbeat's body (no tag).
func (h Heartbeat) Marshal() []byte { return h.Append(make([]byte, 0, 64)) }

// Append appends a heartbeat's body (no tag) to b.
func (h Heartbeat) Append(b []byte) []byte {
	b = append(b, magic...)
	var flags byte
	if h.Ready {
		flags |= 1
	}
	if h.Leaving {
		flags |= 2
	}
	b = append(b, flags)
	b = binary.BigEndian.AppendUint64(b, h.Boot)
	b = binary.BigEndian.AppendUint64(b, h.Seq)
	var ns int64
	if !h.Time.IsZero() {
		ns = h.Time.UnixNano()
	}
	b = binary.BigEndian.AppendUint64(b, uint64(ns))
	ms := h.ReadyFor.Milliseconds()
	ms = max(0, min(ms, math.MaxUint32))
	b = binary.BigEndian.AppendUint32(b, uint32(ms))
	b = appendString(b, h.Node)
	b = binary.BigEndian.AppendUint16(b, 0)
	start := len(b)
	for i, ifi := range h.Interfaces {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, ifi...)
	}
	n := min(len(b)-start, 0xffff)
	b = b[:start+n]
	binary.BigEndian.PutUint16(b[start-2:], uint16(n))
	return b
}

func appendString(b []byte, s string) []byte {
	if len(s) > 0xffff {
		s = s[:0xffff]
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// body is a heartbeat body split into its fields without copying: what the Verifier reads before it
// decides whether the packet deserves a Heartbeat.
type body struct {
	flags        byte
	boot, seq    uint64
	time         int64
	readyFor     uint32
	node, ifaces []byte
}

// split checks a body's framing and returns its fields, aliasing b.
func split(b []byte) (body, bool) {
	var f body
	if len(b) < headerLen+2+2 || string(b[:len(magic)]) != magic {
		return f, false
	}
	f.flags = b[offFlags]
	f.boot = binary.BigEndian.Uint64(b[offBoot:])
	f.seq = binary.BigEndian.Uint64(b[offSeq:])
	f.time = int64(binary.BigEndian.Uint64(b[offTime:]))
	f.readyFor = binary.BigEndian.Uint32(b[offReadyFor:])
	rest := b[headerLen:]
	node, rest, ok := readBytes(rest)
	if !ok || len(node) == 0 || len(node) > maxName {
		return body{}, false
	}
	ifs, rest, ok := readBytes(rest)
	if !ok || len(rest) != 0 {
		return body{}, false
	}
	f.node, f.ifaces = node, ifs
	return f, true
}

// heartbeat turns the fields into a Heartbeat, with node and interfaces as given.
func (f body) heartbeat(node string, ifaces []string) Heartbeat {
	h := Heartbeat{Node: node, Boot: f.boot, Seq: f.seq, Ready: f.flags&1 != 0, Leaving: f.flags&2 != 0,
		Interfaces: ifaces, ReadyFor: time.Duration(f.readyFor) * time.Millisecond}
	if f.time != 0 {
		h.Time = time.Unix(0, f.time)
	}
	return h
}

func splitInterfaces(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	return strings.Split(string(b), ",")
}

// Parse decodes a heartbeat's body (no tag), refusing anything malformed. It checks no key: only
// the Verifier says whether a packet is to be believed.
func Parse(b []byte) (Heartbeat, error) {
	f, ok := split(b)
	if !ok {
		return Heartbeat{}, ErrMalformed
	}
	return f.heartbeat(string(f.node), splitInterfaces(f.ifaces)), nil
}

func readBytes(b []byte) ([]byte, []byte, bool) {
	if len(b) < 2 {
		return nil, nil, false
	}
	n := int(binary.BigEndian.Uint16(b))
	if len(b) < 2+n {
		return nil, nil, false
	}
	return b[2 : 2+n], b[2+n:], true
}
