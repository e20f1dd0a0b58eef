package proxybench

import (
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestEndpointAddr(t *testing.T) {
	for _, tc := range []struct {
		i, j int
		want string
	}{
		{0, 0, "10.10.16.0"}, {0, 1, "10.10.16.1"}, {1, 0, "10.10.16.2"}, {127, 1, "10.10.16.255"}, {128, 0, "10.10.17.0"},
		{29999, 1, "10.10.250.95"}, {maxServices - 1, 1, "10.10.254.71"},
	} {
		if got := EndpointAddr(tc.i, tc.j); got.String() != tc.want {
			t.Errorf("EndpointAddr(%d, %d) = %s, want %s", tc.i, tc.j, got, tc.want)
		}
	}
	// Every endpoint is distinct, none is in a node's pod /24 (10.10.0-15.x) or a change's address.
	seen := map[netip.Addr]bool{}
	for i := range maxServices {
		for j := range 2 {
			a := EndpointAddr(i, j)
			if seen[a] || a.As4()[2] < 16 {
				t.Fatalf("EndpointAddr(%d, %d) = %s: repeated or in a node's pod range", i, j, a)
			}
			seen[a] = true
		}
	}
	for k := range maxChanges {
		if a := ChangeAddr(k); seen[a] {
			t.Fatalf("ChangeAddr(%d) = %s is an endpoint", k, a)
		}
	}
	if got := ChangeAddr(0).String(); got != "10.10.255.1" {
		t.Errorf("ChangeAddr(0) = %s", got)
	}
}

func TestEndpointMarker(t *testing.T) {
	// The endpoint part of chain names in kube-proxy's nftables mode (pkg/proxy/nftables
	// servicePortEndpointChainNameBase, e.g. endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80)
	// and in ironlb's (nftrules endpointBase).
	for _, tc := range []struct {
		ap   netip.AddrPort
		want string
	}{
		{netip.MustParseAddrPort("10.180.0.1:80"), "__10.180.0.1/80"},
		{netip.MustParseAddrPort("[fd00:10:180::1]:8080"), "__fd00.10.180..1/8080"},
	} {
		if got := EndpointMarker(tc.ap); got != tc.want {
			t.Errorf("EndpointMarker(%s) = %q, want %q", tc.ap, got, tc.want)
		}
	}
	chain := "endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80"
	if !strings.Contains(chain, EndpointMarker(netip.MustParseAddrPort("10.180.0.1:80"))) ||
		strings.Contains(chain, EndpointMarker(netip.MustParseAddrPort("10.180.0.10:80"))) {
		t.Error("the marker does not tell 10.180.0.1 from 10.180.0.10")
	}
}

func TestChangeService(t *testing.T) {
	for _, n := range []int{1, 2, 1000, 10000} {
		prev := -1
		for k := range 10 {
			i := ChangeService(k, n)
			if i < 0 || i >= n || n > 1 && i == prev {
				t.Errorf("ChangeService(%d, %d) = %d (previous %d)", k, n, i, prev)
			}
			prev = i
		}
	}
}

func TestChangeSize(t *testing.T) {
	for _, tc := range []struct {
		sizes []int
		want  int
	}{
		{[]int{1000, 10000, 30000}, 10000},
		{[]int{1000, 30000}, 1000},
		{[]int{30000, 5000}, 5000},
		{[]int{9000, 11000}, 9000}, // a tie: the smaller
		{nil, 0},
	} {
		if got := ChangeSize(tc.sizes); got != tc.want {
			t.Errorf("ChangeSize(%v) = %d, want %d", tc.sizes, got, tc.want)
		}
	}
}

func TestCheckSizes(t *testing.T) {
	got, err := CheckSizes([]int{30000, 1000, 10000, 1000})
	if err != nil || !cmp.Equal(got, []int{1000, 10000, 30000}) {
		t.Errorf("CheckSizes = %v, %v", got, err)
	}
	for _, bad := range [][]int{{0}, {-5}, {maxServices + 1}} {
		if _, err := CheckSizes(bad); err == nil {
			t.Errorf("CheckSizes(%v): no error", bad)
		}
	}
}

func TestCIDRCapacity(t *testing.T) {
	for in, want := range map[string]int{"10.200.1.0/24": 254, "10.201.0.0/16": 65534, "10.0.0.0/31": 0, "fd00::/112": 65534} {
		if got := CIDRCapacity(netip.MustParsePrefix(in)); got != want {
			t.Errorf("CIDRCapacity(%s) = %d, want %d", in, got, want)
		}
	}
}

func TestQuantiles(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	for _, tc := range []struct {
		in          []time.Duration
		median, p90 time.Duration
	}{
		{ms(5, 1, 3), 3 * time.Millisecond, 5 * time.Millisecond},
		{ms(4, 1, 3, 2), 2 * time.Millisecond, 4 * time.Millisecond},
		{ms(-1, 7, -1), 7 * time.Millisecond, 7 * time.Millisecond}, // unknowns left out
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 5 * time.Millisecond, 9 * time.Millisecond},
		{nil, -1, -1},
		{ms(-1), -1, -1},
	} {
		if m, p := Median(tc.in), P90(tc.in); m != tc.median || p != tc.p90 {
			t.Errorf("Median, P90 of %v = %v, %v; want %v, %v", tc.in, m, p, tc.median, tc.p90)
		}
	}
}

