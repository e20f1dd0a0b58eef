package chaos

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/ironlb/ironlb/internal/testbed/connprobe"
)

// Issue 19's invariant: the soak holds long-lived keep-alive connections (internal/testbed/connprobe)
// to a probed Service in direct-server-return mode, and none of them may break unless a fault cut
// off the pod that served it.
const InvConnection = "held connection broken, its pod's node not cut off"

// ConnReport is what the held connections showed.
type ConnReport struct {
	Addr      netip.Addr
	Mode      string // the Service's ironlb.io/external-mode
	Held      int    // TCP connections the client opened
	Broken    int    // of them, ended by an error, end of stream, or no answer for the probe's timeout
	Explained int    // of the broken, by a cut-off span of their pod's node
	Findings  []Finding
}

// JudgeConnections judges the client's report of connections held to addr. podNode maps a pod's
// name (whoami's Hostname, as the answers carry it) to its node. The rule, one flow at a time:
//
//   - a TCP flow that did not fail is fine (UDP flows are not judged: they have no connection);
//   - a flow that failed at F, having last answered at L (its opening when it never answered), served
//     last by pod P (its last answer's Hostname at or before F) is explained when P's node N is
//     known and a SpanCutOff span naming N (or every node) meets [L, F], the span's end extended by
//     slack: the fault killed P or took it off the network while the flow waited for an answer;
//   - every other failure is a finding: a break that no fault killed or cut off the pod for (the
//     flow's entry node lost, an announcer moved, an attack, the proxy), a flow whose pod is not
//     known, and a flow that failed before it ever answered.
//
// No other kind of span explains a break: a speaker killed, a controller paused, the apiserver
// restarted, an attack, or a power cut of a node that only carried the flow in (its entry node) are
// exactly what direct server return must carry connections through.
func JudgeConnections(addr netip.Addr, mode string, res connprobe.Result, podNode map[string]string, spans []Span, slack time.Duration) ConnReport {
	r := ConnReport{Addr: addr, Mode: mode}
	for _, f := range res.Flows {
		if f.Proto != "tcp" {
			continue
		}
		r.Held++
		if f.Failed.IsZero() {
			continue
		}
		r.Broken++
		last := f.LastOK
		if last.IsZero() {
			last = f.Opened
		}
		if last.IsZero() || last.After(f.Failed) {
			last = f.Failed
		}
		pod := ""
		for _, h := range f.Hosts {
			if !h.At.After(f.Failed) {
				pod = h.Name
			}
		}
		node, known := podNode[pod]
		if known && cutOff(spans, node, last, f.Failed, slack) {
			r.Explained++
			continue
		}
		var why string
		switch {
		case f.Answers == 0:
			why = "before its first answer"
		case !known:
			why = fmt.Sprintf("its pod %q on no known node", pod)
		default:
			why = fmt.Sprintf("its pod %s on %s, not cut off between %s and %s", pod, node, last.Format("15:04:05.000"), f.Failed.Format("15:04:05.000"))
			if s := running(spans, last, f.Failed, slack); len(s) > 0 {
				why += "; running: " + strings.Join(s, ", ")
			} else {
				why += "; no fault running"
			}
		}
		r.Findings = append(r.Findings, Finding{InvConnection, fmt.Sprintf("%s tcp %d %s", addr, f.Port, f.Failed.Format("15:04:05.000")),
			fmt.Sprintf("%s connection to %s from port %d broke at %s (%s, %d answers), %s", mode, addr, f.Port, f.Failed.Format("15:04:05.000"), f.Reason, f.Answers, why)})
	}
	return r
}

// cutOff says whether a SpanCutOff span naming node (or every node) meets [from, to].
func cutOff(spans []Span, node string, from, to time.Time, slack time.Duration) bool {
	for _, s := range spans {
		if s.Kind == SpanCutOff && (s.Node == "" || s.Node == node) && !to.Before(s.From) && !from.After(s.To.Add(slack)) {
			return true
		}
	}
	return false
}

// running names the faults whose spans meet [from, to] (for a finding's detail).
func running(spans []Span, from, to time.Time, slack time.Duration) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range spans {
		if !to.Before(s.From) && !from.After(s.To.Add(slack)) {
			what := s.Fault
			if s.Node != "" {
				what += " of " + s.Node
			}
			if !seen[what] {
				seen[what] = true
				out = append(out, what)
			}
		}
	}
	return out
}
