package bfd

import (
	"net/netip"
	"time"
)

// Conn is the network side of a Manager: where control packets arrive, and how each session's
// packets leave. Listen returns the one built on UDP sockets (RFC 5881); FakeNetwork builds
// in-memory ones for tests. The Manager calls Recv and Dial from one goroutine, Wake from any.
type Conn interface {
	// Recv reads one control packet into b. It waits until one arrives, Wake is called or the
	// deadline passes; in the last two cases it returns ok false. A deadline that is not after the
	// current time makes it return at once, with a packet that is already queued or ok false. A
	// Wake with no Recv waiting makes the next Recv return.
	Recv(b []byte, deadline time.Time) (d Datagram, ok bool, err error)
	// Dial opens the sending side of one session, from local (or an address the routing picks,
	// when local is the zero Addr) to peer's ControlPort.
	Dial(local, peer netip.Addr) (Sender, error)
	// Wake makes a waiting Recv return ok false.
	Wake()
}

// Datagram describes a packet Recv read.
type Datagram struct {
	N        int        // bytes read into the buffer
	Src, Dst netip.Addr // IP source and destination; Dst is the zero Addr when unknown
	SrcPort  uint16
	TTL      int // IPv4 TTL or IPv6 hop limit; -1 when unknown
}

// Sender sends one session's packets.
type Sender interface {
	Send(b []byte) error
	Close() error
}
