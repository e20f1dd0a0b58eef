// Package chaos is the reliability soak of issue 9 (`ironlb lab chaos`): while a churn loop creates,
// updates and deletes LoadBalancer Services, it injects faults one at a time (a controller replica or
// a speaker SIGKILLed, a node's power cut, a partition, packet loss on a node link, a kube-apiserver
// restart; since issue 18 also attacks from the client, forged and replayed heartbeats and forged
// ARP, through package attack, a paused leading controller, a node's interface down, failing
// nftables commits, the webhook's Secret deleted) and checks ironlb's promises all the time. The pure
// parts, with no I/O: the invariants over what was observed (this file) and the schedule of faults
// (schedule.go); run.go and attacks.go are the adapters.
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
var Invariants = []string{InvSharedAddress, InvOutsidePool, InvSplitBrain, InvNoAnswer, InvHTTP, InvCrash, InvLeak,
	InvUnexplainedFailover, InvAttack, InvWebhook, InvDataplane, InvConnection, InvNotInjected, InvTooFewChecks}

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
	macs := bucketMACs(ev, start, end, bucket)
	n := len(macs)
	if n == 0 {
		return r
	}
	// A change of announcer (a handover, make-before-break or not) resets the connections in flight at
	// that moment: the client's next packets reach a node without their conntrack entry. Those requests
	// may fail, for up to maxFailover after the change, as inside a fault's window.
	windows = slices.Clone(windows)
	for _, c := range macChanges(macs) {
		at := start.Add(time.Duration(c.bucket) * bucket)
		windows = append(windows, Window{From: at.Add(-bucket), To: at.Add(maxFailover), Fault: "handover"})
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

// bucketMACs cuts [start, end) into buckets of bucket and returns, for each, the set of MACs (lower
// case) whose ARP reply or gratuitous ARP the probe saw in it: the one bucketing that AnalyzeProbe,
// Failovers and Disturbances share, so that they agree on what a bucket held. Nil when the span holds
// no whole bucket; events outside it are ignored.
func bucketMACs(ev []failover.Event, start, end time.Time, bucket time.Duration) []map[string]bool {
	n := int(end.Sub(start) / bucket)
	if n <= 0 {
		return nil
	}
	macs := make([]map[string]bool, n)
	for _, e := range ev {
		if e.Kind != "reply" && e.Kind != "garp" {
			continue
		}
		if e.At.Before(start) { // integer division rounds toward zero: -50ms would land in bucket 0
			continue
		}
		i := int(e.At.Sub(start) / bucket)
		if i >= n {
			continue
		}
		if macs[i] == nil {
			macs[i] = map[string]bool{}
		}
		macs[i][strings.ToLower(e.MAC)] = true
	}
	return macs
}

// macChange is a change of the one answering MAC: bucket is the first bucket with to alone after one
// with from alone (buckets with none or several MACs between them do not count).
type macChange struct {
	bucket   int
	from, to string
}

// macChanges lists the changes of answering MAC over bucketMACs' buckets, in order.
func macChanges(macs []map[string]bool) []macChange {
	var out []macChange
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
			out = append(out, macChange{bucket: i, from: prev, to: mac})
		}
		prev = mac
	}
	return out
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
	if c := res.Conns; c.Addr.IsValid() {
		fmt.Fprintf(w, "| keep-alive connections held to %s (%s) | %d held, %d broken (%d of them while their pod's node was cut off) |\n",
			c.Addr, c.Mode, c.Held, c.Broken, c.Explained)
	}
	fmt.Fprintf(w, "| churn: Service and pool changes | %d (%d refused or failed, e.g. while the apiserver restarted) |\n", res.ChurnOps, res.ChurnErrors)
	fmt.Fprintf(w, "| allocation checks (every second) | %d (at least %d required) |\n", res.Checks, res.MinChecks)
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
	if len(macs) > 8 { // a flapping address: the first and last changes
		macs = append(append(macs[:4:4], fmt.Sprintf("(%d more)", len(macs)-8)), macs[len(macs)-4:]...)
	}
	return fmt.Sprintf("ARP answerers %s; last answered before %s; first after %s", cmp.Or(strings.Join(macs, " > "), "none"), req(before), req(after))
}

