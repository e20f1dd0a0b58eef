// Package proxybench is issue 7's benchmark of the Service dataplane: kube-proxy in nftables mode
// against `ironlb proxy`, in the same lab and the same run. It measures the time from a proxy's
// start to its first full sync and its peak memory at 1k-30k Services, the time one endpoint
// change takes to reach the node's ruleset at 10k Services, and HTTP throughput and latency
// through a NodePort of each proxy's node against the pod directly (wrk).
//
// Both proxies are measured by the same yardstick, the node's nftables state read over netlink:
// a full sync is done when the last Service's ClusterIP is in the table's service-ips map (both
// proxies share kube-proxy's layout and commit a full sync as one transaction), an endpoint
// change is done when the kernel announces a chain named for the new endpoint
// ("…__ADDR/PORT", again both layouts). The proxies' own sync-duration metrics are reported
// beside it.
//
// This file and wrk.go, metrics.go are pure (parsing, statistics, the table); netlink.go speaks
// to the kernel. The lab run is one file per job: run.go (Run: options, the order of the steps,
// undo), setup.go (putting the lab in shape and back), services.go (the Services and their
// EndpointSlices), sync.go (a proxy's restart and the time to its first full sync), change.go (one
// endpoint change), wrkrun.go (wrk through NodePorts). scale.go is `bench proxy-scale`, without
// the lab.
package proxybench

