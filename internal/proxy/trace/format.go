package trace

import (
	"fmt"
	"strings"
	"text/tabwriter"
)

// maxRuleWidth is where String cuts long rules (a Maglev rule lists hundreds of buckets).
const maxRuleWidth = 72

// String prints the trace as a table of steps, the steps the paths share once and then each
// path's own, and each path's outcome.
func (r *Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "packet: %s\n", r.Packet)
	common := commonPrefix(r.Paths)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tHOOK\tCHAIN\tRULE\tRESULT")
	n := 0
	if len(r.Paths) > 0 {
		for _, s := range r.Paths[0].Steps[:common] {
			n++
			writeStep(tw, fmt.Sprint(n), s)
		}
	}
	tw.Flush()
	for i, p := range r.Paths {
		if len(r.Paths) > 1 {
			fmt.Fprintf(&b, "path %d of %d:\n", i+1, len(r.Paths))
			tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
			for j, s := range p.Steps[common:] {
				writeStep(tw, fmt.Sprintf("%d", n+j+1), s)
			}
			tw.Flush()
		}
		fmt.Fprintf(&b, "=> %s\n", p.outcome())
	}
	return b.String()
}

func writeStep(tw *tabwriter.Writer, n string, s Step) {
	rule := s.Rule
	if len(rule) > maxRuleWidth {
		rule = rule[:maxRuleWidth-3] + "..."
	}
	note := s.Note
	if s.Comment != "" {
		note = appendNote(note, fmt.Sprintf("%q", s.Comment))
	}
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n, s.Hook, s.Chain, rule, note)
}

// outcome is a path's result in words.
func (p *Path) outcome() string {
	var parts []string
	if p.Choice != "" {
		parts = append(parts, "choice: "+p.Choice)
	}
	switch p.Verdict {
	case Accept:
		if p.DNAT.IsValid() {
			parts = append(parts, "DNAT to "+p.DNAT.String())
		} else {
			parts = append(parts, "not DNATed")
		}
		if p.Masquerade {
			parts = append(parts, "masquerade: yes")
		} else {
			parts = append(parts, "masquerade: no")
		}
		parts = append(parts, "delivered: "+p.Delivery)
	default:
		parts = append(parts, strings.ToUpper(p.Verdict.String())+": "+p.Reason)
	}
	return strings.Join(parts, ", ")
}

func commonPrefix(paths []Path) int {
	if len(paths) == 0 {
		return 0
	}
	n := len(paths[0].Steps)
	for _, p := range paths[1:] {
		i := 0
		for i < n && i < len(p.Steps) && p.Steps[i] == paths[0].Steps[i] {
			i++
		}
		n = i
	}
	return n
}
