// Package connbench is `lab bench-connections` (issue 19's measurement): long-lived TCP and UDP
// flows from the lab's client (internal/testbed/connprobe) to a Service whose pods live on workers
// other than the node the flows enter by, then an event on that entry node (its power cut, a
// planned handover by SIGTERM of its speaker, or its return), counting per trial the flows broken,
// the longest stall of the flows that survived, and, behind the BGP router, how many flows the
// router's ECMP moved to other nodes. The configurations (layer 2 or BGP, ironlb's speaker or
// MetalLB's, the Service's external mode) run side by side in one lab; the Service dataplane is the
// lab's (`lab up --proxy`).
//
// analyze.go is pure: a trial's accounting from the client's report, order statistics and the
// table. run.go drives the lab.
package connbench

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/ironlb/ironlb/internal/testbed/connprobe"
)

// Trial is the outcome of one event, from the client's report.
type Trial struct {
	TCP, UDP int // flows held
	// Before counts the flows that broke (or never opened) before the event: the setup's fault,
	// not the event's; they are left out of everything else.
	Before               int
	TCPBroken, UDPBroken int            // flows that failed at or after the event
	Reasons              map[string]int // why they failed ("reset", "timeout", ...)
	// Stall is the longest time without an answer, after the event, of any flow that did not
	// break: a gap that ends after the event, or the time from its last answer to the end; -1
	// when no flow survived (StallTCP, StallUDP: of that protocol's flows).
	Stall    time.Duration
	StallTCP time.Duration
	StallUDP time.Duration
	// CutStall is what the event itself cost: the longest gap of a surviving flow that spans the
	// event (from its last answer before it to its first after it). A flow answered across the
	// event within the client's gap threshold adds nothing; -1 when no flow survived. Stall also
	// counts every later gap in the window, which on a loaded machine is the machine's.
	CutStall time.Duration
	// Quiet is the longest gap of a surviving flow that ended before the event: the stalls the
	// same flows had with no event at all, to read Stall and CutStall against (-1: no survivor).
	Quiet time.Duration
	// OtherPod counts the surviving flows answered by another pod after the event than before it
	// (a UDP flow can survive that; its application's session may not).
	OtherPod int
	// OtherClient counts the surviving flows whose pod saw another client address after the event
	// than before (with SNAT: the address of the node they enter by).
	OtherClient int
	// RouterMoved counts the flows that the BGP router sends to another node after the event than
	// before it; -1 when not measured (layer 2).
	RouterMoved int
}

// Broken is the number of flows the event broke.
func (t Trial) Broken() int { return t.TCPBroken + t.UDPBroken }

// Analyze accounts a trial: r is the client's report, event the instant of the event.
func Analyze(r connprobe.Result, event time.Time) Trial {
	t := Trial{Reasons: map[string]int{}, RouterMoved: -1, Stall: -1, StallTCP: -1, StallUDP: -1, CutStall: -1, Quiet: -1}
	for _, f := range r.Flows {
		if f.Proto == "tcp" {
			t.TCP++
		} else {
			t.UDP++
		}
		if f.Opened.IsZero() || (!f.Failed.IsZero() && f.Failed.Before(event)) {
			t.Before++
			continue
		}
		if !f.Failed.IsZero() {
			if f.Proto == "tcp" {
				t.TCPBroken++
			} else {
				t.UDPBroken++
			}
			t.Reasons[f.Reason]++
			continue
		}
		stall := FlowStall(f, event, r.End)
		if f.Proto == "tcp" {
			t.StallTCP = max(t.StallTCP, stall)
		} else {
			t.StallUDP = max(t.StallUDP, stall)
		}
		t.Stall = max(t.Stall, stall)
		across, quiet := eventGaps(f, event)
		t.CutStall = max(t.CutStall, across)
		t.Quiet = max(t.Quiet, quiet)
		pre, post, ok := around(f.Hosts, event)
		if ok && pre.Name != post.Name {
			t.OtherPod++
		}
		if ok && clientAddr(pre.Remote) != clientAddr(post.Remote) {
			t.OtherClient++
		}
	}
	return t
}

// FlowStall is a flow's longest time without an answer that ends after event: its gaps that end
// after it, and, if it has answered before, the time from its last answer to end. A flow that never
// answered stalls from its opening.
func FlowStall(f connprobe.Flow, event, end time.Time) time.Duration {
	var s time.Duration
	for _, g := range f.Gaps {
		if g.To.After(event) {
			s = max(s, g.To.Sub(g.From))
		}
	}
	last := cmp.Or(f.LastOK, f.Opened)
	if !last.IsZero() && end.After(last) {
		s = max(s, end.Sub(last))
	}
	return s
}

// eventGaps returns a flow's gap that spans event (0 if none: it was answered across the event
// within the gap threshold) and its longest gap that ended before event.
func eventGaps(f connprobe.Flow, event time.Time) (across, before time.Duration) {
	for _, g := range f.Gaps {
		switch {
		case !g.To.After(event):
			before = max(before, g.To.Sub(g.From))
		case !g.From.After(event):
			across = max(across, g.To.Sub(g.From))
		}
	}
	return across, before
}

// around returns who answered a flow last before event and last of all, if it answered on both
// sides of it.
func around(hosts []connprobe.Host, event time.Time) (pre, post connprobe.Host, ok bool) {
	var havePre bool
	for _, h := range hosts {
		if h.At.Before(event) {
			pre, havePre = h, true
		}
	}
	if !havePre || len(hosts) == 0 {
		return pre, post, false
	}
	post = hosts[len(hosts)-1]
	return pre, post, true
}

