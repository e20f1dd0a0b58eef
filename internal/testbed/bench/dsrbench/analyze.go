// Package dsrbench is `lab bench-dsr-throughput` (issue 19): wrk from the lab's client against a pod
// directly, against a LoadBalancer address in direct-server-return mode and against the same address
// in snat mode, in interleaved rounds, for requests per second and bytes per second with their ratio
// to the pod directly; then a reply-heavy run (1 MiB answers) per target with the entry node's and
// the backend node's interface byte counters read before and after, to show where the replies went.
//
// analyze.go is pure (wrk's transfer lines, `ip -j -s link`'s counters, medians, the tables); run.go
// drives the lab.
package dsrbench

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/ironlb/ironlb/internal/testbed/bench/proxybench"
)

// The targets, in the order each round runs them.
const (
	TargetDirect = "pod directly"
	TargetDSR    = "LoadBalancer, dsr"
	TargetSNAT   = "LoadBalancer, snat"
)

// Targets lists them in order.
var Targets = []string{TargetDirect, TargetDSR, TargetSNAT}

// Wrk is one wrk run: proxybench's figures and the bytes.
type Wrk struct {
	proxybench.Wrk
	Transfer float64 // bytes per second ("Transfer/sec")
	Read     float64 // bytes read ("N requests in Ts, X read")
}

// ParseWrk reads wrk's report (with --latency): proxybench.ParseWrk's figures, the bytes read and
// Transfer/sec. wrk prints bytes in binary units (1 KB = 1024 B) with two decimals.
func ParseWrk(out string) (Wrk, error) {
	pw, err := proxybench.ParseWrk(strings.NewReader(out))
	if err != nil {
		return Wrk{}, err
	}
	w := Wrk{Wrk: pw, Transfer: -1, Read: -1}
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "Transfer/sec:":
			if w.Transfer, err = ParseBytes(f[1]); err != nil {
				return w, fmt.Errorf("wrk %q: %w", strings.TrimSpace(line), err)
			}
		case len(f) >= 6 && f[1] == "requests" && f[2] == "in" && f[len(f)-1] == "read":
			if w.Read, err = ParseBytes(f[len(f)-2]); err != nil {
				return w, fmt.Errorf("wrk %q: %w", strings.TrimSpace(line), err)
			}
		}
	}
	if w.Transfer < 0 || w.Read < 0 {
		return w, fmt.Errorf("wrk output without Transfer/sec or the bytes read")
	}
	return w, nil
}

// ParseBytes parses wrk's byte counts: a number with B, KB, MB, GB, TB or PB (binary units).
func ParseBytes(s string) (float64, error) {
	units := []struct {
		suffix string
		mult   float64
	}{{"PB", 1 << 50}, {"TB", 1 << 40}, {"GB", 1 << 30}, {"MB", 1 << 20}, {"KB", 1 << 10}, {"B", 1}}
	for _, u := range units {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 {
				return 0, fmt.Errorf("bytes %q: not a count", s)
			}
			return f * u.mult, nil
		}
	}
	return 0, fmt.Errorf("bytes %q: no unit", s)
}

// Counters are an interface's byte counters.
type Counters struct{ RX, TX uint64 }

