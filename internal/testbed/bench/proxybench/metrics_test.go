package proxybench

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// kubeProxyMetrics is an excerpt of kube-proxy's /metrics in nftables mode.
const kubeProxyMetrics = `# HELP kubeproxy_sync_full_proxy_rules_duration_seconds [ALPHA] SyncProxyRules latency in seconds for full resyncs
# TYPE kubeproxy_sync_full_proxy_rules_duration_seconds histogram
kubeproxy_sync_full_proxy_rules_duration_seconds_bucket{le="0.001"} 0
kubeproxy_sync_full_proxy_rules_duration_seconds_bucket{le="+Inf"} 1
kubeproxy_sync_full_proxy_rules_duration_seconds_sum 2.5
kubeproxy_sync_full_proxy_rules_duration_seconds_count 1
# HELP kubeproxy_sync_partial_proxy_rules_duration_seconds [ALPHA] SyncProxyRules latency in seconds for partial resyncs
# TYPE kubeproxy_sync_partial_proxy_rules_duration_seconds histogram
kubeproxy_sync_partial_proxy_rules_duration_seconds_bucket{le="+Inf"} 4
kubeproxy_sync_partial_proxy_rules_duration_seconds_sum 0.2
kubeproxy_sync_partial_proxy_rules_duration_seconds_count 4
# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge
kubeproxy_sync_proxy_rules_last_timestamp_seconds 1.7612345678e+09
rest_client_requests_total{code="200",host="172.18.0.2:6443",method="GET"} 12
`

// ironlbMetrics is an excerpt of `ironlb proxy`'s /metrics.
const ironlbMetrics = `# TYPE ironlb_proxy_sync_duration_seconds histogram
ironlb_proxy_sync_duration_seconds_bucket{kind="full",le="0.001"} 0
ironlb_proxy_sync_duration_seconds_bucket{kind="full",le="+Inf"} 2
ironlb_proxy_sync_duration_seconds_sum{kind="full"} 0.8
ironlb_proxy_sync_duration_seconds_count{kind="full"} 2
ironlb_proxy_sync_duration_seconds_sum{kind="partial"} 0.05
ironlb_proxy_sync_duration_seconds_count{kind="partial"} 10
ironlb_proxy_last_sync_timestamp_seconds 1.7612345e+09
ironlb_proxy_service_warnings_total{reason="a \"quoted\" reason, with a comma"} 1
`

func TestOwnMetrics(t *testing.T) {
	for _, tc := range []struct {
		proxy, text string
		want        Own
	}{
		{KubeProxy, kubeProxyMetrics, Own{FullSum: 2.5, FullCount: 1, PartialSum: 0.2, PartialCount: 4, Last: 1.7612345678e9}},
		{IronLB, ironlbMetrics, Own{FullSum: 0.8, FullCount: 2, PartialSum: 0.05, PartialCount: 10, Last: 1.7612345e9}},
		// Before the first sync a histogram has no series: unknowns, not zeros.
		{IronLB, "ironlb_proxy_services 0\n", Own{FullSum: -1, FullCount: -1, PartialSum: -1, PartialCount: -1, Last: -1}},
	} {
		t.Run(tc.proxy, func(t *testing.T) {
			ss, err := ParseMetrics(strings.NewReader(tc.text))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, OwnMetrics(tc.proxy, ss)); d != "" {
				t.Errorf("OwnMetrics (-want +got):\n%s", d)
			}
		})
	}
}

func TestParseMetrics(t *testing.T) {
	ss, err := ParseMetrics(strings.NewReader(ironlbMetrics + "x_total{a=\"1\",b=\"2\"} +Inf 1712345678000\n"))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := Value(ss, "ironlb_proxy_service_warnings_total", map[string]string{"reason": `a "quoted" reason, with a comma`}); !ok || v != 1 {
		t.Errorf("escaped label value: %v %v", v, ok)
	}
	if v, ok := Value(ss, "x_total", map[string]string{"b": "2"}); !ok || !math.IsInf(v, 1) {
		t.Errorf("value with a timestamp: %v %v", v, ok)
	}
	// Without labels, Value sums every series of the name.
	if v, ok := Value(ss, "ironlb_proxy_sync_duration_seconds_count", nil); !ok || v != 12 {
		t.Errorf("sum over series: %v %v", v, ok)
	}
	if _, ok := Value(ss, "missing", nil); ok {
		t.Error("a missing metric was found")
	}
	for _, bad := range []string{"name_only\n", "m{a=\"1\" 3\n", "m{a=1} 3\n", "m{a=\"1\"} x\n"} {
		if _, err := ParseMetrics(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseMetrics(%q): no error", bad)
		}
	}
}

func TestPartialSince(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after Own
		want          float64
	}{
		{"one sync", Own{PartialSum: 1, PartialCount: 4}, Own{PartialSum: 1.012, PartialCount: 5}, 0.012},
		{"two syncs: the mean", Own{PartialSum: 1, PartialCount: 4}, Own{PartialSum: 1.04, PartialCount: 6}, 0.02},
		{"none yet", Own{PartialSum: 1, PartialCount: 4}, Own{PartialSum: 1, PartialCount: 4}, -1},
		{"no histogram before", Own{PartialSum: -1, PartialCount: -1}, Own{PartialSum: 0.01, PartialCount: 1}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PartialSince(tc.before, tc.after); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("PartialSince = %v, want %v", got, tc.want)
			}
		})
	}
}

// A timestamp with a series per IP family is the latest of them, not their sum (which made kube-proxy's
// "start -> last sync" read as 57 years in the lab).
func TestOwnMetricsTimestampPerFamily(t *testing.T) {
	ss := []Sample{
		{Name: "kubeproxy_sync_proxy_rules_last_timestamp_seconds", Labels: map[string]string{"ip_family": "IPv4"}, Value: 1.7e9 + 5},
		{Name: "kubeproxy_sync_proxy_rules_last_timestamp_seconds", Labels: map[string]string{"ip_family": "IPv6"}, Value: 1.7e9 + 2},
	}
	if got := OwnMetrics("kube-proxy", ss).Last; got != 1.7e9+5 {
		t.Errorf("Last = %v, want the latest series 1.7e9+5", got)
	}
	ss = append(ss,
		Sample{Name: "kubeproxy_sync_full_proxy_rules_duration_seconds_sum", Labels: map[string]string{"ip_family": "IPv4"}, Value: 0.9},
		Sample{Name: "kubeproxy_sync_full_proxy_rules_duration_seconds_count", Labels: map[string]string{"ip_family": "IPv4"}, Value: 1},
		Sample{Name: "kubeproxy_sync_full_proxy_rules_duration_seconds_sum", Labels: map[string]string{"ip_family": "IPv6"}, Value: 0.01},
		Sample{Name: "kubeproxy_sync_full_proxy_rules_duration_seconds_count", Labels: map[string]string{"ip_family": "IPv6"}, Value: 1})
	if o := OwnMetrics("kube-proxy", ss); o.FullSum != 0.9 || o.FullCount != 1 {
		t.Errorf("full sync sum/count = %v/%v, want the IPv4 series' 0.9/1", o.FullSum, o.FullCount)
	}
	if v, _ := Value(ss, "kubeproxy_sync_proxy_rules_last_timestamp_seconds", nil); v != 3.4e9+7 {
		t.Errorf("Value sums the series: %v", v)
	}
}
