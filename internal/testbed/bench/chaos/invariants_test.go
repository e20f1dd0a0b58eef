package chaos

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ironlb/ironlb/internal/testbed/bench/failover"
)

var (
	testPoolA = Pool{Name: "a", Ranges: []Range{{netip.MustParseAddr("10.0.0.0"), netip.MustParseAddr("10.0.0.15")}}}
	testPoolB = Pool{Name: "b", Ranges: []Range{{netip.MustParseAddr("10.0.1.0"), netip.MustParseAddr("10.0.1.3")}}}
	ip        = netip.MustParseAddr
	portHTTP  = Port{"TCP", 80}
	portHTTPS = Port{"TCP", 443}
)

func invariantsOf(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Invariant)
	}
	return out
}

func TestCheckAllocations(t *testing.T) {
	for _, tc := range []struct {
		name string
		svcs []Svc
		want []string
	}{
		{"distinct addresses", []Svc{{Key: "x", IPs: []netip.Addr{ip("10.0.0.1")}}, {Key: "y", IPs: []netip.Addr{ip("10.0.0.2")}}}, nil},
		{"same address, no key", []Svc{{Key: "x", IPs: []netip.Addr{ip("10.0.0.1")}}, {Key: "y", IPs: []netip.Addr{ip("10.0.0.1")}}}, []string{InvSharedAddress}},
		{"shared with key, other ports", []Svc{
			{Key: "x", IPs: []netip.Addr{ip("10.0.0.1")}, SharingKey: "k", Ports: []Port{portHTTP}},
			{Key: "y", IPs: []netip.Addr{ip("10.0.0.1")}, SharingKey: "k", Ports: []Port{portHTTPS}}}, nil},
		{"shared with key, same port", []Svc{
			{Key: "x", IPs: []netip.Addr{ip("10.0.0.1")}, SharingKey: "k", Ports: []Port{portHTTP}},
			{Key: "y", IPs: []netip.Addr{ip("10.0.0.1")}, SharingKey: "k", Ports: []Port{portHTTP}}}, []string{InvSharedAddress}},
		{"different keys", []Svc{
			{Key: "x", IPs: []netip.Addr{ip("10.0.0.1")}, SharingKey: "k", Ports: []Port{portHTTP}},
			{Key: "y", IPs: []netip.Addr{ip("10.0.0.1")}, SharingKey: "j", Ports: []Port{portHTTPS}}}, []string{InvSharedAddress}},
		{"local with other pods", []Svc{
			{Key: "x", IPs: []netip.Addr{ip("10.0.0.1")}, SharingKey: "k", Local: true, Selector: "app=a", Ports: []Port{portHTTP}},
			{Key: "y", IPs: []netip.Addr{ip("10.0.0.1")}, SharingKey: "k", Local: true, Selector: "app=b", Ports: []Port{portHTTPS}}}, []string{InvSharedAddress}},
		{"local with the same pods", []Svc{
			{Key: "x", IPs: []netip.Addr{ip("10.0.0.1")}, SharingKey: "k", Local: true, Selector: "app=a", Ports: []Port{portHTTP}},
			{Key: "y", IPs: []netip.Addr{ip("10.0.0.1")}, SharingKey: "k", Local: true, Selector: "app=a", Ports: []Port{portHTTPS}}}, nil},
		{"outside every pool", []Svc{{Key: "x", IPs: []netip.Addr{ip("10.0.2.1")}}}, []string{InvOutsidePool}},
		{"in another pool than asked", []Svc{{Key: "x", Pool: "b", IPs: []netip.Addr{ip("10.0.0.1")}}}, []string{InvOutsidePool}},
		{"in the pool asked", []Svc{{Key: "x", Pool: "b", IPs: []netip.Addr{ip("10.0.1.1")}}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := invariantsOf(CheckAllocations(tc.svcs, []Pool{testPoolA, testPoolB})); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestTrackerGrace(t *testing.T) {
	tr := Tracker{Grace: 2 * time.Second}
	t0 := time.Unix(1000, 0)
	f := Finding{InvOutsidePool, "x 10.0.2.1", "detail"}
	tr.Observe(t0, []Finding{f})
	tr.Observe(t0.Add(time.Second), []Finding{f})
	tr.Observe(t0.Add(1500*time.Millisecond), nil)  // moved in time: no violation
	tr.Observe(t0.Add(2*time.Second), []Finding{f}) // again, from scratch
	tr.Observe(t0.Add(3*time.Second), []Finding{f})
	if len(tr.Violations) != 0 {
		t.Fatalf("violations within the grace: %+v", tr.Violations)
	}
	tr.Observe(t0.Add(4500*time.Millisecond), []Finding{f})
	tr.Observe(t0.Add(9*time.Second), []Finding{f}) // still the same one: counted once
	if len(tr.Violations) != 1 || !tr.Violations[0].Since.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("violations %+v, want one since t0+2s", tr.Violations)
	}

	// While the control plane was away nothing could reconcile: age counts from its return.
	tr2 := Tracker{Grace: 2 * time.Second, ControlPlaneBack: t0.Add(5 * time.Second)}
	tr2.Observe(t0, []Finding{f})
	tr2.Observe(t0.Add(6*time.Second), []Finding{f})
	if len(tr2.Violations) != 0 {
		t.Fatalf("violation counted during the control plane's absence: %+v", tr2.Violations)
	}
	tr2.Observe(t0.Add(7500*time.Millisecond), []Finding{f})
	if len(tr2.Violations) != 1 {
		t.Fatalf("no violation 2.5 s after the control plane's return: %+v", tr2.Violations)
	}
}

// events builds probe events: an ARP reply from mac every 100 ms over [from, to), and an HTTP request
// every 100 ms, failing inside fail.
func events(start time.Time, spans []struct {
	from, to time.Duration
	macs     []string
}, fail [][2]time.Duration) []failover.Event {
	var ev []failover.Event
	for _, s := range spans {
		for d := s.from; d < s.to; d += 100 * time.Millisecond {
			for _, m := range s.macs {
				ev = append(ev, failover.Event{At: start.Add(d + 5*time.Millisecond), Kind: "reply", MAC: m})
			}
		}
	}
	for d := time.Duration(0); d < 10*time.Second; d += 100 * time.Millisecond {
		ok := true
		for _, f := range fail {
			if d >= f[0] && d < f[1] {
				ok = false
			}
		}
		ev = append(ev, failover.Event{At: start.Add(d), End: start.Add(d + 10*time.Millisecond), Kind: "http", OK: ok})
	}
	return ev
}

type span = struct {
	from, to time.Duration
	macs     []string
}

func TestAnalyzeProbe(t *testing.T) {
	t0 := time.Unix(2000, 0)
	end := t0.Add(10 * time.Second)
	a, b := "02:42:ac:12:00:03", "02:42:ac:12:00:04"
	vip := netip.MustParseAddr("172.18.200.1")
	window := []Window{{From: t0.Add(4 * time.Second), To: t0.Add(6 * time.Second), Fault: "stop-node"}}
	for _, tc := range []struct {
		name     string
		spans    []span
		fail     [][2]time.Duration
		windows  []Window
		want     []string
		longest  time.Duration
		inWindow int
	}{
		{name: "steady", spans: []span{{0, 10 * time.Second, []string{a}}}},
		{name: "failover of 300 ms in a window, failures inside it",
			spans: []span{{0, 4 * time.Second, []string{a}}, {4300 * time.Millisecond, 10 * time.Second, []string{b}}},
			fail:  [][2]time.Duration{{4 * time.Second, 4300 * time.Millisecond}}, windows: window, longest: 300 * time.Millisecond, inWindow: 3},
		{name: "failover of 1.5 s", spans: []span{{0, 4 * time.Second, []string{a}}, {5500 * time.Millisecond, 10 * time.Second, []string{b}}},
			windows: window, want: []string{InvNoAnswer}, longest: 1500 * time.Millisecond},
		{name: "two answerers briefly after a heal", spans: []span{{0, 5 * time.Second, []string{a}}, {5 * time.Second, 5300 * time.Millisecond, []string{a, b}}, {5300 * time.Millisecond, 10 * time.Second, []string{b}}},
			windows: window, longest: 300 * time.Millisecond},
		{name: "a handover: two answerers for 200 ms", spans: []span{{0, 2 * time.Second, []string{a}}, {2 * time.Second, 2200 * time.Millisecond, []string{a, b}}, {2200 * time.Millisecond, 10 * time.Second, []string{b}}},
			windows: window, longest: 200 * time.Millisecond},
		{name: "two answerers for 1.5 s", spans: []span{{0, 2 * time.Second, []string{a}}, {2 * time.Second, 3500 * time.Millisecond, []string{a, b}}, {3500 * time.Millisecond, 10 * time.Second, []string{a}}},
			windows: window, want: []string{InvSplitBrain}, longest: 1500 * time.Millisecond},
		{name: "a request failing outside a window", spans: []span{{0, 10 * time.Second, []string{a}}},
			fail: [][2]time.Duration{{1 * time.Second, 1100 * time.Millisecond}}, windows: window, want: []string{InvHTTP}},
		{name: "never answered", want: []string{InvNoAnswer}},
		{name: "a request reset at a clean handover (no fault)", spans: []span{{0, 3 * time.Second, []string{a}}, {3 * time.Second, 10 * time.Second, []string{b}}},
			fail: [][2]time.Duration{{3 * time.Second, 3100 * time.Millisecond}}, inWindow: 1},
		{name: "a request failing 2 s after a handover", spans: []span{{0, 3 * time.Second, []string{a}}, {3 * time.Second, 10 * time.Second, []string{b}}},
			fail: [][2]time.Duration{{5 * time.Second, 5100 * time.Millisecond}}, want: []string{InvHTTP}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := AnalyzeProbe(vip, events(t0, tc.spans, tc.fail), t0, end, 100*time.Millisecond, time.Second, tc.windows)
			if got := invariantsOf(r.Findings); !slices.Equal(got, tc.want) {
				t.Errorf("findings %v (%+v), want %v", got, r.Findings, tc.want)
			}
			if r.LongestFailover != tc.longest {
				t.Errorf("longest failover %s, want %s", r.LongestFailover, tc.longest)
			}
			if r.FailedInWindows != tc.inWindow || r.Sent != 100 {
				t.Errorf("sent %d, failed in windows %d, want 100 and %d", r.Sent, r.FailedInWindows, tc.inWindow)
			}
		})
	}
}

func TestLeaking(t *testing.T) {
	base := Sample{Goroutines: 100, RSS: 50 << 20}
	for _, tc := range []struct {
		last Sample
		want bool
	}{
		{Sample{120, 60 << 20}, false},
		{Sample{260, 60 << 20}, true},
		{Sample{120, 200 << 20}, true},
	} {
		if got := Leaking(base, tc.last); got != tc.want {
			t.Errorf("Leaking(%+v, %+v) = %v, want %v", base, tc.last, got, tc.want)
		}
	}
}

// A failed request's finding says what the probe saw around it: the ARP answerers, and who answered
// the requests before and after it.
func TestAnalyzeProbeFindingContext(t *testing.T) {
	t0 := time.Unix(2000, 0)
	a, b := "02:42:ac:12:00:03", "02:42:ac:12:00:04"
	ev := []failover.Event{
		{At: t0.Add(100 * time.Millisecond), End: t0.Add(110 * time.Millisecond), Kind: "http", OK: true, Detail: "web-1"},
		{At: t0.Add(150 * time.Millisecond), Kind: "reply", MAC: a},
		{At: t0.Add(200 * time.Millisecond), End: t0.Add(1200 * time.Millisecond), Kind: "http", Detail: "timeout"},
		{At: t0.Add(250 * time.Millisecond), Kind: "reply", MAC: a},
		{At: t0.Add(160 * time.Millisecond), Kind: "garp", MAC: strings.ToUpper(b)},
		{At: t0.Add(300 * time.Millisecond), End: t0.Add(310 * time.Millisecond), Kind: "http", OK: true, Detail: "web-2"},
		{At: t0.Add(3 * time.Second), Kind: "reply", MAC: a},
	}
	slices.SortStableFunc(ev, func(x, y failover.Event) int { return x.At.Compare(y.At) })
	r := AnalyzeProbe(netip.MustParseAddr("172.18.200.1"), ev, t0, t0.Add(4*time.Second), 100*time.Millisecond, time.Second, nil)
	var got string
	for _, f := range r.Findings {
		if f.Invariant == InvHTTP {
			got = f.Detail
		}
	}
	for _, want := range []string{"(1000 ms timeout;", "ARP answerers " + a + " > " + b + " > " + a + ";", "before 08:33:20.100 web-1", "after 08:33:20.300 web-2"} {
		if !strings.Contains(got, strings.ReplaceAll(want, "08:33:20", t0.Format("15:04:05"))) {
			t.Errorf("finding %q does not say %q", got, want)
		}
	}
}

var (
	macW1, macW2, macW3 = "02:42:ac:12:00:03", "02:42:ac:12:00:04", "02:42:ac:12:00:05"
	testMACNode         = map[string]string{macW1: "w1", macW2: "w2", macW3: "w3"}
)

func TestFailovers(t *testing.T) {
	t0 := time.Unix(3000, 0)
	vip := ip("172.18.212.1")
	attacker := "02:42:ac:12:00:64"
	ev := events(t0, []span{
		{0, 2 * time.Second, []string{macW1}},
		{2 * time.Second, 2200 * time.Millisecond, []string{macW1, macW2}}, // a handover
		{2200 * time.Millisecond, 5 * time.Second, []string{macW2}},
		{5 * time.Second, 5500 * time.Millisecond, nil}, // a failover's silence
		{5500 * time.Millisecond, 10 * time.Second, []string{macW3, attacker}},
	}, nil)
	got := Failovers(vip, WithoutMACs(ev, strings.ToUpper(attacker)), t0, t0.Add(10*time.Second), 100*time.Millisecond)
	want := []Failover{ // dated by the first packet (events puts it 5 ms into its bucket)
		{At: t0.Add(2205 * time.Millisecond), Addr: vip, From: macW1, To: macW2},
		{At: t0.Add(5505 * time.Millisecond), Addr: vip, From: macW2, To: macW3},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Failovers = %+v, want %+v (the attacker's claims dropped)", got, want)
	}
	if n := len(Failovers(vip, ev, t0, t0.Add(10*time.Second), 100*time.Millisecond)); n != 1 {
		t.Errorf("with the attacker's claims: %d failovers, want 1 (its buckets have two MACs)", n)
	}
}

// One row per rule of JudgeFailovers: a failover is explained by a span letting its old node lose or
// its new node regain the address; otherwise it is the attack's doing inside an attack, else
// unexplained.
func TestJudgeFailovers(t *testing.T) {
	t0 := time.Unix(4000, 0)
	at := t0.Add(10 * time.Second)
	fo := []Failover{{At: at, Addr: ip("172.18.212.1"), From: macW1, To: macW2}}
	sp := func(from, to time.Duration, node string, kind SpanKind) Span {
		return Span{From: t0.Add(from), To: t0.Add(to), Fault: "f", Node: node, Kind: kind}
	}
	for _, tc := range []struct {
		name  string
		spans []Span
		want  []string
	}{
		{"no fault", nil, []string{InvUnexplainedFailover}},
		{"the old node lost it", []Span{sp(5*time.Second, 15*time.Second, "w1", SpanLoses)}, nil},
		{"every node may lose", []Span{sp(5*time.Second, 15*time.Second, "", SpanLoses)}, nil},
		{"another node lost", []Span{sp(5*time.Second, 15*time.Second, "w3", SpanLoses)}, []string{InvUnexplainedFailover}},
		{"the new node may lose, not gain", []Span{sp(5*time.Second, 15*time.Second, "w2", SpanLoses)}, []string{InvUnexplainedFailover}},
		{"the new node returned", []Span{sp(5*time.Second, 15*time.Second, "w2", SpanRegains)}, nil},
		{"the old node returned: no reason to leave", []Span{sp(5*time.Second, 15*time.Second, "w1", SpanRegains)}, []string{InvUnexplainedFailover}},
		{"within the slack after a span", []Span{sp(0, 8*time.Second, "w1", SpanLoses)}, nil},
		{"after the slack", []Span{sp(0, 6*time.Second, "w1", SpanLoses)}, []string{InvUnexplainedFailover}},
		{"during an attack", []Span{sp(8*time.Second, 12*time.Second, "w1", SpanAttack)}, []string{InvAttack}},
		{"during an attack on a cut node, from it", []Span{sp(8*time.Second, 12*time.Second, "w1", SpanAttack), sp(8*time.Second, 40*time.Second, "w1", SpanLoses)}, nil},
		{"during an attack on a cut node, to it", []Span{sp(8*time.Second, 12*time.Second, "w2", SpanAttack), sp(8*time.Second, 40*time.Second, "w2", SpanLoses)}, []string{InvAttack}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := invariantsOf(JudgeFailovers(fo, testMACNode, tc.spans, 3*time.Second)); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestJudgeElections(t *testing.T) {
	t0 := time.Unix(5000, 0)
	attack := Span{From: t0.Add(10 * time.Second), To: t0.Add(15 * time.Second), Fault: "forged-heartbeat", Kind: SpanAttack}
	el := func(s int, node string) Election {
		return Election{At: t0.Add(time.Duration(s) * time.Second), Service: "chaos-p1", Node: node}
	}
	for _, tc := range []struct {
		name    string
		samples []Election
		spans   []Span
		want    []string
	}{
		{"steady through an attack", []Election{el(9, "w1"), el(11, "w1"), el(16, "w1")}, []Span{attack}, nil},
		{"moved during an attack", []Election{el(9, "w1"), el(12, "w2")}, []Span{attack}, []string{InvAttack}},
		{"moved just after an attack (slack)", []Election{el(9, "w1"), el(17, "w2")}, []Span{attack}, []string{InvAttack}},
		{"moved outside attacks: the probe judges it", []Election{el(1, "w1"), el(2, "w2")}, []Span{attack}, nil},
		{"no status for a moment", []Election{el(9, "w1"), el(11, ""), el(12, "w1")}, []Span{attack}, nil},
		{"moved during an attack, its node cut", []Election{el(9, "w1"), el(12, "w2")},
			[]Span{attack, {From: t0.Add(10 * time.Second), To: t0.Add(40 * time.Second), Node: "w1", Kind: SpanLoses}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := invariantsOf(JudgeElections(tc.samples, tc.spans, 3*time.Second)); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParsePeerLines(t *testing.T) {
	at := time.Date(2026, 11, 26, 8, 31, 58, 348_000_000, time.UTC)
	for _, tc := range []struct {
		line string
		want []PeerEvent
	}{
		{`time=2026-11-26T08:31:58.348Z level=INFO msg="speaker peer changed state" component=speaker node=myk8s-worker iface=eth0 node=myk8s-worker2 ready=true leaving=false`,
			[]PeerEvent{{At: at, Reporter: "myk8s-worker", Peer: "myk8s-worker2", Kind: PeerChanged, Ready: true}}},
		{`time=2026-11-26T08:31:58.348Z level=INFO msg="speaker peer alive" component=speaker node=myk8s-worker iface=eth0 node=chaos-ghost-7`,
			[]PeerEvent{{At: at, Reporter: "myk8s-worker", Peer: "chaos-ghost-7", Kind: PeerAlive}}},
		{`time=2026-11-26T08:31:58.348Z level=WARN msg="speaker peers declared dead" component=speaker node=myk8s-worker iface=eth0 node=[myk8s-worker2] silentFor=300ms`,
			[]PeerEvent{{At: at, Reporter: "myk8s-worker", Peer: "myk8s-worker2", Kind: PeerDead}}},
		{`time=2026-11-26T08:31:58.348Z level=WARN msg="speaker peers declared dead" component=speaker node=myk8s-worker iface=eth0 node="[a b]" silentFor=300ms`,
			[]PeerEvent{{At: at, Reporter: "myk8s-worker", Peer: "a", Kind: PeerDead}, {At: at, Reporter: "myk8s-worker", Peer: "b", Kind: PeerDead}}},
		{`time=2026-11-26T08:31:57.879Z level=INFO msg="speaker ready" component=speaker node=myk8s-worker iface=eth0`, nil},
		{`garbage msg="speaker peer alive"`, nil},
	} {
		got := ParsePeerLines(tc.line)
		if !slices.EqualFunc(got, tc.want, func(a, b PeerEvent) bool {
			return a.At.Equal(b.At) && a.Reporter == b.Reporter && a.Peer == b.Peer && a.Kind == b.Kind && a.Ready == b.Ready && a.Leaving == b.Leaving
		}) {
			t.Errorf("ParsePeerLines(%q) = %+v, want %+v", tc.line, got, tc.want)
		}
	}
}

func TestJudgePeerEvents(t *testing.T) {
	t0 := time.Unix(6000, 0)
	nodes := []string{"cp", "w1", "w2", "w3"}
	attack := Span{From: t0.Add(10 * time.Second), To: t0.Add(15 * time.Second), Fault: "replayed-heartbeat", Node: "w1", Kind: SpanAttack}
	cut := Span{From: t0.Add(12 * time.Second), To: t0.Add(45 * time.Second), Fault: "replayed-heartbeat", Node: "w1", Kind: SpanLoses}
	back := Span{From: t0.Add(15 * time.Second), To: t0.Add(45 * time.Second), Fault: "replayed-heartbeat", Node: "w1", Kind: SpanRegains}
	ev := func(s int, reporter, peer, kind string, ready, leaving bool) PeerEvent {
		return PeerEvent{At: t0.Add(time.Duration(s) * time.Second), Reporter: reporter, Peer: peer, Kind: kind, Ready: ready, Leaving: leaving}
	}
	for _, tc := range []struct {
		name string
		evs  []PeerEvent
		want []string
	}{
		{"outside attacks nothing is judged", []PeerEvent{ev(1, "w2", "w1", PeerDead, false, false), ev(2, "w2", "ghost", PeerAlive, false, false)}, nil},
		{"a forged leaving", []PeerEvent{ev(11, "w2", "w1", PeerChanged, false, true)}, []string{InvAttack}},
		{"an unknown name", []PeerEvent{ev(11, "w2", "ghost-1", PeerAlive, false, false)}, []string{InvAttack}},
		{"an unknown name dies just after (slack)", []PeerEvent{ev(17, "w2", "ghost-1", PeerDead, false, false)}, []string{InvAttack}},
		{"one finding per reporter, peer and attack", []PeerEvent{ev(11, "w2", "w1", PeerChanged, false, true), ev(11, "w2", "w1", PeerChanged, true, false)}, []string{InvAttack}},
		{"the cut node declared dead", []PeerEvent{ev(13, "w2", "w1", PeerDead, false, false)}, nil},
		{"the cut node alive again by replay", []PeerEvent{ev(13, "w2", "w1", PeerDead, false, false), ev(14, "w2", "w1", PeerAlive, false, false)}, []string{InvAttack}},
		{"the cut node back after the attack", []PeerEvent{ev(20, "w2", "w1", PeerAlive, false, false)}, nil},
		{"another node dies during the attack", []PeerEvent{ev(13, "w2", "w3", PeerDead, false, false)}, []string{InvAttack}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := invariantsOf(JudgePeerEvents(tc.evs, nodes, []Span{attack, cut, back}, 3*time.Second)); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestJudgeWebhook(t *testing.T) {
	t0 := time.Unix(7000, 0)
	as := []Attempt{{At: t0}, {At: t0.Add(time.Second), Err: "x509: unknown authority"}, {At: t0.Add(6 * time.Second)}, {At: t0.Add(7 * time.Second), Err: "x509: unknown authority"}}
	if got := invariantsOf(JudgeWebhook(as, t0.Add(6*time.Second))); !slices.Equal(got, []string{InvWebhook}) {
		t.Errorf("got %v, want one refusal after the grace", got)
	}
}

func TestCheckServiceIPs(t *testing.T) {
	p1 := Svc{Key: "default/chaos-p1", IPs: []netip.Addr{ip("172.18.212.1")}, Ports: []Port{{"TCP", 80}}}
	c1 := Svc{Key: "default/chaos-c1", IPs: []netip.Addr{ip("172.18.210.3")}, Ports: []Port{{"TCP", 81}}}
	elem := func(a string, port int32, target string) MapElem {
		return MapElem{Addr: ip(a), Proto: "tcp", Port: port, Target: target}
	}
	must := []string{"default/chaos-p1"}
	for _, tc := range []struct {
		name  string
		elems []MapElem
		want  []string
	}{
		{"all there", []MapElem{elem("172.18.212.1", 80, "external-x"), elem("172.18.210.3", 81, "external-y"), elem("172.18.210.4", 80, "chaos-nft-hold")}, nil},
		{"a churned Service not there yet", []MapElem{elem("172.18.212.1", 80, "external-x")}, nil},
		{"a probed Service missing", []MapElem{elem("172.18.210.3", 81, "external-y")}, []string{InvDataplane}},
		{"a Service's traffic to the rogue chain", []MapElem{elem("172.18.212.1", 80, "external-x"), elem("172.18.210.3", 81, "chaos-nft-hold")}, []string{InvDataplane}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := invariantsOf(CheckServiceIPs("w1", []Svc{p1, c1}, must, tc.elems, "chaos-nft-hold")); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseServiceIPs(t *testing.T) {
	b := []byte(`{"nftables": [{"metainfo": {"version": "1.0.6"}}, {"map": {"family": "ip", "name": "service-ips", "table": "ironlb", "type": ["ipv4_addr", "inet_proto", "inet_service"], "map": "verdict", "elem": [[{"concat": ["172.18.210.1", "tcp", 80]}, {"goto": {"target": "chaos-nft-hold"}}], [{"concat": ["10.200.1.1", "tcp", 443]}, {"goto": {"target": "service-N637ELZZ-default/kubernetes/tcp/https"}}]]}}]}`)
	got, err := ParseServiceIPs(b)
	if err != nil {
		t.Fatal(err)
	}
	want := []MapElem{{Addr: ip("172.18.210.1"), Proto: "tcp", Port: 80, Target: "chaos-nft-hold"},
		{Addr: ip("10.200.1.1"), Proto: "tcp", Port: 443, Target: "service-N637ELZZ-default/kubernetes/tcp/https"}}
	if !slices.Equal(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestCheckCoverage(t *testing.T) {
	kinds := []string{FaultStopNode, FaultForgedARP}
	for _, tc := range []struct {
		name     string
		injected map[string]int
		checks   int
		want     []string
	}{
		{"all injected, enough checks", map[string]int{FaultStopNode: 2, FaultForgedARP: 1}, 40, nil},
		{"nothing injected (a run that passed before issue 18)", map[string]int{}, 40, []string{InvNotInjected, InvNotInjected}},
		{"a kind missing", map[string]int{FaultStopNode: 3}, 40, []string{InvNotInjected}},
		{"too few checks", map[string]int{FaultStopNode: 1, FaultForgedARP: 1}, 3, []string{InvTooFewChecks}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := invariantsOf(CheckCoverage(kinds, tc.injected, tc.checks, 20)); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDisturbances(t *testing.T) {
	t0 := time.Unix(8000, 0)
	vip := ip("172.18.212.2")
	ev := events(t0, []span{
		{0, 2 * time.Second, []string{macW1}},
		{2 * time.Second, 2500 * time.Millisecond, []string{macW1, macW2}},
		{2500 * time.Millisecond, 4 * time.Second, []string{macW1}},
		{4300 * time.Millisecond, 9 * time.Second, []string{macW1}},
		{9 * time.Second, 10 * time.Second, nil}, // silence up to the probe's end: not a disturbance
	}, nil)
	got := Disturbances(vip, ev, t0, t0.Add(10*time.Second), 100*time.Millisecond)
	want := []Disturbance{
		{From: t0.Add(2 * time.Second), To: t0.Add(2500 * time.Millisecond), Addr: vip, MACs: []string{macW1, macW2}},
		{From: t0.Add(4 * time.Second), To: t0.Add(4300 * time.Millisecond), Addr: vip},
	}
	if !slices.EqualFunc(got, want, func(a, b Disturbance) bool {
		return a.From.Equal(b.From) && a.To.Equal(b.To) && a.Addr == b.Addr && slices.Equal(a.MACs, b.MACs)
	}) {
		t.Fatalf("Disturbances = %+v, want %+v", got, want)
	}
	// A cut node kept alive by replayed heartbeats: its address unanswered for 3 s, no failover.
	long := []Disturbance{{From: t0.Add(2 * time.Second), To: t0.Add(5 * time.Second), Addr: vip}}
	cut := []Span{{From: t0, To: t0.Add(9 * time.Second), Fault: "replayed-heartbeat", Node: "w1", Kind: SpanAttack},
		{From: t0.Add(2 * time.Second), To: t0.Add(40 * time.Second), Node: "w1", Kind: SpanLoses}}
	if got := invariantsOf(JudgeDisturbances(long, testMACNode, cut, 3*time.Second, 300*time.Millisecond, time.Second)); !slices.Equal(got, []string{InvAttack}) {
		t.Errorf("a 3 s silence after a cut during an attack: got %v, want the attack's", got)
	}
	if got := invariantsOf(JudgeDisturbances(got[1:], testMACNode, cut, 3*time.Second, 300*time.Millisecond, time.Second)); got != nil {
		t.Errorf("a 300 ms silence (jitter): got %v, want nothing", got)
	}
	attack := Span{From: t0.Add(time.Second), To: t0.Add(5 * time.Second), Fault: "forged-heartbeat", Kind: SpanAttack}
	for _, tc := range []struct {
		name  string
		spans []Span
		want  []string
	}{
		{"no attack: AnalyzeProbe's business", nil, nil},
		{"a split brain and a silence during an attack", []Span{attack}, []string{InvAttack, InvAttack}},
		{"w2 returning explains its claim; nothing explains the silence", []Span{attack, {From: t0, To: t0.Add(3 * time.Second), Node: "w2", Kind: SpanRegains}}, []string{InvAttack}},
		{"a node lost: the silence is the failover", []Span{attack, {From: t0.Add(3 * time.Second), To: t0.Add(5 * time.Second), Node: "w3", Kind: SpanLoses}}, []string{InvAttack}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := invariantsOf(JudgeDisturbances(got, testMACNode, tc.spans, 3*time.Second, 0, time.Second)); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// A flood of unknown names is one finding per reporter and attack, saying how many.
func TestJudgePeerEventsFlood(t *testing.T) {
	t0 := time.Unix(9000, 0)
	attack := Span{From: t0, To: t0.Add(5 * time.Second), Fault: "forged-heartbeat", Kind: SpanAttack}
	var evs []PeerEvent
	for i := range 300 {
		for _, r := range []string{"w1", "w2"} {
			evs = append(evs, PeerEvent{At: t0.Add(time.Second), Reporter: r, Peer: fmt.Sprintf("ghost-%d", i), Kind: PeerAlive})
		}
	}
	fs := JudgePeerEvents(evs, []string{"w1", "w2"}, []Span{attack}, 3*time.Second)
	if len(fs) != 2 || !strings.Contains(fs[0].Detail, "and 299 more events about unknown names") {
		t.Errorf("findings %+v, want 2, each counting 300 unknown names", fs)
	}
}

// TestProbeEnd: a probe that stopped before the run did (a fault overran --duration) is judged up
// to its last request, not as an address unanswered from its last line to the run's end; and a
// probe that ran past the judged end is cut at it.
func TestProbeEnd(t *testing.T) {
	t0 := time.Unix(2000, 0)
	a := "02:42:ac:12:00:03"
	vip := netip.MustParseAddr("172.18.200.1")
	ev := events(t0, []span{{0, 10 * time.Second, []string{a}}}, nil) // requests every 100 ms for 10 s
	runEnd := t0.Add(27 * time.Second)
	if r := AnalyzeProbe(vip, ev, t0, runEnd, 100*time.Millisecond, time.Second, nil); !slices.Equal(invariantsOf(r.Findings), []string{InvNoAnswer}) {
		t.Fatalf("judged to the run's end: findings %+v, want the 17 s silence as %s (the case ProbeEnd is for)", r.Findings, InvNoAnswer)
	}
	end := ProbeEnd(ev, runEnd)
	if want := t0.Add(9900 * time.Millisecond); !end.Equal(want) {
		t.Fatalf("ProbeEnd = %s, want the last request's start %s", end, want)
	}
	if r := AnalyzeProbe(vip, ev, t0, end, 100*time.Millisecond, time.Second, nil); len(r.Findings) != 0 {
		t.Errorf("judged to the probe's end: findings %+v, want none", r.Findings)
	}
	if early := t0.Add(5 * time.Second); !ProbeEnd(ev, early).Equal(early) {
		t.Errorf("ProbeEnd(ev, %s) = %s: a probe running past end is cut at end", early, ProbeEnd(ev, early))
	}
	if !ProbeEnd(nil, runEnd).Equal(runEnd) {
		t.Errorf("a probe with no requests is judged to end (and found unanswered), not cut")
	}
}

// TestJudgeDisturbancesBucketStart: a power cut's Loses span is recorded just before the cut, which
// can fall inside the 100 ms bucket that holds the cut node's last answer and its successor's first
// (a clean handover seen as two MACs in one bucket). The disturbance starts at that bucket's start,
// before the span: it is judged over its whole length, so the cut explains it (CI, replayed-heartbeat,
// 2026-11-26). A span that starts only after the disturbance ended explains nothing.
func TestJudgeDisturbancesBucketStart(t *testing.T) {
	t0 := time.Unix(8000, 0)
	vip := ip("172.18.212.1")
	handover := []Disturbance{{From: t0.Add(2 * time.Second), To: t0.Add(2100 * time.Millisecond), Addr: vip, MACs: []string{macW1, macW2}}}
	attack := Span{From: t0, To: t0.Add(5 * time.Second), Fault: "replayed-heartbeat", Node: "w1", Kind: SpanAttack}
	for _, tc := range []struct {
		name    string
		cutSpan time.Duration // when the Loses span of w1 starts, from t0
		want    []string
	}{
		{"span recorded 30 ms into the handover's bucket", 2030 * time.Millisecond, nil},
		{"span recorded before the bucket", 1900 * time.Millisecond, nil},
		{"span recorded after the disturbance", 2200 * time.Millisecond, []string{InvAttack}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spans := []Span{attack, {From: t0.Add(tc.cutSpan), To: t0.Add(40 * time.Second), Fault: "replayed-heartbeat", Node: "w1", Kind: SpanLoses}}
			if got := invariantsOf(JudgeDisturbances(handover, testMACNode, spans, 3*time.Second, 300*time.Millisecond, time.Second)); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
