package speaker

import (
	"maps"
	"slices"
	"time"
)

// Data-plane health (issue 18): whether this node can answer at all. Its responders' sockets can
// fail, and the interface they serve can be deleted, renamed or go down; a node that cannot answer
// must not claim to be ready, or its peers leave it the addresses it is elected for and clients meet
// silence. This file is pure: dataplane is fed with events (dataplaneEvent) and the time, and says
// whether the node is ready, why not, and which responders to reopen when. The adapters report the
// events (layer2.WatchLink for the link, layer2.Managed and Config.OnNetDown for the sockets); the
// owner (dataplaneStep in owner.go) applies them, reopens, and acts on the verdict.
//
// Rules:
//
//  1. The data plane is up when the link is up (it exists under its name, is administratively up
//     and has a carrier) and every responder's socket is open. It is ready once it has been up for
//     Listen (DataplaneListening meanwhile): back from a fault, the node listens to its peers'
//     heartbeats before it speaks, as at start-up, so that it does not elect itself before it hears
//     that another node holds its addresses. The node is ready (heartbeat Ready, /readyz, election of
//     itself) only when the data plane is and it is past its start-up listening.
//  2. A link fault (deleted, renamed, down, no carrier) faults every responder's socket too: a
//     packet socket outlives its interface but never receives again once the interface is gone, and
//     the interface created again has another index.
//  3. A faulted socket is reopened: at once when the link comes (back) up or changes index, otherwise
//     after a backoff that doubles with each consecutive failure (a socket failing again, a reopen
//     failing), from dataplaneRetryMin to dataplaneRetryMax. Retrying while the link is known down
//     is a safety net for a lost link notification; a reopen then fails while the interface is
//     missing or administratively down (layer2.LookupUp).
//  4. The failures count from zero again after dataplaneStable of health, or when the link comes
//     back up.
//  5. While the data plane is not ready this node is not alive in its own elections (plan rule 1),
//     so it withdraws everything (WithdrawDataplaneDown); its heartbeats say Ready=false, so its
//     peers elect without it. Ready again, its ready time starts over (at the end of the listening):
//     its hold-down runs as a returning node's does.

const (
	dataplaneRetryMin = 100 * time.Millisecond
	dataplaneRetryMax = 10 * time.Second
	dataplaneStable   = 30 * time.Second
)

// dataplaneReason says why the data plane is not ready.
type dataplaneReason string

const (
	// DataplaneLinkMissing: no interface has the served name (deleted).
	DataplaneLinkMissing dataplaneReason = "LinkMissing"
	// DataplaneLinkRenamed: the served interface was renamed.
	DataplaneLinkRenamed dataplaneReason = "LinkRenamed"
	// DataplaneLinkDown: the interface is administratively down or has no carrier.
	DataplaneLinkDown dataplaneReason = "LinkDown"
	// DataplaneSocketError: a responder's socket failed (a read error, or ENETDOWN).
	DataplaneSocketError dataplaneReason = "SocketError"
	// DataplaneReopenFailed: reopening a responder's socket failed.
	DataplaneReopenFailed dataplaneReason = "ReopenFailed"
	// DataplaneListening: up again, listening to the peers before speaking (rule 1).
	DataplaneListening dataplaneReason = "Listening"
)

// dataplaneEvent is one report about the data plane.
type dataplaneEvent struct {
	// Responder names the responder ("ARP", "NDP") for a report about its socket; empty for the
	// link.
	Responder string
	// Up: the link is up (Index says which), or the responder's socket is (re)opened. Otherwise Reason
	// says what failed.
	Up     bool
	Index  int // the link's index, for a link report
	Reason dataplaneReason
	Detail string // for people: the error, the link's new name
}

// dataplaneFault is why one part is not working.
type dataplaneFault struct {
	Reason dataplaneReason
	Detail string
}

// dataplane is the data plane's health, as a value: apply returns the next one and never changes
// its receiver.
type dataplane struct {
	// Responders are the responders the node runs, in order ("ARP", and "NDP" with IPv6).
	Responders []string
	// Listen is how long the data plane must be up again before it is ready (rule 1);
	// ListenUntil is when the current listening ends.
	Listen      time.Duration
	ListenUntil time.Time
	// Link is the link's fault, nil when it is up; LinkIndex its last known index (0: unknown).
	Link      *dataplaneFault
	LinkIndex int
	// Sockets are the responders whose socket is faulted, with why.
	Sockets map[string]dataplaneFault
	// Since is when the data plane went down (zero while up); HealthySince when it came up (zero:
	// from the start).
	Since, HealthySince time.Time
	// Failures counts consecutive failures (rule 3); RetryAt is when to reopen the faulted sockets
	// (zero: nothing to reopen).
	Failures int
	RetryAt  time.Time
}

