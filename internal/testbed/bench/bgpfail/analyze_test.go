package bgpfail

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ironlb/ironlb/internal/testbed/bench/failover"
)

func TestAnalyze(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	a := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, x := range s {
			out = append(out, netip.MustParseAddr(x))
		}
		return out
	}
	dead := netip.MustParseAddr("172.18.0.5")
	routes := []RouteEvent{
		{At: at(-500), NextHops: a("172.18.0.2", "172.18.0.3", "172.18.0.5")},
		{At: at(120), NextHops: a("172.18.0.2", "172.18.0.3", "172.18.0.5")}, // another change: still there
		{At: at(190), NextHops: a("172.18.0.2", "172.18.0.3")},
		{At: at(2500), NextHops: a("172.18.0.2", "172.18.0.3", "172.18.0.5")},
	}
	req := func(ms int, ok bool) failover.Event {
		return failover.Event{At: at(ms), End: at(ms + 5), Kind: "http", OK: ok}
	}
	reqs := []failover.Event{req(-20, true), req(10, false), req(50, true), req(150, false), req(300, true), req(2100, false), req(2600, true)}
	got := Analyze(routes, reqs, dead, at(0), at(2000))
	want := Trial{BFDDown: -1, Withdrawn: 190 * time.Millisecond, ClientOutage: 150 * time.Millisecond, Sent: 4, Failed: 2,
		Readded: 500 * time.Millisecond, BackFailed: 1, NextHops: 3}
	if got != want {
		t.Errorf("Analyze = %+v\nwant      %+v", got, want)
	}
	// The route never loses the dead node's next hop before the return; nothing fails.
	got = Analyze(routes[:2], []failover.Event{req(10, true)}, dead, at(0), at(100))
	if got.Withdrawn != -1 || got.ClientOutage != 0 || got.Readded != -1 || got.Sent != 1 {
		t.Errorf("no withdrawal: %+v", got)
	}
}

func TestBFDDownAt(t *testing.T) {
	log := strings.Join([]string{
		"2026/11/23 04:01:21.613312 BFD: [SEY1D-NT8EQ] state-change: [mhop:no peer:172.18.0.5 local:172.18.255.254 vrf:default ifname:eth0] up -> down reason:control-expired",
		"2026/11/23 04:01:30.075143 BFD: [J1C6V-VMRW5] state-change: [mhop:no peer:172.18.0.5 local:172.18.255.254 vrf:default ifname:eth0] down -> up",
		"2026/11/23 04:01:31.100000 BFD: [SEY1D-NT8EQ] state-change: [mhop:no peer:172.18.0.50 local:172.18.255.254 vrf:default ifname:eth0] up -> down reason:control-expired",
		"2026/11/23 04:01:31.365872 BFD: [SEY1D-NT8EQ] state-change: [mhop:no peer:172.18.0.5 local:172.18.255.254 vrf:default ifname:eth0] up -> down reason:control-expired",
	}, "\n")
	since := time.Date(2026, 11, 23, 4, 1, 31, 247146000, time.Local)
	got, ok := BFDDownAt(log, netip.MustParseAddr("172.18.0.5"), since)
	if !ok || got.Sub(since) != 118726*time.Microsecond {
		t.Errorf("BFDDownAt = %v %v (%s after the cut), want 118.726 ms after", got, ok, got.Sub(since))
	}
	if _, ok := BFDDownAt(log, netip.MustParseAddr("172.18.0.4"), since); ok {
		t.Error("found a change for a peer that has none")
	}
}

func TestSpread(t *testing.T) {
	nodes := map[string]string{"172.18.0.2": "cp", "10.10.1.1": "w1"}
	s := Spread([]netip.Addr{netip.MustParseAddr("172.18.0.2"), netip.MustParseAddr("10.10.1.1"), netip.MustParseAddr("10.10.1.1"), netip.MustParseAddr("9.9.9.9")},
		func(a netip.Addr) string { return nodes[a.String()] })
	if s["cp"] != 1 || s["w1"] != 2 || s["unknown 9.9.9.9"] != 1 {
		t.Errorf("Spread = %v", s)
	}
}
