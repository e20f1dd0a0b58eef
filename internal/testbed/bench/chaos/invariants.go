// Package chaos is the reliability soak of issue 9 (`ironlb lab chaos`): while a churn loop creates,
// updates and deletes LoadBalancer Services, it injects faults at random (a controller replica or a
// speaker SIGKILLed, a node's power cut, a partition, packet loss on a node link, a kube-apiserver
// restart) and checks ironlb's promises all the time. This file is the pure part: the invariants over
// what was observed, with no I/O.
package chaos

import (
	"cmp"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ironlb/ironlb/internal/testbed/bench/failover"
)

// Invariant names, as the table prints them.
const (
	InvSharedAddress = "address held by two Services that may not share it"
	InvOutsidePool   = "address outside the pools allowed to serve its Service"
	InvSplitBrain    = "more than one MAC answering ARP for an address for more than 1 s"
	InvNoAnswer      = "no ARP answer for an announced address for more than 1 s"
	InvHTTP          = "request failed outside a failover window"
	InvCrash         = "ironlb container restarted without an injected kill"
	InvLeak          = "ironlb process leaking (goroutines or memory)"
)

// Invariants lists them in table order.
var Invariants = []string{InvSharedAddress, InvOutsidePool, InvSplitBrain, InvNoAnswer, InvHTTP, InvCrash, InvLeak}

// Port is a Service port as sharing sees it.
type Port struct {
	Proto string
	Port  int32
}

// Svc is what the invariants need of a LoadBalancer Service.
type Svc struct {
	Key        string       // namespace/name
	IPs        []netip.Addr // status.loadBalancer.ingress
	Pool       string       // metallb.io/address-pool ("" = any pool)
	SharingKey string       // metallb.io/allow-shared-ip
	Local      bool         // externalTrafficPolicy: Local
	Selector   string       // the selector, canonical ("" when none)
	Ports      []Port
}

// Pool is an IPAddressPool's addresses.
type Pool struct {
	Name   string
	Ranges []Range
}

// Range is a closed address range.
type Range struct{ First, Last netip.Addr }

func (r Range) contains(ip netip.Addr) bool {
	return r.First.BitLen() == ip.BitLen() && r.First.Compare(ip) <= 0 && ip.Compare(r.Last) <= 0
}

// Finding is one invariant broken at one instant, by one subject (an address or a Service).
type Finding struct {
	Invariant string
	Subject   string
	Detail    string
}

// mayShare is MetalLB's rule for two Services on one address: the same non-empty sharing key, no
// port used by both, and with externalTrafficPolicy Local on either side the same pods.
func mayShare(a, b Svc) bool {
	if a.SharingKey == "" || a.SharingKey != b.SharingKey {
		return false
	}
	if (a.Local || b.Local) && (a.Local != b.Local || a.Selector != b.Selector) {
		return false
	}
	for _, p := range a.Ports {
		if slices.Contains(b.Ports, p) {
			return false
		}
	}
	return true
}