func newDataplane(responders ...string) dataplane {
	return dataplane{Responders: responders, Sockets: map[string]dataplaneFault{}}
}

// Up says whether the data plane can answer: the link up, every socket open (rule 1).
func (d dataplane) Up() bool { return d.Link == nil && len(d.Sockets) == 0 }

// Ready says whether the data plane is up and done listening at now (rule 1).
func (d dataplane) Ready(now time.Time) bool { return d.Up() && !now.Before(d.ListenUntil) }

// Why returns why the data plane is not ready at now: the link's fault, else the first faulted
// responder's (in Responders' order) with the responder's name, else DataplaneListening; zero when
// ready.
func (d dataplane) Why(now time.Time) (dataplaneFault, string) {
	if d.Link != nil {
		return *d.Link, ""
	}
	for _, r := range d.Responders {
		if f, ok := d.Sockets[r]; ok {
			return f, r
		}
	}
	if now.Before(d.ListenUntil) {
		return dataplaneFault{Reason: DataplaneListening, Detail: "up again, listening to the peers for " + d.Listen.String()}, ""
	}
	return dataplaneFault{}, ""
}

// Next returns when the verdict may change without an event: the next reopen, or the listening's
// end; zero when nothing is pending.
func (d dataplane) Next(now time.Time) time.Time {
	if !d.Up() {
		return d.RetryAt
	}
	if now.Before(d.ListenUntil) {
		return d.ListenUntil
	}
	return time.Time{}
}

// Due returns the responders to reopen at now (rule 3), in Responders' order.
func (d dataplane) Due(now time.Time) []string {
	if d.RetryAt.IsZero() || now.Before(d.RetryAt) {
		return nil
	}
	var due []string
	for _, r := range d.Responders {
		if _, ok := d.Sockets[r]; ok {
			due = append(due, r)
		}
	}
	return due
}

// apply returns the health after ev at now.
func (d dataplane) apply(ev dataplaneEvent, now time.Time) dataplane {
	was := d.Up()
	d.Sockets = maps.Clone(d.Sockets)
	if d.Sockets == nil {
		d.Sockets = map[string]dataplaneFault{}
	}
	switch {
	case ev.Responder == "" && ev.Up:
		replaced := d.LinkIndex != 0 && ev.Index != 0 && ev.Index != d.LinkIndex
		if ev.Index != 0 {
			d.LinkIndex = ev.Index
		}
		if replaced { // rule 2: created again under the same name while this node looked away
			d.faultSockets(dataplaneFault{Reason: DataplaneLinkMissing, Detail: "the interface was created again"})
		}
		if d.Link != nil || replaced {
			d.Failures = 0 // rule 4
		}
		d.Link = nil
		if len(d.Sockets) > 0 {
			d.RetryAt = now // rule 3: at once
		}
	case ev.Responder == "":
		f := dataplaneFault{Reason: ev.Reason, Detail: ev.Detail}
		d.Link = &f
		d.faultSockets(f)
		d.failed(now)
	case ev.Up:
		if !slices.Contains(d.Responders, ev.Responder) {
			return d
		}
		delete(d.Sockets, ev.Responder)
		if len(d.Sockets) == 0 {
			d.RetryAt = time.Time{}
		}
	default:
		if !slices.Contains(d.Responders, ev.Responder) {
			return d
		}
		d.Sockets[ev.Responder] = dataplaneFault{Reason: ev.Reason, Detail: ev.Detail}
		d.failed(now)
	}
	switch up := d.Up(); {
	case was && !up:
		d.Since, d.ListenUntil = now, time.Time{}
	case !was && up:
		d.Since, d.HealthySince, d.ListenUntil = time.Time{}, now, now.Add(d.Listen)
	}
	return d
}

// faultSockets faults every responder's socket not faulted yet with f (rule 2).
func (d *dataplane) faultSockets(f dataplaneFault) {
	for _, r := range d.Responders {
		if _, ok := d.Sockets[r]; !ok {
			d.Sockets[r] = f
		}
	}
}

// failed counts a failure at now and schedules the next reopen (rules 3 and 4).
func (d *dataplane) failed(now time.Time) {
	// Since is still zero when this failure ends a healthy spell (apply sets it afterwards).
	if d.Since.IsZero() && now.Sub(d.HealthySince) >= dataplaneStable {
		d.Failures = 0
	}
	d.Failures++
	d.RetryAt = now.Add(dataplaneBackoff(d.Failures))
}

// dataplaneBackoff is the wait before the reopen that follows the n-th consecutive failure (n >= 1).
func dataplaneBackoff(n int) time.Duration {
	b := dataplaneRetryMin
	for i := 1; i < n && b < dataplaneRetryMax; i++ {
		b *= 2
	}
	return min(b, dataplaneRetryMax)
}
