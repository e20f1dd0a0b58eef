package chaos

import (
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
