// Package bgpfail is the BGP failover benchmark (seed 003's BGP mode): in the lab with a router, the
// client behind it (mypc2) requests a service address every 10 ms over a new connection each time,
// so ECMP spreads the requests over every node, while one node loses power and comes back. The
// router's kernel routing table is watched over netlink: the figure that matters is how long the
// router keeps a next hop for a dead node (with BFD: the detection time; without: the hold time), and
// what the client saw meanwhile. Analysis is pure (Analyze, Summarize, Table); run.go drives the lab.
package bgpfail

import (
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/ironlb/ironlb/internal/testbed/bench/failover"
)

// RouteEvent is the router's route to the service address after one netlink message: its next hops
// (none when the route is gone).
type RouteEvent struct {
	At       time.Time
	NextHops []netip.Addr
}

// Trial is one power cut and return. Durations are -1 when the event never came.
type Trial struct {
	BFDDown      time.Duration // cut -> the router's BFD session with the dead node goes down (-1 without BFD)
	Withdrawn    time.Duration // cut -> the router's route loses the dead node's next hop
	ClientOutage time.Duration // cut -> start of the last failed request before the return (0: none failed)
	Sent, Failed int           // requests started between the cut and the return, and how many failed
	Readded      time.Duration // return -> the dead node's next hop is back
	BackFailed   int           // failed requests started after the return
	NextHops     int           // next hops before the cut
}

// Analyze computes a trial: routes are the router's route events, reqs the client's requests (kind
// "http"), dead the cut node's address, cut and back the power cut and return.
func Analyze(routes []RouteEvent, reqs []failover.Event, dead netip.Addr, cut, back time.Time) Trial {
	t := Trial{BFDDown: -1, Withdrawn: -1, Readded: -1}
	has := func(e RouteEvent) bool { return slices.Contains(e.NextHops, dead) }
	present := true // the dead node's next hop is in the route
	for _, e := range routes {
		if !e.At.After(cut) {
			t.NextHops = len(e.NextHops)
			present = has(e)
			continue
		}
		if e.At.Before(back) {
			if t.Withdrawn < 0 && !has(e) {
				t.Withdrawn = e.At.Sub(cut)
			}
		} else if t.Readded < 0 && has(e) && !present {
			t.Readded = e.At.Sub(back)
		}
		present = has(e)
	}
	for _, r := range reqs {
		if r.Kind != "http" {
			continue
		}
		switch {
		case r.At.Before(cut):
		case r.At.Before(back):
			t.Sent++
			if !r.OK {
				t.Failed++
				t.ClientOutage = max(t.ClientOutage, r.At.Sub(cut))
			}
		default:
			if !r.OK {
				t.BackFailed++
			}
		}
	}
	return t
}

// BFDDownAt finds, in bfdd's log, the first state change of peer's session from up to down at or
// after since ("2026/11/23 04:01:31.365872 BFD: [...] state-change: [mhop:no peer:172.18.0.5 ...] up
// -> down reason:control-expired"; FRR logs local time).
func BFDDownAt(log string, peer netip.Addr, since time.Time) (time.Time, bool) {
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "peer:"+peer.String()+" ") || !strings.Contains(line, "] up -> down") || len(line) < 26 {
			continue
		}
		at, err := time.ParseInLocation("2006/01/02 15:04:05.000000", line[:26], time.Local)
		if err == nil && !at.Before(since) {
			return at, true
		}
	}
	return time.Time{}, false
}

// Table prints the trials and their median, p90 and max.
func Table(w io.Writer, label string, ts []Trial) {
	fmt.Fprintf(w, "\n%s: %d trials\n", label, len(ts))
	fmt.Fprintf(w, "%-6s %-14s %-16s %-16s %-16s %-15s %s\n", "trial", "BFD down", "route withdrawn", "client outage", "failed/sent", "route re-added", "failed after return")
	var bd, wd, co, ra []time.Duration
	for i, t := range ts {
		fmt.Fprintf(w, "%-6d %-14s %-16s %-16s %-16s %-15s %d\n", i+1, ms(t.BFDDown), ms(t.Withdrawn), ms(t.ClientOutage), fmt.Sprintf("%d/%d", t.Failed, t.Sent), ms(t.Readded), t.BackFailed)
		if t.BFDDown >= 0 {
			bd = append(bd, t.BFDDown)
		}
		if t.Withdrawn >= 0 {
			wd = append(wd, t.Withdrawn)
		}
		co = append(co, t.ClientOutage)
		if t.Readded >= 0 {
			ra = append(ra, t.Readded)
		}
	}
	row := func(name string, ds []time.Duration) {
		s := failover.Summarize(ds)
		fmt.Fprintf(w, "%-16s median %-9s p90 %-9s max %-9s (n=%d)\n", name, ms(s.Median), ms(s.P90), ms(s.Max), len(ds))
	}
	if len(bd) > 0 {
		row("BFD down", bd)
	}
	row("route withdrawn", wd)
	row("client outage", co)
	row("route re-added", ra)
	if missing := len(ts) - len(wd); missing > 0 {
		fmt.Fprintf(w, "route never withdrawn before the node's return in %d trials\n", missing)
	}
}

func ms(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}

// Spread counts requests by the node that received them, from whoami's RemoteAddr: with
// externalTrafficPolicy Cluster the receiving node masquerades, so the pod sees the node's address on
// the bridge (pod on another node) or its pod-network gateway (pod on the same node).
func Spread(remoteAddrs []netip.Addr, nodeOf func(netip.Addr) string) map[string]int {
	out := map[string]int{}
	for _, a := range remoteAddrs {
		n := nodeOf(a)
		if n == "" {
			n = "unknown " + a.String()
		}
		out[n]++
	}
	return out
}

// SpreadTable prints a spread as a bar per node.
func SpreadTable(w io.Writer, spread map[string]int) {
	total := 0
	var names []string
	for n, c := range spread {
		total += c
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		c := spread[n]
		fmt.Fprintf(w, "%-22s %5d  %5.1f%%  %s\n", n, c, 100*float64(c)/float64(max(total, 1)), strings.Repeat("█", c*50/max(total, 1)))
	}
}