// clientAddr is the address of whoami's RemoteAddr ("ip:port"), without the port: a flow's port
// changes when SNAT picks another one, its address when another node masquerades it.
func clientAddr(remote string) string {
	if i := strings.LastIndexByte(remote, ':'); i > 0 {
		return strings.Trim(remote[:i], "[]")
	}
	return remote
}

// Flow names a flow by protocol and local port, as the router's ECMP sees it.
type Flow struct {
	Proto string
	Port  int
}

// Moved counts the flows whose next hop differs between before and after; a flow missing from
// either is not counted.
func Moved[H comparable](before, after map[Flow]H) int {
	n := 0
	for f, b := range before {
		if a, ok := after[f]; ok && a != b {
			n++
		}
	}
	return n
}

// Quantile returns the p-quantile of v by the nearest-rank method (v need not be sorted; the zero
// value when v is empty).
func Quantile[T cmp.Ordered](v []T, p float64) T {
	var zero T
	if len(v) == 0 {
		return zero
	}
	s := slices.Sorted(slices.Values(v))
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// Run is one configuration's trials of one event.
type Run struct {
	Label  string // the configuration, e.g. "l2, ironlb speaker, ironlb proxy, snat"
	Event  string // "power-cut", "sigterm", "return"
	Trials []Trial
}

// column returns f over the trials.
func column[T any](ts []Trial, f func(Trial) T) []T {
	out := make([]T, len(ts))
	for i, t := range ts {
		out[i] = f(t)
	}
	return out
}

// Table writes a run per row: broken flows (TCP, UDP) and the longest stall, median and p99 over the
// trials, and the totals. The stall's statistics are over the trials in which some flow survived.
func Table(w io.Writer, runs []Run) {
	fmt.Fprintf(w, "\n| configuration | event | trials | TCP broken median / p99 / total | UDP broken median / p99 / total | longest stall median / p99 / max | stall across the event median / p99 / max | longest stall before the event (no event) median / max | surviving flows on another pod / client address (total) | router moved median / p99 | broken before the event |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		ts := r.Trials
		if len(ts) == 0 {
			fmt.Fprintf(w, "| %s | %s | 0 | - | - | - | - | - | - | - | - |\n", r.Label, r.Event)
			continue
		}
		ints := func(f func(Trial) int) string {
			v := column(ts, f)
			total := 0
			for _, x := range v {
				total += x
			}
			return fmt.Sprintf("%d / %d / %d", Quantile(v, 0.5), Quantile(v, 0.99), total)
		}
		stalls := durations(ts, func(t Trial) time.Duration { return t.Stall }, true)
		across := durations(ts, func(t Trial) time.Duration { return t.CutStall }, true)
		quiet := durations(ts, func(t Trial) time.Duration { return t.Quiet }, false)
		moved := "-"
		if m := column(ts, func(t Trial) int { return t.RouterMoved }); slices.Min(m) >= 0 {
			moved = fmt.Sprintf("%d / %d", Quantile(m, 0.5), Quantile(m, 0.99))
		}
		other, client, before := 0, 0, 0
		for _, t := range ts {
			other += t.OtherPod
			client += t.OtherClient
			before += t.Before
		}
		fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %s | %s | %s | %d / %d | %s | %d |\n", r.Label, r.Event, len(ts),
			ints(func(t Trial) int { return t.TCPBroken }), ints(func(t Trial) int { return t.UDPBroken }),
			stalls, across, quiet, other, client, moved, before)
	}
	reasons := map[string]int{}
	for _, r := range runs {
		for _, t := range r.Trials {
			for k, v := range t.Reasons {
				reasons[k] += v
			}
		}
	}
	if len(reasons) > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(reasons)) {
			parts = append(parts, fmt.Sprintf("%s %d", k, reasons[k]))
		}
		fmt.Fprintf(w, "why flows broke, all runs: %s\n", strings.Join(parts, ", "))
	}
}

// durations is f over the trials in which some flow survived (f >= 0): "median / p99 / max", or
// "median / max" without p99; "-" when none survived.
func durations(ts []Trial, f func(Trial) time.Duration, p99 bool) string {
	var v []time.Duration
	for _, t := range ts {
		if d := f(t); d >= 0 {
			v = append(v, d)
		}
	}
	if len(v) == 0 {
		return "-"
	}
	if !p99 {
		return fmt.Sprintf("%s / %s", ms(Quantile(v, 0.5)), ms(slices.Max(v)))
	}
	return fmt.Sprintf("%s / %s / %s", ms(Quantile(v, 0.5)), ms(Quantile(v, 0.99)), ms(slices.Max(v)))
}

// TrialLine is one trial in the log.
func TrialLine(t Trial) string {
	moved := ""
	if t.RouterMoved >= 0 {
		moved = fmt.Sprintf(", router moved %d", t.RouterMoved)
	}
	return fmt.Sprintf("broken TCP %d/%d UDP %d/%d, longest stall %s (TCP %s, UDP %s; across the event %s, before it %s), on another pod %d, other client address %d%s, broken before the event %d",
		t.TCPBroken, t.TCP, t.UDPBroken, t.UDP, ms(t.Stall), ms(t.StallTCP), ms(t.StallUDP), ms(t.CutStall), ms(t.Quiet), t.OtherPod, t.OtherClient, moved, t.Before)
}

func ms(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
}
