package connbench

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ironlb/ironlb/internal/testbed/connprobe"
)

func at(ms int64) time.Time { return time.Unix(1_700_000_000, ms*int64(time.Millisecond)) }

func host(ms int64, name, remote string) connprobe.Host {
	return connprobe.Host{At: at(ms), Name: name, Remote: remote}
}

func TestAnalyze(t *testing.T) {
	event := at(1000)
	r := connprobe.Result{End: at(5000), Flows: []connprobe.Flow{
		// steady through the event: its 80 ms gap before the event does not count, the 350 ms one
		// across it does
		{Proto: "tcp", ID: 0, Opened: at(0), LastOK: at(4990), Hosts: []connprobe.Host{host(10, "a", "172.18.0.4:40000")},
			Gaps: []connprobe.Gap{{From: at(500), To: at(580)}, {From: at(950), To: at(1300)}}},
		// reset after the event
		{Proto: "tcp", ID: 1, Opened: at(0), LastOK: at(990), Failed: at(1100), Reason: "reset",
			Hosts: []connprobe.Host{host(10, "a", "172.18.0.4:40001")}},
		// failed before the event: the setup's
		{Proto: "tcp", ID: 2, Opened: at(0), LastOK: at(300), Failed: at(400), Reason: "eof"},
		// never opened
		{Proto: "tcp", ID: 3, Failed: at(1), Reason: "refused"},
		// UDP answered by another pod through another node after the event; silent for its last 2 s
		{Proto: "udp", ID: 0, Opened: at(0), LastOK: at(3000), Hosts: []connprobe.Host{host(10, "a", "172.18.0.4:42000"), host(1200, "b", "172.18.0.5:42000")}},
		// UDP timed out
		{Proto: "udp", ID: 1, Opened: at(0), LastOK: at(990), Failed: at(3990), Reason: "timeout", Hosts: []connprobe.Host{host(10, "a", "x:1")}},
		// UDP: same pod, another SNAT port only
		{Proto: "udp", ID: 2, Opened: at(0), LastOK: at(4990), Hosts: []connprobe.Host{host(10, "a", "172.18.0.4:1"), host(1500, "a", "172.18.0.4:2")}},
	}}
	want := Trial{TCP: 4, UDP: 3, Before: 2, TCPBroken: 1, UDPBroken: 1, Reasons: map[string]int{"reset": 1, "timeout": 1},
		Stall: 2000 * time.Millisecond, StallTCP: 350 * time.Millisecond, StallUDP: 2000 * time.Millisecond,
		CutStall: 350 * time.Millisecond, Quiet: 80 * time.Millisecond,
		OtherPod: 1, OtherClient: 1, RouterMoved: -1}
	if d := cmp.Diff(want, Analyze(r, event)); d != "" {
		t.Errorf("Analyze (-want +got):\n%s", d)
	}
}

func TestAnalyzeNoSurvivor(t *testing.T) {
	r := connprobe.Result{End: at(3000), Flows: []connprobe.Flow{
		{Proto: "tcp", Opened: at(0), LastOK: at(990), Failed: at(1010), Reason: "reset"},
		{Proto: "udp", Opened: at(0), LastOK: at(2990)},
	}}
	got := Analyze(r, at(1000))
	if got.Stall != 10*time.Millisecond || got.StallTCP != -1 || got.StallUDP != 10*time.Millisecond {
		t.Errorf("stalls %v (TCP %v, UDP %v), want 10ms (TCP -1: none survived, UDP 10ms)", got.Stall, got.StallTCP, got.StallUDP)
	}
	if got.CutStall != 0 || got.Quiet != 0 {
		t.Errorf("across the event %v, before it %v; want 0, 0 (the survivor had no gap)", got.CutStall, got.Quiet)
	}
}

// TestEventGaps: a gap counts as the event's when it spans the event (a gap ending exactly at the
// event is before it; one starting exactly at it spans it), and a later gap counts as neither.
func TestEventGaps(t *testing.T) {
	event := at(1000)
	for _, tc := range []struct {
		name           string
		gaps           []connprobe.Gap
		across, before time.Duration
	}{
		{"none", nil, 0, 0},
		{"before only", []connprobe.Gap{{From: at(100), To: at(250)}, {From: at(600), To: at(700)}}, 0, 150 * time.Millisecond},
		{"ends at the event", []connprobe.Gap{{From: at(900), To: at(1000)}}, 0, 100 * time.Millisecond},
		{"starts at the event", []connprobe.Gap{{From: at(1000), To: at(1240)}}, 240 * time.Millisecond, 0},
		{"spans it, then a later load gap", []connprobe.Gap{{From: at(960), To: at(1210)}, {From: at(3000), To: at(3500)}}, 250 * time.Millisecond, 0},
	} {
		across, before := eventGaps(connprobe.Flow{Gaps: tc.gaps}, event)
		if across != tc.across || before != tc.before {
			t.Errorf("%s: eventGaps = %v, %v; want %v, %v", tc.name, across, before, tc.across, tc.before)
		}
	}
}