// CheckAllocations returns the allocation invariants broken by this view of the Services and pools.
func CheckAllocations(svcs []Svc, pools []Pool) []Finding {
	var out []Finding
	holders := map[netip.Addr][]Svc{}
	for _, s := range svcs {
		for _, ip := range s.IPs {
			holders[ip] = append(holders[ip], s)
			if !inAllowedPool(ip, s.Pool, pools) {
				where := "any pool"
				if s.Pool != "" {
					where = "pool " + s.Pool
				}
				out = append(out, Finding{InvOutsidePool, s.Key + " " + ip.String(), fmt.Sprintf("%s holds %s, not in %s", s.Key, ip, where)})
			}
		}
	}
	ips := make([]netip.Addr, 0, len(holders))
	for ip := range holders {
		ips = append(ips, ip)
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	for _, ip := range ips {
		hs := holders[ip]
		for i := range hs {
			for j := i + 1; j < len(hs); j++ {
				if !mayShare(hs[i], hs[j]) {
					out = append(out, Finding{InvSharedAddress, ip.String(), fmt.Sprintf("%s held by %s and %s", ip, hs[i].Key, hs[j].Key)})
				}
			}
		}
	}
	return out
}

func inAllowedPool(ip netip.Addr, want string, pools []Pool) bool {
	for _, p := range pools {
		if want != "" && p.Name != want {
			continue
		}
		for _, r := range p.Ranges {
			if r.contains(ip) {
				return true
			}
		}
	}
	return false
}

// Tracker turns instantaneous findings into violations: a finding is a violation only once it has
// lasted longer than Grace (one reconcile: a pool that shrinks leaves its Services' addresses outside it
// until the controller has moved them). Each persistent finding counts once.
type Tracker struct {
	Grace time.Duration
	// ControlPlaneBack is when the control plane last came back (kube-apiserver ready after a
	// restart, plus a leader election): nothing reconciles while it is away, so a finding's age counts
	// from then at the earliest.
	ControlPlaneBack time.Time
	since            map[Finding]time.Time
	counted          map[Finding]bool
	Violations       []Violation
}

// Violation is a finding that outlived the grace.
type Violation struct {
	Finding
	Since, Seen time.Time
}

// Observe records the findings of one check at instant now.
func (t *Tracker) Observe(now time.Time, fs []Finding) {
	if t.since == nil {
		t.since, t.counted = map[Finding]time.Time{}, map[Finding]bool{}
	}
	cur := map[Finding]bool{}
	for _, f := range fs {
		k := Finding{Invariant: f.Invariant, Subject: f.Subject}
		cur[k] = true
		first, ok := t.since[k]
		if !ok {
			t.since[k] = now
			first = now
		}
		from := first
		if t.ControlPlaneBack.After(from) {
			from = t.ControlPlaneBack
		}
		if now.Sub(from) > t.Grace && !t.counted[k] {
			t.counted[k] = true
			f.Detail += fmt.Sprintf(" (since %s, seen %s)", first.Format("15:04:05"), now.Format("15:04:05"))
			t.Violations = append(t.Violations, Violation{Finding: f, Since: first, Seen: now})
		}
	}
	for k := range t.since {
		if !cur[k] {
			delete(t.since, k)
			delete(t.counted, k)
		}
	}
}

// Window is a span of time in which a fault may break traffic.
type Window struct {
	From, To time.Time
	Fault    string
}

func inWindows(at time.Time, ws []Window) bool {
	for _, w := range ws {
		if !at.Before(w.From) && !at.After(w.To) {
			return true
		}
	}
	return false
}

// ProbeReport is what one address's ARP and HTTP probe showed.
type ProbeReport struct {
	Addr            netip.Addr
	Sent, Failed    int           // HTTP requests
	FailedInWindows int           // failures inside a fault's window (allowed)
	LongestFailover time.Duration // longest span without exactly one answering MAC
	Findings        []Finding
}

// AnalyzeProbe checks one address's probe events (failover.Parse) against the fault windows. The
// probe asks who-has every interval; time is cut into buckets of bucket (100 ms), from the first answer
// on. A span of buckets without exactly one answering MAC is a failover window: none (the announcer
// lost, the next not yet there) or two (a handover, which starts the new announcer before the old one
// stops, or a healing partition). Issue 9 allows such windows up to maxFailover (1 s) wherever they
// are; a longer one is a split brain (two MACs) or a lost address (none). HTTP failures outside the
// fault windows are findings.
func AnalyzeProbe(addr netip.Addr, ev []failover.Event, start, end time.Time, bucket, maxFailover time.Duration, windows []Window) ProbeReport {
	r := ProbeReport{Addr: addr}
	n := int(end.Sub(start) / bucket)
	if n <= 0 {
		return r
	}
	macs := make([]map[string]bool, n)
	for _, e := range ev {
		if e.Kind != "reply" && e.Kind != "garp" {
			continue
		}
		i := int(e.At.Sub(start) / bucket)
		if i < 0 || i >= n {
			continue
		}
		if macs[i] == nil {
			macs[i] = map[string]bool{}
		}
		macs[i][strings.ToLower(e.MAC)] = true
	}
	// A change of announcer (a handover, make-before-break or not) resets the connections in flight at
	// that moment: the client's next packets reach a node without their conntrack entry. Those requests
	// may fail, for up to maxFailover after the change, as inside a fault's window.
	windows = slices.Clone(windows)
	prev := ""
	for i, m := range macs {
		if len(m) != 1 {
			continue
		}
		var mac string
		for k := range m {
			mac = k
		}
		if prev != "" && mac != prev {
			at := start.Add(time.Duration(i) * bucket)
			windows = append(windows, Window{From: at.Add(-bucket), To: at.Add(maxFailover), Fault: "handover"})
		}
		prev = mac
	}
	for _, e := range ev {
		switch e.Kind {
		case "http":
			r.Sent++
			if !e.OK {
				r.Failed++
				if inWindows(e.At, windows) || inWindows(e.End, windows) {
					r.FailedInWindows++
				} else {
					why := "" // older probe logs say nothing
					if e.Detail != "" {
						why = " " + e.Detail
					}
					r.Findings = append(r.Findings, Finding{InvHTTP, addr.String() + " " + e.At.Format("15:04:05.000"),
						fmt.Sprintf("request to %s at %s failed (%.0f ms%s; %s)", addr, e.At.Format("15:04:05.000"), float64(e.End.Sub(e.At))/1e6,
							why, around(ev, e))})
				}
			}
		}
	}
	// Spans of buckets that do not have exactly one MAC, from the first answer on.
	firstAnswer := slices.IndexFunc(macs, func(m map[string]bool) bool { return len(m) > 0 })
	if firstAnswer < 0 {
		r.Findings = append(r.Findings, Finding{InvNoAnswer, addr.String(), fmt.Sprintf("%s never answered", addr)})
		return r
	}
	for i := firstAnswer; i < n; {
		if len(macs[i]) == 1 {
			i++
			continue
		}
		j := i
		split := false
		for j < n && len(macs[j]) != 1 {
			split = split || len(macs[j]) > 1
			j++
		}
		from, to := start.Add(time.Duration(i)*bucket), start.Add(time.Duration(j)*bucket)
		span := to.Sub(from)
		if span > r.LongestFailover {
			r.LongestFailover = span
		}
		switch {
		case split && span > maxFailover:
			var all []string
			for k := i; k < j; k++ {
				for m := range macs[k] {
					if !slices.Contains(all, m) {
						all = append(all, m)
					}
				}
			}
			sort.Strings(all)
			r.Findings = append(r.Findings, Finding{InvSplitBrain, addr.String() + " " + from.Format("15:04:05.000"),
				fmt.Sprintf("%s answered by %s for %.0f ms from %s", addr, strings.Join(all, " and "), float64(span)/1e6, from.Format("15:04:05.000"))})
		case !split && span > maxFailover && i > firstAnswer:
			r.Findings = append(r.Findings, Finding{InvNoAnswer, addr.String() + " " + from.Format("15:04:05.000"),
				fmt.Sprintf("%s unanswered for %.0f ms from %s", addr, float64(span)/1e6, from.Format("15:04:05.000"))})
		}
		i = j
	}
	return r
}

// Sample is one reading of an ironlb process' metrics.
type Sample struct {
	Goroutines float64
	RSS        float64 // bytes
}

// Leaking says whether a process grew from first to last beyond what a steady process does: goroutines
// more than 1.5× plus 50, or resident memory more than 2× plus 64 MiB.
func Leaking(first, last Sample) bool {
	return last.Goroutines > 1.5*first.Goroutines+50 || last.RSS > 2*first.RSS+64<<20
}

// Table writes a run's result as Markdown: faults by kind, violations by invariant (with the first few
// details), the longest failover window, requests and churn.
func (res Result) Table(w io.Writer) {
	fmt.Fprintf(w, "| chaos run: %s, seed %d | |\n|---|---|\n", res.Duration, res.Seed)
	total := 0
	var kinds []string
	for _, k := range AllFaults {
		if n := res.Faults[k]; n > 0 {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
			total += n
		}
	}
	fmt.Fprintf(w, "| faults injected | %d: %s |\n", total, strings.Join(kinds, ", "))
	nv := 0
	for _, inv := range Invariants {
		n := len(res.Violations[inv])
		nv += n
		fmt.Fprintf(w, "| violations: %s | %d |\n", inv, n)
	}
	fmt.Fprintf(w, "| **violations, total** | **%d** |\n", nv)
	fmt.Fprintf(w, "| longest failover window (ARP, probed addresses) | %d ms |\n", res.LongestFailover.Milliseconds())
	fmt.Fprintf(w, "| requests to the probed Services (every 100 ms each) | %d sent, %d failed (%d inside fault windows, %d outside) |\n",
		res.Requests, res.Failed, res.FailedInWindows, res.Failed-res.FailedInWindows)
	fmt.Fprintf(w, "| churn: Service and pool changes | %d (%d refused or failed, e.g. while the apiserver restarted) |\n", res.ChurnOps, res.ChurnErrors)
	fmt.Fprintf(w, "| allocation checks (every second) | %d |\n", res.Checks)
	for _, inv := range Invariants {
		for i, d := range res.Violations[inv] {
			if i == 5 {
				fmt.Fprintf(w, "\n- … and %d more", len(res.Violations[inv])-5)
				break
			}
			fmt.Fprintf(w, "\n- %s: %s", inv, d)
		}
	}
	fmt.Fprintln(w)
}

// Total is the number of violations.
func (res Result) Total() int {
	n := 0
	for _, v := range res.Violations {
		n += len(v)
	}
	return n
}

// around describes what the probe saw around a failed request, to tell a dead endpoint from a change of
// announcer: the ARP answerers from 1 s before it started to its end, and the last request answered
// before it and the first after it (with the host that answered).
func around(ev []failover.Event, failed failover.Event) string {
	var macs []string
	var before, after *failover.Event
	for i := range ev {
		e := &ev[i]
		switch {
		case e.Kind == "reply" || e.Kind == "garp":
			if !e.At.Before(failed.At.Add(-time.Second)) && !e.At.After(failed.End) {
				if m := strings.ToLower(e.MAC); len(macs) == 0 || macs[len(macs)-1] != m {
					macs = append(macs, m)
				}
			}
		case e.Kind == "http" && e.OK && e.End.Before(failed.At):
			before = e
		case e.Kind == "http" && e.OK && e.At.After(failed.At) && after == nil:
			after = e
		}
	}
	req := func(e *failover.Event) string {
		if e == nil {
			return "none"
		}
		return e.At.Format("15:04:05.000") + " " + cmp.Or(e.Detail, "ok")
	}
	return fmt.Sprintf("ARP answerers %s; last answered before %s; first after %s", cmp.Or(strings.Join(macs, " > "), "none"), req(before), req(after))
}