import (
	"fmt"
	"io"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The proxies, as they are named in results and tables.
const (
	KubeProxy = "kube-proxy"
	IronLB    = "ironlb"
)

// Goals of issue 7, printed next to the results.
const (
	GoalSyncRatio   = 0.5                   // ironlb's full sync at most half kube-proxy's
	GoalChange      = 20 * time.Millisecond // one endpoint change at 10k Services
	GoalThroughput  = 0.95                  // of the direct-to-pod requests per second
	maxServices     = 30500                 // EndpointAddr's range holds two endpoints for this many Services, below ChangeAddr's
	maxChanges      = 250                   // ChangeAddr's range
	fakeEndpointOff = 16 << 8               // EndpointAddr starts at 10.10.16.0, above the nodes' pod /24s
)

// SyncTrial is one restart of a proxy with a number of Services present. Durations are -1 when
// unknown.
type SyncTrial struct {
	Services int
	Sync     time.Duration // container start -> the last Service's ClusterIP in the node's table
	OwnFull  time.Duration // the proxy's own full-sync duration metric (mean if it did several)
	OwnLast  time.Duration // container start -> the proxy's own last-sync timestamp metric
	PeakRSS  int64         // bytes: every process of the Pod (the proxy and the nft it runs), sampled every 100 ms
	CPU      time.Duration // CPU time (user and system) of the proxy and its children from start to rules; 0 when not measured (the lab)
}

// ChangeTrial is one endpoint change. Durations are -1 when unknown.
type ChangeTrial struct {
	Ruleset time.Duration // EndpointSlice update sent -> the kernel announces the new endpoint's chain
	Own     time.Duration // the proxy's own partial-sync duration metric for that sync
}

// Result is everything a run measured; missing parts stay empty.
type Result struct {
	Sync     map[string][]SyncTrial   // by proxy
	ChangeAt int                      // Services present during the endpoint changes
	Changes  map[string][]ChangeTrial // by proxy
	Wrk      map[string][]Wrk         // by target: WrkTargets
	WrkSpec  string                   // wrk's options, for the table
}

// The wrk targets: each proxy's NodePort (externalTrafficPolicy Local, so to the pod on the same
// node) and that pod directly.
const (
	TargetIronLB       = "ironlb"
	TargetKubeProxy    = "kube-proxy"
	TargetDirectIronLB = "direct-ironlb"    // the pod on ironlb's node, by its own address
	TargetDirectKube   = "direct-kubeproxy" // the pod on kube-proxy's node
)

// EndpointAddr is the fake pod address of endpoint j (0 or 1) of Service i: 10.10.16.0 onwards,
// above the pod /24s the nodes use (10.10.0-15.x). Valid for i < 30500 (below 10.10.255.0).
func EndpointAddr(i, j int) netip.Addr {
	n := fakeEndpointOff + 2*i + j
	return netip.AddrFrom4([4]byte{10, 10, byte(n >> 8), byte(n)})
}

// ChangeAddr is the address the k-th endpoint change moves an endpoint to: 10.10.255.(k+1), out of
// EndpointAddr's range. Valid for k < 250.
func ChangeAddr(k int) netip.Addr { return netip.AddrFrom4([4]byte{10, 10, 255, byte(k + 1)}) }

// EndpointMarker is the part of an endpoint chain's name that names the endpoint, in kube-proxy's
// layout and ironlb's alike: "endpoint-HASH-ns/name/proto/port__ADDR/PORT".
func EndpointMarker(a netip.AddrPort) string {
	return "__" + strings.ReplaceAll(a.Addr().String(), ":", ".") + "/" + strconv.Itoa(int(a.Port()))
}

// ChangeService picks the Service whose endpoint the k-th change moves among n: spread over the
// range, never the same twice in a row.
func ChangeService(k, n int) int { return (n/2 + k*7919) % n }

// ChangeSize is the number of Services to run the endpoint changes at: the size closest to 10,000
// (the smaller on a tie), or 0 without sizes.
func ChangeSize(sizes []int) int {
	best := 0
	for _, s := range sizes {
		if best == 0 || abs(s-10000) < abs(best-10000) || abs(s-10000) == abs(best-10000) && s < best {
			best = s
		}
	}
	return best
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// CheckSizes validates and sorts the Service counts.
func CheckSizes(sizes []int) ([]int, error) {
	out := slices.Clone(sizes)
	slices.Sort(out)
	out = slices.Compact(out)
	for _, s := range out {
		if s < 1 || s > maxServices {
			return nil, fmt.Errorf("--services %d: want 1..%d", s, maxServices)
		}
	}
	return out, nil
}

// CIDRCapacity is the number of ClusterIPs a service CIDR holds (the network and broadcast
// addresses of IPv4 excluded, as the allocator does).
func CIDRCapacity(p netip.Prefix) int {
	host := p.Addr().BitLen() - p.Bits()
	if host >= 31 {
		return math.MaxInt32
	}
	return max(0, 1<<host-2)
}

// Median of the durations that are not negative, -1 if none.
func Median(ds []time.Duration) time.Duration { return quantile(ds, 0.5) }

// P90 of the durations that are not negative, -1 if none.
func P90(ds []time.Duration) time.Duration { return quantile(ds, 0.9) }

// quantile by the nearest-rank method, over the values that are not negative.
func quantile[T int64 | time.Duration | float64](vs []T, p float64) T {
	var v []T
	for _, x := range vs {
		if x >= 0 {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return -1
	}
	slices.Sort(v)
	i := int(math.Ceil(p*float64(len(v)))) - 1
	return v[max(0, min(i, len(v)-1))]
}

// Ratio is a/b, NaN when either is unknown (negative) or b is 0.
func Ratio(a, b float64) float64 {
	if a < 0 || b <= 0 {
		return math.NaN()
	}
	return a / b
}

// Verdict says whether a goal is met: "met", "NOT met", or "-" when a value is missing.
func Verdict(ok, known bool) string {
	switch {
	case !known:
		return "-"
	case ok:
		return "met"
	}
	return "NOT met"
}

func fmtDur(d time.Duration) string {
	switch {
	case d < 0:
		return "-"
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	case d < time.Second:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func fmtRatio(r float64) string {
	if math.IsNaN(r) {
		return "-"
	}
	return fmt.Sprintf("%.2f", r)
}

func fmtMiB(b int64) string {
	if b < 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
}

func fmtRate(r float64) string {
	if r < 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f req/s", r)
}

// Table writes the side-by-side summary: medians, the ratio ironlb / kube-proxy, and the goals.
func Table(w io.Writer, r Result) {
	fmt.Fprintf(w, "\nkube-proxy (nftables mode) vs ironlb proxy, same lab, same run\n")
	fmt.Fprintf(w, "| measure | kube-proxy nftables | ironlb proxy | ironlb / kube-proxy | goal |\n|---|---|---|---|---|\n")
	row := func(measure, kp, il, ratio, goal string) {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", measure, kp, il, ratio, goal)
	}
	for _, n := range syncSizes(r.Sync) {
		kp, il := bySize(r.Sync[KubeProxy], n), bySize(r.Sync[IronLB], n)
		col := func(ts []SyncTrial, f func(SyncTrial) time.Duration) time.Duration {
			var ds []time.Duration
			for _, t := range ts {
				ds = append(ds, f(t))
			}
			return Median(ds)
		}
		sync := func(t SyncTrial) time.Duration { return t.Sync }
		kpS, ilS := col(kp, sync), col(il, sync)
		ratio := Ratio(float64(ilS), float64(kpS))
		row(fmt.Sprintf("full sync, %d Services × 2 endpoints: start -> rules in the kernel (median of %d/%d)", n, len(kp), len(il)),
			fmtDur(kpS), fmtDur(ilS), fmtRatio(ratio),
			fmt.Sprintf("≥ 2× faster: %s", Verdict(ratio <= GoalSyncRatio, !math.IsNaN(ratio))))
		own := func(t SyncTrial) time.Duration { return t.OwnFull }
		kpO, ilO := col(kp, own), col(il, own)
		row("  own metric: full sync duration", fmtDur(kpO), fmtDur(ilO), fmtRatio(Ratio(float64(ilO), float64(kpO))), "")
		last := func(t SyncTrial) time.Duration { return t.OwnLast }
		kpL, ilL := col(kp, last), col(il, last)
		row("  own metric: start -> last sync timestamp", fmtDur(kpL), fmtDur(ilL), fmtRatio(Ratio(float64(ilL), float64(kpL))), "")
		cpu := func(t SyncTrial) time.Duration {
			if t.CPU <= 0 {
				return -1
			}
			return t.CPU
		}
		if kpC, ilC := col(kp, cpu), col(il, cpu); kpC > 0 || ilC > 0 {
			row("  CPU time of the proxy and its children, start -> rules", fmtDur(kpC), fmtDur(ilC), fmtRatio(Ratio(float64(ilC), float64(kpC))), "")
		}
		kpR, ilR := peakRSS(kp), peakRSS(il)
		row("  peak RSS during start and full sync (median)", fmtMiB(kpR), fmtMiB(ilR), fmtRatio(Ratio(float64(ilR), float64(kpR))), "")
	}
	if kp, il := r.Changes[KubeProxy], r.Changes[IronLB]; len(kp)+len(il) > 0 {
		get := func(ts []ChangeTrial, f func(ChangeTrial) time.Duration) []time.Duration {
			var ds []time.Duration
			for _, t := range ts {
				ds = append(ds, f(t))
			}
			return ds
		}
		rs := func(t ChangeTrial) time.Duration { return t.Ruleset }
		kpC, ilC := get(kp, rs), get(il, rs)
		ilM := Median(ilC)
		row(fmt.Sprintf("one endpoint change at %d Services: update -> rules in the kernel (median of %d/%d)", r.ChangeAt, len(kp), len(il)),
			fmtDur(Median(kpC)), fmtDur(ilM), fmtRatio(Ratio(float64(ilM), float64(Median(kpC)))),
			fmt.Sprintf("≤ %s: %s", fmtDur(GoalChange), Verdict(ilM <= GoalChange, ilM >= 0)))
		row("  p90", fmtDur(P90(kpC)), fmtDur(P90(ilC)), fmtRatio(Ratio(float64(P90(ilC)), float64(P90(kpC)))), "")
		own := func(t ChangeTrial) time.Duration { return t.Own }
		kpO, ilO := Median(get(kp, own)), Median(get(il, own))
		row("  own metric: partial sync duration (median)", fmtDur(kpO), fmtDur(ilO), fmtRatio(Ratio(float64(ilO), float64(kpO))), "")
	}
	if len(r.Wrk) > 0 {
		m := map[string]WrkSummary{}
		for k, v := range r.Wrk {
			m[k] = SummarizeWrk(v)
		}
		kp, il, dkp, dil := m[TargetKubeProxy], m[TargetIronLB], m[TargetDirectKube], m[TargetDirectIronLB]
		row(fmt.Sprintf("wrk %s via the node's NodePort (median of %d/%d runs)", r.WrkSpec, kp.Runs, il.Runs),
			fmtRate(kp.RPS), fmtRate(il.RPS), fmtRatio(Ratio(il.RPS, kp.RPS)), "")
		row("  the same pod directly (its node routes mypc to it)", fmtRate(dkp.RPS), fmtRate(dil.RPS), fmtRatio(Ratio(dil.RPS, dkp.RPS)), "")
		kpPct, ilPct := Ratio(kp.RPS, dkp.RPS), Ratio(il.RPS, dil.RPS)
		row("  NodePort / direct", fmtPct(kpPct), fmtPct(ilPct), "",
			fmt.Sprintf("≥ %.0f%% of direct: %s", GoalThroughput*100, Verdict(ilPct >= GoalThroughput, !math.IsNaN(ilPct))))
		row("  latency p50 via NodePort (direct)", fmtDur(kp.P50)+" ("+fmtDur(dkp.P50)+")", fmtDur(il.P50)+" ("+fmtDur(dil.P50)+")",
			fmtRatio(Ratio(float64(il.P50), float64(kp.P50))), "")
		row("  latency p99 via NodePort (direct)", fmtDur(kp.P99)+" ("+fmtDur(dkp.P99)+")", fmtDur(il.P99)+" ("+fmtDur(dil.P99)+")",
			fmtRatio(Ratio(float64(il.P99), float64(kp.P99))), "")
		if e := kp.Errors + il.Errors + dkp.Errors + dil.Errors; e > 0 {
			fmt.Fprintf(w, "wrk socket errors or non-2xx/3xx responses: kube-proxy %d (direct %d), ironlb %d (direct %d)\n",
				kp.Errors, dkp.Errors, il.Errors, dil.Errors)
		}
	}
}

func fmtPct(r float64) string {
	if math.IsNaN(r) {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", r*100)
}

func syncSizes(m map[string][]SyncTrial) []int {
	var out []int
	for _, ts := range m {
		for _, t := range ts {
			out = append(out, t.Services)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func bySize(ts []SyncTrial, n int) []SyncTrial {
	var out []SyncTrial
	for _, t := range ts {
		if t.Services == n {
			out = append(out, t)
		}
	}
	return out
}

func peakRSS(ts []SyncTrial) int64 {
	var v []int64
	for _, t := range ts {
		if t.PeakRSS > 0 {
			v = append(v, t.PeakRSS)
		}
	}
	return quantile(v, 0.5)
}

// ProcStartTicks returns the start time of a process, in clock ticks since boot, from the contents
// of /proc/PID/stat (field 22; the command name in field 2 may hold spaces and parentheses).
func ProcStartTicks(stat string) (uint64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("proc stat %.40q: no command name", stat)
	}
	f := strings.Fields(stat[i+1:])
	const idx = 22 - 3 // fields after the command name start at field 3 (state)
	if len(f) <= idx {
		return 0, fmt.Errorf("proc stat %.40q: %d fields after the command name", stat, len(f))
	}
	return strconv.ParseUint(f[idx], 10, 64)
}

// ProcCPUTicks is the CPU time in clock ticks in the contents of /proc/PID/stat: utime, stime,
// cutime and cstime (fields 14-17: the process and its children it has waited for); 0 if the
// line is malformed.
func ProcCPUTicks(stat string) uint64 {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(stat[i+1:])
	const first = 14 - 3
	if len(f) < first+4 {
		return 0
	}
	var sum uint64
	for _, v := range f[first : first+4] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0
		}
		sum += n
	}
	return sum
}