func TestFlowStall(t *testing.T) {
	event, end := at(1000), at(2000)
	for _, tc := range []struct {
		name string
		f    connprobe.Flow
		want time.Duration
	}{
		{"steady", connprobe.Flow{Opened: at(0), LastOK: at(1990)}, 10 * time.Millisecond},
		{"gap across the event", connprobe.Flow{Opened: at(0), LastOK: at(1990), Gaps: []connprobe.Gap{{From: at(900), To: at(1400)}}}, 500 * time.Millisecond},
		{"gap before the event", connprobe.Flow{Opened: at(0), LastOK: at(1990), Gaps: []connprobe.Gap{{From: at(100), To: at(900)}}}, 10 * time.Millisecond},
		{"silent since the event", connprobe.Flow{Opened: at(0), LastOK: at(990)}, 1010 * time.Millisecond},
		{"never answered", connprobe.Flow{Opened: at(500)}, 1500 * time.Millisecond},
	} {
		if got := FlowStall(tc.f, event, end); got != tc.want {
			t.Errorf("%s: FlowStall = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestMoved(t *testing.T) {
	before := map[Flow]string{{"tcp", 1}: "n1", {"tcp", 2}: "n2", {"udp", 42000}: "n3", {"tcp", 3}: "n1"}
	after := map[Flow]string{{"tcp", 1}: "n1", {"tcp", 2}: "n3", {"udp", 42000}: "n1"} // tcp 3 unknown after
	if got := Moved(before, after); got != 2 {
		t.Errorf("Moved = %d, want 2", got)
	}
}

func TestQuantile(t *testing.T) {
	v := []int{5, 1, 4, 2, 3}
	for _, tc := range []struct {
		p    float64
		want int
	}{{0, 1}, {0.5, 3}, {0.9, 5}, {0.99, 5}, {1, 5}} {
		if got := Quantile(v, tc.p); got != tc.want {
			t.Errorf("Quantile(%v, %v) = %d, want %d", v, tc.p, got, tc.want)
		}
	}
	if !slicesEqual(v, []int{5, 1, 4, 2, 3}) {
		t.Errorf("Quantile reordered its input: %v", v)
	}
	if got := Quantile([]time.Duration(nil), 0.5); got != 0 {
		t.Errorf("Quantile(empty) = %v, want 0", got)
	}
	// nearest rank: the p99 of 20 values is the largest, the median the 10th
	var d []time.Duration
	for i := 1; i <= 20; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	if Quantile(d, 0.99) != 20*time.Millisecond || Quantile(d, 0.5) != 10*time.Millisecond {
		t.Errorf("p99, median of 1..20 ms = %v, %v", Quantile(d, 0.99), Quantile(d, 0.5))
	}
}

func slicesEqual(a, b []int) bool { return cmp.Equal(a, b) }

func TestTable(t *testing.T) {
	runs := []Run{
		{Label: "l2, ironlb speaker, ironlb proxy, snat", Event: "power-cut", Trials: []Trial{
			{TCP: 200, UDP: 20, TCPBroken: 200, UDPBroken: 0, Stall: 900 * time.Millisecond, CutStall: 300 * time.Millisecond, Quiet: 100 * time.Millisecond, OtherPod: 10, OtherClient: 20, RouterMoved: -1, Reasons: map[string]int{"reset": 200}},
			{TCP: 200, UDP: 20, TCPBroken: 198, UDPBroken: 1, Stall: 1200 * time.Millisecond, CutStall: 500 * time.Millisecond, Quiet: 200 * time.Millisecond, OtherPod: 9, OtherClient: 19, RouterMoved: -1, Reasons: map[string]int{"reset": 198, "timeout": 1}},
		}},
		{Label: "bgp, ironlb speaker, ironlb proxy, dsr", Event: "power-cut", Trials: []Trial{
			{TCP: 200, UDP: 20, Stall: 300 * time.Millisecond, CutStall: 0, Quiet: 120 * time.Millisecond, RouterMoved: 80, Before: 1},
		}},
		{Label: "all broken", Event: "sigterm", Trials: []Trial{{TCP: 1, TCPBroken: 1, Stall: -1, CutStall: -1, Quiet: -1, RouterMoved: -1}}},
		{Label: "empty", Event: "return"},
	}
	var b bytes.Buffer
	Table(&b, runs)
	for _, want := range []string{
		"| l2, ironlb speaker, ironlb proxy, snat | power-cut | 2 | 198 / 200 / 398 | 0 / 1 / 1 | 900ms / 1200ms / 1200ms | 300ms / 500ms / 500ms | 100ms / 200ms | 19 / 39 | - | 0 |",
		"| bgp, ironlb speaker, ironlb proxy, dsr | power-cut | 1 | 0 / 0 / 0 | 0 / 0 / 0 | 300ms / 300ms / 300ms | 0ms / 0ms / 0ms | 120ms / 120ms | 0 / 0 | 80 / 80 | 1 |",
		"| all broken | sigterm | 1 | 1 / 1 / 1 | 0 / 0 / 0 | - | - | - | 0 / 0 | - | 0 |",
		"| empty | return | 0 | - | - | - | - | - | - | - | - |",
		"why flows broke, all runs: reset 398, timeout 1",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestStalls(t *testing.T) {
	runs := []Run{{Label: "l2, ironlb speaker, ironlb proxy, snat", Event: "power-cut", Trials: []Trial{
		{TCP: 2, UDP: 1, TCPBroken: 2, Stall: 40 * time.Millisecond},                // a survivor
		{TCP: 2, UDP: 1, TCPBroken: 2, UDPBroken: 1, Stall: -1},                     // none survived
		{TCP: 2, UDP: 1, Before: 1, TCPBroken: 1, UDPBroken: 0, Stall: time.Second}, // a survivor
	}}}
	d := Stalls(runs)
	want := []time.Duration{40 * time.Millisecond, -1, time.Second}
	if len(d.Series) != 1 || !cmp.Equal(d.Series[0].Values, want) || d.Series[0].Name != "l2, ironlb speaker, ironlb proxy, snat, power-cut" {
		t.Errorf("Stalls = %+v, want one series with %v", d.Series, want)
	}
	if _, err := d.SVG(); err != nil {
		t.Errorf("SVG: %v", err)
	}
}
