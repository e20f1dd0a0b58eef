package benchplot

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Point is the trials of one measure at one count, e.g. the 3 full syncs of a proxy at 10,000
// Services. Values that are not positive (unknown) are left out.
type Point struct {
	N      int
	Values []time.Duration
}

// Curve is one measure against a count: e.g. "ironlb: start -> rules in the kernel".
type Curve struct {
	Name   string
	Style  Style
	Points []Point
}

// Scaling draws each curve's median at each count, joined by lines, with a whisker from the
// smallest trial to the 99th percentile (nearest rank: with few trials, the largest), on
// logarithmic axes: a straight line is a power law, its slope the exponent (1: linear).
type Scaling struct {
	Title  string
	XLabel string // e.g. "Services (2 endpoints each)"
	YLabel string
	Curves []Curve
}

// Quantile is the nearest-rank p-quantile of sorted values (the median for 0.5); 0 when empty.
func Quantile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// medianErrs is the XYer and YErrorer of a curve: medians with whiskers to min and p99.
type medianErrs struct {
	plotter.XYs
	plotter.YErrors
}

// SVG renders the curves; ErrNoData if no curve has a positive value.
func (s Scaling) SVG() ([]byte, error) {
	p, leg, n, err := s.build()
	if err != nil {
		return nil, err
	}
	return render(p, leg, n)
}

func (s Scaling) build() (*plot.Plot, plot.Legend, int, error) {
	p := newPlot(s.Title)
	p.X.Label.Text = s.XLabel
	p.Y.Label.Text = s.YLabel
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.Y.Tick.Marker = logTimeTicks{}
	var counts []int
	p.Add(plotter.NewGrid())
	leg := newLegend()
	entries := 0
	for _, c := range s.Curves {
		var m medianErrs
		for _, pt := range c.Points {
			var v []time.Duration
			for _, x := range pt.Values {
				if x > 0 {
					v = append(v, x)
				}
			}
			if len(v) == 0 || pt.N <= 0 {
				continue
			}
			slices.Sort(v)
			med := ms(Quantile(v, 0.5))
			m.XYs = append(m.XYs, plotter.XY{X: float64(pt.N), Y: med})
			m.YErrors = append(m.YErrors, struct{ Low, High float64 }{Low: med - ms(v[0]), High: ms(Quantile(v, 0.99)) - med})
			counts = append(counts, pt.N)
		}
		if len(m.XYs) == 0 {
			continue
		}
		l, sc, err := plotter.NewLinePoints(m.XYs)
		if err != nil {
			return nil, plot.Legend{}, 0, fmt.Errorf("curve %q: %w", c.Name, err)
		}
		l.LineStyle = c.Style.line()
		sc.GlyphStyle = draw.GlyphStyle{Color: c.Style.color(), Radius: vg.Points(2.6), Shape: draw.CircleGlyph{}}
		if c.Style.Dashed {
			sc.GlyphStyle.Shape = draw.RingGlyph{}
		}
		eb, err := plotter.NewYErrorBars(m)
		if err != nil {
			return nil, plot.Legend{}, 0, fmt.Errorf("curve %q: %w", c.Name, err)
		}
		eb.LineStyle = draw.LineStyle{Color: c.Style.color(), Width: vg.Points(1)}
		eb.CapWidth = vg.Points(6)
		p.Add(l, sc, eb)
		leg.Add(c.Name, l, sc)
		entries++
	}
	if entries == 0 {
		return nil, plot.Legend{}, 0, ErrNoData
	}
	slices.Sort(counts)
	counts = slices.Compact(counts)
	var ticks []plot.Tick
	for _, n := range counts {
		ticks = append(ticks, plot.Tick{Value: float64(n), Label: formatCount(n)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.X.Min, p.X.Max = p.X.Min/1.4, p.X.Max*1.4
	p.Y.Min, p.Y.Max = p.Y.Min/1.5, p.Y.Max*1.5
	return p, leg, entries, nil
}

// formatCount writes 1000 as "1k", 30000 as "30k", 1500 as "1,500".
func formatCount(n int) string {
	if n >= 1000 && n%1000 == 0 {
		return strconv.Itoa(n/1000) + "k"
	}
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