// Issue 18's invariants: failovers must have a cause, attacks must change nothing, and a run must
// have done what it was asked to.
const (
	InvUnexplainedFailover = "failover that no fault explains"
	InvAttack              = "forged or replayed packets changed a view, an election or an answering MAC"
	InvWebhook             = "admission webhook refusing a valid object after its Secret went"
	InvDataplane           = "a node's rules lost a Service after a failed nftables commit"
	InvNotInjected         = "fault kind in the run's list never injected"
	InvTooFewChecks        = "fewer checks than --min-checks"
)

// SpanKind says what a fault's span allows.
type SpanKind int

const (
	// SpanLoses: Node (every node when "") failed, or its link did: it may lose its addresses, and its
	// peers may declare it dead or not ready.
	SpanLoses SpanKind = iota + 1
	// SpanRegains: Node came back: it may take addresses back (after its hold-down), and its peers
	// may see it alive and ready again.
	SpanRegains
	// SpanAttack: forged or replayed packets are on the wire: no view, election or answering MAC may
	// change unless another span allows it.
	SpanAttack
	// SpanCutOff: Node's pods were killed (its power cut) or cut off the network (its link cut or
	// down, or dropping packets): connections they serve may break (JudgeConnections). No other
	// judge reads it.
	SpanCutOff
)

// Span is a stretch of time in which a fault allows (SpanLoses, SpanRegains) or forbids
// (SpanAttack) changes.
type Span struct {
	From, To time.Time
	Fault    string
	Node     string // "" = any node (Loses, Regains); the attacked or impersonated node, if any (Attack)
	Kind     SpanKind
}

func (s Span) covers(at time.Time, slack time.Duration) bool {
	return !at.Before(s.From) && !at.After(s.To.Add(slack))
}

// overlaps says whether the span (its end extended by slack) meets [from, to).
func (s Span) overlaps(from, to time.Time, slack time.Duration) bool {
	return to.After(s.From) && !from.After(s.To.Add(slack))
}

// allowsDuring says whether some span of kind naming node (or every node) meets [from, to): a
// disturbance is judged over its whole length, as its From is its first bucket's start, up to a
// bucket before the first packet it holds (a power cut's span, recorded just before the cut, can
// start inside the bucket in which the cut node's last answer and its successor's first fall).
func allowsDuring(spans []Span, kind SpanKind, node string, from, to time.Time, slack time.Duration) bool {
	for _, s := range spans {
		if s.Kind == kind && (s.Node == "" || s.Node == node) && s.overlaps(from, to, slack) {
			return true
		}
	}
	return false
}

// allows says whether some span of kind covering at names node (or every node).
func allows(spans []Span, kind SpanKind, node string, at time.Time, slack time.Duration) bool {
	for _, s := range spans {
		if s.Kind == kind && (s.Node == "" || s.Node == node) && s.covers(at, slack) {
			return true
		}
	}
	return false
}

func attackAt(spans []Span, at time.Time, slack time.Duration) (Span, bool) {
	for _, s := range spans {
		if s.Kind == SpanAttack && s.covers(at, slack) {
			return s, true
		}
	}
	return Span{}, false
}

// WithoutMACs returns the probe's events but the ARP packets sent by macs (the attacker's own forged
// claims: they are the attack, not an answer).
func WithoutMACs(ev []failover.Event, macs ...string) []failover.Event {
	drop := map[string]bool{}
	for _, m := range macs {
		drop[strings.ToLower(m)] = true
	}
	out := make([]failover.Event, 0, len(ev))
	for _, e := range ev {
		if (e.Kind == "reply" || e.Kind == "garp") && drop[strings.ToLower(e.MAC)] {
			continue
		}
		out = append(out, e)
	}
	return out
}

// Failover is a change of the one MAC answering ARP for an address.
type Failover struct {
	At       time.Time
	Addr     netip.Addr
	From, To string // MACs
}

