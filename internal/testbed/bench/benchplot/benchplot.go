// Package benchplot draws the benchmarks' results as SVG pictures for docs/benchmarks.md: the
// distribution of an outage over trials (Distribution), what a client saw around one failover
// (Timeline) and a time against a count (Scaling). It is pure: its input is plain data (durations,
// names), not the benchmarks' types, and its output is bytes. The same input gives the same bytes,
// so tests compare golden files. Fonts are referenced by name (Liberation Sans, as gonum's font
// metrics assume), not embedded: a viewer without them substitutes a sans-serif font.
package benchplot

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"math"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Style picks how a series is drawn: Color indexes a fixed palette (wrapping), Dashed draws its
// line dashed. Series of one subject share a color; measures of it differ by Dashed.
type Style struct {
	Color  int
	Dashed bool
}

// palette is colorblind-safe (Okabe-Ito), in the order series usually come: ironlb first.
var palette = []color.RGBA{
	{R: 0x00, G: 0x72, B: 0xB2, A: 0xFF}, // blue
	{R: 0xD5, G: 0x5E, B: 0x00, A: 0xFF}, // vermilion
	{R: 0x00, G: 0x9E, B: 0x73, A: 0xFF}, // bluish green
	{R: 0xCC, G: 0x79, B: 0xA7, A: 0xFF}, // reddish purple
	{R: 0xE6, G: 0x9F, B: 0x00, A: 0xFF}, // orange
	{R: 0x56, G: 0xB4, B: 0xE9, A: 0xFF}, // sky blue
	{R: 0x00, G: 0x00, B: 0x00, A: 0xFF}, // black
}

var (
	okColor   = color.RGBA{R: 0x00, G: 0x9E, B: 0x73, A: 0xFF}
	failColor = color.RGBA{R: 0xD5, G: 0x00, B: 0x00, A: 0xFF}
	markColor = color.RGBA{R: 0x55, G: 0x55, B: 0x55, A: 0xFF}
)

func (s Style) color() color.Color {
	return palette[((s.Color%len(palette))+len(palette))%len(palette)]
}

func (s Style) line() draw.LineStyle {
	l := draw.LineStyle{Color: s.color(), Width: vg.Points(1.5)}
	if s.Dashed {
		l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
	}
	return l
}

// ErrNoData is returned when there is nothing to draw: no series, or no positive value in any.
var ErrNoData = errors.New("no data to plot")

// Picture size: wide enough for docs' column, readable when GitHub scales it down.
const (
	width  = 20 * vg.Centimeter
	height = 11 * vg.Centimeter
)

// newPlot returns a plot whose every text is Liberation Sans.
func newPlot(title string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	sans := func(s *draw.TextStyle) { s.Font.Variant = "Sans" }
	for _, s := range []*draw.TextStyle{&p.Title.TextStyle, &p.X.Label.TextStyle, &p.Y.Label.TextStyle,
		&p.X.Tick.Label, &p.Y.Tick.Label, &p.Legend.TextStyle} {
		sans(s)
	}
	p.Title.TextStyle.Font.Size = vg.Points(13)
	return p
}

// newLegend returns a legend in the plots' font, to be drawn under the plot by render (inside it,
// it would hide the data of one plot or another).
func newLegend() plot.Legend {
	l := plot.NewLegend()
	l.TextStyle.Font.Variant = "Sans"
	l.TextStyle.Font.Size = vg.Points(10)
	l.Top, l.Left = true, true
	l.ThumbnailWidth = vg.Points(24)
	l.Padding = vg.Points(3)
	return l
}

// render writes p as SVG, with leg (if it has entries: nentries) in a strip under the plot.
func render(p *plot.Plot, leg plot.Legend, nentries int) ([]byte, error) {
	b, err := renderAs(p, leg, nentries, func(w, h vg.Length) vg.CanvasWriterTo { return vgsvg.New(w, h) })
	// The font is named, not embedded; where Liberation Sans is missing, take a like one.
	return bytes.ReplaceAll(b, []byte("font-family:Liberation Sans;"), []byte("font-family:'Liberation Sans',Arial,Helvetica,sans-serif;")), err
}

// renderAs is render onto any canvas (tests look at PNGs).
func renderAs(p *plot.Plot, leg plot.Legend, nentries int, canvas func(w, h vg.Length) vg.CanvasWriterTo) ([]byte, error) {
	strip := vg.Length(0)
	if nentries > 0 {
		strip = vg.Length(nentries)*(leg.TextStyle.Font.Size*1.15+leg.Padding) + vg.Points(10)
	}
	c := canvas(width, height+strip)
	dc := draw.New(c)
	// White under the legend too: a transparent strip is unreadable on a dark page.
	r := dc.Rectangle
	dc.FillPolygon(color.White, []vg.Point{r.Min, {X: r.Max.X, Y: r.Min.Y}, r.Max, {X: r.Min.X, Y: r.Max.Y}})
	top := draw.Crop(dc, 0, 0, strip, 0)
	p.Draw(top)
	if nentries > 0 {
		bottom := draw.Crop(dc, vg.Points(50), 0, 0, -(height))
		leg.Draw(bottom)
	}
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return nil, fmt.Errorf("rendering: %w", err)
	}
	return b.Bytes(), nil
}

// ms is a duration in (fractional) milliseconds, the unit of every time axis here.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// FormatMS labels a time given in milliseconds: "250 ms", "1.5 s", "20 s".
func FormatMS(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 1000:
		return strconv.FormatFloat(v/1000, 'f', -1, 64) + " s"
	default:
		return strconv.FormatFloat(v, 'f', -1, 64) + " ms"
	}
}

// logTimeTicks marks a logarithmic millisecond axis at 1, 2 and 5 times each power of ten, labelling
// those that fit (every one when the range is short, else the powers of ten and the fives).
type logTimeTicks struct{}

func (logTimeTicks) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi <= lo {
		return nil
	}
	var ts []plot.Tick
	decades := math.Log10(hi / lo)
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		base := math.Pow(10, e)
		for _, m := range []float64{1, 2, 5} {
			v := m * base
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || decades < 3 {
				t.Label = FormatMS(roundSig(v))
			}
			ts = append(ts, t)
		}
		for m := 3.0; m < 10; m++ { // minor ticks, labelled on a short axis
			if v := m * base; m != 5 && v >= lo && v <= hi {
				t := plot.Tick{Value: v}
				if decades < 1.2 {
					t.Label = FormatMS(roundSig(v))
				}
				ts = append(ts, t)
			}
		}
	}
	return ts
}

// roundSig removes float noise from 1, 2, 5 × 10^k.
func roundSig(v float64) float64 {
	f, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 6, 64), 64)
	return f
}

// linTimeTicks marks a linear millisecond axis with FormatMS labels.
type linTimeTicks struct{}

func (linTimeTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = FormatMS(roundSig(ts[i].Value))
		}
	}
	return ts
}