func TestRatioVerdict(t *testing.T) {
	if r := Ratio(1, 4); r != 0.25 {
		t.Errorf("Ratio(1, 4) = %v", r)
	}
	for _, r := range []float64{Ratio(-1, 4), Ratio(1, 0), Ratio(1, -1)} {
		if !math.IsNaN(r) {
			t.Errorf("Ratio of an unknown = %v, want NaN", r)
		}
	}
	if Verdict(true, true) != "met" || Verdict(false, true) != "NOT met" || Verdict(true, false) != "-" {
		t.Error("Verdict")
	}
}

func TestProcStartTicks(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       uint64
		wantErr    bool
	}{
		{name: "kube-proxy", stat: "4242 (kube-proxy) S 4200 4242 4242 0 -1 4194560 5000 0 0 0 120 30 0 0 20 0 12 0 987654 1300000000 9000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n", want: 987654},
		{name: "spaces and parens in the name", stat: "7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 31337 0 0\n", want: 31337},
		{name: "no name", stat: "7 a R 1", wantErr: true},
		{name: "short", stat: "7 (x) R 1 2 3", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ProcStartTicks(tc.stat)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("ProcStartTicks = %d, %v; want %d, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestTable(t *testing.T) {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	r := Result{
		Sync: map[string][]SyncTrial{
			KubeProxy: {
				{Services: 1000, Sync: ms(900), OwnFull: ms(300), OwnLast: ms(880), PeakRSS: 60 << 20},
				{Services: 1000, Sync: ms(1100), OwnFull: ms(320), OwnLast: ms(1090), PeakRSS: 64 << 20},
				{Services: 1000, Sync: ms(1000), OwnFull: ms(310), OwnLast: ms(990), PeakRSS: 62 << 20},
				{Services: 10000, Sync: 8 * time.Second, OwnFull: 3 * time.Second, OwnLast: -1, PeakRSS: 200 << 20},
			},
			IronLB: {
				{Services: 1000, Sync: ms(300), OwnFull: ms(100), OwnLast: ms(290), PeakRSS: 40 << 20},
				{Services: 1000, Sync: ms(350), OwnFull: ms(110), OwnLast: ms(340), PeakRSS: 42 << 20},
				{Services: 1000, Sync: ms(400), OwnFull: ms(120), OwnLast: ms(390), PeakRSS: 41 << 20},
				{Services: 10000, Sync: 5 * time.Second, OwnFull: 2 * time.Second, OwnLast: 5 * time.Second, PeakRSS: 150 << 20},
			},
		},
		ChangeAt: 10000,
		Changes: map[string][]ChangeTrial{
			KubeProxy: {{Ruleset: ms(1200), Own: ms(40)}, {Ruleset: ms(900), Own: ms(35)}},
			IronLB:    {{Ruleset: ms(12), Own: ms(4)}, {Ruleset: ms(9.5), Own: -1}},
		},
		Wrk: map[string][]Wrk{
			TargetKubeProxy:    {{RPS: 9000, P50: ms(2.5), P99: ms(9)}},
			TargetIronLB:       {{RPS: 9700, P50: ms(2.2), P99: ms(8), Errors: 2}},
			TargetDirectKube:   {{RPS: 10000, P50: ms(2), P99: ms(7)}},
			TargetDirectIronLB: {{RPS: 10000, P50: ms(2), P99: ms(7)}},
		},
		WrkSpec: "-t2 -c50 -d10s from mypc",
	}
	var b strings.Builder
	Table(&b, r)
	got := b.String()
	for _, want := range []string{
		"| measure | kube-proxy nftables | ironlb proxy | ironlb / kube-proxy | goal |",
		"| full sync, 1000 Services × 2 endpoints: start -> rules in the kernel (median of 3/3) | 1.00 s | 350.0 ms | 0.35 | ≥ 2× faster: met |",
		"|   own metric: full sync duration | 310.0 ms | 110.0 ms | 0.35 |  |",
		"|   peak RSS during start and full sync (median) | 62 MiB | 41 MiB | 0.66 |  |",
		"| full sync, 10000 Services × 2 endpoints: start -> rules in the kernel (median of 1/1) | 8.00 s | 5.00 s | 0.62 | ≥ 2× faster: NOT met |",
		"|   own metric: start -> last sync timestamp | - | 5.00 s | - |  |",
		"| one endpoint change at 10000 Services: update -> rules in the kernel (median of 2/2) | 900.0 ms | 9.50 ms | 0.01 | ≤ 20.0 ms: met |",
		"|   own metric: partial sync duration (median) | 35.0 ms | 4.00 ms | 0.11 |  |",
		"| wrk -t2 -c50 -d10s from mypc via the node's NodePort (median of 1/1 runs) | 9000 req/s | 9700 req/s | 1.08 |  |",
		"|   NodePort / direct | 90.0% | 97.0% |  | ≥ 95% of direct: met |",
		"|   latency p99 via NodePort (direct) | 9.00 ms (7.00 ms) | 8.00 ms (7.00 ms) | 0.89 |  |",
		"wrk socket errors or non-2xx/3xx responses: kube-proxy 0 (direct 0), ironlb 2 (direct 0)",
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("table lacks line\n%s\ngot:\n%s", want, got)
		}
	}
	// An empty result prints only the header.
	b.Reset()
	Table(&b, Result{})
	if n := strings.Count(b.String(), "\n"); n != 4 {
		t.Errorf("empty table has %d lines:\n%s", n, b.String())
	}
}

func TestProcCPUTicks(t *testing.T) {
	stat := "1234 (a (weird) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 7 3 20 0 12 0 5000 0 0"
	if got := ProcCPUTicks(stat); got != 310 {
		t.Errorf("ProcCPUTicks = %d, want 250+50+7+3", got)
	}
	if got := ProcCPUTicks("garbage"); got != 0 {
		t.Errorf("ProcCPUTicks(garbage) = %d", got)
	}
}
