package benchplot

import (
	"fmt"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Series is one measure over trials, e.g. "ironlb: cut -> ARP answer" of 20 power cuts. Values
// that are not positive (a benchmark's -1 for "never came") are left out and counted in the legend.
type Series struct {
	Name   string
	Style  Style
	Values []time.Duration
}

// Distribution draws the empirical distribution (CDF) of each series against a logarithmic time
// axis: a point per trial at (value, fraction of trials at most that long), joined by steps. A
// series far to the left is faster; its steepness is its consistency. The log axis keeps a 30 ms
// and a 6 s outage on one picture.
type Distribution struct {
	Title  string
	XLabel string // e.g. "outage seen by the client"
	Series []Series
}

// SVG renders the distribution; ErrNoData if no series has a positive value.
func (d Distribution) SVG() ([]byte, error) {
	p, leg, n, err := d.build()
	if err != nil {
		return nil, err
	}
	return render(p, leg, n)
}

func (d Distribution) build() (*plot.Plot, plot.Legend, int, error) {
	p := newPlot(d.Title)
	p.X.Label.Text = d.XLabel
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = logTimeTicks{}
	p.Y.Label.Text = "fraction of trials at most this long"
	p.Y.Min, p.Y.Max = 0, 1
	p.Y.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 0, Label: "0"}, {Value: 0.25}, {Value: 0.5, Label: "0.5"}, {Value: 0.75}, {Value: 0.9, Label: "0.9"}, {Value: 1, Label: "1"}})
	leg := newLegend()
	p.Add(plotter.NewGrid())
	drawn := 0
	for _, s := range d.Series {
		var v []float64
		for _, x := range s.Values {
			if x > 0 {
				v = append(v, ms(x))
			}
		}
		name := fmt.Sprintf("%s (%d)", s.Name, len(v))
		if missing := len(s.Values) - len(v); missing > 0 {
			name = fmt.Sprintf("%s (%d; %d never)", s.Name, len(v), missing)
		}
		if len(v) == 0 {
			continue
		}
		slices.Sort(v)
		steps := plotter.XYs{{X: v[0], Y: 0}}
		pts := make(plotter.XYs, len(v))
		for i, x := range v {
			f := float64(i+1) / float64(len(s.Values))
			steps = append(steps, plotter.XY{X: x, Y: f})
			pts[i] = plotter.XY{X: x, Y: f}
		}
		l, err := plotter.NewLine(steps)
		if err != nil {
			return nil, plot.Legend{}, 0, fmt.Errorf("series %q: %w", s.Name, err)
		}
		l.StepStyle = plotter.PostStep
		l.LineStyle = s.Style.line()
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return nil, plot.Legend{}, 0, fmt.Errorf("series %q: %w", s.Name, err)
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: s.Style.color(), Radius: vg.Points(2.2), Shape: draw.CircleGlyph{}}
		if s.Style.Dashed {
			sc.GlyphStyle.Shape = draw.RingGlyph{}
		}
		p.Add(l, sc)
		leg.Add(name, l, sc)
		drawn++
	}
	if drawn == 0 {
		return nil, plot.Legend{}, 0, ErrNoData
	}
	// Room on both sides of the extremes, so the first and last steps are seen.
	p.X.Min, p.X.Max = p.X.Min/1.3, p.X.Max*1.3
	return p, leg, drawn, nil
}
