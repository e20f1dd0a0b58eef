package connbench

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/ironlb/ironlb/internal/testbed/connprobe"
)

// TestParseRaw writes a trial's file as the benchmark does and reads it back: the same accounting
// as Analyze, the router's moves from the hop lines, and bad lines named.
func TestParseRaw(t *testing.T) {
	event := at(1000)
	r := connprobe.Result{End: at(3000), Flows: []connprobe.Flow{
		{Proto: "tcp", ID: 0, Port: 40000, Opened: at(0), LastOK: at(2990), Answers: 50,
			Hosts: []connprobe.Host{host(10, "a", "172.18.0.4:40000")},
			Gaps:  []connprobe.Gap{{From: at(300), To: at(420)}, {From: at(980), To: at(1230)}}},
		{Proto: "udp", ID: 0, Port: 42000, Opened: at(0), LastOK: at(2990), Answers: 50,
			Hosts: []connprobe.Host{host(10, "b", "172.18.0.4:42000")}},
	}}
	var hops Hops
	hops.Add(at(10), Flow{Proto: "tcp", Port: 40000}, "aa")
	hops.Add(at(1100), Flow{Proto: "tcp", Port: 40000}, "bb")
	hops.Add(at(10), Flow{Proto: "udp", Port: 42000}, "aa")
	var b bytes.Buffer
	b.WriteString("config bgp, ironlb speaker, ironlb proxy, dsr\nevent power-cut 1700000001000000000\n")
	b.WriteString(hops.String())
	if err := connprobe.Write(&b, r); err != nil {
		t.Fatal(err)
	}
	label, ev, got, err := ParseRaw(&b)
	if err != nil {
		t.Fatal(err)
	}
	want := Analyze(r, event)
	want.RouterMoved = 1
	if label != "bgp, ironlb speaker, ironlb proxy, dsr" || ev != "power-cut" || got.CutStall != 250*time.Millisecond ||
		got.Quiet != 120*time.Millisecond || got.RouterMoved != 1 || got.Stall != want.Stall || got.TCP != 1 || got.UDP != 1 {
		t.Errorf("ParseRaw = %q %q %+v; want the label, power-cut, across 250ms, before 120ms, moved 1, %+v", label, ev, got, want)
	}
	runs := Group(Group(Group(nil, label, ev, got), "x", ev, got), label, ev, got)
	if len(runs) != 2 || len(runs[0].Trials) != 2 || len(runs[1].Trials) != 1 {
		t.Errorf("Group: %+v", runs)
	}
	for _, bad := range []string{"event power-cut soon\n", "config x\nhop tcp x 1 aa\n", "config x\nevent a 1\nflow tcp\n", "flow tcp 0 1 1 1 1\n"} {
		if _, _, _, err := ParseRaw(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseRaw(%q): no error", bad)
		}
	}
}
