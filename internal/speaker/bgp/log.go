package bgp

import (
	"context"
	"log/slog"
	"net/netip"
)

// attempt is what GoBGP's log says about a failed attempt to open a session. GoBGP v4 opens
// outgoing connections and exchanges OPEN messages in a connection manager that stays in the
// Active state: a refused or timed-out connection, or an OPEN refused with a NOTIFICATION either
// way, changes no state and reaches no watcher, only the log.
type attempt struct {
	kind          attemptKind
	code, subcode uint8  // of the NOTIFICATION
	text          string // the dial error
}

type attemptKind int

const (
	connectFailed    attemptKind = iota + 1 // "failed to connect", attribute Error
	notificationSent                        // "sent notification", attributes Code and Subcode
	notificationRecv                        // "received notification", attributes Code and Subcode
)

// gobgpLog is the slog.Handler GoBGP logs to. It passes records at or above level to next (nil:
// none), and reports the records of failed attempts (see attempt) with the peer they are about,
// which GoBGP's peer loggers carry as the attribute Key.
type gobgpLog struct {
	next      slog.Handler
	level     slog.Level
	key       string // the peer, from a Key attribute added by WithAttrs
	onAttempt func(peer netip.Addr, a attempt)
}

func (h *gobgpLog) Enabled(context.Context, slog.Level) bool {
	// "failed to connect" is a debug record.
	return true
}

func (h *gobgpLog) Handle(ctx context.Context, r slog.Record) error {
	var kind attemptKind
	switch r.Message {
	case "failed to connect":
		kind = connectFailed
	case "sent notification":
		kind = notificationSent
	case "received notification":
		kind = notificationRecv
	}
	if kind != 0 && h.onAttempt != nil {
		key, a := h.key, attempt{kind: kind}
		r.Attrs(func(at slog.Attr) bool {
			switch at.Key {
			case "Key":
				key = at.Value.String()
			case "Error":
				a.text = at.Value.String()
			case "Code":
				a.code = uint8(at.Value.Int64())
			case "Subcode":
				a.subcode = uint8(at.Value.Int64())
			}
			return true
		})
		if peer, err := netip.ParseAddr(key); err == nil {
			h.onAttempt(peer, a)
		}
	}
	if h.next == nil || r.Level < h.level || !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *gobgpLog) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	for _, a := range attrs {
		if a.Key == "Key" {
			c.key = a.Value.String()
		}
	}
	if c.next != nil {
		c.next = c.next.WithAttrs(attrs)
	}
	return &c
}

func (h *gobgpLog) WithGroup(name string) slog.Handler {
	c := *h
	if c.next != nil {
		c.next = c.next.WithGroup(name)
	}
	return &c
}