// Failovers lists the changes of answering MAC in one address's probe events, bucketed as
// AnalyzeProbe does: a change is seen between two buckets with exactly one MAC each (a handover's
// buckets with two MACs, or a failover's with none, lie between them), when the new MAC's first
// packet of the first bucket with it alone arrived.
func Failovers(addr netip.Addr, ev []failover.Event, start, end time.Time, bucket time.Duration) []Failover {
	var out []Failover
	for _, c := range macChanges(bucketMACs(ev, start, end, bucket)) {
		out = append(out, Failover{At: firstSeen(ev, c.to, start.Add(time.Duration(c.bucket)*bucket), bucket), Addr: addr, From: c.from, To: c.to})
	}
	return out
}

// firstSeen is when mac first answered within the bucket starting at from (the bucket's start if it
// did not): a change is dated by the packet, not by the bucket, so that a fault starting in the same
// bucket explains it.
func firstSeen(ev []failover.Event, mac string, from time.Time, bucket time.Duration) time.Time {
	at := time.Time{}
	for _, e := range ev {
		if (e.Kind == "reply" || e.Kind == "garp") && strings.ToLower(e.MAC) == mac && !e.At.Before(from) && e.At.Before(from.Add(bucket)) &&
			(at.IsZero() || e.At.Before(at)) {
			at = e.At
		}
	}
	if at.IsZero() {
		return from
	}
	return at
}

// JudgeFailovers returns a finding for each failover no span explains: one from a node that a span
// says may lose its addresses, or to a node that a span says may take them back (slack after each
// span's end, for detection and hold-down). An unexplained failover inside an attack's span is the
// attack's doing (InvAttack); elsewhere it is InvUnexplainedFailover. macNode names the nodes' MACs.
func JudgeFailovers(fos []Failover, macNode map[string]string, spans []Span, slack time.Duration) []Finding {
	var out []Finding
	name := func(mac string) string {
		if n, ok := macNode[strings.ToLower(mac)]; ok {
			return n
		}
		return mac
	}
	for _, f := range fos {
		from, to := name(f.From), name(f.To)
		if allows(spans, SpanLoses, from, f.At, slack) || allows(spans, SpanRegains, to, f.At, slack) {
			continue
		}
		detail := fmt.Sprintf("%s moved from %s to %s at %s", f.Addr, from, to, f.At.Format("15:04:05.000"))
		inv := InvUnexplainedFailover
		if s, ok := attackAt(spans, f.At, slack); ok {
			inv = InvAttack
			detail += " during " + s.Fault
		} else {
			detail += ", no fault running"
		}
		out = append(out, Finding{inv, f.Addr.String() + " " + f.At.Format("15:04:05.000"), detail})
	}
	return out
}

// Disturbance is a stretch of probe buckets without exactly one answering MAC (silence, or a split
// brain), after the address first answered.
type Disturbance struct {
	From, To time.Time
	Addr     netip.Addr
	MACs     []string // sorted; none for silence
}

// Disturbances lists the stretches without exactly one answering MAC (bucketed as AnalyzeProbe does).
func Disturbances(addr netip.Addr, ev []failover.Event, start, end time.Time, bucket time.Duration) []Disturbance {
	macs := bucketMACs(ev, start, end, bucket)
	n := len(macs)
	first := slices.IndexFunc(macs, func(m map[string]bool) bool { return len(m) > 0 })
	if first < 0 {
		return nil
	}
	var out []Disturbance
	for i := first; i < n; {
		if len(macs[i]) == 1 {
			i++
			continue
		}
		j := i
		all := map[string]bool{}
		for j < n && len(macs[j]) != 1 {
			for m := range macs[j] {
				all[m] = true
			}
			j++
		}
		if j == n {
			break // the probe's end, not a disturbance
		}
		d := Disturbance{From: start.Add(time.Duration(i) * bucket), To: start.Add(time.Duration(j) * bucket), Addr: addr}
		for m := range all {
			d.MACs = append(d.MACs, m)
		}
		sort.Strings(d.MACs)
		out = append(out, d)
		i = j
	}
	return out
}

