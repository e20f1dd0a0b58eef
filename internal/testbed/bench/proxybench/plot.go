package proxybench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ironlb/ironlb/internal/testbed/bench/benchplot"
)

// ResultsKind marks a file of Saved results, for `ironlb bench plot`.
const ResultsKind = "proxy-sync"

// Saved is a run as `bench-proxy --plot` and `bench proxy-scale --plot` save it and `ironlb bench
// plot` reads it back.
type Saved struct {
	Kind   string `json:"kind"`   // ResultsKind
	Name   string `json:"name"`   // the file's base name: proxy-lab (bench-proxy) or proxy-scale
	Where  string `json:"where"`  // the pictures' subtitle: "in the lab", "without the lab"
	Result Result `json:"result"` // Result's fields have no tags: durations are nanoseconds
}

// SyncPlot is full sync time against the number of Services for both proxies: from the start to
// the rules in the kernel (solid) and by the proxy's own full-sync metric (dashed); medians, with
// whiskers from the fastest trial to the p99 (with 3 trials, the slowest).
func SyncPlot(s Saved) benchplot.Scaling {
	p := benchplot.Scaling{
		Title:  "Full sync against the number of Services, " + s.Where,
		XLabel: "Services (2 endpoints each; log scale)",
		YLabel: "time (log scale)",
	}
	for _, px := range []struct {
		name, label string
		color       int
	}{{KubeProxy, "kube-proxy nftables", 1}, {IronLB, "ironlb proxy", 0}} {
		for _, m := range []struct {
			what   string
			dashed bool
			f      func(SyncTrial) time.Duration
		}{
			{"start -> rules in the kernel", false, func(t SyncTrial) time.Duration { return t.Sync }},
			{"own full-sync metric", true, func(t SyncTrial) time.Duration { return t.OwnFull }},
		} {
			c := benchplot.Curve{Name: px.label + ": " + m.what, Style: benchplot.Style{Color: px.color, Dashed: m.dashed}}
			for _, n := range syncSizes(s.Result.Sync) {
				pt := benchplot.Point{N: n}
				for _, t := range bySize(s.Result.Sync[px.name], n) {
					pt.Values = append(pt.Values, m.f(t))
				}
				c.Points = append(c.Points, pt)
			}
			p.Curves = append(p.Curves, c)
		}
	}
	return p
}

// ChangePlot is the distribution of the endpoint changes' times for both proxies: from the
// EndpointSlice update to the rules in the kernel (solid) and by the proxy's own partial-sync
// metric (dashed). ok is false when the run made no change.
func ChangePlot(s Saved) (d benchplot.Distribution, ok bool) {
	d = benchplot.Distribution{
		Title:  fmt.Sprintf("One endpoint change at %s Services, %s", fmtCount(s.Result.ChangeAt), s.Where),
		XLabel: "time (log scale)",
	}
	for _, px := range []struct {
		name, label string
		color       int
	}{{KubeProxy, "kube-proxy nftables", 1}, {IronLB, "ironlb proxy", 0}} {
		var rules, own []time.Duration
		for _, c := range s.Result.Changes[px.name] {
			rules, own = append(rules, c.Ruleset), append(own, c.Own)
		}
		if len(rules) == 0 {
			continue
		}
		ok = true
		d.Series = append(d.Series,
			benchplot.Series{Name: px.label + ": update -> rules in the kernel", Style: benchplot.Style{Color: px.color}, Values: rules},
			benchplot.Series{Name: px.label + ": own partial-sync metric", Style: benchplot.Style{Color: px.color, Dashed: true}, Values: own})
	}
	return d, ok
}

// fmtCount writes 10000 as "10,000".
func fmtCount(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// SavePlots writes s to dir as NAME.json and draws from it NAME.svg (SyncPlot) and, when the run
// changed endpoints, NAME-change.svg (ChangePlot). It returns the files written.
func SavePlots(dir string, s Saved) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	s.Kind = ResultsKind
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	f := filepath.Join(dir, s.Name+".json")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		return nil, err
	}
	svgs, err := RenderFile(dir, f)
	return append([]string{f}, svgs...), err
}

// RenderFile draws the run saved in file into dir: BASE.svg (SyncPlot), when it has full syncs,
// and BASE-change.svg (ChangePlot), when it has endpoint changes, BASE being the file's name without
// .json. It returns the files written.
func RenderFile(dir, file string) ([]string, error) {
	var s Saved
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if s.Kind != ResultsKind {
		return nil, fmt.Errorf("%s: kind %q, want %q", file, s.Kind, ResultsKind)
	}
	base := filepath.Join(dir, strings.TrimSuffix(filepath.Base(file), ".json"))
	var written []string
	write := func(out string, svg func() ([]byte, error)) error {
		b, err := svg()
		if err != nil {
			return fmt.Errorf("%s: %w", out, err)
		}
		if err := os.WriteFile(out, b, 0o644); err != nil {
			return err
		}
		written = append(written, out)
		return nil
	}
	if len(s.Result.Sync) > 0 {
		if err := write(base+".svg", SyncPlot(s).SVG); err != nil {
			return written, err
		}
	}
	if d, ok := ChangePlot(s); ok {
		if err := write(base+"-change.svg", d.SVG); err != nil {
			return written, err
		}
	}
	if len(written) == 0 {
		return nil, fmt.Errorf("%s: neither full syncs nor endpoint changes to draw", file)
	}
	return written, nil
}
