package liveness

import (
	"encoding/binary"
	"errors"
	"math"
	"net"
	"slices"
	"strings"
	"time"
)

// Heartbeat is what a speaker says every interval.
type Heartbeat struct {
	Node       string   // the sender's node name
	Seq        uint64   // increments per packet
	Ready      bool     // the speaker is synced with the API and ready to announce
	Leaving    bool     // the speaker is shutting down (SIGTERM): hand its addresses over now
	Interfaces []string // the sender's interfaces that are up (for advertisements naming interfaces)
	// ReadyFor is how long the sender has been ready (so that every speaker computes the same hold-down
	// end for it), capped at about 49 days.
	ReadyFor time.Duration
	// MAC is the hardware address of the sender's announcing interface (to tell which node answers when
	// two nodes claim an address).
	MAC net.HardwareAddr
}

// Changed reports whether next says something about its sender that the elections depend on and
// prev did not: it became ready or not, or it leaves. (Seq, ReadyFor and the rest change with every
// heartbeat or are read when the elections run.)
func Changed(prev, next Heartbeat) bool {
	return prev.Ready != next.Ready || prev.Leaving != next.Leaving
}

const (
	magic   = "ILB1"
	maxName = 253
)

// ErrMalformed marks a packet that is not a heartbeat.
var ErrMalformed = errors.New("malformed heartbeat")

// Marshal encodes a heartbeat: magic, flags, seq, then length-prefixed node name and interface list.
func (h Heartbeat) Marshal() []byte {
	b := make([]byte, 0, 64)
	b = append(b, magic...)
	var flags byte
	if h.Ready {
		flags |= 1
	}
	if h.Leaving {
		flags |= 2
	}
	b = append(b, flags)
	b = binary.BigEndian.AppendUint64(b, h.Seq)
	b = appendString(b, h.Node)
	b = appendString(b, strings.Join(h.Interfaces, ","))
	ms := h.ReadyFor.Milliseconds()
	ms = max(0, min(ms, math.MaxUint32))
	b = binary.BigEndian.AppendUint32(b, uint32(ms))
	mac := h.MAC
	if len(mac) > 255 {
		mac = nil
	}
	b = append(b, byte(len(mac)))
	return append(b, mac...)
}

func appendString(b []byte, s string) []byte {
	if len(s) > 0xffff {
		s = s[:0xffff]
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// Parse decodes a heartbeat, refusing anything malformed.
func Parse(b []byte) (Heartbeat, error) {
	var h Heartbeat
	if len(b) < len(magic)+1+8+2 || string(b[:4]) != magic {
		return h, ErrMalformed
	}
	h.Ready = b[4]&1 != 0
	h.Leaving = b[4]&2 != 0
	h.Seq = binary.BigEndian.Uint64(b[5:13])
	rest := b[13:]
	node, rest, ok := readString(rest)
	if !ok || node == "" || len(node) > maxName {
		return Heartbeat{}, ErrMalformed
	}
	h.Node = node
	ifs, rest, ok := readString(rest)
	if !ok {
		return Heartbeat{}, ErrMalformed
	}
	if ifs != "" {
		h.Interfaces = strings.Split(ifs, ",")
	}
	if len(rest) == 0 { // an older speaker: no ReadyFor and MAC
		return h, nil
	}
	if len(rest) < 5 || len(rest) < 5+int(rest[4]) {
		return Heartbeat{}, ErrMalformed
	}
	h.ReadyFor = time.Duration(binary.BigEndian.Uint32(rest)) * time.Millisecond
	if n := int(rest[4]); n > 0 {
		h.MAC = net.HardwareAddr(slices.Clone(rest[5 : 5+n]))
	}
	return h, nil
}

func readString(b []byte) (string, []byte, bool) {
	if len(b) < 2 {
		return "", nil, false
	}
	n := int(binary.BigEndian.Uint16(b))
	if len(b) < 2+n {
		return "", nil, false
	}
	return string(b[2 : 2+n]), b[2+n:], true
}