// JudgeDisturbances returns an InvAttack finding for each disturbance that starts inside an attack's
// span, unless a span lets one of its MACs' nodes lose or regain addresses, or, for a silence no
// longer than maxSilence (a failover), a span lets any node lose them. A silence of at most
// minSilence is the probe's jitter on a loaded machine (an answer landing in the next bucket), not a
// change. A longer silence during an
// attack is the attack's doing even when a node was cut: its peers were kept from taking over (a
// cut node's replayed heartbeats keep it alive in their eyes). Outside attacks, AnalyzeProbe judges
// disturbances by their length.
func JudgeDisturbances(ds []Disturbance, macNode map[string]string, spans []Span, slack, minSilence, maxSilence time.Duration) []Finding {
	var out []Finding
	for _, d := range ds {
		s, attacked := attackAt(spans, d.From, slack)
		if !attacked || len(d.MACs) == 0 && d.To.Sub(d.From) <= minSilence {
			continue
		}
		explained := false
		if len(d.MACs) == 0 && d.To.Sub(d.From) <= maxSilence {
			for _, sp := range spans {
				explained = explained || sp.Kind == SpanLoses && sp.overlaps(d.From, d.To, slack)
			}
		}
		var names []string
		for _, m := range d.MACs {
			node := macNode[strings.ToLower(m)]
			explained = explained || node != "" && (allowsDuring(spans, SpanLoses, node, d.From, d.To, slack) || allowsDuring(spans, SpanRegains, node, d.From, d.To, slack))
			names = append(names, cmp.Or(node, m))
		}
		if explained {
			continue
		}
		what := "no answer"
		if len(names) > 0 {
			what = "answered by " + strings.Join(names, " and ")
		}
		out = append(out, Finding{InvAttack, d.Addr.String() + " " + d.From.Format("15:04:05.000"),
			fmt.Sprintf("%s %s for %.0f ms from %s during %s", d.Addr, what, float64(d.To.Sub(d.From))/1e6, d.From.Format("15:04:05.000"), s.Fault)})
	}
	return out
}

// Election is one reading of a Service's announcer (its ServiceL2Status's node; "" when it has none).
type Election struct {
	At      time.Time
	Service string
	Node    string
}

// JudgeElections returns a finding for each change of a Service's announcer inside an attack's span
// that no other span explains (as JudgeFailovers). Readings without an announcer are skipped: the
// status object of a handover goes before the new one comes.
func JudgeElections(samples []Election, spans []Span, slack time.Duration) []Finding {
	var out []Finding
	last := map[string]string{}
	for _, e := range samples {
		if e.Node == "" {
			continue
		}
		prev, ok := last[e.Service]
		last[e.Service] = e.Node
		if !ok || prev == e.Node {
			continue
		}
		s, attacked := attackAt(spans, e.At, slack)
		if !attacked || allows(spans, SpanLoses, prev, e.At, slack) || allows(spans, SpanRegains, e.Node, e.At, slack) {
			continue
		}
		out = append(out, Finding{InvAttack, e.Service + " " + e.At.Format("15:04:05.000"),
			fmt.Sprintf("%s's announcer changed from %s to %s at %s during %s", e.Service, prev, e.Node, e.At.Format("15:04:05.000"), s.Fault)})
	}
	return out
}

// Peer event kinds, from the speakers' log lines.
const (
	PeerAlive   = "alive"   // "speaker peer alive"
	PeerChanged = "changed" // "speaker peer changed state"
	PeerDead    = "dead"    // "speaker peers declared dead"
)

// PeerEvent is one speaker's log line saying its view of a peer changed.
type PeerEvent struct {
	At             time.Time
	Reporter, Peer string
	Kind           string
	Ready, Leaving bool // PeerChanged: the peer's new state
}

// up says whether the event brings the peer into the elections (alive, or ready and staying).
func (e PeerEvent) up() bool {
	return e.Kind == PeerAlive || e.Kind == PeerChanged && e.Ready && !e.Leaving
}