// ParseLinkStats reads `ip -j -s link show dev IFACE`: the one link's stats64 byte counters.
func ParseLinkStats(b []byte) (Counters, error) {
	var links []struct {
		Ifname  string `json:"ifname"`
		Stats64 *struct {
			RX struct {
				Bytes *uint64 `json:"bytes"`
			} `json:"rx"`
			TX struct {
				Bytes *uint64 `json:"bytes"`
			} `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(b, &links); err != nil {
		return Counters{}, fmt.Errorf("ip -j -s link: %w", err)
	}
	if len(links) != 1 {
		return Counters{}, fmt.Errorf("ip -j -s link: %d links, want 1", len(links))
	}
	s := links[0].Stats64
	if s == nil || s.RX.Bytes == nil || s.TX.Bytes == nil {
		return Counters{}, fmt.Errorf("ip -j -s link: %s has no stats64 byte counters", links[0].Ifname)
	}
	return Counters{RX: *s.RX.Bytes, TX: *s.TX.Bytes}, nil
}

// Sub is c minus before (a counter that went back, as after a device was recreated, gives 0).
func (c Counters) Sub(before Counters) Counters {
	d := func(a, b uint64) uint64 {
		if a < b {
			return 0
		}
		return a - b
	}
	return Counters{RX: d(c.RX, before.RX), TX: d(c.TX, before.TX)}
}

// Summary is the median of a target's runs and its ratio to the pod directly.
type Summary struct {
	Target          string
	Runs            int
	RPS, Transfer   float64 // medians
	RPSMin, RPSMax  float64
	RPSRatio, Ratio float64 // median RPS and median transfer over the direct target's (0: no direct runs)
	Errors          int
}

// Summarize takes the medians of each target's runs and their ratios to TargetDirect's, in Targets'
// order (targets without runs are left out).
func Summarize(runs map[string][]Wrk) []Summary {
	var out []Summary
	var direct Summary
	for _, t := range Targets {
		rs := runs[t]
		if len(rs) == 0 {
			continue
		}
		s := Summary{Target: t, Runs: len(rs), RPSMin: rs[0].RPS, RPSMax: rs[0].RPS}
		var rps, tr []float64
		for _, r := range rs {
			rps = append(rps, r.RPS)
			tr = append(tr, r.Transfer)
			s.RPSMin, s.RPSMax = min(s.RPSMin, r.RPS), max(s.RPSMax, r.RPS)
			s.Errors += r.Errors
		}
		s.RPS, s.Transfer = Median(rps), Median(tr)
		if t == TargetDirect {
			direct = s
		}
		if direct.RPS > 0 {
			s.RPSRatio = s.RPS / direct.RPS
		}
		if direct.Transfer > 0 {
			s.Ratio = s.Transfer / direct.Transfer
		}
		out = append(out, s)
	}
	return out
}

// Median of xs (the mean of the middle two for an even count); 0 for none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Bulk is one reply-heavy run against a target, with the interface counters' changes over it.
type Bulk struct {
	Target  string
	Wrk     Wrk
	Entry   Counters // the entry node's eth0 (the address's announcer)
	Backend Counters // the pod's node's eth0
}

// Share is x over the bytes the client read (0 when it read none).
func (b Bulk) Share(x uint64) float64 {
	if b.Wrk.Read <= 0 {
		return 0
	}
	return float64(x) / b.Wrk.Read
}

// Table writes the throughput summaries and the reply-heavy runs as Markdown.
func Table(w io.Writer, spec string, sums []Summary, bulkSpec, entry, backend string, bulks []Bulk) {
	fmt.Fprintf(w, "throughput (%s), median of the runs:\n\n", spec)
	fmt.Fprintln(w, "| target | runs | requests/s median (min-max) | transfer/s median | requests/s / direct | transfer/s / direct | errors |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, s := range sums {
		fmt.Fprintf(w, "| %s | %d | %.0f (%.0f-%.0f) | %s | %s | %s | %d |\n", s.Target, s.Runs, s.RPS, s.RPSMin, s.RPSMax, mib(s.Transfer)+"/s",
			ratio(s.RPSRatio), ratio(s.Ratio), s.Errors)
	}
	if len(bulks) == 0 {
		return
	}
	fmt.Fprintf(w, "\nreply-heavy (%s): bytes the client read and eth0 bytes sent by the entry node %s and the backend node %s over the run:\n\n", bulkSpec, entry, backend)
	fmt.Fprintln(w, "| target | responses | client read | entry node tx | entry tx / read | backend node tx | backend tx / read | transfer/s |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, b := range bulks {
		fmt.Fprintf(w, "| %s | %d | %s | %s | %.3f | %s | %.3f | %s/s |\n", b.Target, b.Wrk.Requests, mib(b.Wrk.Read), mib(float64(b.Entry.TX)),
			b.Share(b.Entry.TX), mib(float64(b.Backend.TX)), b.Share(b.Backend.TX), mib(b.Wrk.Transfer))
	}
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

func ratio(r float64) string {
	if r == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f", r)
}
