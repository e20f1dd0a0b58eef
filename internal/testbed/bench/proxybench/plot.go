package proxybench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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

// SavePlots writes s to dir as NAME.json and draws NAME.svg (SyncPlot) from it. It returns the
// files written.
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
	svg, err := RenderFile(dir, f)
	if err != nil {
		return []string{f}, err
	}
	return []string{f, svg}, nil
}

// RenderFile draws the run saved in file into dir as the file's base name with .svg, and returns
// that path.
func RenderFile(dir, file string) (string, error) {
	var s Saved
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return "", fmt.Errorf("%s: %w", file, err)
	}
	if s.Kind != ResultsKind {
		return "", fmt.Errorf("%s: kind %q, want %q", file, s.Kind, ResultsKind)
	}
	svg, err := SyncPlot(s).SVG()
	if err != nil {
		return "", fmt.Errorf("%s: %w", file, err)
	}
	out := filepath.Join(dir, strings.TrimSuffix(filepath.Base(file), ".json")+".svg")
	return out, os.WriteFile(out, svg, 0o644)
}