// ParsePeerLines reads a speaker's log line (log/slog's text format) and returns the peer events it
// holds: none for other lines, one per peer for "declared dead".
func ParsePeerLines(line string) []PeerEvent {
	var kind string
	switch {
	case strings.Contains(line, `msg="speaker peer alive"`):
		kind = PeerAlive
	case strings.Contains(line, `msg="speaker peer changed state"`):
		kind = PeerChanged
	case strings.Contains(line, `msg="speaker peers declared dead"`):
		kind = PeerDead
	default:
		return nil
	}
	fields := logfmt(line)
	at, err := time.Parse(time.RFC3339Nano, fieldOf(fields, "time", false))
	if err != nil {
		return nil
	}
	reporter, peers := fieldOf(fields, "node", false), fieldOf(fields, "node", true)
	if reporter == "" || peers == "" {
		return nil
	}
	var out []PeerEvent
	for _, p := range strings.Fields(strings.Trim(peers, "[]")) {
		out = append(out, PeerEvent{At: at, Reporter: reporter, Peer: p, Kind: kind,
			Ready: fieldOf(fields, "ready", true) == "true", Leaving: fieldOf(fields, "leaving", true) == "true"})
	}
	return out
}

type kv struct{ k, v string }

// logfmt splits a slog text line into its key=value pairs, in order (values may be quoted).
func logfmt(line string) []kv {
	var out []kv
	for s := strings.TrimSpace(line); s != ""; s = strings.TrimSpace(s) {
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			break
		}
		k := s[:eq]
		s = s[eq+1:]
		var v string
		if strings.HasPrefix(s, `"`) {
			end := 1
			for end < len(s) && (s[end] != '"' || s[end-1] == '\\') {
				end++
			}
			v = strings.ReplaceAll(s[1:min(end, len(s))], `\"`, `"`)
			s = s[min(end+1, len(s)):]
		} else {
			sp := strings.IndexByte(s, ' ')
			if sp < 0 {
				sp = len(s)
			}
			v, s = s[:sp], s[sp:]
		}
		out = append(out, kv{k, v})
	}
	return out
}

// fieldOf returns the first (or, with last, the last) value of key.
func fieldOf(fs []kv, key string, last bool) string {
	v := ""
	for _, f := range fs {
		if f.k == key {
			v = f.v
			if !last {
				return v
			}
		}
	}
	return v
}

// JudgePeerEvents returns a finding for each peer event inside an attack's span that no other span
// explains: a peer going down while a span says it may lose (or its reporter is the faulted node), or
// coming up while a span says it may return. A name that is no node of the cluster is never
// explained. Outside attacks, peer events are not judged (the faults cause them).
func JudgePeerEvents(evs []PeerEvent, nodes []string, spans []Span, slack time.Duration) []Finding {
	var out []Finding
	seen := map[Finding]int{} // finding key -> index in out
	var unknown []int         // per finding: events about unknown names it stands for
	var repeats []int         // per finding about a node: its further events
	for _, e := range evs {
		s, attacked := attackAt(spans, e.At, slack)
		if !attacked {
			continue
		}
		if slices.Contains(nodes, e.Peer) {
			kind := SpanLoses
			if e.up() {
				kind = SpanRegains
			}
			if allows(spans, kind, e.Peer, e.At, slack) ||
				allows(spans, SpanLoses, e.Reporter, e.At, slack) || allows(spans, SpanRegains, e.Reporter, e.At, slack) {
				continue
			}
		}
		what := e.Kind
		if e.Kind == PeerChanged {
			what = fmt.Sprintf("changed state (ready %v, leaving %v)", e.Ready, e.Leaving)
		}
		peer := e.Peer
		if !slices.Contains(nodes, e.Peer) {
			peer = "unknown names" // one finding for the flood, with its count
		}
		k := Finding{Invariant: InvAttack, Subject: e.Reporter + " " + peer + " " + s.Fault + " " + s.From.Format("15:04:05")}
		if i, ok := seen[k]; ok {
			if unknown[i] > 0 {
				unknown[i]++
			} else {
				repeats[i]++
			}
			continue // one finding per reporter, peer and attack
		}
		seen[k] = len(out)
		out = append(out, Finding{k.Invariant, k.Subject,
			fmt.Sprintf("%s saw %s %s at %s during %s", e.Reporter, e.Peer, what, e.At.Format("15:04:05.000"), s.Fault)})
		unknown, repeats = append(unknown, 0), append(repeats, 0)
		if peer != e.Peer {
			unknown[len(unknown)-1] = 1
		}
	}
	for i, n := range unknown {
		switch {
		case n > 1:
			out[i].Detail += fmt.Sprintf(" (and %d more events about unknown names)", n-1)
		case repeats[i] > 0:
			out[i].Detail += fmt.Sprintf(" (and %d more changes of that peer)", repeats[i])
		}
	}
	return out
}

