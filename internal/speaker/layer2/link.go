package layer2

// The state of the link a responder serves, as the kernel's link notifications tell it (RTM_NEWLINK,
// RTM_DELLINK). This file is pure: linkTracker turns notifications, given as plain numbers, into
// LinkStates; link_linux.go subscribes to them (WatchLink).

// LinkReason says why a link is not usable for answering.
type LinkReason string

const (
	// LinkMissing: no interface has the name (it was deleted, or never created).
	LinkMissing LinkReason = "LinkMissing"
	// LinkRenamed: the interface served was renamed; none has the name now.
	LinkRenamed LinkReason = "LinkRenamed"
	// LinkAdminDown: the interface is administratively down (IFF_UP clear).
	LinkAdminDown LinkReason = "LinkAdminDown"
	// LinkNoCarrier: the interface is up but has no carrier (IFF_LOWER_UP clear), as a veth whose
	// peer is down.
	LinkNoCarrier LinkReason = "LinkNoCarrier"
)

// LinkState is what the kernel says about the interface a watcher follows by name.
type LinkState struct {
	Name string // the name followed
	// Index is the interface's index, 0 when no interface has the name. A link deleted and created
	// again comes back with another index: sockets bound to the old one receive nothing.
	Index int
	// Up: the interface exists, is administratively up and has a carrier.
	Up bool
	// Reason says why the link is not up; empty when Up.
	Reason LinkReason
	// Detail completes Reason for people (the new name of a renamed link).
	Detail string
}

// The kernel's numbers the tracker reads (linux/rtnetlink.h, linux/if.h).
const (
	rtmNewLink = 16
	rtmDelLink = 17
	iffUp      = 0x1
	iffLowerUp = 0x10000
)

// linkTracker follows one interface by name through link notifications.
type linkTracker struct {
	name     string
	state    LinkState
	reported bool // a state was reported: the first is, changed or not
}

func newLinkTracker(name string) *linkTracker {
	return &linkTracker{name: name, state: LinkState{Name: name, Reason: LinkMissing}}
}

// seed sets the state from a lookup by name (found, with its index and flags, or not), as done
// after (re)subscribing; it reports the state and whether it changed.
func (t *linkTracker) seed(found bool, index int, flags uint32) (LinkState, bool) {
	next := LinkState{Name: t.name, Reason: LinkMissing}
	if found {
		next = t.fromFlags(index, flags)
	}
	return t.set(next)
}

// update applies one notification (its message type, and the link's index, name and flags) and
// reports the state and whether it changed. Notifications about other links change nothing.
func (t *linkTracker) update(msgType uint16, index int, name string, flags uint32) (LinkState, bool) {
	ours := t.state.Index != 0 && index == t.state.Index
	switch {
	case msgType == rtmDelLink && (ours || name == t.name):
		return t.set(LinkState{Name: t.name, Reason: LinkMissing, Detail: "deleted"})
	case msgType == rtmNewLink && name == t.name:
		return t.set(t.fromFlags(index, flags))
	case msgType == rtmNewLink && ours:
		return t.set(LinkState{Name: t.name, Reason: LinkRenamed, Detail: "renamed to " + name})
	}
	return t.state, false
}

func (t *linkTracker) fromFlags(index int, flags uint32) LinkState {
	s := LinkState{Name: t.name, Index: index, Up: true}
	switch {
	case flags&iffUp == 0:
		s.Up, s.Reason = false, LinkAdminDown
	case flags&iffLowerUp == 0:
		s.Up, s.Reason = false, LinkNoCarrier
	}
	return s
}

func (t *linkTracker) set(next LinkState) (LinkState, bool) {
	changed := next != t.state || !t.reported
	t.state, t.reported = next, true
	return next, changed
}
