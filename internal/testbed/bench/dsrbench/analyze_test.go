package dsrbench

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A real wrk 4.1.0 report (Debian's package, against a local server).
const wrkOut = `Running 1s test @ http://127.0.0.1:18080/
  1 threads and 2 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    29.04ms   22.43ms 103.45ms   68.18%
    Req/Sec    61.22     52.49   188.00     88.89%
  Latency Distribution
     50%   26.52ms
     75%   41.54ms
     90%   62.69ms
     99%  103.45ms
  64 requests in 1.09s, 0.99MB read
Requests/sec:     58.91
Transfer/sec:      0.91MB
`

func TestParseWrk(t *testing.T) {
	w, err := ParseWrk(wrkOut)
	if err != nil {
		t.Fatal(err)
	}
	if w.Requests != 64 || w.RPS != 58.91 || w.Read != 0.99*(1<<20) || w.Transfer != 0.91*(1<<20) {
		t.Errorf("got %+v", w)
	}
	for _, bad := range []string{
		strings.Replace(wrkOut, "Transfer/sec:      0.91MB\n", "", 1),
		strings.Replace(wrkOut, ", 0.99MB read", "", 1),
		strings.Replace(wrkOut, "0.91MB", "0.91", 1),
		strings.Replace(wrkOut, "Requests/sec:     58.91\n", "", 1),
	} {
		if _, err := ParseWrk(bad); err == nil {
			t.Errorf("no error for\n%s", bad)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
		ok   bool
	}{
		{"512B", 512, true}, {"1.50KB", 1536, true}, {"2.00MB", 2 << 20, true}, {"1.00GB", 1 << 30, true}, {"3TB", 3 << 40, true},
		{"1PB", 1 << 50, true}, {"", 0, false}, {"12", 0, false}, {"xMB", 0, false}, {"-1MB", 0, false},
	} {
		got, err := ParseBytes(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseBytes(%q) = %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestParseLinkStats(t *testing.T) {
	// iproute2's output on this machine.
	real := `[{"ifindex":1,"ifname":"lo","flags":["LOOPBACK","UP","LOWER_UP"],"mtu":65536,"qdisc":"noqueue","operstate":"UNKNOWN","linkmode":"DEFAULT","group":"default","txqlen":1000,"link_type":"loopback","address":"00:00:00:00:00:00","broadcast":"00:00:00:00:00:00","stats64":{"rx":{"bytes":14376009172,"packets":32578317,"errors":0,"dropped":0,"over_errors":0,"multicast":0},"tx":{"bytes":14376009100,"packets":32578317,"errors":0,"dropped":0,"carrier_errors":0,"collisions":0}}}]`
	c, err := ParseLinkStats([]byte(real))
	if err != nil || c != (Counters{RX: 14376009172, TX: 14376009100}) {
		t.Errorf("got %+v, %v", c, err)
	}
	for _, bad := range []string{`[]`, `not json`, `[{"ifname":"eth0"}]`, `[{"ifname":"eth0","stats64":{"rx":{},"tx":{"bytes":1}}}]`, real[:len(real)-1] + `,` + real[1:]} {
		if _, err := ParseLinkStats([]byte(bad)); err == nil {
			t.Errorf("no error for %s", bad)
		}
	}
	if d := (Counters{RX: 10, TX: 5}).Sub(Counters{RX: 4, TX: 7}); d != (Counters{RX: 6, TX: 0}) {
		t.Errorf("Sub: %+v", d)
	}
}

func TestSummarize(t *testing.T) {
	run := func(rps, tr float64) Wrk { w := Wrk{Transfer: tr}; w.RPS = rps; return w }
	got := Summarize(map[string][]Wrk{
		TargetSNAT:   {run(80, 8), run(90, 9), run(70, 7)},
		TargetDirect: {run(100, 10), run(120, 12), run(110, 11)},
		TargetDSR:    {run(105, 11), run(95, 9)},
	})
	want := []Summary{
		{Target: TargetDirect, Runs: 3, RPS: 110, Transfer: 11, RPSMin: 100, RPSMax: 120, RPSRatio: 1, Ratio: 1},
		{Target: TargetDSR, Runs: 2, RPS: 100, Transfer: 10, RPSMin: 95, RPSMax: 105, RPSRatio: 100.0 / 110, Ratio: 10.0 / 11},
		{Target: TargetSNAT, Runs: 3, RPS: 80, Transfer: 8, RPSMin: 70, RPSMax: 90, RPSRatio: 80.0 / 110, Ratio: 8.0 / 11},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// Without direct runs there is no ratio.
	if s := Summarize(map[string][]Wrk{TargetDSR: {run(1, 1)}}); len(s) != 1 || s[0].RPSRatio != 0 {
		t.Errorf("got %+v", s)
	}
}

func TestTable(t *testing.T) {
	w := Wrk{Read: 100 << 20, Transfer: 20 << 20}
	w.Requests = 100
	var b bytes.Buffer
	Table(&b, "wrk -t2 -c50 -d10s", Summarize(map[string][]Wrk{TargetDirect: {{Transfer: 1 << 20}}}), "wrk -t1 -c4 -d5s, 1 MiB", "w3", "w1",
		[]Bulk{{Target: TargetDSR, Wrk: w, Entry: Counters{TX: 1 << 20}, Backend: Counters{TX: 101 << 20}}})
	for _, s := range []string{"| pod directly | 1 |", "| LoadBalancer, dsr | 100 | 100.0 MiB | 1.0 MiB | 0.010 | 101.0 MiB | 1.010 | 20.0 MiB/s |"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, b.String())
		}
	}
}