// Attempt is one request that a healthy admission webhook admits.
type Attempt struct {
	At  time.Time
	Err string // "" when admitted
}

// JudgeWebhook returns a finding for the attempts refused from okFrom on (the webhook's grace to
// recover from the loss of its Secret).
func JudgeWebhook(attempts []Attempt, okFrom time.Time) []Finding {
	var out []Finding
	for _, a := range attempts {
		if a.Err != "" && !a.At.Before(okFrom) {
			out = append(out, Finding{InvWebhook, "webhook " + a.At.Format("15:04:05.000"),
				fmt.Sprintf("a valid IPAddressPool update refused at %s: %s", a.At.Format("15:04:05.000"), a.Err)})
		}
	}
	return out
}

// MapElem is one element of a node's service-ips verdict map.
type MapElem struct {
	Addr   netip.Addr
	Proto  string // lower case
	Port   int32
	Target string // the chain its verdict jumps or goes to
}

// CheckServiceIPs returns the findings of one node's service-ips map against the Services: an
// element of a Service's address and port that goes to the chain rogue (which nobody but the fault
// made: the proxy's full resync did not replace it), and a Service of must (stable, Cluster policy)
// whose address and port have no element.
func CheckServiceIPs(node string, svcs []Svc, must []string, elems []MapElem, rogue string) []Finding {
	type key struct {
		a     netip.Addr
		proto string
		port  int32
	}
	have := map[key]string{}
	for _, e := range elems {
		have[key{e.Addr, strings.ToLower(e.Proto), e.Port}] = e.Target
	}
	var out []Finding
	for _, s := range svcs {
		for _, ip := range s.IPs {
			for _, p := range s.Ports {
				k := key{ip, strings.ToLower(p.Proto), p.Port}
				target, ok := have[k]
				subject := fmt.Sprintf("%s %s %s/%d", node, ip, k.proto, p.Port)
				switch {
				case ok && target == rogue:
					out = append(out, Finding{InvDataplane, subject, fmt.Sprintf("%s: %s %s/%d of %s still goes to %s", node, ip, k.proto, p.Port, s.Key, rogue)})
				case !ok && slices.Contains(must, s.Key):
					out = append(out, Finding{InvDataplane, subject, fmt.Sprintf("%s: no rule for %s %s/%d of %s", node, ip, k.proto, p.Port, s.Key)})
				}
			}
		}
	}
	return out
}

// CheckCoverage returns the findings of a run that did not do what it was asked: a kind of its list
// never injected, or fewer checks than minChecks.
func CheckCoverage(kinds []string, injected map[string]int, checks, minChecks int) []Finding {
	var out []Finding
	for _, k := range kinds {
		if injected[k] == 0 {
			out = append(out, Finding{InvNotInjected, k, fmt.Sprintf("%s was never injected (make the run longer, or --every shorter)", k)})
		}
	}
	if checks < minChecks {
		out = append(out, Finding{InvTooFewChecks, "checks", fmt.Sprintf("%d checks ran, want at least %d", checks, minChecks)})
	}
	return out
}

// ProbeEnd is where a probe's log may be judged up to: end, or the start of its last HTTP request
// when that is earlier. The probes run for a fixed time (--duration and a margin); a fault that
// overruns the run (a kube-apiserver slow to come back is waited for) can outlast them, and the
// silence after a probe's last line is the probe gone, not an address unanswered. The probe sends
// an HTTP request every interval whether or not ARP is answered, so its last request is its end.
func ProbeEnd(ev []failover.Event, end time.Time) time.Time {
	var last time.Time
	for _, e := range ev {
		if e.Kind == "http" && e.At.After(last) {
			last = e.At
		}
	}
	if !last.IsZero() && last.Before(end) {
		return last
	}
	return end
}
