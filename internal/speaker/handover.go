package speaker

import (
	"net/netip"
	"time"
)

// handoverLinger bounds how long this node keeps answering for an address it lost to another node
// without seeing that node claim it. The winner sends gratuitous announcements at once and after 20 ms,
// 200 ms and 1 s; two seconds outlast them all.
const handoverLinger = 2 * time.Second

// handovers tracks the addresses this node keeps answering for after losing an election it is still
// eligible for (election.Decision.Lingers): a handover that no failure caused is make-before-break.
// An address leaves the set when the winner claims it on the wire (claimed), when this node wins it
// again (forget), when this node stops being
// eligible, or when the linger ends. Owned by the run goroutine.
type handovers struct {
	linger time.Duration
	until  map[netip.Addr]time.Time // address -> end of its linger
}

func newHandovers(linger time.Duration) *handovers {
	return &handovers{linger: linger, until: map[netip.Addr]time.Time{}}
}

// keep is asked at each reconcile for an address this node announces but did not win. mayLinger is
// Decision.Lingers for this node. It reports whether to keep answering; false means withdraw now.
func (h *handovers) keep(a netip.Addr, mayLinger bool, now time.Time) bool {
	if !mayLinger {
		delete(h.until, a)
		return false
	}
	end, ok := h.until[a]
	if !ok {
		end = now.Add(h.linger)
		h.until[a] = end
	}
	if !now.Before(end) {
		delete(h.until, a)
		return false
	}
	return true
}

// forget ends a's linger: this node is elected for it again, or withdrew it.
func (h *handovers) forget(a netip.Addr) { delete(h.until, a) }

// lingering reports whether this node answers for a only until its winner takes it.
func (h *handovers) lingering(a netip.Addr) bool {
	_, ok := h.until[a]
	return ok
}

// claimed is called when another node claims a on the wire. It reports whether a was lingering, in
// which case the handover is complete and the caller withdraws a.
func (h *handovers) claimed(a netip.Addr) bool {
	_, ok := h.until[a]
	delete(h.until, a)
	return ok
}

// next returns the earliest end of a linger, zero when nothing lingers.
func (h *handovers) next() time.Time {
	var t time.Time
	for _, end := range h.until {
		if t.IsZero() || end.Before(t) {
			t = end
		}
	}
	return t
}

// yieldHold is how long this node leaves alone an address it gave up to a duplicate announcer.
const yieldHold = 500 * time.Millisecond

// yields tracks the addresses this node gave up to another node that claimed them too (resolve, after a
// partition heals or while views differ): it does not announce them again for yieldHold while that
// node stays alive, so that a view that still elects this node (a cache not yet caught up after a
// partition) does not take the address back at every reconcile, each time with gratuitous
// announcements that steer clients back here. The node's failure ends the hold at once: failover is
// not delayed. Owned by the run goroutine.
type yields map[netip.Addr]yield

type yield struct {
	node  string
	until time.Time
}

// hold records that a was given up to node until until.
func (y yields) hold(a netip.Addr, node string, until time.Time) { y[a] = yield{node, until} }

// holds reports whether a is still left to its claimant at now; alive says whether a node is alive.
func (y yields) holds(a netip.Addr, now time.Time, alive func(string) bool) bool {
	v, ok := y[a]
	if !ok {
		return false
	}
	if !now.Before(v.until) || !alive(v.node) {
		delete(y, a)
		return false
	}
	return true
}

// next forgets the holds ended at now and returns the earliest end of the others, zero when none.
func (y yields) next(now time.Time) time.Time {
	var t time.Time
	for a, v := range y {
		if !now.Before(v.until) {
			delete(y, a)
			continue
		}
		if t.IsZero() || v.until.Before(t) {
			t = v.until
		}
	}
	return t
}
